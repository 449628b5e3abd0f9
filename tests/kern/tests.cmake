# The convolution test again with oneDNN capped to AVX2: the fp32 checks on
# the AVX2 kernels, and bf16 must be refused with a message.
add_test(NAME kern.conv2d_avx2 COMMAND test_kern_conv2d)
set_tests_properties(kern.conv2d_avx2 PROPERTIES TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;ONEDNN_MAX_CPU_ISA=AVX2")
# The GEMM backend test again with oneDNN capped to AVX2: fp32 must still
# pass on both backends and bf16 must be refused with its reason.
add_test(NAME kern.gemm_backends_avx2 COMMAND test_kern_gemm_backends)
set_tests_properties(kern.gemm_backends_avx2 PROPERTIES
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;ONEDNN_MAX_CPU_ISA=AVX2" TIMEOUT 600)

# The tropical kernels again, compiled without AVX-512 (the AVX2 path) and
# without AVX (the scalar path) into their own test executables; each
# checks that it runs the path it was built for.
file(GLOB TROPICAL_KERN_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kern/tropical_*.c)
set(TROPICAL_FLAGS_avx2 -mno-avx512f)
set(TROPICAL_FLAGS_scalar -mno-avx)
foreach(isa avx2 scalar)
  add_executable(test_kern_tropical_${isa} ${CMAKE_CURRENT_LIST_DIR}/test_tropical.c ${TROPICAL_KERN_SOURCES})
  target_compile_options(test_kern_tropical_${isa} PRIVATE ${TROPICAL_FLAGS_${isa}})
  target_include_directories(test_kern_tropical_${isa} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${CMOCKA_INCLUDE_DIRS})
  target_link_libraries(test_kern_tropical_${isa} PRIVATE fivefold_kern ${CMOCKA_LINK_LIBRARIES})
  add_test(NAME kern.tropical_${isa} COMMAND test_kern_tropical_${isa})
  set_tests_properties(kern.tropical_${isa} PROPERTIES TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;TROPICAL_EXPECT_ISA=${isa}")
endforeach()

# The bf16 weight cache needs bf16 GEMMs: exit 77 (skipped) without avx512_bf16.
set_tests_properties(kern.bf16_weights PROPERTIES SKIP_RETURN_CODE 77)

# The direct convolution kernels again, compiled without AVX-512 (the AVX2
# path) and without AVX (the scalar path) into their own test executables;
# each checks that it runs the path it was built for.
foreach(isa avx2 scalar)
  add_executable(test_kern_conv2d_direct_${isa} ${CMAKE_CURRENT_LIST_DIR}/test_conv2d_direct.c
                 ${CMAKE_SOURCE_DIR}/src/kern/conv2d_direct_kernels.c)
  target_compile_options(test_kern_conv2d_direct_${isa} PRIVATE ${TROPICAL_FLAGS_${isa}})
  target_include_directories(test_kern_conv2d_direct_${isa} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${CMOCKA_INCLUDE_DIRS})
  target_link_libraries(test_kern_conv2d_direct_${isa} PRIVATE fivefold_kern ${CMOCKA_LINK_LIBRARIES})
  add_test(NAME kern.conv2d_direct_${isa} COMMAND test_kern_conv2d_direct_${isa})
  set_tests_properties(kern.conv2d_direct_${isa} PROPERTIES TIMEOUT 300
                       ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
endforeach()
