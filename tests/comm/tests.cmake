# Multi-rank tests of src/comm, label "mpi". The programs tests/comm/mpi_*.c
# run under mpirun (named mpi_* so the cmocka glob, which takes test_*.c,
# leaves them alone); test_grid_math.c is the plain single-process test of
# the grid arithmetic and is registered by tests/CMakeLists.txt.
#
# Environment of every run: mpirun refuses root without the two OMPI_ALLOW
# variables (CI containers run as root); one OpenMP thread per rank because
# up to 8 ranks share 2 cores; and under AddressSanitizer, LeakSanitizer
# ignores leaks whose stack passes through Open MPI's own libraries
# (lsan.supp), which free little at MPI_Finalize. Suppressions match on
# any frame of the allocation's stack, and Open MPI is built without frame
# pointers, so the stacks are taken with the slow unwinder
# (fast_unwind_on_malloc=0); with the fast one they stop inside Open MPI's
# plug-ins and nothing matches.
set(COMM_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
set(COMM_MPI_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;LSAN_OPTIONS=suppressions=${COMM_TEST_DIR}/lsan.supp:fast_unwind_on_malloc=0")

foreach(prog mpi_collectives mpi_groups mpi_failure)
  add_executable(comm_${prog} ${COMM_TEST_DIR}/${prog}.c)
  target_include_directories(comm_${prog} PRIVATE ${COMM_TEST_DIR})
  target_link_libraries(comm_${prog} PRIVATE fivefold_comm)
endforeach()

# name, ranks (0 = started without mpirun), program, arguments
function(comm_mpi_test name np prog)
  if(np EQUAL 0)
    add_test(NAME comm.${name} COMMAND $<TARGET_FILE:comm_${prog}> ${ARGN})
  else()
    add_test(NAME comm.${name}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                     $<TARGET_FILE:comm_${prog}> ${ARGN})
  endif()
  set(procs 1)
  if(np GREATER 1)
    set(procs 2)
  endif()
  set_tests_properties(comm.${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${procs}
                       ENVIRONMENT "${COMM_MPI_ENV}")
endfunction()

foreach(np 2 4 8)
  comm_mpi_test(collectives_np${np} ${np} mpi_collectives)
  comm_mpi_test(groups_np${np} ${np} mpi_groups)
endforeach()
comm_mpi_test(collectives_singleton 0 mpi_collectives)
comm_mpi_test(groups_singleton 0 mpi_groups)

# Failure propagation: the job must end (not hang) with a message naming the
# failing rank. mpi_failure's victim is the last rank.
function(comm_failure_test name np mode expect)
  add_test(NAME comm.failure_${name}
           COMMAND bash ${COMM_TEST_DIR}/run_failure.sh ${MPIEXEC_EXECUTABLE} ${np}
                   $<TARGET_FILE:comm_mpi_failure> ${mode} ${expect} ${ARGN})
  set_tests_properties(comm.failure_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${COMM_MPI_ENV}")
endfunction()

comm_failure_test(none 4 ok ok "mpi_failure: all checks passed on 4 ranks")
comm_failure_test(abort 4 abort fails
                  "fivefold: rank 3 failed: deliberate failure in the failure test \\(code 7\\)")
comm_failure_test(mpi_error 4 mpi_error fails
                  "fivefold: rank 3 failed: MPI_ERR_TRUNCATE: message truncated in comm_recv_f32 on group dp")
comm_failure_test(mpi_error_async 4 mpi_error_async fails
                  "fivefold: rank 3 failed: MPI_ERR_TRUNCATE: message truncated in comm_recv_f32 \\(asynchronous.*\\) on group dp")
comm_failure_test(exit 4 exit fails
                  "fivefold: rank 3 failed: exited with status 3 before comm_finalize")
comm_failure_test(return 4 return fails
                  "fivefold: rank 3 failed: exited with status 0 before comm_finalize")
comm_failure_test(kill 4 kill fails "process rank 3 .*signal 9")
# A large collective under the collective timeout: a rank that never
# arrives is named by the others' arrival check; one that stops inside the
# blocking call after it is caught by their watchdogs (comm/timeout.h).
comm_failure_test(late_large 4 late_large fails
                  "fivefold: rank [0-2] failed: comm_allreduce_f32 on group world waited [0-9]+ s \\(the collective timeout is 1 s\\): rank 3 did not arrive")
comm_failure_test(stop_large 4 stop_large fails
                  "fivefold: rank [0-2] failed: comm_allreduce_f32 on group world has run [0-9]+ s in a blocking collective after every rank of the group arrived at it \\(the collective timeout is 1 s\\)")
comm_failure_test(singleton_abort 0 abort fails
                  "fivefold: rank 0 failed: deliberate failure in the failure test \\(code 7\\)")
