# Scripted tests of the planner: `fivefold calibrate --quick` on one rank
# without MPI, on 2 ranks under mpirun and on 2 ranks sharing one core
# (label mpi), each followed by a
# simulation on the spec it wrote (tests/plan/calibrate_smoke.sh). The
# cmocka tests of tests/plan/test_*.c are registered by tests/CMakeLists.txt.
set(PLAN_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
set(PLAN_MPI_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/comm/lsan.supp:fast_unwind_on_malloc=0")

add_test(NAME plan.calibrate_quick
         COMMAND bash ${PLAN_TEST_DIR}/calibrate_smoke.sh $<TARGET_FILE:fivefold> 0)
set_tests_properties(plan.calibrate_quick PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")

add_test(NAME plan.calibrate_quick_np2
         COMMAND bash ${PLAN_TEST_DIR}/calibrate_smoke.sh $<TARGET_FILE:fivefold> 2 ${MPIEXEC_EXECUTABLE})
set_tests_properties(plan.calibrate_quick_np2 PROPERTIES LABELS mpi TIMEOUT 180 PROCESSORS 2
                     ENVIRONMENT "${PLAN_MPI_ENV}")

# Two ranks on one core: the CNN kernels timed with both at once.
add_test(NAME plan.calibrate_quick_one_core
         COMMAND bash ${PLAN_TEST_DIR}/calibrate_smoke.sh $<TARGET_FILE:fivefold> 2 ${MPIEXEC_EXECUTABLE})
set_tests_properties(plan.calibrate_quick_one_core PROPERTIES LABELS mpi TIMEOUT 180
                     ENVIRONMENT "${PLAN_MPI_ENV};ONE_CORE=1")

# A vision network's bucket search applied by train --plan on 2 ranks,
# against one rank (tests/plan/net_buckets_train_test.sh).
add_test(NAME plan.net_buckets_train
         COMMAND bash ${PLAN_TEST_DIR}/net_buckets_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(plan.net_buckets_train PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PLAN_MPI_ENV}")
