/* The MoE layer of docs/moe-semantics.md, cut into the phases a parallel
 * dispatcher reuses:
 *
 *   route  -> permute -> (exchange) -> experts -> (exchange back) -> combine
 *
 * Each phase is a function on plain arrays; the single-rank layer
 * (moe_layer_forward / moe_layer_backward) simply calls them in order. A
 * dispatcher over expert-parallel ranks inserts its all-to-alls between
 * moe_permute_forward and moe_experts_forward (and between the experts and
 * moe_combine_forward), and reduces the router statistics (counts, prob_sum,
 * lse_sq_sum) over the sequence-sharding group before moe_router_losses.
 *
 * Buffers are owned by the caller (the model sizes them once); nothing here
 * allocates. Token n of the local micro-batch is row n of x [N, C];
 * assignment a = n*K + j is token n's j-th routing choice. */
#ifndef FIVEFOLD_MODEL_MOE_H
#define FIVEFOLD_MODEL_MOE_H

#include <stddef.h>

#include "model/config.h"

/* Below about this many floats of work a loop runs on one thread: waking
 * the pool costs more than it saves (and far more on a loaded machine). */
#define PARALLEL_MIN_WORK ((size_t)1 << 15)

typedef struct MoeSpec {
  int C;  /* hidden size */
  int E;  /* routed experts */
  int K;  /* top-k */
  int Fe; /* expert FFN */
  int Fs; /* shared-expert FFN, 0: none */
  RouterScore score;
  RouterOrder order;
  int norm_topk_prob;
  float scaling;
  float aux_coeff, z_coeff;
  float capacity_factor; /* <= 0: dropless */
  DropPolicy policy;
  int pad_to_capacity;
} MoeSpec;

void moe_spec_from_config(MoeSpec *s, const ModelConfig *cfg);

/* ceil(N * K * capacity_factor / E) in double (0 when dropless). */
int moe_capacity(const MoeSpec *s, int N);
/* Rows of the expert-major buffers for a micro-batch of N tokens. */
size_t moe_max_rows(const MoeSpec *s, int N);

/* ---------------------------------------------------------------- route */

typedef struct MoeRouting {
  float *logits;     /* [N, E] z */
  float *scores;     /* [N, E] softmax(z) (softmax score) or sigmoid(z) */
  float *lse;        /* [N] logsumexp_e z (filled when z_coeff > 0) */
  int *topk_idx;     /* [N, K] */
  float *topk_w;     /* [N, K] routing weights (after scaling) */
  long *counts;      /* [E] assignments per expert, before dropping */
  double *prob_sum;  /* [E] sum over tokens of q[n, e] (aux loss) */
  double *aux_dq;    /* [E] d L_aux / d q[n, e], set by moe_router_losses */
  double lse_sq_sum; /* sum over tokens of lse^2 */
  double z_dlse2;    /* d L_z / d (lse_n^2), set by moe_router_losses */
} MoeRouting;

/* Logits, scores, top-k, routing weights and the local statistics. */
void moe_router_forward(MoeRouting *r, const float *x, const float *w_router, int N, const MoeSpec *s);

/* Aux and z losses (coefficients applied) over num_tokens tokens whose
 * statistics r holds (already reduced over ranks if the tokens are sharded);
 * also prepares the loss gradients used by moe_router_backward. */
void moe_router_losses(MoeRouting *r, long num_tokens, const MoeSpec *s, double *aux, double *z);

/* dz [N, E] and dscore [N, E] are scratch. dx += d/dx, dw_router += d/dW,
 * for the routing-weight gradient dtopk_w [N, K] (already scaled) plus
 * grad_scale times the aux and z losses. */
void moe_router_backward(float *dx, float *dw_router, float *dz, float *dscore, const float *dtopk_w, const float *x,
                         const float *w_router, const MoeRouting *r, int N, const MoeSpec *s, float grad_scale);

/* -------------------------------------------------------------- permute */

typedef struct MoePermutation {
  int *row_of;        /* [N*K] row of assignment (n, j) in the expert-major buffer; -1 if dropped */
  int *token_of_row;  /* [max rows] source token of each row; -1 for padding */
  int *expert_offset; /* [E+1] first row of each expert */
  int *kept;          /* [E] rows holding real tokens */
  int rows;           /* rows in use */
  int capacity;       /* 0 when dropless */
  long dropped;       /* assignments dropped by the capacity rule */
} MoePermutation;

/* Scratch bytes moe_permute_plan needs for N tokens. */
size_t moe_plan_scratch_bytes(const MoeSpec *s, int N);

/* Capacity, drop policy, padding, and the expert-major row of every kept
 * assignment (within an expert, (n, j) order). */
