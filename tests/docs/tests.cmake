# Documentation that must follow the code (tests/docs/*.sh).
add_test(NAME docs.parallelism_current
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/parallelism_doc_test.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE:fivefold>)
set_tests_properties(docs.parallelism_current PROPERTIES TIMEOUT 60)
