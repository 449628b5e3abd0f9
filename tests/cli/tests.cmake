# The command line as a whole: every subcommand's options in both forms
# (--flag value, --flag=value) and the common usage-error wording.
add_test(NAME cli.options
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/options_test.sh $<TARGET_FILE:fivefold> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli.options PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 300)
# `fivefold blur`: outputs, reproducibility from the seed, errors.
add_test(NAME cli.blur COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/blur_test.sh $<TARGET_FILE:fivefold>)
set_tests_properties(cli.blur PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 120)
# `fivefold images` on the LFW subset and Fashion-MNIST (77 when missing).
add_test(NAME cli.images COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/images_test.sh $<TARGET_FILE:fivefold>)
set_tests_properties(cli.images PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 120
                     SKIP_RETURN_CODE 77)