void moe_permute_plan(MoePermutation *p, const MoeRouting *r, int N, const MoeSpec *s, void *scratch);

/* xp[row] = x[token_of_row[row]] (zeros for padding rows). */
void moe_permute_forward(float *xp, const float *x, const MoePermutation *p, int C);

/* dx[n] (+)= sum_j dxp[row_of[n, j]]. */
void moe_permute_backward(float *dx, const float *dxp, const MoePermutation *p, int N, int K, int C, int accumulate);

/* -------------------------------------------------------------- experts */

/* Grouped GEMMs over contiguous row blocks: expert e owns rows
 * [expert_offset[e], expert_offset[e+1]). w_gate_up [num_experts, 2F, C],
 * w_down [num_experts, C, F]. h [rows, 2F] is kept for backward; a [rows, F]
 * is scratch. */
void moe_experts_forward(float *y, float *h, float *a, const float *xp, const int *expert_offset, int num_experts,
                         const float *w_gate_up, const float *w_down, int C, int F);

/* dxp overwritten; dw_* accumulate. a, da, dh are [rows, F] / [rows, F] /
 * [rows, 2F] scratch (a is recomputed from h). */
void moe_experts_backward(float *dxp, float *dw_gate_up, float *dw_down, const float *dy, const float *xp,
                          const float *h, float *a, float *da, float *dh, const int *expert_offset, int num_experts,
                          const float *w_gate_up, const float *w_down, int C, int F);

/* -------------------------------------------------------------- combine */

/* out[n] += sum_j kept(n, j) * topk_w[n, j] * y[row_of[n, j]]. */
void moe_combine_forward(float *out, const float *y, const MoePermutation *p, const float *topk_w, int N, int K, int C);

/* dy[row] = w * dout[n] (zero on padding rows); dtopk_w[n, j] = dout[n].y(row)
 * (zero when dropped). */
void moe_combine_backward(float *dy, float *dtopk_w, const float *dout, const float *y, const MoePermutation *p,
                          const float *topk_w, int N, int K, int C);

/* ------------------------------------------------ the single-rank layer */

typedef struct MoeLayerParams {
  const float *router;         /* [E, C] */
  const float *w_gate_up;      /* [E, 2Fe, C] */
  const float *w_down;         /* [E, C, Fe] */
  const float *shared_gate_up; /* [2Fs, C] or NULL */
  const float *shared_down;    /* [C, Fs] or NULL */
} MoeLayerParams;

typedef struct MoeLayerGrads {
  float *router, *w_gate_up, *w_down, *shared_gate_up, *shared_down;
} MoeLayerGrads;

/* What one layer keeps from forward for backward. */
typedef struct MoeLayerActs {
  MoeRouting routing;
  MoePermutation perm;
  float *xp;       /* [rows, C] */
  float *h;        /* [rows, 2Fe] */
  float *y;        /* [rows, C] */
  float *shared_h; /* [N, 2Fs] */
} MoeLayerActs;

/* Scratch shared by all layers (sized for the largest). */
typedef struct MoeScratch {
  float *a, *da, *dh; /* [max(rows, N), max(Fe, Fs)] and 2x that for dh */
  float *dy, *dxp;    /* [rows, C] */
  float *dtopk_w;     /* [N, K] */
  float *dz, *dscore; /* [N, E] */
  void *plan;         /* moe_plan_scratch_bytes */
} MoeScratch;

/* out += moe(x). Losses of this layer (coefficients applied) to *aux, *z. */
void moe_layer_forward(float *out, MoeLayerActs *acts, MoeScratch *scratch, const float *x, const MoeLayerParams *p,
                       int N, const MoeSpec *s, double *aux, double *z);

/* dx (overwritten) and parameter gradients (+=) of the layer for dout, plus
 * grad_scale times its aux and z losses. */
void moe_layer_backward(float *dx, const MoeLayerGrads *g, MoeScratch *scratch, const float *dout,
                        const MoeLayerActs *acts, const float *x, const MoeLayerParams *p, int N, const MoeSpec *s,
                        float grad_scale);

/* ------------------------------------------------ dense SwiGLU MLP */

/* out (+)= W_down . swiglu(W_gate_up . x); h [N, 2F] kept, a [N, F] scratch. */
void swiglu_mlp_forward(float *out, int accumulate, float *h, float *a, const float *x, const float *w_gate_up,
                        const float *w_down, int N, int C, int F);

/* dx (+)= ..., dw_* +=; a, da [N, F] and dh [N, 2F] scratch. */
void swiglu_mlp_backward(float *dx, int accumulate_dx, float *dw_gate_up, float *dw_down, const float *dout,
                         const float *x, const float *h, float *a, float *da, float *dh, const float *w_gate_up,
                         const float *w_down, int N, int C, int F);

#endif
