/* Private helpers of the expert-parallel dispatchers (moe_dispatch_ep.c,
 * moe_dispatch_allgather.c): carving caller memory into arrays, so that one
 * function both sizes and binds a buffer set, the scratch both carve alike,
 * and the wrapping of callback failures into messages that name the phase. */
#ifndef FIVEFOLD_MODEL_MOE_DISPATCH_EP_INTERNAL_H
#define FIVEFOLD_MODEL_MOE_DISPATCH_EP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/moe_dispatch_ep.h"

/* base == NULL: only counts bytes (every take returns NULL). */
typedef struct Carver {
  char *base;
  size_t used;
} Carver;

static inline void *carve(Carver *c, size_t bytes) {
  /* 64-byte alignment: whole cache lines, and any element type fits. */
  size_t at = (c->used + 63) & ~(size_t)63;
  c->used = at + (bytes ? bytes : 1);
  return c->base ? c->base + at : NULL;
}

/* Rows of the expert-major buffer one source rank may send to one EP
 * member, for at most max_tokens local tokens. */
static inline size_t moe_ep_rows_per_peer(const MoeSpec *s, int local_experts, int max_tokens) {
  const int per_token = s->K < local_experts ? s->K : local_experts;
  size_t rows = (size_t)max_tokens * per_token;
  const int cap = moe_capacity(s, max_tokens);
  if (cap > 0) {
    size_t capped = (size_t)cap * local_experts;
    rows = s->pad_to_capacity || capped < rows ? capped : rows;
  }
  return rows;
}

/* The routing and local permutation arrays of N tokens. */
static inline void carve_routing(Carver *c, MoeRouting *r, MoePermutation *p, const MoeSpec *s, int N) {
  const size_t E = (size_t)s->E, NK = (size_t)N * s->K;
  r->logits = carve(c, (size_t)N * E * sizeof(float));
  r->scores = carve(c, (size_t)N * E * sizeof(float));
  r->lse = carve(c, (size_t)N * sizeof(float));
  r->topk_idx = carve(c, NK * sizeof(int));
  r->topk_w = carve(c, NK * sizeof(float));
  r->counts = carve(c, E * sizeof(long));
  r->prob_sum = carve(c, E * sizeof(double));
  r->aux_dq = carve(c, E * sizeof(double));
  p->row_of = carve(c, NK * sizeof(int));
  p->token_of_row = carve(c, moe_max_rows(s, N) * sizeof(int));
  p->expert_offset = carve(c, (E + 1) * sizeof(int));
  p->kept = carve(c, E * sizeof(int));
}

/* The end of either dispatcher's scratch: the FFN activations a, da and
 * dh for expert_rows rows of this rank's expert shard (Fl wide) or the
 * shared expert's N rows, whichever is larger; the router's backward
 * (dtopk_w, dz, dscore); moe_ep_route's statistics and capacity plan. */
static inline void carve_shared_scratch(Carver *c, float **a, float **da, float **dh, float **dtopk_w, float **dz,
                                        float **dscore, double **stats, void **plan, const MoeSpec *s, int N,
                                        size_t expert_rows, size_t Fl) {
  size_t ffn = expert_rows * Fl;
  if ((size_t)N * s->Fs > ffn) ffn = (size_t)N * s->Fs;
  *a = carve(c, ffn * sizeof(float));
  *da = carve(c, ffn * sizeof(float));
  *dh = carve(c, 2 * ffn * sizeof(float));
  *dtopk_w = carve(c, (size_t)N * s->K * sizeof(float));
  *dz = carve(c, (size_t)N * s->E * sizeof(float));
  *dscore = carve(c, (size_t)N * s->E * sizeof(float));
  *stats = carve(c, (size_t)(2 * s->E + 2) * sizeof(double));
  *plan = carve(c, moe_plan_scratch_bytes(s, N));
}

static inline int64_t sum_i64(const int64_t *v, int n) {
  int64_t t = 0;
  for (int i = 0; i < n; i++) t += v[i];
  return t;
}

#define MOE_EP_CALL(err, what, call)                                      \
  do {                                                                    \
    int call_rc_ = (call);                                                \
    if (call_rc_) {                                                       \
      if ((err) && !(err)->code) (err)->code = call_rc_;                  \
      return error_wrap((err), "MoE dispatcher, %s", (what));             \
    }                                                                     \
  } while (0)

#endif
