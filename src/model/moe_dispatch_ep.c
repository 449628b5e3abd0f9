/* The all-to-all token dispatcher of the expert-parallel MoE layer, and
 * what both dispatchers share: layout checks, expert sharding, routing with
 * statistics reduced over the sequence group. The data path and the
 * runtime's duties are described in moe_dispatch_ep.h. */
#include "base/op_probe.h"
#include "model/moe_dispatch_ep.h"

#include <math.h>
#include <string.h>

#include "model/moe_dispatch_ep_internal.h"

int moe_ep_check(const MoeSpec *s, const MoeEpLayout *l, Error *err) {
  if (l->ep < 1 || l->etp < 1 || l->ep_rank < 0 || l->ep_rank >= l->ep || l->etp_rank < 0 || l->etp_rank >= l->etp)
    return error_set(err, ERR_ARG, "MoE layout: ep %d (rank %d), etp %d (rank %d): sizes >= 1 and ranks within them",
                     l->ep, l->ep_rank, l->etp, l->etp_rank);
  if (s->E % l->ep)
    return error_set(err, ERR_CONFIG, "MoE layout: %d experts do not split over ep %d; choose ep dividing num_experts",
                     s->E, l->ep);
  if (s->Fe % l->etp)
    return error_set(err, ERR_CONFIG,
                     "MoE layout: moe_intermediate_size %d does not split over etp %d; choose etp dividing it", s->Fe,
                     l->etp);
  return 0;
}

void moe_ep_shard_experts(float *w_gate_up_local, float *w_down_local, const float *w_gate_up, const float *w_down,
                          const MoeSpec *s, const MoeEpLayout *l) {
  const int El = s->E / l->ep, Fl = s->Fe / l->etp, C = s->C, Fe = s->Fe;
  const size_t row = (size_t)C * sizeof(float);
  for (int le = 0; le < El; le++) {
    const int e = l->ep_rank * El + le;
    const float *gu = w_gate_up + (size_t)e * 2 * Fe * C;
    float *gu_local = w_gate_up_local + (size_t)le * 2 * Fl * C;
    memcpy(gu_local, gu + (size_t)l->etp_rank * Fl * C, Fl * row);
    memcpy(gu_local + (size_t)Fl * C, gu + (size_t)(Fe + l->etp_rank * Fl) * C, Fl * row);
    const float *d = w_down + (size_t)e * C * Fe;
    float *d_local = w_down_local + (size_t)le * C * Fl;
    for (int c = 0; c < C; c++)
      memcpy(d_local + (size_t)c * Fl, d + (size_t)c * Fe + (size_t)l->etp_rank * Fl, (size_t)Fl * sizeof(float));
  }
}

int moe_ep_route(MoeRouting *r, MoePermutation *perm, long *group_counts, long *group_tokens, double *stats,
                 void *plan, const float *x, const float *w_router, int N, const MoeSpec *s, const MoeCommOps *ops,
                 double *aux, double *z, Error *err) {
  const int E = s->E;
  moe_router_forward(r, x, w_router, N, s);
  /* The plan needs the LOCAL counts: capacity is a per-source rule. */
  moe_permute_plan(perm, r, N, s, plan);
  for (int e = 0; e < E; e++) stats[e] = (double)r->counts[e], stats[E + e] = r->prob_sum[e];
  stats[2 * E] = r->lse_sq_sum;
  stats[2 * E + 1] = N;
  /* Doubles hold counts exactly up to 2^53. */
  MOE_EP_CALL(err, "router statistics over the sequence group", ops->allreduce_f64(ops->ctx, MOE_GROUP_SEQ, stats,
                                                                                       (size_t)2 * E + 2, err));
  for (int e = 0; e < E; e++) group_counts[e] = (long)llround(stats[e]);
  *group_tokens = (long)llround(stats[2 * E + 1]);
  /* The losses of the whole micro-batch; aux_dq and z_dlse2 land in r. */
  MoeRouting group = *r;
  group.counts = group_counts;
  group.prob_sum = stats + E;
  group.lse_sq_sum = stats[2 * E];
  moe_router_losses(&group, *group_tokens, s, aux, z);
  r->z_dlse2 = group.z_dlse2;
  return 0;
}

