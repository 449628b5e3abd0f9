/* MoE experts (grouped GEMMs over contiguous expert-major row blocks) and
 * the single-rank MoE layer that chains the phases of moe.h:
 * route -> permute -> experts -> combine, plus the optional shared expert. */
#include "base/op_probe.h"
#include "model/moe.h"

#include <omp.h>

#include "kern/gemm.h"
#include "kern/swiglu.h"

/* Experts over threads. With several threads, OpenBLAS splits every expert
 * GEMM between them and the threads wait for each other inside it in
 * sched_yield loops (2-6% of the CPU time of a two-thread step of the
 * reference MoE, more when another process holds one of the cores). Experts
 * are independent, so when their row counts can be spread evenly each thread
 * instead runs whole experts with single-threaded GEMMs (OpenBLAS uses one
 * thread inside a parallel region), biggest first. Measured at two threads
 * on the reference MoE's expert shapes: 12-24% faster than threaded GEMMs
 * one expert after another, and ~8% less CPU per training step. Skewed
 * routing (one expert holding most rows) keeps the threaded GEMMs, which
 * split any single expert evenly. */
enum { EXPERT_SCHED_MAX_EXPERTS = 1024, EXPERT_SCHED_MAX_THREADS = 256 };

/* Fills order[] with the experts that have rows, most rows first (ties:
 * lower index), and returns how many, or 0 when they should run one after
 * another: one thread, already inside a parallel region, fewer experts than
 * threads, or a greedy assignment more than 10% above an even split. */
static int expert_schedule(int *order, const int *expert_offset, int num_experts) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads < 2 || threads > EXPERT_SCHED_MAX_THREADS || num_experts > EXPERT_SCHED_MAX_EXPERTS) return 0;
  int count = 0;
  long total = 0;
  for (int e = 0; e < num_experts; e++) {
    const int rows = expert_offset[e + 1] - expert_offset[e];
    if (rows <= 0) continue;
    total += rows;
    int i = count++;
    for (; i > 0 && expert_offset[order[i - 1] + 1] - expert_offset[order[i - 1]] < rows; i--) order[i] = order[i - 1];
    order[i] = e;
  }
  if (count < threads) return 0;
  long load[EXPERT_SCHED_MAX_THREADS] = {0}, makespan = 0;
  for (int i = 0; i < count; i++) {
    int least = 0;
    for (int t = 1; t < threads; t++)
      if (load[t] < load[least]) least = t;
    load[least] += expert_offset[order[i] + 1] - expert_offset[order[i]];
    if (load[least] > makespan) makespan = load[least];
  }
  const long even = (total + threads - 1) / threads;
  return makespan * 10 <= even * 11 ? count : 0;
}

/* Expert e's whole MLP (gate/up GEMM, SwiGLU, down GEMM) back to back, so
 * its h rows are still in cache when SwiGLU reads them; each weight is one
 * GEMM over all of the expert's rows. */
static void expert_forward(float *y, float *h, float *a, const float *xp, int r0, int n, const float *w_gate_up,
                           const float *w_down, int C, int F) {
  float *h_e = h + (size_t)r0 * 2 * F, *a_e = a + (size_t)r0 * F;
  const int vary = kern_gemm_rows_vary_begin(); /* the expert's row count changes every step */
  linear_forward(h_e, xp + (size_t)r0 * C, w_gate_up, n, C, 2 * F, 0);
  swiglu_forward(a_e, h_e, n, F);
  linear_forward(y + (size_t)r0 * C, a_e, w_down, n, F, C, 0);
  kern_gemm_rows_vary_end(vary);
}

void moe_experts_forward(float *y, float *h, float *a, const float *xp, const int *expert_offset, int num_experts,
                         const float *w_gate_up, const float *w_down, int C, int F) {
  const int base = expert_offset[0];
  int order[EXPERT_SCHED_MAX_EXPERTS];
  const int count = expert_schedule(order, expert_offset, num_experts);
  if (count > 0) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < count; i++) {
      const int e = order[i];
      expert_forward(y, h, a, xp, expert_offset[e] - base, expert_offset[e + 1] - expert_offset[e],
                     w_gate_up + (size_t)e * 2 * F * C, w_down + (size_t)e * C * F, C, F);
    }
    return;
  }
  for (int e = 0; e < num_experts; e++) {
    const int n = expert_offset[e + 1] - expert_offset[e];
    if (n > 0)
      expert_forward(y, h, a, xp, expert_offset[e] - base, n, w_gate_up + (size_t)e * 2 * F * C,
                     w_down + (size_t)e * C * F, C, F);
  }
}

/* Backward of expert_forward for expert e; a, da, dh hold its rows only. */
static void expert_backward(float *dxp, float *dw_gate_up, float *dw_down, const float *dy, const float *xp,
                            const float *h, float *a, float *da, float *dh, int r0, int n, const float *w_gate_up,
                            const float *w_down, int C, int F) {
  const float *h_e = h + (size_t)r0 * 2 * F;
  float *a_e = a + (size_t)r0 * F, *da_e = da + (size_t)r0 * F, *dh_e = dh + (size_t)r0 * 2 * F;
  const int vary = kern_gemm_rows_vary_begin();
  swiglu_forward(a_e, h_e, n, F);
  linear_backward(da_e, dw_down, dy + (size_t)r0 * C, a_e, w_down, n, F, C, 0);
  swiglu_backward(dh_e, da_e, h_e, n, F);
  linear_backward(dxp + (size_t)r0 * C, dw_gate_up, dh_e, xp + (size_t)r0 * C, w_gate_up, n, C, 2 * F, 0);
  kern_gemm_rows_vary_end(vary);
}

