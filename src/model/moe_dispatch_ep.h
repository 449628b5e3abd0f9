/* Expert-parallel MoE layers: the phases of moe.h spread over an MoE grid
 * (etp-ep-edp-pp, "parallel folding": the EP x ETP ranks may be TP, CP or DP
 * ranks of attention). Two token dispatchers compute the same layer:
 *
 *  all-to-all (moe_a2a_*): route the local tokens, permute them
 *    expert-major (= destination-major: EP rank q holds experts
 *    [q E/ep, (q+1) E/ep)), exchange per-(rank, local expert) row counts,
 *    all-to-all-v over EP, all-gather-v over ETP, sort by local expert,
 *    grouped expert GEMMs with ETP-sharded weights, unsort, reduce-scatter-v
 *    over ETP (completes the down-projection's partial sums), all-to-all-v
 *    back, weighted combine. Backward runs the same path in reverse.
 *  all-gather (moe_ag_*, for small EP): all-gather the local tokens and
 *    their routing over EP then ETP, compute the local experts' share of
 *    every gathered token, reduce-scatter the partial outputs back over ETP
 *    then EP.
 *
 * Both give, for the tokens a rank holds, the outputs, dx, aux and z losses
 * of the one-rank moe_layer_forward / moe_layer_backward over the whole
 * micro-batch (dropless), whatever the token layout. Dropping (capacity
 * factor > 0) is decided on the source rank before any exchange, exactly as
 * moe.c decides it for the rank's local tokens alone: capacity from the
 * LOCAL token count, both drop policies, optional padding to capacity
 * (padding rows travel as zero rows; shapes change, results do not).
 *
 * Parameters (MoeLayerParams / MoeLayerGrads of moe.h, local views):
 *   router [E, C], shared_gate_up [2Fs, C], shared_down [C, Fs]: replicated;
 *   w_gate_up [E/ep, 2 Fe/etp, C]: rows [0, Fe/etp) are the gate rows
 *     [etp_rank Fe/etp, (etp_rank+1) Fe/etp) of the full expert, the next
 *     Fe/etp rows the same slice of its up rows (moe_ep_shard_experts);
 *   w_down [E/ep, C, Fe/etp]: the matching column slice.
 *
 * What the runtime must do (this module never links MPI):
 *   - give MoeCommOps callbacks over three groups of the rank: MOE_GROUP_EP
 *     (grid group "ep"), MOE_GROUP_ETP ("etp") and MOE_GROUP_SEQ, the ranks
 *     that hold the tokens of one micro-batch (attention's "tp-cp" group);
 *     the layout's ranks are the positions in those groups. Every member of a
 *     group issues the same calls in the same order.
 *   - reduce the gradients these functions leave local: expert weights
 *     (w_gate_up, w_down) sum over EDP; router and shared-expert weights sum
 *     over DP x CP, and also over TP when sequence parallel (they hold the
 *     gradient of the local tokens only), like every replicated parameter.
 *   - count the aux and z losses once per micro-batch: every rank of the
 *     SEQ group returns the same full values.
 *
 * Buffers: sized once for at most max_tokens tokens per rank
 * (moe_a2a_sizes / moe_ag_sizes), bound to caller memory
 * (*_bind_acts per layer, *_bind_scratch shared by layers); nothing here
 * allocates. More than max_tokens local tokens, or a received row count
 * beyond what the sizes assumed (a peer with more tokens), is an error,
 * not an overflow.
 *
 * Errors: a failure on one rank leaves its peers inside a collective, so
 * the runtime must treat any error returned here as fatal for the job
 * (report it, then abort), as it does for MPI failures. */
#ifndef FIVEFOLD_MODEL_MOE_DISPATCH_EP_H
#define FIVEFOLD_MODEL_MOE_DISPATCH_EP_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/moe.h"

typedef enum MoeGroup {
  MOE_GROUP_EP = 0, /* expert parallel: the all-to-alls / token all-gather */
  MOE_GROUP_ETP,    /* expert tensor parallel: the row all-gather and reduce-scatter */
  MOE_GROUP_SEQ     /* the ranks sharing one micro-batch: router statistics */
} MoeGroup;

/* Collectives over one group of this rank. Rows are row_floats floats each,
 * packed in member order; members are numbered by their position in the
 * group. Each returns 0 or an error code with a message in err. */
