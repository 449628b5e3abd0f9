# PyTorch reference tests: fivefold's model (tests/tools/model_dump) against
# an independent PyTorch implementation (reference.py) on tiny configs —
# logits, losses, every gradient, 10 AdamW steps. Label "torch"; skipped
# (exit 77) where PyTorch is not installed.
set(TORCH_REF_DIR ${CMAKE_CURRENT_LIST_DIR})
set(TORCH_REF_CONFIGS
  dense_gqa
  dense_tied
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
