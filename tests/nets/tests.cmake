# The networks of nets/ through `fivefold train` (label "mpi"): the MLP on
# one rank with a bit-exact resume, and data-parallel (plain and ZeRO-1)
# against one rank.
add_test(NAME nets.mlp_train
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/mlp_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(nets.mlp_train PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")

# A vision network on Fashion-MNIST through `fivefold train` (label "mpi"):
# resume, DP2 / DP4 / ZeRO-1 against one rank, --trace, refusals; and a
# short learning run (well above chance within 300 steps).
add_test(NAME nets.vision_train
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/vision_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(nets.vision_train PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
add_test(NAME nets.vision_learns
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/vision_learn_test.sh $<TARGET_FILE:fivefold>
                 ${CMAKE_SOURCE_DIR}/configs/vision)
set_tests_properties(nets.vision_learns PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
# The MLP with two parameter groups stepped in phases (the program of a GAN):
# the phased program, a bit-exact resume, DP2 and ZeRO-1 against one rank.
add_test(NAME nets.mlp_groups
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/mlp_groups_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(nets.mlp_groups PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
# The deblurring GAN through `fivefold train` (label "mpi"): both phases,
# val PSNR/SSIM, a bit-exact resume, DP2 and ZeRO-1 against one rank, --trace,
# refusals naming file and field.
add_test(NAME nets.gan_train
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/gan_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(nets.gan_train PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")

# `fivefold classify` on a trained checkpoint: the printed probabilities
# against softmax(W x + b) from the checkpoint in PyTorch, resizing, refusals.
add_test(NAME nets.classify
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/classify_test.sh $<TARGET_FILE:fivefold>)
set_tests_properties(nets.classify PROPERTIES TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
# Tropical networks through `fivefold train` (label "mpi"): a TCNN resumed
# bit for bit and DP2 / DP4 / ZeRO-1 against one rank; re-centring of
# mmp-norm.json visible in its checkpoint.
add_test(NAME nets.tropical_train
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tropical_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE}
                 ${CMAKE_SOURCE_DIR}/configs/vision)
set_tests_properties(nets.tropical_train PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
