/* MoE experts (grouped GEMMs over contiguous expert-major row blocks) and
 * the single-rank MoE layer that chains the phases of moe.h:
 * route -> permute -> experts -> combine, plus the optional shared expert. */
#include "model/moe.h"

#include "kern/gemm.h"
#include "kern/swiglu.h"

void moe_experts_forward(float *y, float *h, float *a, const float *xp, const int *expert_offset, int num_experts,
                         const float *w_gate_up, const float *w_down, int C, int F) {
  const int rows = expert_offset[num_experts] - expert_offset[0];
  const int base = expert_offset[0];
  for (int e = 0; e < num_experts; e++) {
    int r0 = expert_offset[e] - base, n = expert_offset[e + 1] - expert_offset[e];
    if (n == 0) continue;
    linear_forward(h + (size_t)r0 * 2 * F, xp + (size_t)r0 * C, w_gate_up + (size_t)e * 2 * F * C, n, C, 2 * F, 0);
  }
  if (rows > 0) swiglu_forward(a, h, rows, F);
  for (int e = 0; e < num_experts; e++) {
    int r0 = expert_offset[e] - base, n = expert_offset[e + 1] - expert_offset[e];
    if (n == 0) continue;
    linear_forward(y + (size_t)r0 * C, a + (size_t)r0 * F, w_down + (size_t)e * C * F, n, F, C, 0);
  }
}

void moe_experts_backward(float *dxp, float *dw_gate_up, float *dw_down, const float *dy, const float *xp,
                          const float *h, float *a, float *da, float *dh, const int *expert_offset, int num_experts,
                          const float *w_gate_up, const float *w_down, int C, int F) {
  const int rows = expert_offset[num_experts] - expert_offset[0];
  const int base = expert_offset[0];
  if (rows == 0) return;
  swiglu_forward(a, h, rows, F);
  for (int e = 0; e < num_experts; e++) {
    int r0 = expert_offset[e] - base, n = expert_offset[e + 1] - expert_offset[e];
    if (n == 0) continue;
    linear_backward(da + (size_t)r0 * F, dw_down + (size_t)e * C * F, dy + (size_t)r0 * C, a + (size_t)r0 * F,
                    w_down + (size_t)e * C * F, n, F, C, 0);
  }
  swiglu_backward(dh, da, h, rows, F);
  for (int e = 0; e < num_experts; e++) {
    int r0 = expert_offset[e] - base, n = expert_offset[e + 1] - expert_offset[e];
    if (n == 0) continue;
    linear_backward(dxp + (size_t)r0 * C, dw_gate_up + (size_t)e * 2 * F * C, dh + (size_t)r0 * 2 * F,
                    xp + (size_t)r0 * C, w_gate_up + (size_t)e * 2 * F * C, n, C, 2 * F, 0);
  }
}

void moe_layer_forward(float *out, MoeLayerActs *acts, MoeScratch *scratch, const float *x, const MoeLayerParams *p,
                       int N, const MoeSpec *s, double *aux, double *z) {
  MoeRouting *r = &acts->routing;
  MoePermutation *perm = &acts->perm;
  moe_router_forward(r, x, p->router, N, s);
  moe_router_losses(r, N, s, aux, z);
  moe_permute_plan(perm, r, N, s, scratch->plan);
  moe_permute_forward(acts->xp, x, perm, s->C);
  moe_experts_forward(acts->y, acts->h, scratch->a, acts->xp, perm->expert_offset, s->E, p->w_gate_up, p->w_down, s->C,
                      s->Fe);
  moe_combine_forward(out, acts->y, perm, r->topk_w, N, s->K, s->C);
  if (s->Fs > 0)
    swiglu_mlp_forward(out, 1, acts->shared_h, scratch->a, x, p->shared_gate_up, p->shared_down, N, s->C, s->Fs);
}

void moe_layer_backward(float *dx, const MoeLayerGrads *g, MoeScratch *scratch, const float *dout,
                        const MoeLayerActs *acts, const float *x, const MoeLayerParams *p, int N, const MoeSpec *s,
                        float grad_scale) {
  const MoeRouting *r = &acts->routing;
  const MoePermutation *perm = &acts->perm;
  moe_combine_backward(scratch->dy, scratch->dtopk_w, dout, acts->y, perm, r->topk_w, N, s->K, s->C);
  moe_experts_backward(scratch->dxp, g->w_gate_up, g->w_down, scratch->dy, acts->xp, acts->h, scratch->a, scratch->da,
                       scratch->dh, perm->expert_offset, s->E, p->w_gate_up, p->w_down, s->C, s->Fe);
  moe_permute_backward(dx, scratch->dxp, perm, N, s->K, s->C, 0);
  if (s->Fs > 0)
    swiglu_mlp_backward(dx, 1, g->shared_gate_up, g->shared_down, dout, x, acts->shared_h, scratch->a, scratch->da,
                        scratch->dh, p->shared_gate_up, p->shared_down, N, s->C, s->Fs);
  moe_router_backward(dx, g->router, scratch->dz, scratch->dscore, scratch->dtopk_w, x, p->router, r, N, s, grad_scale);
}
