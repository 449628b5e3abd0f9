/* The all-gather token dispatcher of the expert-parallel MoE layer (for
 * small EP): every rank of the EP x ETP group sees every token of the group
 * with its routing, computes its own experts' (ETP-partial) share of each,
 * and the partial outputs are summed back to the tokens' owners by
 * reduce-scatters over ETP then EP. Routing and the capacity rule run on
 * the source rank, as in the all-to-all dispatcher, so both compute the same
 * layer. Layout and runtime duties: moe_dispatch_ep.h. */
#include <string.h>

#include "model/moe_dispatch_ep.h"
#include "model/moe_dispatch_ep_internal.h"

/* A gathered token travels as one row: x [C], then per choice j the expert
 * (as a float, -1 when dropped; exact for any expert count below 2^24) and
 * the routing weight. Backward returns [dx (C), dtopk_w (K)]. */
static int packed_floats(const MoeSpec *s) { return s->C + 2 * s->K; }

static void ag_carve_acts(Carver *c, MoeAgActs *a, const MoeSpec *s, const MoeEpLayout *l, int N,
                          const MoeAgSizes *z) {
  const int El = s->E / l->ep, Fl = s->Fe / l->etp;
  carve_routing(c, &a->routing, &a->perm, s, N);
  a->group_counts = carve(c, (size_t)s->E * sizeof(long));
  a->ep_tokens = carve(c, (size_t)l->ep * sizeof(int64_t));
  a->etp_tokens = carve(c, (size_t)l->etp * sizeof(int64_t));
  a->row_of = carve(c, z->gathered_tokens * s->K * sizeof(int));
  a->weight = carve(c, z->gathered_tokens * s->K * sizeof(float));
  a->local_offset = carve(c, (size_t)(El + 1) * sizeof(int));
  a->xs = carve(c, z->local_rows * s->C * sizeof(float));
  a->h = carve(c, z->local_rows * 2 * Fl * sizeof(float));
  a->ys = carve(c, z->local_rows * s->C * sizeof(float));
  a->shared_h = carve(c, (size_t)N * 2 * s->Fs * sizeof(float));
}

static void ag_carve_scratch(Carver *c, MoeAgScratch *sc, const MoeSpec *s, const MoeEpLayout *l, int N,
                             const MoeAgSizes *z) {
  const size_t row = (size_t)packed_floats(s);
  sc->packed = carve(c, (size_t)N * row * sizeof(float));
  sc->ep_buf = carve(c, (size_t)l->ep * N * row * sizeof(float));
  sc->all_buf = carve(c, (l->etp > 1 ? z->gathered_tokens : 0) * row * sizeof(float)); /* etp 1: ep_buf */
  sc->dys = carve(c, z->local_rows * s->C * sizeof(float));
  sc->dxs = carve(c, z->local_rows * s->C * sizeof(float));
  carve_shared_scratch(c, &sc->a, &sc->da, &sc->dh, &sc->dtopk_w, &sc->dz, &sc->dscore, &sc->stats, &sc->plan, s, N,
                       z->local_rows, (size_t)(s->Fe / l->etp));
}

MoeAgSizes moe_ag_sizes(const MoeSpec *s, const MoeEpLayout *l, int max_tokens) {
  MoeAgSizes z = {0};
  const size_t sources = (size_t)l->ep * l->etp;
  z.max_tokens = max_tokens;
  z.gathered_tokens = sources * max_tokens;
  z.local_rows = sources * moe_ep_rows_per_peer(s, s->E / l->ep, max_tokens);
  Carver c = {0};
  MoeAgActs a;
  ag_carve_acts(&c, &a, s, l, max_tokens, &z);
  z.acts_bytes = c.used;
  c.used = 0;
  MoeAgScratch sc;
  ag_carve_scratch(&c, &sc, s, l, max_tokens, &z);
  z.scratch_bytes = c.used;
  return z;
}

