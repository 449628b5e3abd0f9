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
