# Scripted tests of src/trace: the helper programs (the threaded pipeline
# driver as a binary with USDT probes, and `fivefold trace` on its own), the
# recorder test again on the portable clock, and `trace record --ebpf` end
# to end under bpftrace (skipped, exit 77, where eBPF is not available).
set(TRACE_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})

add_executable(trace_pipeline ${TRACE_TEST_DIR}/trace_pipeline.c)
target_include_directories(trace_pipeline PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(trace_pipeline PRIVATE fivefold_trace)

add_executable(trace_cli ${TRACE_TEST_DIR}/trace_cli.c ${CMAKE_SOURCE_DIR}/src/cli/cmd_trace.c)
target_link_libraries(trace_cli PRIVATE fivefold_trace)

add_test(NAME trace.recorder_monotonic COMMAND test_trace_recorder)
set_tests_properties(trace.recorder_monotonic PROPERTIES ENVIRONMENT "FIVEFOLD_TRACE_CLOCK=monotonic" TIMEOUT 120)

# eBPF end to end (ebpf_lib.sh probes first whether bpftrace can run here
# at all; only that decides a skip): the threaded pipeline's probes against
# its own recorder (trace.ebpf), and `fivefold train` without --trace, on
# one rank and as PP2 under mpirun (trace.ebpf_train).
add_test(NAME trace.ebpf COMMAND bash ${TRACE_TEST_DIR}/ebpf_test.sh $<TARGET_FILE:trace_cli> $<TARGET_FILE:trace_pipeline>)
set_tests_properties(trace.ebpf PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS 2)

# `trace compare` prices the traced configuration with the planner: the
# command's test (which compiles cmd_trace.c in) and trace_cli link it.
target_link_libraries(trace_cli PRIVATE fivefold_plan)
target_link_libraries(test_trace_cmd_trace PRIVATE fivefold_plan)

# The tracer on real MPI ranks (label "mpi"): tests/tools/trace_mpi_pipeline.c
# runs a 1F1B program on 4 ranks under mpirun, traced by
# train/trace_session.h; mpi_trace_test.sh checks the gathered trace.
# Environment as in tests/parallel/tests.cmake: mpirun refuses root without
# the OMPI_ALLOW variables, one OpenMP thread per rank (4 ranks share 2
# cores), and Open MPI's own allocations are not our leaks (lsan.supp, with
# the slow unwinder so the suppressions can see Open MPI's frames).
set(TRACE_MPI_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${TRACE_TEST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
foreach(mode dag delay)
  add_test(NAME trace.mpi_${mode}
           COMMAND bash ${TRACE_TEST_DIR}/mpi_trace_test.sh ${mode} $<TARGET_FILE:trace_mpi_pipeline>
                   $<TARGET_FILE:trace_cli> ${MPIEXEC_EXECUTABLE})
  set_tests_properties(trace.mpi_${mode} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2 ENVIRONMENT "${TRACE_MPI_ENV}")
endforeach()

# Checks that judge measured times against injected sleeps (the size of a
# delay, the straggler, the bubble) need a quiet machine: they run alone
# (RUN_SERIAL: nothing else of the suite beside them), record again when
# a run was disturbed, and report a skip (77), never a pass, when no run of
# a few was quiet. trace.pipeline makes the checks load cannot change.
add_test(NAME trace.pipeline_delay COMMAND test_trace_pipeline --timing)
set_tests_properties(trace.pipeline_delay PROPERTIES RUN_SERIAL TRUE SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
set_tests_properties(trace.mpi_delay PROPERTIES RUN_SERIAL TRUE SKIP_RETURN_CODE 77)

add_test(NAME trace.ebpf_train
         COMMAND bash ${TRACE_TEST_DIR}/ebpf_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(trace.ebpf_train PROPERTIES LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${TRACE_MPI_ENV}")

# The critical path of real PP2 training traces with an injected straggler
# (pp2_path_test.sh): through a backward a posted receive's span covered,
# and across the all-gather inside OPTIM to the rank it waited for.
add_test(NAME trace.pp2_path
         COMMAND bash ${TRACE_TEST_DIR}/pp2_path_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(trace.pp2_path PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2 ENVIRONMENT "${TRACE_MPI_ENV}")

# Operations inside layers in a real training trace (ops_trace_test.sh):
# one rank without MPI (GEMM FLOPs per forward, nesting, calibrate
# --from-trace), and TP2 under mpirun (label mpi: the tp group's exchanges).
add_test(NAME trace.ops_one COMMAND bash ${TRACE_TEST_DIR}/ops_trace_test.sh $<TARGET_FILE:fivefold> one)
set_tests_properties(trace.ops_one PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME trace.ops_tp2
         COMMAND bash ${TRACE_TEST_DIR}/ops_trace_test.sh $<TARGET_FILE:fivefold> tp2 ${MPIEXEC_EXECUTABLE})
set_tests_properties(trace.ops_tp2 PROPERTIES LABELS mpi TIMEOUT 180 PROCESSORS 2 ENVIRONMENT "${TRACE_MPI_ENV}")