typedef struct MoeCommOps {
  void *ctx;
  /* per_rank values to each member; recv gets per_rank values from each. */
  int (*alltoall_i64)(void *ctx, MoeGroup g, const int64_t *send, int64_t *recv, int per_rank, Error *err);
  /* send_rows[m] rows to member m; recv_rows[m] rows arrive from m. */
  int (*alltoallv_f32)(void *ctx, MoeGroup g, const float *send, const int64_t *send_rows, float *recv,
                       const int64_t *recv_rows, int row_floats, Error *err);
  /* count values from each member, in member order. */
  int (*allgather_i64)(void *ctx, MoeGroup g, const int64_t *send, int64_t *recv, int count, Error *err);
  /* Member m contributes rows[m] rows (this rank: send). */
  int (*allgatherv_f32)(void *ctx, MoeGroup g, const float *send, float *recv, const int64_t *rows, int row_floats,
                        Error *err);
  /* send holds sum(rows) rows in member blocks; recv gets the sum over
   * members of block `this rank` (rows[this rank] rows). The backward of
   * allgatherv_f32. */
  int (*reduce_scatterv_f32)(void *ctx, MoeGroup g, const float *send, float *recv, const int64_t *rows,
                             int row_floats, Error *err);
  /* In place sum over the group. */
  int (*allreduce_f64)(void *ctx, MoeGroup g, double *buf, size_t n, Error *err);
} MoeCommOps;

typedef struct MoeEpLayout {
  int ep, ep_rank;   /* EP group size, this rank's position in it */
  int etp, etp_rank; /* ETP group size and position */
} MoeEpLayout;

/* E divisible by ep, Fe by etp, ranks in range. */
int moe_ep_check(const MoeSpec *s, const MoeEpLayout *l, Error *err);

/* This rank's expert shard from full weights ([E, 2Fe, C], [E, C, Fe]). */
void moe_ep_shard_experts(float *w_gate_up_local, float *w_down_local, const float *w_gate_up, const float *w_down,
                          const MoeSpec *s, const MoeEpLayout *l);

/* ------------------------------------------------ all-to-all dispatcher */

typedef struct MoeA2aSizes {
  int max_tokens;       /* local tokens the buffers hold */
  size_t source_rows;   /* expert-major rows of the local tokens */
  size_t received_rows; /* rows one rank can receive over EP */
  size_t gathered_rows; /* rows after the ETP all-gather */
  size_t acts_bytes;    /* one layer's MoeA2aActs */
  size_t scratch_bytes; /* MoeA2aScratch, shared by layers */
} MoeA2aSizes;

typedef struct MoeA2aActs {
  MoeRouting routing;   /* the local tokens */
  MoePermutation perm;  /* local tokens into expert-major rows over all E experts */
  long *group_counts;   /* [E] assignments per expert over the SEQ group (statistics) */
  long group_tokens;    /* tokens of the SEQ group */
  int64_t *send_counts; /* [ep, E/ep] rows to each (member, its local expert) */
  int64_t *recv_counts; /* [ep, E/ep] rows from each (member, local expert) */
  int64_t *send_rows, *recv_rows; /* [ep] */
  int64_t *etp_counts;  /* [etp, ep, E/ep] recv_counts of every ETP member */
  int64_t *etp_rows;    /* [etp] rows each ETP member received */
  int *sorted_row;      /* [gathered] row of gathered row i in expert-sorted order */
  int *local_offset;    /* [E/ep + 1] first sorted row of each local expert */
  int received, gathered;
  float *y_source;      /* [source_rows, C] expert outputs back at the source */
  float *xs;            /* [gathered, C] sorted expert inputs */
  float *h;             /* [gathered, 2 Fe/etp] */
  float *shared_h;      /* [N, 2Fs] */
} MoeA2aActs;

typedef struct MoeA2aScratch {
  float *source;   /* [source_rows, C] send rows; dy and dxp at the source in backward */
  float *received; /* [received_rows, C] */
  float *gathered; /* [gathered_rows, C] in arrival order */
  float *sorted;   /* [gathered_rows, C] ys forward, dys backward */
  float *dxs;      /* [gathered_rows, C] */
  float *a, *da, *dh;
  float *dtopk_w, *dz, *dscore;
  double *stats; /* [2E + 2] */
  void *plan;
  MoeA2aSizes sizes;
} MoeA2aScratch;

MoeA2aSizes moe_a2a_sizes(const MoeSpec *s, const MoeEpLayout *l, int max_tokens);
/* mem: sizes.acts_bytes / sizes.scratch_bytes, 64-byte aligned. */
void moe_a2a_bind_acts(MoeA2aActs *a, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens);
void moe_a2a_bind_scratch(MoeA2aScratch *sc, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens);

/* Phases (the layer functions chain them; a schedule may call them apart). */
/* Router, local capacity plan, SEQ-group statistics, *aux and *z. */
int moe_a2a_route(MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeLayerParams *p, int N, const MoeSpec *s,
                  const MoeCommOps *ops, double *aux, double *z, Error *err);
