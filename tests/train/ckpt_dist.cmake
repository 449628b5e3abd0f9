# Distributed checkpoints under mpirun (label "mpi"): sharded saves are
# byte-identical to one-rank saves, any layout loads any other, and damaged
# files or failing ranks leave the older checkpoints usable
# (tests/train/ckpt_dist_test.sh, driving tests/tools/ckpt_dist_check.c).
# Environment as for the other MPI tests: mpirun refuses root without the
# OMPI_ALLOW variables, one OpenMP thread per rank (4 ranks share 2 cores),
# and LeakSanitizer ignores Open MPI's own allocations (tests/comm/lsan.supp).
set(CKPT_DIST_MPI_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
foreach(mode layouts-moe layouts-tied failures)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME train.ckpt_dist_${name}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ckpt_dist_test.sh $<TARGET_FILE:ckpt_dist_check> ${MPIEXEC_EXECUTABLE}
                   ${mode})
  set_tests_properties(train.ckpt_dist_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${CKPT_DIST_MPI_ENV}")
endforeach()
