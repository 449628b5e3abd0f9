/* Private to src/model: the layout of ModelActs (the activations one
 * (chunk, slot) keeps for backward), the scratch every chunk shares, where
 * each layer's parameters live in the flat buffer, the local (TP-sharded)
 * sizes, and the per-block passes. Tests may include it to inspect routing
 * decisions. */
#ifndef FIVEFOLD_MODEL_MODEL_INTERNAL_H
#define FIVEFOLD_MODEL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/attention_cp.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/moe_dispatch_ep.h"

#define NO_TENSOR ((size_t)-1)

/* Offsets (in floats) of one block's parameters; NO_TENSOR when absent
 * (also for every tensor of a block another rank holds). */
typedef struct LayerTensors {
  size_t attn_norm, wq, wk, wv, wo, mlp_norm;
  size_t mlp_gate_up, mlp_down;                 /* dense */
  size_t router, experts_gate_up, experts_down; /* MoE */
  size_t shared_gate_up, shared_down;
  /* GPT-2: norm biases, projection biases, and the GeLU MLP [F, C] / [C, F] */
  size_t attn_norm_bias, bq, bk, bv, bo, mlp_norm_bias;
  size_t mlp_fc, mlp_fc_bias, mlp_proj, mlp_proj_bias;
} LayerTensors;

/* Row counts: N = B*T/cp tokens of the micro-batch that this CP rank
 * holds (all of them when cp = 1); a TP rank holds Nl = N/t rows of the
 * residual stream. Buffers marked [N, .] hold the gathered sequence (the
 * same as [Nl, .] when t = 1). On the dispatcher path (ModelActs.moe_folded)
 * a MoE layer's ln2 holds only the Nl local rows and its state lives in a2a
 * or ag instead of moe. */
typedef struct LayerActs {
  float *res_attn; /* [Nl, C] block input (residual stream) */
  float *res_mlp;  /* [Nl, C] residual after attention */
  float *ln1, *rstd1; /* [N, C] normed input (gathered), [Nl] */
  float *q, *k, *v;   /* [N, local heads * D] after RoPE */
  float *att, *lse;
  float *ln2, *rstd2; /* [N, C], [Nl] */
  float *mlp_h;       /* [N, 2F/t] dense layers (GPT-2: [N, F/t] before the GeLU) */
  MoeLayerActs moe;   /* over all N rows (TP path) */
  MoeA2aActs a2a;     /* dispatcher path, all-to-all */
  MoeAgActs ag;       /* dispatcher path, all-gather */
  /* Split backward (ModelShard.split_backward, tp 1): output gradients the
   * weight-gradient pass needs, kept by model_chunk_backward_input. keep_dmlp
   * and keep_dh only on dense SwiGLU layers; NULL when not kept. */
  float *keep_datt;         /* [N, C] gradient of the attention output projection's output */
  float *keep_dq, *keep_dk, *keep_dv; /* [N, QD], [N, KVD] x 2: of q, k, v before RoPE */
  float *keep_dmlp, *keep_dh;         /* [N, C], [N, 2F]: of w_down's and w_gate_up's outputs */
  /* Full recomputation (ModelShard.recompute_method): rc 1 when the block
   * belongs to the recomputed group [rc_begin, rc_end). Only the group's
   * first block owns its res_attn (the checkpoint); every other buffer of
   * the group points into ModelScratch.rc_ws, position l - rc_begin. */
  int rc, rc_begin, rc_end;
} LayerActs;

/* What every (chunk, slot) of one model shares: backward scratch and the
 * buffers of the tensor-parallel exchanges. */
typedef struct ModelScratch {
  float *rope_cos, *rope_sin; /* [max_T, D/2] */
  long *dropped;              /* [L] */
  float *dln;                /* [N, C] gradient of a norm's output (gathered rows under TP) */
  float *dln_local;          /* [Nl, C] (TP) */
  float *dq, *dk, *dv, *datt;
  MoeScratch moe;            /* a/da/dh also serve the dense MLPs */
  float *full;               /* [N, C]: the attention projection's output before its residual add; under TP
                                also partial sums before reduce-scatter, gathered gradients */
  float *norm_dx;            /* [Nl, C]: a norm's input gradient before its residual add, unfused */
  float *ln_local;           /* [Nl, C] (TP): a norm's output before the all-gather */
  float *norm_dw;            /* [2C] (TP): one micro-batch's norm weight (and bias) gradient */
  float *kv_dw;              /* [2, Hkv*D, C] (TP, shared KV heads): wk/wv gradients to sum */
  float *xent_scratch;
  int xent_chunk;
  MoeA2aScratch a2a;         /* dispatcher path */
  MoeAgScratch ag;
  float *moe_dw;             /* [E*C + 3*Fs*C] (dispatcher path, TP): router and shared-expert gradients to sum */
  void *cp_work;             /* (CP) ring attention workspace */
  /* Full recomputation: the activations of one recomputed group (rc_ws_n
   * blocks, the longest group of this rank), and where the rerun of a
   * group's last block writes its output ([Nl, C]: the block after it, or
   * the chunk's output, already holds the same values). */
  LayerActs *rc_ws;
  int rc_ws_n;
  float *rc_out;
  /* Selective recomputation (ModelShard.recompute_modules): the one norm
   * output [N, C] (layernorm) and the one dense first-product output
   * [N, 2F] (mlp) every block writes and its backward rebuilds; NULL when
   * the blocks keep their own. */
  float *sel_ln, *sel_h;
  int *targets_local;        /* [N] (CP) this rank's targets */
  void *arena;
} ModelScratch;