/* Permute, counts, all-to-all-v over EP, all-gather-v over ETP, sort. */
int moe_a2a_dispatch(MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeSpec *s, const MoeEpLayout *l,
                     const MoeCommOps *ops, Error *err);
void moe_a2a_experts(MoeA2aActs *a, MoeA2aScratch *sc, const MoeLayerParams *p, const MoeSpec *s,
                     const MoeEpLayout *l);
/* Unsort, reduce-scatter-v over ETP, all-to-all-v back, out += combine
 * (+ shared expert). */
int moe_a2a_combine(float *out, MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeLayerParams *p, int N,
                    const MoeSpec *s, const MoeEpLayout *l, const MoeCommOps *ops, Error *err);

int moe_a2a_forward(float *out, MoeA2aActs *a, MoeA2aScratch *sc, const float *x, const MoeLayerParams *p, int N,
                    const MoeSpec *s, const MoeEpLayout *l, const MoeCommOps *ops, double *aux, double *z,
                    Error *err);
/* dx overwritten, grads +=, grad_scale on the aux and z losses. */
int moe_a2a_backward(float *dx, const MoeLayerGrads *g, MoeA2aScratch *sc, const float *dout, const MoeA2aActs *a,
                     const float *x, const MoeLayerParams *p, int N, const MoeSpec *s, const MoeEpLayout *l,
                     const MoeCommOps *ops, float grad_scale, Error *err);

/* ------------------------------------------------ all-gather dispatcher */

typedef struct MoeAgSizes {
  int max_tokens;
  size_t gathered_tokens; /* tokens of the EP x ETP group */
  size_t local_rows;      /* rows of this rank's experts */
  size_t acts_bytes, scratch_bytes;
} MoeAgSizes;

typedef struct MoeAgActs {
  MoeRouting routing;
  MoePermutation perm; /* the local capacity decision */
  long *group_counts;
  long group_tokens;
  int64_t *ep_tokens;  /* [ep] tokens of each EP member */
  int64_t *etp_tokens; /* [etp] tokens gathered over EP by each ETP member */
  int gathered;        /* tokens of the EP x ETP group */
  int *row_of;         /* [gathered, K] local row of a gathered assignment, -1: elsewhere or dropped */
  float *weight;       /* [gathered, K] routing weights of the gathered assignments */
  int *local_offset;   /* [E/ep + 1] */
  int rows;
  float *xs, *h, *ys;  /* [rows, C], [rows, 2 Fe/etp], [rows, C] (ys: this ETP shard's partial outputs) */
  float *shared_h;
} MoeAgActs;

typedef struct MoeAgScratch {
  float *packed;   /* [N, C + 2K] local tokens and routing; [N, C + K] results */
  float *ep_buf;   /* [ep N, C + 2K] after the EP gather */
  float *all_buf;  /* [gathered, C + 2K] after the ETP gather */
  float *dys, *dxs;
  float *a, *da, *dh;
  float *dtopk_w, *dz, *dscore;
  double *stats;
  void *plan;
  MoeAgSizes sizes;
} MoeAgScratch;

MoeAgSizes moe_ag_sizes(const MoeSpec *s, const MoeEpLayout *l, int max_tokens);
void moe_ag_bind_acts(MoeAgActs *a, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens);
void moe_ag_bind_scratch(MoeAgScratch *sc, void *mem, const MoeSpec *s, const MoeEpLayout *l, int max_tokens);

int moe_ag_forward(float *out, MoeAgActs *a, MoeAgScratch *sc, const float *x, const MoeLayerParams *p, int N,
                   const MoeSpec *s, const MoeEpLayout *l, const MoeCommOps *ops, double *aux, double *z,
                   Error *err);
int moe_ag_backward(float *dx, const MoeLayerGrads *g, MoeAgScratch *sc, const float *dout, const MoeAgActs *a,
                    const float *x, const MoeLayerParams *p, int N, const MoeSpec *s, const MoeEpLayout *l,
                    const MoeCommOps *ops, float grad_scale, Error *err);

/* ------------------------------------------- shared by both dispatchers */

/* Routes the local tokens, plans their capacity, reduces the statistics
 * over MOE_GROUP_SEQ into group_counts (and returns the group's tokens),
 * then the losses. stats: [2E + 2] scratch. */
int moe_ep_route(MoeRouting *r, MoePermutation *perm, long *group_counts, long *group_tokens, double *stats,
                 void *plan, const float *x, const float *w_router, int N, const MoeSpec *s, const MoeCommOps *ops,
                 double *aux, double *z, Error *err);

#endif
