# Scripts that remove output (scripts/*.sh, bench/*.sh) reject bad
# arguments before removing anything.
add_test(NAME scripts.args_checked_first
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/script_args_test.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE_DIR:fivefold>)
set_tests_properties(scripts.args_checked_first PROPERTIES TIMEOUT 120)