/* ------------------------------------------------------------- buffers */

static void a2a_carve_acts(Carver *c, MoeA2aActs *a, const MoeSpec *s, const MoeEpLayout *l, int N,
                           const MoeA2aSizes *z) {
  const int El = s->E / l->ep, Fl = s->Fe / l->etp;
  carve_routing(c, &a->routing, &a->perm, s, N);
  a->group_counts = carve(c, (size_t)s->E * sizeof(long));
  a->send_counts = carve(c, (size_t)l->ep * El * sizeof(int64_t));
  a->recv_counts = carve(c, (size_t)l->ep * El * sizeof(int64_t));
  a->send_rows = carve(c, (size_t)l->ep * sizeof(int64_t));
  a->recv_rows = carve(c, (size_t)l->ep * sizeof(int64_t));
  a->etp_counts = carve(c, (size_t)l->etp * l->ep * El * sizeof(int64_t));
  a->etp_rows = carve(c, (size_t)l->etp * sizeof(int64_t));
  a->sorted_row = carve(c, z->gathered_rows * sizeof(int));
  a->local_offset = carve(c, (size_t)(El + 1) * sizeof(int));
  a->y_source = carve(c, z->source_rows * s->C * sizeof(float));
  a->xs = carve(c, z->gathered_rows * s->C * sizeof(float));
  a->h = carve(c, z->gathered_rows * 2 * Fl * sizeof(float));
  a->shared_h = carve(c, (size_t)N * 2 * s->Fs * sizeof(float));
}

static void a2a_carve_scratch(Carver *c, MoeA2aScratch *sc, const MoeSpec *s, const MoeEpLayout *l, int N,
                              const MoeA2aSizes *z) {
  const size_t C = (size_t)s->C;
  sc->source = carve(c, z->source_rows * C * sizeof(float));
  sc->received = carve(c, z->received_rows * C * sizeof(float));
  sc->gathered = carve(c, (l->etp > 1 ? z->gathered_rows : 0) * C * sizeof(float)); /* etp 1: rows stay put */
  sc->sorted = carve(c, z->gathered_rows * C * sizeof(float));
  sc->dxs = carve(c, z->gathered_rows * C * sizeof(float));
  carve_shared_scratch(c, &sc->a, &sc->da, &sc->dh, &sc->dtopk_w, &sc->dz, &sc->dscore, &sc->stats, &sc->plan, s, N,
                       z->gathered_rows, (size_t)(s->Fe / l->etp));
}

MoeA2aSizes moe_a2a_sizes(const MoeSpec *s, const MoeEpLayout *l, int max_tokens) {
  MoeA2aSizes z = {0};
  z.max_tokens = max_tokens;
  z.source_rows = moe_max_rows(s, max_tokens);
  z.received_rows = (size_t)l->ep * moe_ep_rows_per_peer(s, s->E / l->ep, max_tokens);
  z.gathered_rows = (size_t)l->etp * z.received_rows;
  Carver c = {0};
  MoeA2aActs a;
  a2a_carve_acts(&c, &a, s, l, max_tokens, &z);
  z.acts_bytes = c.used;
  c.used = 0;
  MoeA2aScratch sc;
  a2a_carve_scratch(&c, &sc, s, l, max_tokens, &z);
  z.scratch_bytes = c.used;
  return z;
}

void moe_a2a_bind_acts(MoeA2aActs *a, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens) {
  const MoeA2aSizes z = moe_a2a_sizes(s, l, max_tokens);
  memset(a, 0, sizeof *a);
  Carver c = {mem, 0};
  a2a_carve_acts(&c, a, s, l, max_tokens, &z);
}

void moe_a2a_bind_scratch(MoeA2aScratch *sc, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens) {
  memset(sc, 0, sizeof *sc);
  sc->sizes = moe_a2a_sizes(s, l, max_tokens);
  Carver c = {mem, 0};
  a2a_carve_scratch(&c, sc, s, l, max_tokens, &sc->sizes);
}

