/* FLOPs conventions: which work a published MFU or TFLOP/s figure counts,
 * so a prediction is compared with a source on the source's own terms.
 *
 *   megatron   model/flops.h: forward + backward = 3 x forward, matmul FLOPs
 *              only, attention scores (QK^T and AV) counted in full, no
 *              causal halving (Megatron-Core's counter, REFERENCES.md)
 *   causal     the same with the attention scores halved: the work a causal
 *              kernel really does
 *   recompute  arXiv 2104.04473 Eq. 3 (96 B s l h^2 (1 + s/6h + V/16lh) for
 *              GPT): megatron plus one more forward of every block, the
 *              forward that full activation recomputation repeats (the LM
 *              head is not recomputed)
 *   6n         6 x the matmul parameters a token passes through (attention
 *              projections, the active MLP or experts, the LM head): megatron
 *              without the attention scores
 * MFU under a convention = its FLOPs per sequence x global batch / (step x
 * devices x peak). */
#ifndef FIVEFOLD_PLAN_FLOPS_CONVENTION_H
#define FIVEFOLD_PLAN_FLOPS_CONVENTION_H

#include "model/config.h"

typedef enum PlanFlopsConvention {
  PLAN_FLOPS_MEGATRON = 0,
  PLAN_FLOPS_CAUSAL,
  PLAN_FLOPS_RECOMPUTE,
  PLAN_FLOPS_6N,
  PLAN_NUM_FLOPS_CONVENTIONS
} PlanFlopsConvention;

const char *plan_flops_convention_name(PlanFlopsConvention c); /* "megatron", "causal", "recompute", "6n" */
int plan_flops_convention_from_name(const char *name, PlanFlopsConvention *c);

/* Training FLOPs of one sequence under the convention. */
double plan_flops_per_sequence(const ModelConfig *model, int seq_len, PlanFlopsConvention c);

/* The attention-score FLOPs (QK^T and AV, forward + backward, no halving)
 * that every convention but 6n contains. */
double plan_attention_score_flops(const ModelConfig *model, int seq_len);

/* MFU of a simulated step under the convention: its FLOPs per sequence x
 * the global batch / (step x devices x the cluster's peak in the run's
 * precision). */
struct PlanResult;
struct ClusterSpec;
double plan_result_mfu(const struct PlanResult *r, const ModelConfig *model, const struct ClusterSpec *cluster,
                       int devices, PlanFlopsConvention c);

#endif
