# base.idx runs its malformed-file checks everywhere and reports SKIP (77)
# afterwards when the Fashion-MNIST files are not installed.
set_tests_properties(base.idx PROPERTIES SKIP_RETURN_CODE 77)
# base.npy likewise, when scikit-image's lfw_subset.npy is not installed.
set_tests_properties(base.npy PROPERTIES SKIP_RETURN_CODE 77)
