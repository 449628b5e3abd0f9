# PyTorch reference tests: fivefold's model (tests/tools/model_dump) against
# an independent PyTorch implementation (reference.py) on tiny configs —
# logits, losses, every gradient, 10 steps of the trainer's optimizer
# (train/optimizer.h, schedule and clipping included) against
# torch.optim.AdamW. Label "torch"; skipped
# (exit 77) where PyTorch is not installed.
set(TORCH_REF_DIR ${CMAKE_CURRENT_LIST_DIR})
set(TORCH_REF_CONFIGS
  dense_gqa
  dense_tied
  gpt2
  dense_attention_bias
  moe_softmax_then_topk
  moe_topk_then_softmax
  moe_sigmoid
  moe_shared_mixed
  moe_capacity_probs
  moe_capacity_position_pad)
foreach(cfg ${TORCH_REF_CONFIGS})
  set(flags "")
  if(cfg MATCHES "^moe_capacity")
    set(flags --expect-drops)
  endif()
  add_test(NAME torch_ref.${cfg}
           COMMAND bash ${TORCH_REF_DIR}/run_compare.sh $<TARGET_FILE:model_dump>
                   ${TORCH_REF_DIR}/configs/${cfg}.json ${flags})
  set_tests_properties(torch_ref.${cfg} PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=2")
endforeach()

# The comparison itself must be able to fail, on exactly the tensor that
# is wrong (self_check), and must pass an honest dump (self_check_honest).
add_test(NAME torch_ref.self_check
         COMMAND bash ${TORCH_REF_DIR}/run_compare.sh --self-check
                 ${TORCH_REF_DIR}/configs/moe_capacity_probs.json grad.layers.1.moe.router)
add_test(NAME torch_ref.self_check_honest
         COMMAND bash ${TORCH_REF_DIR}/run_compare.sh --self-check-honest
                 ${TORCH_REF_DIR}/configs/moe_capacity_probs.json)
set_tests_properties(torch_ref.self_check torch_ref.self_check_honest PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
add_test(NAME torch_ref.self_check_gpt2
         COMMAND bash ${TORCH_REF_DIR}/run_compare.sh --self-check
                 ${TORCH_REF_DIR}/configs/gpt2.json grad.pos_embed.weight)
set_tests_properties(torch_ref.self_check_gpt2 PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=2")

# conv2d / conv_transpose2d against PyTorch on fixed weights
# (tests/tools/conv2d_dump), and proof that its comparison can fail.
add_test(NAME torch_ref.conv2d COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/conv_parity.py $<TARGET_FILE:conv2d_dump>)
add_test(NAME torch_ref.conv2d_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/conv_parity.py $<TARGET_FILE:conv2d_dump> --self-check)
set_tests_properties(torch_ref.conv2d torch_ref.conv2d_self_check PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")

# The reference itself under bf16 autocast (what bench/torch_bench.py's bf16
# rows run): dtype-clean, losses and gradients close to fp32.
file(GLOB TORCH_REF_CONFIG_FILES ${TORCH_REF_DIR}/configs/*.json)
add_test(NAME torch_ref.autocast_bf16 COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/autocast_check.py ${TORCH_REF_CONFIG_FILES})
set_tests_properties(torch_ref.autocast_bf16 PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=2")

# Tropical dense layers (max-plus, min-plus) and the six tropical conv2d
# variants against an independent broadcast + amax/amin implementation
# (tests/tools/tropical_dump), and proof that its comparison can fail.
add_test(NAME torch_ref.tropical COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/tropical_parity.py $<TARGET_FILE:tropical_dump>)
add_test(NAME torch_ref.tropical_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/tropical_parity.py $<TARGET_FILE:tropical_dump> --self-check)
set_tests_properties(torch_ref.tropical torch_ref.tropical_self_check PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")

# The classic layer kinds of nets/ (linear, conv2d, pooling, activations)
# against torch.nn.functional on fixed weights (tests/tools/layer_dump), a
# max-pool case full of ties included, and proof that the comparison can fail.
add_test(NAME torch_ref.vision_layers
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/vision_layers.py $<TARGET_FILE:layer_dump>)
add_test(NAME torch_ref.vision_layers_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/vision_layers.py $<TARGET_FILE:layer_dump> --self-check)
set_tests_properties(torch_ref.vision_layers torch_ref.vision_layers_self_check PROPERTIES LABELS torch
                     TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
# PSNR and Gaussian-window SSIM (kern/image_metrics.h) against
# scikit-image's implementations on fixed images, and proof that the
# comparison can fail. Skipped (77, "missing dependency") without
# python3-skimage, which CI=true turns into a failure.
add_test(NAME torch_ref.image_metrics
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/image_metrics_parity.py $<TARGET_FILE:image_metrics_dump>)
add_test(NAME torch_ref.image_metrics_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/image_metrics_parity.py $<TARGET_FILE:image_metrics_dump> --self-check)
set_tests_properties(torch_ref.image_metrics torch_ref.image_metrics_self_check PROPERTIES LABELS torch TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")

# The GAN generator's layers (conv_transpose2d, instance_norm) against
# PyTorch on fixed weights (tests/tools/gan_layers_dump), and proof that
# the comparison can fail.
add_test(NAME torch_ref.gan_layers COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/gan_layers.py $<TARGET_FILE:gan_layers_dump>)
add_test(NAME torch_ref.gan_layers_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/gan_layers.py $<TARGET_FILE:gan_layers_dump> --self-check)
set_tests_properties(torch_ref.gan_layers torch_ref.gan_layers_self_check PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
# The deblurring GAN's generator as a whole (its layouts: blocked with
# Winograd, channels-last, NCHW under instance norm; the direct kernels)
# against the same network in PyTorch (tests/tools/gan_generator_dump), and
# proof that the comparison can fail.
add_test(NAME torch_ref.gan_generator
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/gan_generator.py $<TARGET_FILE:gan_generator_dump>)
add_test(NAME torch_ref.gan_generator_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/gan_generator.py $<TARGET_FILE:gan_generator_dump> --self-check)
set_tests_properties(torch_ref.gan_generator torch_ref.gan_generator_self_check PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
# WGAN-GP's gradient penalty of the deblurring GAN (nets/gan.c, the closed-
# form double backward of its piecewise-linear critic): the penalty, its
# gradient with respect to every critic parameter and the whole critic loss
# against PyTorch's double backward (autograd.grad with create_graph, then
# backward) on fixed weights (tests/tools/gan_penalty_dump), and proof that
# the comparison can fail.
add_test(NAME torch_ref.gan_penalty COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/gan_penalty.py $<TARGET_FILE:gan_penalty_dump>)
add_test(NAME torch_ref.gan_penalty_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/gan_penalty.py $<TARGET_FILE:gan_penalty_dump> --self-check)
set_tests_properties(torch_ref.gan_penalty torch_ref.gan_penalty_self_check PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
# The tropical layer kinds of nets/ (tropical_conv2d x 6, maxplus, minplus,
# standardize) and a small tropical network over 10 AdamW steps against an
# independent PyTorch implementation (tests/tools/tropical_layers_dump),
# and proof that its comparison can fail.
add_test(NAME torch_ref.tropical_layers
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/tropical_layers.py $<TARGET_FILE:tropical_layers_dump>)
add_test(NAME torch_ref.tropical_layers_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/tropical_layers.py $<TARGET_FILE:tropical_layers_dump> --self-check)
set_tests_properties(torch_ref.tropical_layers torch_ref.tropical_layers_self_check PROPERTIES LABELS torch
                     TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")

# fivefold's loss curve through `fivefold train` (config, data loader,
# schedule, clipping, AdamW) on a tiny GPT-2 against the PyTorch GPT-2 of
# gpt2_reference.py: fivefold's initial weights imported as a step-0 run, the
# same tokens, 30 steps, per-step loss, lr and gradient norm
# (gpt2_curve.py); and proof that a schedule one step late or dropped bias
# gradients are told apart.
foreach(mode none schedule bias)
  set(name torch_ref.gpt2_loss_curve)
  set(flags "")
  if(NOT mode STREQUAL "none")
    set(name torch_ref.gpt2_loss_curve_self_check_${mode})
    set(flags --self-check ${mode})
  endif()
  add_test(NAME ${name}
           COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/gpt2_curve.py --fivefold $<TARGET_FILE:fivefold>
                   --model-dump $<TARGET_FILE:model_dump> ${flags})
  set_tests_properties(${name} PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

# The fused elementwise chains (GPT-2's bias + GeLU, SwiGLU), fused and
# unfused, against torch.nn.functional (tests/tools/fused_act_dump), and
# proof that the comparison can fail.
add_test(NAME torch_ref.fused_act
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/fused_act_parity.py $<TARGET_FILE:fused_act_dump>)
add_test(NAME torch_ref.fused_act_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/fused_act_parity.py $<TARGET_FILE:fused_act_dump> --self-check)
set_tests_properties(torch_ref.fused_act torch_ref.fused_act_self_check PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")

# The residual add + RMSNorm / LayerNorm (with GPT-2's biases), fused and
# unfused, forward and backward, against PyTorch autograd
# (tests/tools/norm_residual_dump), and proof that the comparison can fail.
add_test(NAME torch_ref.norm_residual
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/norm_residual_parity.py $<TARGET_FILE:norm_residual_dump>)
add_test(NAME torch_ref.norm_residual_self_check
         COMMAND /usr/bin/python3 ${TORCH_REF_DIR}/norm_residual_parity.py $<TARGET_FILE:norm_residual_dump>
                 --self-check)
set_tests_properties(torch_ref.norm_residual torch_ref.norm_residual_self_check PROPERTIES LABELS torch TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
