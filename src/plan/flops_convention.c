/* FLOPs conventions of published figures (flops_convention.h), derived
 * from the one model counter (model/flops.h) so that they cannot drift
 * apart: the score term and the blocks' forward are split off it. */
#include "plan/flops_convention.h"

#include <string.h>

#include "model/flops.h"
#include "plan/simulate.h"

static const char *const NAMES[PLAN_NUM_FLOPS_CONVENTIONS] = {"megatron", "causal", "recompute", "6n"};

const char *plan_flops_convention_name(PlanFlopsConvention c) {
  return (unsigned)c < PLAN_NUM_FLOPS_CONVENTIONS ? NAMES[c] : "?";
}

int plan_flops_convention_from_name(const char *name, PlanFlopsConvention *c) {
  for (int i = 0; i < PLAN_NUM_FLOPS_CONVENTIONS; i++)
    if (!strcmp(name, NAMES[i])) {
      *c = (PlanFlopsConvention)i;
      return 0;
    }
  return -1;
}

double plan_attention_score_flops(const ModelConfig *m, int seq_len) {
  const double s = seq_len, a = m->num_heads, d = model_config_head_dim(m);
  return 12.0 * s * s * a * d * m->num_layers;
}

double plan_flops_per_sequence(const ModelConfig *m, int seq_len, PlanFlopsConvention c) {
  double total = model_flops_per_sequence(m, seq_len);
  double scores = plan_attention_score_flops(m, seq_len);
  switch (c) {
    case PLAN_FLOPS_CAUSAL: return total - 0.5 * scores;
    case PLAN_FLOPS_RECOMPUTE: {
      /* The LM head (6 s h V of the total) is the only part not repeated. */
      double head = 6.0 * seq_len * (double)m->hidden_size * m->vocab_size;
      return total + (total - head) / 3.0;
    }
    case PLAN_FLOPS_6N: return total - scores;
    default: return total;
  }
}

double plan_result_mfu(const PlanResult *r, const ModelConfig *m, const ClusterSpec *cl, int devices,
                       PlanFlopsConvention c) {
  double peak = plan_peak_flops(cl, r->cfg.dtype);
  if (!(r->step_time > 0) || !(peak > 0) || devices < 1) return 0.0;
  return plan_flops_per_sequence(m, r->cfg.seq_len, c) * r->cfg.global_batch_size / (r->step_time * devices * peak);
}