struct ModelActs {
  /* shapes (local to this TP rank: Hq, Hkv, QD, KVD, F, V are this rank's) */
  int C, V, L, Hq, Hkv, D, QD, KVD, F;
  int kv_head0;  /* first KV head this rank holds */
  int kv_shared; /* 1: KV heads are held by several TP ranks (wk/wv gradients summed over TP) */
  int vocab0;    /* first vocabulary row this rank holds */
  int tp, tp_rank;
  int cp, cp_rank;
  int moe_folded, dispatcher;
  MoeEpLayout ep; /* the MoE grid position (dispatcher path) */
  int max_N;      /* rows N of the largest micro-batch (max_B * max_T / cp) */
  MoeSpec moe;
  size_t max_rows; /* MoE expert-major rows */
  /* which chunk and slot this is */
  int chunk, slot;
  int layer_begin, layer_end, has_embedding, has_head;
  /* parameters */
  size_t embed, final_norm, lm_head; /* NO_TENSOR when absent; lm_head == embed when tied on this rank */
  size_t pos_embed, final_norm_bias; /* GPT-2; NO_TENSOR otherwise */
  size_t param_begin, param_end;     /* the chunk's range of the flat buffer */
  const LayerTensors *lt;            /* [L], shared by the chunks */
  /* the last forward */
  int B, T, N, Nl;
  int Tl; /* T / cp: rows of one sequence on this CP rank */
  int training_pending; /* a training forward awaits its backward */
  int split_ok;         /* the slot keeps what a split backward defers (LayerActs.keep_*) */
  int deferring;        /* set during model_chunk_backward_input: weight GEMMs wait */
  int weights_pending;  /* a split backward's weight-gradient pass is due */
  int rc_method, rc_num; /* ModelShard.recompute_method, recompute_num_layers */
  unsigned sel;          /* ModelShard.recompute_modules */
  int recomputing;       /* set while a backward reruns a group's forward: no statistics written */
  int norm_done;         /* the block (or layer_end: the final norm) whose input norm the block before it
                            computed with its residual add (model_pass.c); -1 none */
  float grad_scale;
  int *tokens, *pos; /* [N] */
  float *rope_cos, *rope_sin; /* [max_T, D/2] */
  LayerActs *layers;          /* [L]; only this chunk's are set */
  long *dropped;              /* [L] assignments dropped by the last forward, per layer (shared) */
  float *final_in;            /* [Nl, C] = residual after the last block: the chunk's output */
  float *lnf, *rstdf, *dlnf;  /* lnf [N, C] (gathered), rstdf [Nl], dlnf [Nl, C] */
  float *dres;                /* [Nl, C] running gradient; after backward, the input's */
  ModelScratch *s;            /* shared */
  void *arena;
};

/* The (chunk, slot) activation set; m->acts is (0, 0). */
static inline ModelActs *model_acts(const Model *m, int chunk, int slot) {
  return m->acts + (size_t)chunk * m->shard.num_slots + slot;
}

/* Errors come only from the dispatcher and ring callbacks (fatal for the job). */
int block_forward(Model *m, ModelActs *A, int l, double *aux, double *z, Error *err);
int block_backward(Model *m, ModelActs *A, int l, Error *err);
/* Selective recomputation: rebuilds block l's first (which 1) or second
 * (2) norm output in ModelScratch.sel_ln, or its dense first-product
 * output in sel_h (selective_rebuild_h), when the shard drops them;
 * nothing otherwise. The same calls as block_forward's. */
void selective_rebuild_norm(Model *m, ModelActs *A, int l, int which);
void selective_rebuild_h(Model *m, ModelActs *A, int l);
/* The weight-gradient GEMMs block_backward deferred (A->deferring). */
void block_backward_weights(Model *m, ModelActs *A, int l);
/* The backward of a (chunk, slot) (model_pass.c); defer: the first part of
 * a split backward (no deferred weight GEMMs, no on_grads_ready reports). */
int chunk_backward_pass(Model *m, int chunk, int slot, const float *dy, int defer, const char *who, Error *err);
/* Reports the chunk's gradient ranges to on_grads_ready in backward order. */
void chunk_report_grads(Model *m, const ModelActs *A);

/* GPT-2's MLP (mlp_layer.c): out (+)= W_proj . gelu(W_fc . x + b_fc), the
 * proj bias left to the caller (it is added once, after any TP sum).
 * h [N, F] keeps the pre-activation; a, da, dh are [N, F] scratch. */
void gelu_mlp_forward(float *out, int accumulate, float *h, float *a, const float *x, const float *w_fc,
                      const float *b_fc, const float *w_proj, int N, int C, int F);
void gelu_mlp_backward(float *dx, float *dw_fc, float *db_fc, float *dw_proj, const float *dout, const float *x,
                       const float *h, float *a, float *da, float *dh, const float *w_fc, const float *w_proj, int N,
                       int C, int F);

/* Tensor-parallel pieces (model_tp.c). */
void tp_allgather_rows(const Model *m, float *out, const float *in, int Nl, int C);
void tp_reduce_scatter_rows(const Model *m, float *out, const float *in, int Nl, int C);
/* dw += allreduce_sum(d) where d is this micro-batch's gradient in scratch. */
void tp_add_reduced(const Model *m, float *dw, float *scratch, size_t n);
void tp_embedding_forward(Model *m, ModelActs *A, float *out_local);
void tp_embedding_backward(Model *m, ModelActs *A, const float *dout_local);
/* Vocab-parallel LM head + cross-entropy over the gathered lnf. */
void tp_lmhead_xent(Model *m, ModelActs *A, const int *targets, float grad_scale, double *loss_sum, long *count,
                    int training);

/* Hash of every routing decision of the last forward of chunk 0 slot 0
 * (top-k choices and kept/dropped rows), so a finite-difference test can
 * tell whether a perturbation changed the routing. */
uint64_t model_routing_fingerprint(const Model *m);

#endif