void moe_ag_bind_acts(MoeAgActs *a, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens) {
  const MoeAgSizes z = moe_ag_sizes(s, l, max_tokens);
  memset(a, 0, sizeof *a);
  Carver c = {mem, 0};
  ag_carve_acts(&c, a, s, l, max_tokens, &z);
}

void moe_ag_bind_scratch(MoeAgScratch *sc, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens) {
  memset(sc, 0, sizeof *sc);
  sc->sizes = moe_ag_sizes(s, l, max_tokens);
  Carver c = {mem, 0};
  ag_carve_scratch(&c, sc, s, l, max_tokens, &sc->sizes);
}

/* Gathers row_floats-wide rows of the local tokens over EP then ETP into
 * sc->all_buf (sc->ep_buf in between); with etp == 1 the result stays in
 * ep_buf. Returns the buffer holding all gathered rows in *all. */
static int gather_tokens(float **all, MoeAgScratch *sc, const float *rows, const MoeAgActs *a, int row_floats,
                         const MoeEpLayout *l, const MoeCommOps *ops, Error *err) {
  MOE_EP_CALL(err, "token all-gather over EP", ops->allgatherv_f32(ops->ctx, MOE_GROUP_EP, rows, sc->ep_buf,
                                                                   a->ep_tokens, row_floats, err));
  *all = sc->ep_buf;
  if (l->etp > 1) {
    MOE_EP_CALL(err, "token all-gather over ETP", ops->allgatherv_f32(ops->ctx, MOE_GROUP_ETP, sc->ep_buf,
                                                                      sc->all_buf, a->etp_tokens, row_floats, err));
    *all = sc->all_buf;
  }
  return 0;
}

/* The reverse of gather_tokens, summing: all rows -> this rank's tokens
 * (sc->packed). */
static int scatter_sums(MoeAgScratch *sc, float *all, const MoeAgActs *a, int row_floats, const MoeEpLayout *l,
                        const MoeCommOps *ops, Error *err) {
  if (l->etp > 1)
    MOE_EP_CALL(err, "partial-result reduce-scatter over ETP",
                ops->reduce_scatterv_f32(ops->ctx, MOE_GROUP_ETP, all, sc->ep_buf, a->etp_tokens, row_floats, err));
  MOE_EP_CALL(err, "partial-result reduce-scatter over EP",
              ops->reduce_scatterv_f32(ops->ctx, MOE_GROUP_EP, sc->ep_buf, sc->packed, a->ep_tokens, row_floats,
                                       err));
  return 0;
}

/* Rows for this rank's experts: expert-major, within an expert in gathered
 * (token, choice) order. */
static int plan_local_rows(MoeAgActs *a, const float *all, const MoeSpec *s, const MoeEpLayout *l, size_t max_rows,
                           Error *err) {
  const int K = s->K, El = s->E / l->ep, first = l->ep_rank * El, row = packed_floats(s);
  for (int le = 0; le <= El; le++) a->local_offset[le] = 0;
  for (int t = 0; t < a->gathered; t++)
    for (int j = 0; j < K; j++) {
      const float *route = all + (size_t)t * row + s->C + 2 * j;
      const int e = (int)route[0];
      a->weight[(size_t)t * K + j] = route[1];
      a->row_of[(size_t)t * K + j] = e >= first && e < first + El ? e - first : -1; /* local expert for now */
      if (e >= first && e < first + El) a->local_offset[e - first + 1]++;
    }
  for (int le = 0; le < El; le++) a->local_offset[le + 1] += a->local_offset[le];
  a->rows = a->local_offset[El];
  if ((size_t)a->rows > max_rows)
    return error_set(err, ERR_ARG, "MoE all-gather dispatcher: %d rows for the local experts, buffers hold %zu: a "
                     "peer has more tokens than max_tokens", a->rows, max_rows);
  int cursor[El > 0 ? El : 1];
  for (int le = 0; le < El; le++) cursor[le] = a->local_offset[le];
  for (int t = 0; t < a->gathered; t++)
    for (int j = 0; j < K; j++) {
      int *r = &a->row_of[(size_t)t * K + j];
      if (*r < 0) continue;
      *r = cursor[*r]++;
      memcpy(a->xs + (size_t)*r * s->C, all + (size_t)t * row, (size_t)s->C * sizeof(float));
    }
  return 0;
}