/* ------------------------------------------------------------- phases */

int moe_a2a_route(MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeLayerParams *p, int N, const MoeSpec *s,
                  const MoeCommOps *ops, double *aux, double *z, Error *err) {
  if (N < 0 || N > sc->sizes.max_tokens)
    return error_set(err, ERR_ARG, "MoE dispatcher: %d local tokens, buffers sized for 0..%d", N,
                     sc->sizes.max_tokens);
  return moe_ep_route(&a->routing, &a->perm, a->group_counts, &a->group_tokens, sc->stats, sc->plan, x, p->router, N,
                      s, ops, aux, z, err);
}

/* rows[perm[i]] = src[i] (scatter = 1) or rows[i] = src[perm[i]]. */
static void move_rows(float *dst, const float *src, const int *perm, int rows, int C, int scatter) {
#pragma omp parallel for schedule(static) if ((size_t)rows * C > PARALLEL_MIN_WORK)
  for (int i = 0; i < rows; i++) {
    const size_t to = scatter ? (size_t)perm[i] : (size_t)i, from = scatter ? (size_t)i : (size_t)perm[i];
    memcpy(dst + to * C, src + from * C, (size_t)C * sizeof(float));
  }
}

int moe_a2a_dispatch(MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeSpec *s, const MoeEpLayout *l,
                     const MoeCommOps *ops, Error *err) {
  const int El = s->E / l->ep, C = s->C, ep = l->ep, etp = l->etp;
  const MoePermutation *perm = &a->perm;
  OP_PROBED(OP_PROBE_MOE_PERMUTE, moe_permute_forward(sc->source, x, perm, C));
  for (int q = 0; q < ep; q++) {
    for (int le = 0; le < El; le++) {
      const int e = q * El + le;
      a->send_counts[q * El + le] = perm->expert_offset[e + 1] - perm->expert_offset[e];
    }
    a->send_rows[q] = sum_i64(a->send_counts + (size_t)q * El, El);
  }
  OP_PROBE_BEGIN(counts, OP_PROBE_MOE_COUNTS);
  MOE_EP_CALL(err, "row counts over EP", ops->alltoall_i64(ops->ctx, MOE_GROUP_EP, a->send_counts, a->recv_counts,
                                                           El, err));
  OP_PROBE_END(counts);
  for (int q = 0; q < ep; q++) a->recv_rows[q] = sum_i64(a->recv_counts + (size_t)q * El, El);
  const int64_t received = sum_i64(a->recv_rows, ep);
  if ((size_t)received > sc->sizes.received_rows)
    return error_set(err, ERR_ARG,
                     "MoE dispatcher: %lld rows arrive over EP, buffers hold %zu: a peer has more tokens than the "
                     "max_tokens the buffers were sized for",
                     (long long)received, sc->sizes.received_rows);
  a->received = (int)received;
  OP_PROBE_BEGIN(dispatch, OP_PROBE_MOE_A2A);
  MOE_EP_CALL(err, "token all-to-all over EP", ops->alltoallv_f32(ops->ctx, MOE_GROUP_EP, sc->source, a->send_rows,
                                                                  sc->received, a->recv_rows, C, err));
  OP_PROBE_END_BYTES(dispatch, (int64_t)received * C * (int64_t)sizeof(float));

  /* Every ETP member's counts, then its rows: arrival order is
   * (ETP member, source, local expert). */
  OP_PROBE_BEGIN(gather, OP_PROBE_MOE_ALLGATHER);
  MOE_EP_CALL(err, "row counts over ETP", ops->allgather_i64(ops->ctx, MOE_GROUP_ETP, a->recv_counts, a->etp_counts,
                                                             ep * El, err));
  for (int i = 0; i < etp; i++) a->etp_rows[i] = sum_i64(a->etp_counts + (size_t)i * ep * El, ep * El);
  const int64_t gathered = sum_i64(a->etp_rows, etp);
  if ((size_t)gathered > sc->sizes.gathered_rows || a->etp_rows[l->etp_rank] != received)
    return error_set(err, ERR_ARG, "MoE dispatcher: ETP members report %lld rows (this rank %lld of %lld), buffers "
                     "hold %zu: the ETP group disagrees or exceeds max_tokens",
                     (long long)gathered, (long long)a->etp_rows[l->etp_rank], (long long)received,
                     sc->sizes.gathered_rows);
  a->gathered = (int)gathered;
  const float *rows = sc->received;
  if (etp > 1) {
    MOE_EP_CALL(err, "token all-gather over ETP", ops->allgatherv_f32(ops->ctx, MOE_GROUP_ETP, sc->received,
                                                                      sc->gathered, a->etp_rows, C, err));
    rows = sc->gathered;
  }
  OP_PROBE_END(gather);

  /* Sort by local expert, stable: within an expert, arrival order. */
  OP_PROBE_BEGIN(sort, OP_PROBE_MOE_SORT);
  a->local_offset[0] = 0;
  for (int le = 0; le < El; le++) {
    int64_t n = 0;
    for (int b = 0; b < etp * ep; b++) n += a->etp_counts[(size_t)b * El + le];
    a->local_offset[le + 1] = a->local_offset[le] + (int)n;
  }
  int cursor[El > 0 ? El : 1];
  for (int le = 0; le < El; le++) cursor[le] = a->local_offset[le];
  int g = 0;
  for (int b = 0; b < etp * ep; b++)
    for (int le = 0; le < El; le++)
      for (int64_t i = 0; i < a->etp_counts[(size_t)b * El + le]; i++) a->sorted_row[g++] = cursor[le]++;
  move_rows(a->xs, rows, a->sorted_row, a->gathered, C, 1);
  OP_PROBE_END(sort);
  return 0;
}

