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

add_test(NAME trace.ebpf
         COMMAND bash ${TRACE_TEST_DIR}/ebpf_test.sh $<TARGET_FILE:trace_cli> $<TARGET_FILE:trace_pipeline>)
set_tests_properties(trace.ebpf PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS 2)