int moe_ag_forward(float *out, MoeAgActs *a, MoeAgScratch *sc, const float *x, const MoeLayerParams *p, int N,
                   const MoeSpec *s, const MoeEpLayout *l, const MoeCommOps *ops, double *aux, double *z,
                   Error *err) {
  const int C = s->C, K = s->K, row = packed_floats(s);
  int rc = moe_ep_check(s, l, err);
  if (!rc && (N < 0 || N > sc->sizes.max_tokens))
    rc = error_set(err, ERR_ARG, "MoE all-gather dispatcher: %d local tokens, buffers sized for 0..%d", N,
                   sc->sizes.max_tokens);
  if (!rc)
    rc = moe_ep_route(&a->routing, &a->perm, a->group_counts, &a->group_tokens, sc->stats, sc->plan, x, p->router, N,
                      s, ops, aux, z, err);
  if (rc) return rc;

  const int64_t mine = N;
  MOE_EP_CALL(err, "token counts over EP", ops->allgather_i64(ops->ctx, MOE_GROUP_EP, &mine, a->ep_tokens, 1, err));
  const int64_t ep_total = sum_i64(a->ep_tokens, l->ep);
  MOE_EP_CALL(err, "token counts over ETP", ops->allgather_i64(ops->ctx, MOE_GROUP_ETP, &ep_total, a->etp_tokens, 1,
                                                               err));
  const int64_t gathered = sum_i64(a->etp_tokens, l->etp);
  const size_t max_ep = sc->sizes.gathered_tokens / (size_t)l->etp;
  if ((size_t)ep_total > max_ep || (size_t)gathered > sc->sizes.gathered_tokens)
    return error_set(err, ERR_ARG, "MoE all-gather dispatcher: %lld tokens over EP, %lld over EP x ETP, buffers "
                     "hold %zu and %zu: a peer has more tokens than max_tokens",
                     (long long)ep_total, (long long)gathered, max_ep, sc->sizes.gathered_tokens);
  a->gathered = (int)gathered;

  for (int n = 0; n < N; n++) {
    float *dst = sc->packed + (size_t)n * row;
    memcpy(dst, x + (size_t)n * C, (size_t)C * sizeof(float));
    for (int j = 0; j < K; j++) {
      const size_t as = (size_t)n * K + j;
      dst[C + 2 * j] = a->perm.row_of[as] >= 0 ? (float)a->routing.topk_idx[as] : -1.0f;
      dst[C + 2 * j + 1] = a->routing.topk_w[as];
    }
  }
  float *all;
  rc = gather_tokens(&all, sc, sc->packed, a, row, l, ops, err);
  if (!rc) rc = plan_local_rows(a, all, s, l, sc->sizes.local_rows, err);
  if (rc) return rc;
  moe_experts_forward(a->ys, a->h, sc->a, a->xs, a->local_offset, s->E / l->ep, p->w_gate_up, p->w_down, C,
                      s->Fe / l->etp);

  /* Partial outputs of every gathered token (rows of C floats now). */
  float *partial = all;
#pragma omp parallel for schedule(static) if ((size_t)a->gathered * K * C > PARALLEL_MIN_WORK)
  for (int t = 0; t < a->gathered; t++) {
    float *o = partial + (size_t)t * C;
    memset(o, 0, (size_t)C * sizeof(float));
    for (int j = 0; j < K; j++) {
      const int r = a->row_of[(size_t)t * K + j];
      if (r < 0) continue;
      const float w = a->weight[(size_t)t * K + j];
      const float *y = a->ys + (size_t)r * C;
      for (int c = 0; c < C; c++) o[c] += w * y[c];
    }
  }
  rc = scatter_sums(sc, partial, a, C, l, ops, err);
  if (rc) return rc;
  for (size_t i = 0; i < (size_t)N * C; i++) out[i] += sc->packed[i];
  if (s->Fs > 0) swiglu_mlp_forward(out, 1, a->shared_h, sc->a, x, p->shared_gate_up, p->shared_down, N, C, s->Fs);
  return 0;
}

