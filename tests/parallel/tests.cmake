# Data-parallel training through `fivefold train` under mpirun (label
# "mpi"): the golden rule against one rank for a dense and an MoE model,
# ZeRO-1 checkpoints moving between runs, and a killed rank ending the job.
# Environment: mpirun refuses root without the OMPI_ALLOW variables (CI runs
# as root); one OpenMP thread per rank since up to 4 ranks share 2 cores;
# Open MPI's own allocations are not our leaks (tests/comm/lsan.supp).
set(PARALLEL_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
set(PARALLEL_MPI_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
foreach(mode golden-dense golden-moe resume kill)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.dp_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/dp_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.dp_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
