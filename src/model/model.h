/* The transformer: parameters in one flat buffer (gradients in a twin
 * buffer), activations sized once for (B, T), and explicit forward and
 * backward passes, llm.c style.
 *
 * Block i:  x += attn(rmsnorm(x));  x += mlp_or_moe(rmsnorm(x))
 * Head:     loss = xent(rmsnorm(x) * lm_head^T, targets)
 *
 * Parameter tensors, by name (layouts are [out, in] like PyTorch):
 *   embed.weight                         [V, C]
 *   layers.{i}.attn_norm.weight          [C]
 *   layers.{i}.attn.wq                   [Hq*D, C]
 *   layers.{i}.attn.wk / attn.wv         [Hkv*D, C]
 *   layers.{i}.attn.wo                   [C, Hq*D]
 *   layers.{i}.mlp_norm.weight           [C]
 *   dense layer:
 *   layers.{i}.mlp.w_gate_up             [2F, C]   rows [0,F) gate, [F,2F) up
 *   layers.{i}.mlp.w_down                [C, F]
 *   MoE layer:
 *   layers.{i}.moe.router                [E, C]
 *   layers.{i}.moe.experts.w_gate_up     [E, 2Fe, C]
 *   layers.{i}.moe.experts.w_down        [E, C, Fe]
 *   layers.{i}.moe.shared.w_gate_up      [2Fs, C]  (if a shared expert)
 *   layers.{i}.moe.shared.w_down         [C, Fs]
 *   final_norm.weight                    [C]
 *   lm_head.weight                       [V, C]    (absent when tied)
 *
 * Loss: lm = mean cross-entropy over tokens with target >= 0;
 * aux = sum over MoE layers of aux_loss_coeff * E * sum_e f_e * P_e;
 * z = sum over MoE layers of z_loss_coeff * mean_t logsumexp(z_t)^2.
 * The objective is lm + aux + z. The MoE layer is defined exactly in
 * docs/moe-semantics.md (implementation: model/moe.h and moe*.c). RoPE
 * positions restart at 0 in every sequence of the batch.
 * Implementation files: model.c (init, buffers), model_table.c (the
 * parameter table of a shard), model_pass.c (forward/backward of blocks and
 * chunks), model_tp.c (tensor-parallel exchanges), mlp_layer.c, moe*.c,
 * model_internal.h and model_table.h (private). */
#ifndef FIVEFOLD_MODEL_MODEL_H
#define FIVEFOLD_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/attention_cp.h"
#include "model/config.h"
#include "model/moe_dispatch_ep.h"

typedef struct ParamTensor {
  char name[96];
  int ndim;
  int shape[4];
  size_t offset; /* in floats, into Model.params / Model.grads */
  size_t numel;
  int no_weight_decay; /* norms and biases */
  int is_bias;         /* a bias (GPT-2): initialised to zero */
  int is_expert;       /* routed-expert weights (reduced over EDP later) */
  /* Where this (local) tensor sits in the full logical tensor of the same
   * name, which has shape global_shape (ndim dims). Seen as the row-major
   * array view_shape[0..view_ndim) (a reshape of global_shape), the logical
   * tensor holds this tensor's data, row-major, as the sub-array starting at
   * view_start with extent view_count. An unsharded tensor has view_ndim =
   * ndim, view_shape = view_count = shape, view_start = 0. Example: the
   * column-parallel mlp.w_gate_up [2F, C] of TP rank r of t is the view
   * [2, F, C] with start [0, r*F/t, 0] and count [2, F/t, C] (its gate rows
   * then its up rows). Checkpoints write and read slices through this. */
  int global_shape[4];
  int view_ndim;
  int view_shape[4], view_start[4], view_count[4];
  int tp_replicated; /* identical on every TP rank (norms, the router; all tensors when tp = 1) */
  int tied_copy;     /* the LM head's copy of embed.weight on a rank without the embedding
                        (tied embeddings, pipeline): its gradient is summed with the
                        embedding's by the runtime, and checkpoints skip it */
  int tp_ranks;      /* how many TP ranks hold this same data: tp_size when tp_replicated, 1 for
                        a split tensor, in between for KV heads shared by some ranks (count it
                        1/tp_ranks times when summing over the TP group, e.g. a gradient norm) */
  int reduce_over_edp; /* the runtime sums this gradient over the EDP group (expert weights on the
                          expert-parallel path, see "Gradient reductions" below); 0: over DP x CP.
                          For such tensors tp_ranks = 1 (tp_replicated only when tp = 1): the copies of
                          one slice are the EDP group's members, not TP ranks */
} ParamTensor;

