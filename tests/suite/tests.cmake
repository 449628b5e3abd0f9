# Tests of the test suite's own machinery: scripts/test_summary.sh, which
# ends `make test` by reporting every skipped test and unregistered layer
# and fails under CI=true when a dependency was missing.
add_test(NAME suite.summary
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/summary_test.sh ${CMAKE_SOURCE_DIR}/scripts/test_summary.sh)
set_tests_properties(suite.summary PROPERTIES TIMEOUT 60)