void moe_experts_backward(float *dxp, float *dw_gate_up, float *dw_down, const float *dy, const float *xp,
                          const float *h, float *a, float *da, float *dh, const int *expert_offset, int num_experts,
                          const float *w_gate_up, const float *w_down, int C, int F) {
  const int base = expert_offset[0];
  int order[EXPERT_SCHED_MAX_EXPERTS];
  const int count = expert_schedule(order, expert_offset, num_experts);
  if (count > 0) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < count; i++) {
      const int e = order[i];
      expert_backward(dxp, dw_gate_up + (size_t)e * 2 * F * C, dw_down + (size_t)e * C * F, dy, xp, h, a, da, dh,
                      expert_offset[e] - base, expert_offset[e + 1] - expert_offset[e],
                      w_gate_up + (size_t)e * 2 * F * C, w_down + (size_t)e * C * F, C, F);
    }
    return;
  }
  for (int e = 0; e < num_experts; e++) {
    const int n = expert_offset[e + 1] - expert_offset[e];
    if (n > 0)
      expert_backward(dxp, dw_gate_up + (size_t)e * 2 * F * C, dw_down + (size_t)e * C * F, dy, xp, h, a, da, dh,
                      expert_offset[e] - base, n, w_gate_up + (size_t)e * 2 * F * C, w_down + (size_t)e * C * F, C,
                      F);
  }
}

void moe_layer_forward(float *out, MoeLayerActs *acts, MoeScratch *scratch, const float *x, const MoeLayerParams *p,
                       int N, const MoeSpec *s, double *aux, double *z) {
  MoeRouting *r = &acts->routing;
  MoePermutation *perm = &acts->perm;
  OP_PROBE_BEGIN(router, OP_PROBE_ROUTER);
  moe_router_forward(r, x, p->router, N, s);
  moe_router_losses(r, N, s, aux, z);
  OP_PROBE_END(router);
  OP_PROBE_BEGIN(permute, OP_PROBE_MOE_PERMUTE);
  moe_permute_plan(perm, r, N, s, scratch->plan);
  moe_permute_forward(acts->xp, x, perm, s->C);
  OP_PROBE_END(permute);
  OP_PROBE_BEGIN(experts, OP_PROBE_MOE_EXPERTS);
  moe_experts_forward(acts->y, acts->h, scratch->a, acts->xp, perm->expert_offset, s->E, p->w_gate_up, p->w_down, s->C,
                      s->Fe);
  OP_PROBE_END_GEMM(experts, perm->expert_offset[s->E] - perm->expert_offset[0], 3 * s->Fe, s->C);
  OP_PROBED(OP_PROBE_MOE_UNPERMUTE, moe_combine_forward(out, acts->y, perm, r->topk_w, N, s->K, s->C));
  if (s->Fs > 0)
    swiglu_mlp_forward(out, 1, acts->shared_h, scratch->a, x, p->shared_gate_up, p->shared_down, N, s->C, s->Fs);
}

void moe_layer_backward(float *dx, const MoeLayerGrads *g, MoeScratch *scratch, const float *dout,
                        const MoeLayerActs *acts, const float *x, const MoeLayerParams *p, int N, const MoeSpec *s,
                        float grad_scale) {
  const MoeRouting *r = &acts->routing;
  const MoePermutation *perm = &acts->perm;
  OP_PROBED(OP_PROBE_MOE_UNPERMUTE,
            moe_combine_backward(scratch->dy, scratch->dtopk_w, dout, acts->y, perm, r->topk_w, N, s->K, s->C));
  OP_PROBE_BEGIN(experts, OP_PROBE_MOE_EXPERTS);
  moe_experts_backward(scratch->dxp, g->w_gate_up, g->w_down, scratch->dy, acts->xp, acts->h, scratch->a, scratch->da,
                       scratch->dh, perm->expert_offset, s->E, p->w_gate_up, p->w_down, s->C, s->Fe);
  OP_PROBE_END_GEMM(experts, perm->expert_offset[s->E] - perm->expert_offset[0], 3 * s->Fe, 2 * s->C);
  OP_PROBED(OP_PROBE_MOE_PERMUTE, moe_permute_backward(dx, scratch->dxp, perm, N, s->K, s->C, 0));
  if (s->Fs > 0)
    swiglu_mlp_backward(dx, 1, g->shared_gate_up, g->shared_down, dout, x, acts->shared_h, scratch->a, scratch->da,
                        scratch->dh, p->shared_gate_up, p->shared_down, N, s->C, s->Fs);
  OP_PROBED(OP_PROBE_ROUTER, moe_router_backward(dx, g->router, scratch->dz, scratch->dscore, scratch->dtopk_w, x,
                                                 p->router, r, N, s, grad_scale));
}