typedef struct ModelLoss {
  double lm;  /* mean over counted tokens */
  double aux; /* load-balancing loss (coefficient applied) */
  double z;   /* router z-loss (coefficient applied) */
  long tokens; /* tokens with a target */
} ModelLoss;

/* ---- sharding: the part of the model one rank of a parallel run holds ----
 *
 * Tensor parallelism (tp_size > 1) always comes with sequence parallelism:
 * between blocks a TP rank holds the rows [r*N/t, (r+1)*N/t) of the
 * flattened [N = B*T, C] activation (N must be divisible by t). Attention:
 * all-gather the normed rows, q/k/v column-parallel over heads (Hq/t query
 * heads per rank; KV heads split when Hkv % t == 0, otherwise each rank
 * keeps the KV heads its query heads use), wo row-parallel, reduce-scatter
 * into the residual. Dense MLP likewise (w_gate_up column-, w_down
 * row-parallel). MoE layers under TP alone (ep = etp = cp = 1) compute on
 * the all-gathered sequence with replicated experts and keep their own
 * rows: exact, layout-independent aux/z losses, redundant expert work (the
 * MoE grid, below, removes the redundancy). Embedding and LM head are vocab-parallel (rows [r*V/t,
 * (r+1)*V/t) of embed.weight / lm_head.weight; V must be divisible by t);
 * the cross-entropy is the vocab-parallel one (global max and sum of
 * exponentials over the TP group). Gradients of TP-replicated tensors that
 * see only local rows (norms) are summed over TP inside the backward, so
 * after model_chunk_backward every TP rank holds the full gradient of its
 * tensors.
 *
 * Pipeline parallelism: a rank holds num_chunks model chunks (virtual
 * stages, sched/program.h); chunk c runs blocks [layer_begin[c],
 * layer_end[c]). The chunk that is the first virtual stage also holds the
 * embedding, the last one the final norm, LM head and loss. With tied
 * embeddings and the two on different ranks, the last stage holds a copy of
 * embed.weight (ParamTensor.tied_copy) as its head. The flat parameter
 * buffer lays the chunks out in order (chunk c's tensors are contiguous:
 * model_chunk_params).
 *
 * Activations: each chunk has num_slots slots, one per micro-batch whose
 * forward awaits its backward; the caller picks the slot (a micro-batch uses
 * the same slot for its forward and backward of a chunk).
 *
 * Context parallelism (cp_size > 1): every rank of the CP group receives the
 * same full micro-batch [B, T] (tokens and targets: model_chunk_forward
 * selects its rows itself); T must be divisible by 2 * cp_size. The rank
 * keeps chunks cp_rank and 2*cp_size-1-cp_rank of every sequence (the
 * layout of attention_cp.h's cp_split_rows): B*T/cp rows, of which a TP rank
 * holds the slice [r*N'/t, (r+1)*N'/t) (N' = B*T/cp) between blocks, so
 * model_chunk_rows is B*T/(cp*tp). RoPE uses the global positions; the
 * attention core is the ring attention of attention_cp.h over
 * ModelParallelOps.cp (after the TP all-gather, on this TP rank's heads).
 * The LM loss is the mean over the whole micro-batch: token count and loss
 * sum are summed over the CP group (CpCommOps.allreduce_sum_f64), so every
 * CP rank reports the same lm and tokens and the head's gradient divides by
 * the micro-batch's total count.
 *
 * Expert parallelism and folding (ep_size * etp_size > 1, or cp_size > 1 on
 * a MoE model): MoE layers run one of the dispatchers of moe_dispatch_ep.h
 * (moe_dispatcher 0: all-to-all, 1: all-gather) over ModelParallelOps.moe on
 * the rank's own Nl residual rows (no TP all-gather of the MoE input). Its
 * MOE_GROUP_SEQ is the TP x CP group (the ranks sharing one micro-batch),
 * MOE_GROUP_EP / MOE_GROUP_ETP the MoE grid's groups (etp-ep-edp-pp). The
 * rank holds experts [ep_rank*E/ep, (ep_rank+1)*E/ep) sliced over etp:
 * moe.experts.w_gate_up [E/ep, 2Fe/etp, C] (view [E, 2, Fe, C], start
 * [ep_rank*E/ep, 0, etp_rank*Fe/etp, 0]) and moe.experts.w_down [E/ep, C,
 * Fe/etp] (view [E, C, Fe], start [ep_rank*E/ep, 0, etp_rank*Fe/etp]).
 * Router and shared expert stay replicated; their gradients (local tokens
 * only) are summed over TP inside the backward like the norms'. The
 * capacity rule (dropping mode) is applied per rank on its Nl tokens.
 * With ep = etp = cp = 1 MoE layers keep the TP path above.
 *
 * Gradient reductions the runtime does after the backward (the model has
 * already summed over TP what needs it):
 *   - reduce_over_edp = 1 (routed experts on the dispatcher path): sum over
 *     the EDP group of the MoE grid;
 *   - every other tensor (attention, dense MLP, norms, router, shared
 *     expert, embedding, head; routed experts on the TP path): sum over
 *     DP x CP (the attention grid's ranks with the same tp and pp
 *     coordinates); tied copies also add to the embedding as before.
 *
 * Losses under TP / CP / EP: every rank of a TP x CP group reports the same
 * lm, tokens, aux and z for the micro-batch (the whole micro-batch's values),
 * so the runtime counts them once per micro-batch (e.g. from one rank of the
 * group, or the group's sum divided by its size). expert_counts hold the
 * whole micro-batch's tokens per expert (identical on the TP x CP group);
 * dropped_assignments and model_chunk_dropped count this rank's own tokens
 * on the dispatcher path (sum them over the TP x CP group for the
 * micro-batch), the whole micro-batch on the TP path.
 *
 * Fields added after tp_size: a zero size (an older caller's zeroed struct)
 * means 1. */
