/* Model FLOPs per training sequence (forward + backward = 3 x forward),
 * Megatron's counting generalised layer by layer. Per layer, sequence s:
 *   attention projections  12 s h d_h (a + g)    (q, o: a heads; k, v: g heads)
 *   attention scores       12 s^2 a d_h          (QK^T and AV, no causal halving)
 *   SwiGLU MLP             18 s h f              (f = intermediate_size, or
 *                                                 top_k * f_moe + f_shared)
 *   GeLU MLP (GPT-2)       12 s h f              (two GEMMs instead of three)
 * plus the LM head 6 s h V. For a uniform model this is exactly the formula
 * in /work/shared/REFERENCES.md divided by the batch size. The router GEMM
 * is not counted (Megatron does not count it either). */
#include "model/flops.h"

double model_flops_per_sequence(const ModelConfig *cfg, int seq_len) {
  const double s = seq_len, h = cfg->hidden_size, V = cfg->vocab_size;
  const double a = cfg->num_heads, g = model_config_kv_heads(cfg), d = model_config_head_dim(cfg);
  double total = 6.0 * s * h * V;
  for (int l = 0; l < cfg->num_layers; l++) {
    double ffn;
    if (cfg->num_experts > 0 && cfg->is_moe_layer[l])
      ffn = (double)cfg->top_k * cfg->moe_intermediate_size + cfg->shared_expert_intermediate_size;
    else
      ffn = cfg->intermediate_size;
    const double mlp_gemms = cfg->gpt2 ? 12.0 : 18.0;
    total += 12.0 * s * h * d * (a + g) + 12.0 * s * s * a * d + mlp_gemms * s * h * ffn;
  }
  return total;
}