int moe_ag_backward(float *dx, const MoeLayerGrads *g, MoeAgScratch *sc, const float *dout, const MoeAgActs *a,
                    const float *x, const MoeLayerParams *p, int N, const MoeSpec *s, const MoeEpLayout *l,
                    const MoeCommOps *ops, float grad_scale, Error *err) {
  const int C = s->C, K = s->K, back = C + K;
  float *all;
  /* Backward of the output reduce-scatters: every rank needs dout of every
   * gathered token. */
  int rc = gather_tokens(&all, sc, dout, a, C, l, ops, err);
  if (rc) return rc;
  const float *dout_all = all;
  /* dy of the local rows (the combine's backward). */
#pragma omp parallel for schedule(static) if ((size_t)a->gathered * K * C > PARALLEL_MIN_WORK)
  for (int t = 0; t < a->gathered; t++) {
    const float *d = dout_all + (size_t)t * C;
    for (int j = 0; j < K; j++) {
      const int r = a->row_of[(size_t)t * K + j];
      if (r < 0) continue;
      const float w = a->weight[(size_t)t * K + j];
      float *dy = sc->dys + (size_t)r * C;
      for (int c = 0; c < C; c++) dy[c] = w * d[c];
    }
  }
  moe_experts_backward(sc->dxs, g->w_gate_up, g->w_down, sc->dys, a->xs, a->h, sc->a, sc->da, sc->dh,
                       a->local_offset, s->E / l->ep, p->w_gate_up, p->w_down, C, s->Fe / l->etp);
  /* Each token's row becomes [dx (C), dtopk_w (K)] in place over its dout
   * row (C floats). Row t's result starts at or after row t's input, so
   * going from the last token down never overwrites an unread input; dot
   * products with this shard's partial y sum to the full ones over ETP. */
  float *packed = all;
  for (int t = a->gathered - 1; t >= 0; t--) {
    float dtw[K > 0 ? K : 1], d[C];
    memcpy(d, dout_all + (size_t)t * C, (size_t)C * sizeof(float));
    float *o = packed + (size_t)t * back;
    for (int c = 0; c < C; c++) o[c] = 0;
    for (int j = 0; j < K; j++) {
      const int r = a->row_of[(size_t)t * K + j];
      dtw[j] = 0;
      if (r < 0) continue;
      const float *y = a->ys + (size_t)r * C, *dxr = sc->dxs + (size_t)r * C;
      for (int c = 0; c < C; c++) dtw[j] += d[c] * y[c], o[c] += dxr[c];
    }
    memcpy(o + C, dtw, (size_t)K * sizeof(float));
  }
  rc = scatter_sums(sc, packed, a, back, l, ops, err);
  if (rc) return rc;
  for (int n = 0; n < N; n++) {
    memcpy(dx + (size_t)n * C, sc->packed + (size_t)n * back, (size_t)C * sizeof(float));
    memcpy(sc->dtopk_w + (size_t)n * K, sc->packed + (size_t)n * back + C, (size_t)K * sizeof(float));
  }
  if (s->Fs > 0)
    swiglu_mlp_backward(dx, 1, g->shared_gate_up, g->shared_down, dout, x, a->shared_h, sc->a, sc->da, sc->dh,
                        p->shared_gate_up, p->shared_down, N, C, s->Fs);
  moe_router_backward(dx, g->router, sc->dz, sc->dscore, sc->dtopk_w, x, p->router, &a->routing, N, s, grad_scale);
  return 0;
}