void moe_a2a_experts(MoeA2aActs *a, MoeA2aScratch *sc, const MoeLayerParams *p, const MoeSpec *s,
                     const MoeEpLayout *l) {
  OP_PROBE_BEGIN(experts, OP_PROBE_MOE_EXPERTS);
  moe_experts_forward(sc->sorted, a->h, sc->a, a->xs, a->local_offset, s->E / l->ep, p->w_gate_up, p->w_down, s->C,
                      s->Fe / l->etp);
  OP_PROBE_END_GEMM(experts, a->gathered, 3 * (s->Fe / l->etp), s->C);
}

int moe_a2a_combine(float *out, MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeLayerParams *p, int N,
                    const MoeSpec *s, const MoeEpLayout *l, const MoeCommOps *ops, Error *err) {
  const int C = s->C;
  /* ys in arrival order; the ETP sum completes the down projection. */
  float *arrived = l->etp > 1 ? sc->gathered : sc->received;
  OP_PROBED(OP_PROBE_MOE_UNSORT, move_rows(arrived, sc->sorted, a->sorted_row, a->gathered, C, 0));
  OP_PROBE_BEGIN(scatter, OP_PROBE_MOE_REDUCE_SCATTER);
  if (l->etp > 1)
    MOE_EP_CALL(err, "expert output reduce-scatter over ETP",
                ops->reduce_scatterv_f32(ops->ctx, MOE_GROUP_ETP, sc->gathered, sc->received, a->etp_rows, C, err));
  if (l->etp > 1) OP_PROBE_END(scatter);
  OP_PROBE_BEGIN(combine, OP_PROBE_MOE_A2A_COMBINE);
  MOE_EP_CALL(err, "expert output all-to-all over EP", ops->alltoallv_f32(ops->ctx, MOE_GROUP_EP, sc->received,
                                                                          a->recv_rows, a->y_source, a->send_rows,
                                                                          C, err));
  OP_PROBE_END_BYTES(combine, (int64_t)a->received * C * (int64_t)sizeof(float));
  OP_PROBED(OP_PROBE_MOE_UNPERMUTE, moe_combine_forward(out, a->y_source, &a->perm, a->routing.topk_w, N, s->K, C));
  if (s->Fs > 0) swiglu_mlp_forward(out, 1, a->shared_h, sc->a, x, p->shared_gate_up, p->shared_down, N, C, s->Fs);
  return 0;
}

