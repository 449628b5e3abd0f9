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

# bpftrace can drop probe events on a loaded machine (seen about once in 20
# runs, as an incomplete trace at the compare-ready step); one more recording
# is allowed before the test counts as failed. A skip (77) is not retried.
add_test(NAME trace.ebpf
         COMMAND bash -c "bash \"$0\" \"$1\" \"$2\"; rc=$?; if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then echo 'trace.ebpf: retrying once'; bash \"$0\" \"$1\" \"$2\"; rc=$?; fi; exit $rc"
                 ${TRACE_TEST_DIR}/ebpf_test.sh $<TARGET_FILE:trace_cli> $<TARGET_FILE:trace_pipeline>)
set_tests_properties(trace.ebpf PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS 2)