#define MODEL_MAX_CHUNKS 16

typedef struct ModelShard {
  int tp_size, tp_rank;
  int num_chunks;
  int layer_begin[MODEL_MAX_CHUNKS], layer_end[MODEL_MAX_CHUNKS];
  int has_embedding[MODEL_MAX_CHUNKS]; /* 1 on the chunk that is virtual stage 0 */
  int has_head[MODEL_MAX_CHUNKS];      /* 1 on the chunk that is the last virtual stage */
  int num_slots;                       /* activation slots per chunk (>= 1) */
  int cp_size, cp_rank;                /* context parallelism (attention grid) */
  int ep_size, ep_rank;                /* expert parallelism (MoE grid) */
  int etp_size, etp_rank;              /* expert tensor parallelism (MoE grid) */
  int moe_dispatcher;                  /* MODEL_MOE_ALLTOALL or MODEL_MOE_ALLGATHER */
  /* 1: every slot also keeps what a split backward's weight-gradient pass
   * needs (model_chunk_backward_input / model_chunk_backward_weights): the
   * output gradients of the attention projections and of the dense MLP's
   * two matrices, about 2C + QD + 2 KVD + 2F floats per row and layer. */
  int split_backward;
  /* Full activation recomputation (Megatron's --recompute-granularity full
   * with --recompute-method and --recompute-num-layers), per chunk:
   *   MODEL_RECOMPUTE_UNIFORM: the chunk's blocks in groups of
   *     recompute_num_layers (0 or 1: every block alone; the last group may
   *     be shorter), every block recomputed;
   *   MODEL_RECOMPUTE_BLOCK: the first recompute_num_layers blocks of the
   *     chunk, each alone; the others keep their activations.
   * A slot keeps only the input of each group (the checkpoint); the
   * group's internal activations live in one workspace every slot and chunk
   * shares. The backward of a group first reruns the group's forward from
   * its checkpoint (the same calls, collectives included, in the same
   * order), then runs the ordinary backward, so gradients are bit-identical
   * to a run without recomputation. A recomputed block's weight gradients
   * are not deferred by a split backward (its workspace does not outlive
   * the first part). */
  int recompute_method;     /* MODEL_RECOMPUTE_NONE (0), _UNIFORM, _BLOCK */
  int recompute_num_layers; /* group size (uniform) or blocks per chunk (block) */
  /* Selective recomputation (Megatron's --recompute-granularity selective
   * with --recompute-modules), a set of MODEL_RECOMPUTE_LAYERNORM_BIT and
   * MODEL_RECOMPUTE_MLP_BIT; not with full recomputation:
   *   LAYERNORM: the two pre-norms' outputs are not kept; the backward
   *     reruns each norm from the block's kept residual rows (the norm's
   *     input) right before the products that read it (under TP with the
   *     same all-gather as the forward);
   *   MLP: a dense block's first product's output (SwiGLU's [gate; up],
   *     GPT-2's fc pre-activation) is not kept; the backward reruns that
   *     product (and GPT-2's bias) from the norm output.
   * What is dropped lives in one shared buffer every block, slot and chunk
   * reuses. The rerun makes the same calls on the same inputs (a norm the
   * forward fused with its residual add: the unfused norm of the kept sum,
   * bit-identical by kern/fusion.h), so the values and hence losses and
   * gradients are bit-identical. The MLP's
   * activation output and the experts' SwiGLU output are never kept: every
   * backward recomputes them from the first product's output. */
  unsigned recompute_modules;
} ModelShard;

