# Faults a cluster delivers (tests/faults/faults_test.sh): a non-finite
# gradient or weight, checkpoints on a time interval, and (disk_test.sh) a
# full or read-only disk during a checkpoint. Under mpirun like the
# parallel tests (label "mpi").
foreach(mode nonfinite interval data)
  add_test(NAME faults.${mode}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/faults_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(faults.${mode} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
endforeach()
foreach(mode full readonly)
  add_test(NAME faults.disk_${mode}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/disk_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(faults.disk_${mode} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
endforeach()
# Preemption signals to mpirun (plain and scripts/fivefold-mpirun), to one
# rank and to every rank, and a rank stopped with SIGSTOP that the
# collective timeout names (preempt_test.sh).
foreach(name preempt_mpirun preempt_ranks hang)
  string(REPLACE "preempt_" "" mode ${name})
  add_test(NAME faults.${name}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/preempt_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(faults.${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
endforeach()
