# Upcycling tests outside a module library: the CLI test compiles
# cmd_upcycle.c in (the `fivefold` binary's main is not), and the workflow
# script drives the real binary -- upcycle, then train --resume -- and
# never skips: the command exists, so anything that fails is a failure.
target_sources(test_upcycle_cli PRIVATE ${CMAKE_SOURCE_DIR}/src/cli/cmd_upcycle.c)
set_tests_properties(upcycle.cli PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
add_test(NAME upcycle.workflow COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/workflow_test.sh $<TARGET_FILE:fivefold>)
set_tests_properties(upcycle.workflow PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE"
                     TIMEOUT 300)
