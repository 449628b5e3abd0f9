/* Model FLOPs: the one counter used by the training log, the benchmarks and
 * the planner. Megatron's convention: forward + backward = 3 x forward,
 * matmul FLOPs only, no causal halving of attention, SwiGLU MLPs have three
 * matrices. Works layer by layer so dense and MoE layers can be mixed; GQA
 * (fewer K/V heads), top-k routed experts and shared experts are counted. */
#ifndef FIVEFOLD_MODEL_FLOPS_H
#define FIVEFOLD_MODEL_FLOPS_H

#include "model/config.h"

/* Training FLOPs (forward + backward) for one sequence of length seq_len. */
double model_flops_per_sequence(const ModelConfig *cfg, int seq_len);

#endif