int moe_a2a_forward(float *out, MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeLayerParams *p, int N,
                    const MoeSpec *s, const MoeEpLayout *l, const MoeCommOps *ops, double *aux, double *z,
                    Error *err) {
  int rc = moe_ep_check(s, l, err);
  OP_PROBE_BEGIN(router, OP_PROBE_ROUTER);
  if (!rc) rc = moe_a2a_route(a, sc, x, p, N, s, ops, aux, z, err);
  OP_PROBE_END(router);
  if (!rc) rc = moe_a2a_dispatch(a, sc, x, s, l, ops, err);
  if (rc) return rc;
  moe_a2a_experts(a, sc, p, s, l);
  return moe_a2a_combine(out, a, sc, x, p, N, s, l, ops, err);
}

int moe_a2a_backward(float *dx, const MoeLayerGrads *g, MoeA2aScratch *sc, const float *dout, const MoeA2aActs *a,
                     const float *x, const MoeLayerParams *p, int N, const MoeSpec *s, const MoeEpLayout *l,
                     const MoeCommOps *ops, float grad_scale, Error *err) {
  const int C = s->C, El = s->E / l->ep, Fl = s->Fe / l->etp;
  const MoeRouting *r = &a->routing;
  /* Combine at the source, then dy follows the tokens' forward path. */
  moe_combine_backward(sc->source, sc->dtopk_w, dout, a->y_source, &a->perm, r->topk_w, N, s->K, C);
  MOE_EP_CALL(err, "output gradient all-to-all over EP", ops->alltoallv_f32(ops->ctx, MOE_GROUP_EP, sc->source,
                                                                            a->send_rows, sc->received, a->recv_rows,
                                                                            C, err));
  const float *arrived = sc->received;
  if (l->etp > 1) {
    /* Backward of the reduce-scatter: every ETP shard needs all of dy. */
    MOE_EP_CALL(err, "output gradient all-gather over ETP",
                ops->allgatherv_f32(ops->ctx, MOE_GROUP_ETP, sc->received, sc->gathered, a->etp_rows, C, err));
    arrived = sc->gathered;
  }
  move_rows(sc->sorted, arrived, a->sorted_row, a->gathered, C, 1);
  OP_PROBE_BEGIN(experts, OP_PROBE_MOE_EXPERTS);
  moe_experts_backward(sc->dxs, g->w_gate_up, g->w_down, sc->sorted, a->xs, a->h, sc->a, sc->da, sc->dh,
                       a->local_offset, El, p->w_gate_up, p->w_down, C, Fl);
  OP_PROBE_END_GEMM(experts, a->gathered, 3 * Fl, 2 * C);
  float *dx_arrived = l->etp > 1 ? sc->gathered : sc->received;
  move_rows(dx_arrived, sc->dxs, a->sorted_row, a->gathered, C, 0);
  /* Backward of the all-gather: each shard's partial dx sums over ETP. */
  if (l->etp > 1)
    MOE_EP_CALL(err, "input gradient reduce-scatter over ETP",
                ops->reduce_scatterv_f32(ops->ctx, MOE_GROUP_ETP, sc->gathered, sc->received, a->etp_rows, C, err));
  MOE_EP_CALL(err, "input gradient all-to-all over EP", ops->alltoallv_f32(ops->ctx, MOE_GROUP_EP, sc->received,
                                                                           a->recv_rows, sc->source, a->send_rows,
                                                                           C, err));
  moe_permute_backward(dx, sc->source, &a->perm, N, s->K, C, 0);
  if (s->Fs > 0)
    swiglu_mlp_backward(dx, 1, g->shared_gate_up, g->shared_down, dout, x, a->shared_h, sc->a, sc->da, sc->dh,
                        p->shared_gate_up, p->shared_down, N, C, s->Fs);
  OP_PROBED(OP_PROBE_ROUTER,
            moe_router_backward(dx, g->router, sc->dz, sc->dscore, sc->dtopk_w, x, p->router, r, N, s, grad_scale));
  return 0;
}