enum { MODEL_RECOMPUTE_LAYERNORM_BIT = 1u << 0, MODEL_RECOMPUTE_MLP_BIT = 1u << 1 };

enum { MODEL_MOE_ALLTOALL = 0, MODEL_MOE_ALLGATHER = 1 };
enum { MODEL_RECOMPUTE_NONE = 0, MODEL_RECOMPUTE_UNIFORM = 1, MODEL_RECOMPUTE_BLOCK = 2 };

/* The collectives the model calls (the runtime binds them to its groups;
 * the model itself never links MPI). The four float ones act on the TP
 * group: blocking, in place where in == out is allowed, called in the same
 * order on every TP rank; unused (may be NULL) when tp_size = 1. `moe`
 * serves the MoE dispatchers (needed when ep_size * etp_size > 1, or
 * cp_size > 1 with MoE layers on this rank), `cp` the CP group (needed when
 * cp_size > 1: ring_shift and allreduce_sum_f64); NULL when unused. */
typedef struct ModelParallelOps {
  void *ctx;
  void (*allreduce_sum)(void *ctx, float *buf, size_t n);
  void (*allreduce_max)(void *ctx, float *buf, size_t n);
  /* out [t * count] = the `count` floats of every rank, in rank order */
  void (*allgather)(void *ctx, float *out, const float *in, size_t count);
  /* out [count] = this rank's block of the element-wise sum of every rank's in [t * count] */
  void (*reduce_scatter)(void *ctx, float *out, const float *in, size_t count);
  const MoeCommOps *moe;
  const CpCommOps *cp;
} ModelParallelOps;

typedef struct ModelActs ModelActs; /* private: activations and scratch */

