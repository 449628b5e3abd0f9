/* The search of the fused elementwise kernels by simulation (fusion.h). */
#include "plan/fusion.h"

#include <string.h>

int plan_fusion_search(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *opt, const PlanConfig *cfg,
                       PlanFusionChoice *out, PlanOptions *opt_out, Error *err) {
  memset(out, 0, sizeof *out);
  /* GPT-2's MLP is fc + bias + GeLU; every other dense or expert FFN of
   * fivefold's models is SwiGLU. Every block has a residual add before its
   * MLP's norm. */
  out->has_bias_gelu = m->gpt2 != 0;
  out->has_swiglu = !m->gpt2;
  out->has_norm_residual = 1;
  int best_s = 1, best_g = 1, best_n = 1, found = 0;
  double best = 0;
  /* Fused first: a tie keeps it. */
  for (int s = 1; s >= (out->has_swiglu ? 0 : 1); s--)
    for (int g = 1; g >= (out->has_bias_gelu ? 0 : 1); g--)
      for (int n = 1; n >= (out->has_norm_residual ? 0 : 1); n--) {
        PlanOptions o = *opt;
        o.fuse_swiglu = s, o.fuse_bias_gelu = g, o.fuse_norm_residual = n;
        PlanResult r;
        int rc = plan_simulate(m, cl, &o, cfg, NULL, NULL, &r, err);
        if (rc) return rc;
        out->simulations++;
        out->step_time_of[s][g][n] = r.step_time;
        if (!found || r.step_time < best * (1 - 1e-12))
          best = r.step_time, best_s = s, best_g = g, best_n = n, found = 1;
        plan_result_free(&r);
      }
  out->swiglu = best_s, out->bias_gelu = best_g, out->norm_residual = best_n;
  out->step_time = best;
  out->unfused_step_time =
      out->step_time_of[out->has_swiglu ? 0 : 1][out->has_bias_gelu ? 0 : 1][out->has_norm_residual ? 0 : 1];
  *opt_out = *opt;
  opt_out->fuse_swiglu = best_s, opt_out->fuse_bias_gelu = best_g, opt_out->fuse_norm_residual = best_n;
  return ERR_OK;
}

void plan_fusion_explain(const PlanFusionChoice *c, FILE *f) {
  const char *chain = c->has_swiglu ? "SwiGLU (silu(gate) * up)" : "bias + GeLU";
  int fused = c->has_swiglu ? c->swiglu : c->bias_gelu;
  double fused_time = c->step_time_of[1][1][1], gain = c->unfused_step_time - fused_time;
  fprintf(f,
          "operator fusion (%d simulations): %s %s, residual add + norm %s; unfused (each intermediate written and "
          "read back) %.4f s/step, fused %.4f s/step (fusion saves %.4f s, %.1f%%)\n",
          c->simulations, chain, fused ? "fused" : "unfused", c->norm_residual ? "fused" : "unfused",
          c->unfused_step_time, fused_time, gain, c->unfused_step_time > 0 ? 100.0 * gain / c->unfused_step_time : 0.0);
}