typedef struct Model {
  ModelConfig cfg;
  int max_B, max_T; /* activation buffers are sized for these */
  size_t num_params;
  float *params;
  float *grads;
  ParamTensor *tensors;
  int num_tensors;
  ModelShard shard;
  const ModelParallelOps *ops;
  ModelActs *acts; /* chunk 0, slot 0 (model_forward's); the others are private */
  /* MoE statistics: tokens routed to each expert (before dropping)
   * [num_layers * num_experts] (zeros on dense layers and on layers this
   * rank does not hold), and assignments dropped by the capacity rule.
   * A forward of chunk c rewrites only the rows of c's layers (with the
   * counts of that micro-batch; under TP, of the whole sequence, identical
   * on every TP rank); dropped_assignments is then the sum over this rank's
   * layers of their latest forward. For per-step totals the runtime adds,
   * after each forward of chunk c, the rows [layer_begin[c], layer_end[c])
   * and model_chunk_dropped(m, c). With the default shard this is exactly
   * the last model_forward's statistics. */
  long *expert_counts;
  long dropped_assignments;
  /* Optional: called by model_backward / model_chunk_backward each time a
   * contiguous range of m->grads has received its last contribution of
   * this backward (the final norm and LM head, then each block from the
   * last to the first, then the embedding: ranges arrive in decreasing
   * offset order and cover the chunk's range, model_chunk_params, once).
   * Data parallelism starts reducing a gradient bucket as soon as it is
   * complete. Under TP the norm gradients (and on the dispatcher path the
   * router and shared-expert ones) are already summed over the group when
   * their range is reported. One exception: with tied embeddings and
   * the embedding and head in different chunks of the same rank, the head
   * chunk's forward adds the LM-head gradient into embed.weight (in the
   * embedding chunk's range); the embedding chunk's backward of the last
   * micro-batch still comes after every head forward of the step in any
   * pipeline schedule, so its report is final. NULL calls nothing. */
  void (*on_grads_ready)(void *ctx, size_t offset, size_t count);
  void *on_grads_ready_ctx;
  /* Bytes of activation memory the model holds: every (chunk, slot)'s
   * arena plus the shared scratch (the recomputation workspace included).
   * Allocated once at creation, so this is also its peak. */
  size_t activation_bytes;
  size_t recompute_workspace_bytes; /* the part of the scratch that rebuilds recomputed groups (or, under
                                     * selective recomputation, holds what the blocks no longer keep) */
} Model;

/* The whole model on one rank: tp 1, one chunk with every block, the
 * embedding and the head, one slot. */
void model_shard_default(const ModelConfig *cfg, ModelShard *shard);

/* Creates the shard of the model described by `shard`; ops must outlive the
 * model (NULL when every size is 1). Errors (ERR_CONFIG) name what does not
 * divide or fit: heads, vocabulary, FFN sizes by tp, query heads that do
 * not map onto whole KV heads, num_experts by ep_size,
 * moe_intermediate_size by etp_size, max_T by 2 * cp_size, ranks outside
 * their sizes, an unknown moe_dispatcher, layer ranges outside [0, L) or overlapping,
 * the embedding on a chunk not starting at layer 0 or the head on one not
 * ending at L, num_chunks, num_slots. The tied copy of the head (see
 * ParamTensor.tied_copy) is named "embed.weight" like the tensor it copies
 * (lm_head.weight does not exist with tied embeddings). */
int model_create_shard(Model *m, const ModelConfig *cfg, const ModelShard *shard, const ModelParallelOps *ops,
                       int max_B, int max_T, Error *err);

/* The tensors of the full, unsharded model in the canonical order (what a
 * one-rank model_create lays out, and what checkpoints hold). *out is
 * malloc'd. */
int model_global_tensors(const ModelConfig *cfg, ParamTensor **out, int *n, Error *err);

/* [*offset, *offset + *count) of m->params holds the tensors of chunk c. */
void model_chunk_params(const Model *m, int chunk, size_t *offset, size_t *count);

/* Rows of the activation passed between chunks on this rank: B*T/(cp*tp)
 * (T must be divisible by 2*cp and B*T/cp by tp: forwards refuse it
 * otherwise, ERR_ARG). RoPE positions are n % T of the global flattened row
 * n. */
int model_chunk_rows(const Model *m, int B, int T);

/* Assignments dropped by the capacity rule in the latest forward of chunk
 * `chunk` (over its layers; 0 when dropless). */
long model_chunk_dropped(const Model *m, int chunk);

/* Forward of one micro-batch [B, T] through chunk `chunk`, keeping what
 * backward needs in `slot` when training. The chunk with the embedding reads
 * tokens [B, T] (x_in unused); any other reads x_in [rows, C] (rows =
 * model_chunk_rows). The chunk with the head reads targets [B, T]
 * (negative = ignore; may be NULL: no loss) and, when training, already
 * produces its LM-head gradient scaled by grad_scale. Every rank of a
 * TP x CP group passes the same full [B, T] tokens and targets (or NULL
 * targets on all of them). loss (may be NULL): lm and tokens from the head
 * chunk (identical on all TP x CP ranks), aux and z of this chunk's MoE
 * layers; zero otherwise. Errors from the dispatchers or the ring are fatal
 * for the job (peers wait inside a collective). */
int model_chunk_forward(Model *m, int chunk, int slot, const int *tokens, const int *targets, const float *x_in,
                        int B, int T, int training, float grad_scale, ModelLoss *loss, Error *err);
/* The output activation [rows, C] of the last forward of (chunk, slot): what
 * SEND_ACT sends (not valid for the head chunk). */
const float *model_chunk_output(const Model *m, int chunk, int slot);
/* Backward of (chunk, slot); dy [rows, C] is the gradient of the chunk's
 * output (ignored, may be NULL, for the head chunk). Accumulates into
 * m->grads, calling on_grads_ready for this chunk's ranges. */
int model_chunk_backward(Model *m, int chunk, int slot, const float *dy, Error *err);
/* The backward of (chunk, slot) in two parts, for zero-bubble pipeline
 * orders (needs a shard made with split_backward). _input does everything
 * model_chunk_backward does except the weight gradients of the attention
 * projections (wq, wk, wv, wo) and of the dense SwiGLU MLP (w_gate_up,
 * w_down), whose output gradients it keeps in the slot; afterwards
 * model_chunk_input_grad is valid. _weights computes those weight
 * gradients from the kept tensors with the same GEMMs the unsplit backward
 * runs, so the gradients are bit-identical, and only then reports the
 * chunk's ranges to on_grads_ready. The slot stays busy until _weights.
 * Layers whose passes are not split (MoE experts, GPT-2's MLP, and every
 * layer under tensor parallelism) compute all their gradients in _input. */
int model_chunk_backward_input(Model *m, int chunk, int slot, const float *dy, Error *err);
int model_chunk_backward_weights(Model *m, int chunk, int slot, Error *err);
/* The gradient [rows, C] of the chunk's input from the last backward of
 * (chunk, slot): what SEND_GRAD sends (not valid for the embedding chunk). */
const float *model_chunk_input_grad(const Model *m, int chunk, int slot);

/* model_create_shard with model_shard_default and no ops: the model as one
 * rank trains it. */
int model_create(Model *m, const ModelConfig *cfg, int max_B, int max_T, Error *err);
void model_free(Model *m);

/* Every element is a pure function of (seed, tensor name, index) so a rank
 * holding a slice can initialise just that slice: element j of tensor `name`
 * (j: the flat index in the full logical tensor, whatever slice this rank
 * holds) is std * rng_normal(seed, rng_stream_id(name), j) (base/rng.h), with
 * std = init_std, times 1/sqrt(2 * num_layers) for the output projections
 * (attn.wo and every w_down); norm weights = 1. */
void model_init_weights(Model *m, uint64_t seed);

const ParamTensor *model_find_tensor(const Model *m, const char *name);

/* The bf16 weight cache (kern/bf16_weights.h) for a model used without a
 * bound network (benchmarks, sampling): registers its weight matrices, so
 * its bf16 GEMMs read them converted once until the next
 * model_weights_changed (model_init_weights calls it; so does every
 * checkpoint load, through the network's table). model_free forgets them. */
void model_cache_bf16_weights(const Model *m);
void model_weights_changed(const Model *m);

/* Forward over tokens [B, T] (B <= max_B, T <= max_T): chunk 0, slot 0 of a
 * shard whose chunk 0 holds embedding and head (ERR_ARG otherwise); under TP
 * B*T must be divisible by tp_size.
 * targets [B, T] (negative = ignore) or NULL for no loss.
 * training != 0 keeps what backward needs and, since the loss is the last op,
 * already computes the LM head's gradient scaled by grad_scale (typically
 * 1 / number of micro-batches); call model_backward next with the same scale.
 * Losses of this micro-batch go to *loss (may be NULL). */
int model_forward(Model *m, const int *tokens, const int *targets, int B, int T, int training,
                  float grad_scale, ModelLoss *loss, Error *err);

/* Backward of grad_scale * (lm + aux + z) for the last training forward;
 * accumulates (+=) into m->grads. */
int model_backward(Model *m, Error *err);

void model_zero_grad(Model *m);

/* Logits [B*T, V] of the last position-wise forward (inference helper for
 * sampling and reference tests): runs a forward without targets. Needs
 * tp_size, cp_size, ep_size and etp_size 1 and chunk 0 holding embedding and head (ERR_ARG otherwise). */
int model_logits(Model *m, const int *tokens, int B, int T, float *logits, Error *err);

#endif
