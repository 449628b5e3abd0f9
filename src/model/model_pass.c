/* Forward and backward passes of one block and of one model chunk:
 *   x += wo . attn(rope(q, k), v) of rmsnorm(x)
 *   x += mlp(rmsnorm(x))  or  moe(rmsnorm(x))
 * or, for GPT-2 (cfg.gpt2), LayerNorm with bias, biased q/k/v/o, no RoPE,
 * the GeLU MLP with biases, and learned position embeddings added to the
 * token embeddings;
 * then, on the head chunk, the final norm and the fused LM head +
 * cross-entropy, whose gradient is produced during a training forward.
 * Under tensor parallelism (tp > 1) the residual stream holds this rank's
 * Nl = N/t rows; norms run on them, an all-gather feeds the column-parallel
 * GEMMs, and the row-parallel ones are reduce-scattered back (model_tp.c
 * holds the exchanges). With tp = 1 every step is the single-rank one, in
 * the same order. Each residual add runs with the norm after it (the MLP's,
 * the next block's or the final one: add_norm_rows, residual_to_next_norm;
 * fused or not, kern/fusion.h). Nothing here allocates. */
#include <math.h>
#include <string.h>

#include "kern/attention.h"
#include "kern/cross_entropy.h"
#include "kern/embedding.h"
#include "kern/gelu.h"
#include "kern/gemm.h"
#include "kern/layernorm.h"
#include "kern/rmsnorm.h"
#include "kern/rope.h"
#include "base/op_probe.h"
#include "kern/vecops.h"
#include "model/attention_cp.h"
#include "model/model.h"
#include "model/model_internal.h"

static int is_moe(const ModelActs *A, const Model *m, int l) { return A->moe.E > 0 && m->cfg.is_moe_layer[l]; }

static MoeLayerParams moe_params(const Model *m, const LayerTensors *t) {
  MoeLayerParams p = {m->params + t->router, m->params + t->experts_gate_up, m->params + t->experts_down, NULL, NULL};
  if (t->shared_gate_up != NO_TENSOR) {
    p.shared_gate_up = m->params + t->shared_gate_up;
    p.shared_down = m->params + t->shared_down;
  }
  return p;
}

static MoeLayerGrads moe_grads(const Model *m, const LayerTensors *t) {
  MoeLayerGrads g = {m->grads + t->router, m->grads + t->experts_gate_up, m->grads + t->experts_down, NULL, NULL};
  if (t->shared_gate_up != NO_TENSOR) {
    g.shared_gate_up = m->grads + t->shared_gate_up;
    g.shared_down = m->grads + t->shared_down;
  }
  return g;
}

/* The norm of rows: LayerNorm when it has a bias b (GPT-2), else RMSNorm. */
static void norm_rows(const Model *m, float *out, float *rstd, const float *x, const float *w, const float *b,
                      int rows, int C) {
  if (b)
    OP_PROBED(OP_PROBE_NORM, layernorm_forward(out, rstd, x, w, b, rows, C, m->cfg.rms_norm_eps));
  else
    OP_PROBED(OP_PROBE_NORM, rmsnorm_forward(out, rstd, x, w, rows, C, m->cfg.rms_norm_eps));
}

/* x_out = res + y (+ bias), and its norm into out: the residual add and
 * the norm after it, as one kernel or not (kern/fusion.h: norm_residual). */
static void add_norm_rows(const Model *m, float *x_out, float *out, float *rstd, const float *res, const float *y,
                          const float *bias, const float *w, const float *b, int rows, int C) {
  if (b)
    OP_PROBED(OP_PROBE_NORM, add_layernorm_forward(x_out, out, rstd, res, y, bias, w, b, rows, C, m->cfg.rms_norm_eps));
  else
    OP_PROBED(OP_PROBE_NORM, add_rmsnorm_forward(x_out, out, rstd, res, y, bias, w, rows, C, m->cfg.rms_norm_eps));
}

/* The parameter at offset o, or NULL when the model has none there. */
static const float *param_or_null(const Model *m, size_t o) { return o == NO_TENSOR ? NULL : m->params + o; }
static float *grad_or_null(const Model *m, size_t o) { return o == NO_TENSOR ? NULL : m->grads + o; }

/* The norm of this rank's rows into `gathered` [N, C] (all ranks' rows
 * under TP). */
static void norm_forward_gathered(const Model *m, const ModelActs *A, float *gathered, float *rstd, const float *x,
                                  const float *w, const float *b) {
  float *out = A->tp > 1 ? A->s->ln_local : gathered;
  norm_rows(m, out, rstd, x, w, b, A->Nl, A->C);
  if (A->tp > 1) tp_allgather_rows(m, gathered, out, A->Nl, A->C);
}

/* add_norm_rows on this rank's rows, the norm all-gathered as above. */
static void add_norm_forward_gathered(const Model *m, const ModelActs *A, float *gathered, float *rstd, float *x_out,
                                      const float *res, const float *y, const float *bias, const float *w,
                                      const float *b) {
  float *out = A->tp > 1 ? A->s->ln_local : gathered;
  add_norm_rows(m, x_out, out, rstd, res, y, bias, w, b, A->Nl, A->C);
  if (A->tp > 1) tp_allgather_rows(m, gathered, out, A->Nl, A->C);
}

/* dx += d/dx and dw += d/dw of a norm over this rank's rows; under TP the
 * weight's gradient is summed over the group first (each rank saw only its
 * rows) so every rank holds the full one. residual: dx is the residual
 * stream's gradient and the add of the norm's input gradient to it is the
 * fused-or-not kind (kern/fusion.h: norm_residual); the final norm's dx
 * starts at zero and always takes the plain accumulating kernel. */
static void norm_backward(const Model *m, const ModelActs *A, int residual, float *dx, float *dw, float *db,
                          const float *dout, const float *x, const float *w, const float *rstd) {
  const size_t C = (size_t)A->C;
  float *gw = dw, *gb = db;
  if (A->tp > 1) {
    vec_zero(A->s->norm_dw, 2 * C);
    gw = A->s->norm_dw;
    gb = A->s->norm_dw + C;
  }
  float *tmp = A->s->norm_dx;
  if (db && residual)
    OP_PROBED(OP_PROBE_NORM, add_layernorm_backward(dx, tmp, gw, gb, dout, x, w, rstd, A->Nl, A->C));
  else if (db)
    OP_PROBED(OP_PROBE_NORM, layernorm_backward(dx, gw, gb, dout, x, w, rstd, A->Nl, A->C));
  else if (residual)
    OP_PROBED(OP_PROBE_NORM, add_rmsnorm_backward(dx, tmp, gw, dout, x, w, rstd, A->Nl, A->C));
  else
    OP_PROBED(OP_PROBE_NORM, rmsnorm_backward(dx, gw, dout, x, w, rstd, A->Nl, A->C));
  if (A->tp == 1) return;
  m->ops->allreduce_sum(m->ops->ctx, A->s->norm_dw, db ? 2 * C : C);
  vec_acc(dw, A->s->norm_dw, C);
  if (db) vec_acc(db, A->s->norm_dw + C, C);
}

/* dst [Nl, C] = the sum over TP ranks of partial [N, C]: a row-parallel
 * GEMM's result on the rows this rank holds. */
static void tp_reduce_scattered_into(const Model *m, const ModelActs *A, float *dst, const float *partial) {
  tp_reduce_scatter_rows(m, dst, partial, A->Nl, A->C);
}

/* The end of block l: out = res + y (+ bias) on this rank's rows. When the
 * norm that reads out runs in this chunk (the next block's attention norm,
 * or the final norm after the last block of the head chunk) it is computed
 * here with the add (add_norm_forward_gathered: fused or not, kern/fusion.h)
 * and the next block or the head skips its own. A rerun of recomputation
 * does only the add: every rerun block computes its own norm, and nothing
 * outside the rerun group is written. */
static void residual_to_next_norm(Model *m, ModelActs *A, int l, float *out, const float *res, const float *y,
                                  const float *bias) {
  const float *P = m->params;
  if (!A->recomputing && l + 1 < A->layer_end) {
    LayerActs *next = &A->layers[l + 1];
    const LayerTensors *t = &A->lt[l + 1];
    /* The norm is the next block's: its op event says so (the add rides
     * along in the same kernel). */
    OP_PROBE_LAYER(l + 1);
    add_norm_forward_gathered(m, A, next->ln1, next->rstd1, out, res, y, bias, P + t->attn_norm,
                              param_or_null(m, t->attn_norm_bias));
    OP_PROBE_LAYER(l);
    A->norm_done = l + 1;
  } else if (!A->recomputing && l + 1 == A->layer_end && A->has_head) {
    OP_PROBE_LAYER(-1); /* the head's final norm */
    add_norm_forward_gathered(m, A, A->lnf, A->rstdf, out, res, y, bias, P + A->final_norm,
                              param_or_null(m, A->final_norm_bias));
    OP_PROBE_LAYER(l);
    A->norm_done = A->layer_end;
  } else {
    vec_add(out, res, y, (size_t)A->Nl * A->C);
    if (bias) bias_add_rows(out, bias, A->Nl, A->C);
  }
}

/* The gradient rows [Nl, C] of this rank, all-gathered to [N, C] under TP. */
static const float *gathered_grad(const Model *m, const ModelActs *A, const float *d) {
  if (A->tp == 1) return d;
  tp_allgather_rows(m, A->s->full, d, A->Nl, A->C);
  return A->s->full;
}

/* dln [N, C] (partial sums under TP) -> this rank's rows, summed. */
static const float *scattered_grad(const Model *m, const ModelActs *A, const float *dln) {
  if (A->tp == 1) return dln;
  tp_reduce_scatter_rows(m, A->s->dln_local, dln, A->Nl, A->C);
  return A->s->dln_local;
}

/* The ring attention of this CP rank's rows (cp > 1) or the kernel's. */
static int attention_core_forward(const Model *m, const ModelActs *A, LayerActs *la, Error *err) {
  if (A->cp == 1) {
    OP_PROBED(OP_PROBE_ATTN_FWD, attention_forward(la->att, la->lse, la->q, la->k, la->v, A->B, A->T, A->Hq, A->Hkv, A->D));
    return 0;
  }
  OP_PROBE_BEGIN(op, OP_PROBE_ATTN_FWD);
  const int rc = cp_attention_forward(la->att, la->lse, la->q, la->k, la->v, A->B, A->Tl, A->Hq, A->Hkv, A->D, A->cp,
                                      A->cp_rank, A->s->cp_work, m->ops->cp, err);
  OP_PROBE_END(op);
  return rc;
}

static int attention_core_backward(const Model *m, const ModelActs *A, const LayerActs *la, Error *err) {
  ModelScratch *S = A->s;
  if (A->cp == 1) {
    OP_PROBED(OP_PROBE_ATTN_BWD, attention_backward(S->dq, S->dk, S->dv, S->datt, la->att, la->lse, la->q, la->k,
                                                    la->v, A->B, A->T, A->Hq, A->Hkv, A->D));
    return 0;
  }
  OP_PROBE_BEGIN(op, OP_PROBE_ATTN_BWD);
  const int rc = cp_attention_backward(S->dq, S->dk, S->dv, S->datt, la->att, la->lse, la->q, la->k, la->v, A->B,
                                       A->Tl, A->Hq, A->Hkv, A->D, A->cp, A->cp_rank, S->cp_work, m->ops->cp, err);
  OP_PROBE_END(op);
  return rc;
}

/* The MoE layer through a dispatcher on this rank's Nl rows: out += moe(ln2). */
static int moe_folded_forward(Model *m, ModelActs *A, LayerActs *la, const LayerTensors *t, float *out,
                              double *aux, double *z, Error *err) {
  const MoeLayerParams p = moe_params(m, t);
  const MoeCommOps *ops = m->ops->moe;
  ModelScratch *S = A->s;
  if (A->dispatcher == MODEL_MOE_ALLTOALL)
    return moe_a2a_forward(out, &la->a2a, &S->a2a, la->ln2, &p, A->Nl, &A->moe, &A->ep, ops, aux, z, err);
  return moe_ag_forward(out, &la->ag, &S->ag, la->ln2, &p, A->Nl, &A->moe, &A->ep, ops, aux, z, err);
}

/* dx [Nl, C] overwritten; router and shared-expert gradients (local tokens
 * only) summed over TP before they are added, like a norm's. */
static int moe_folded_backward(Model *m, ModelActs *A, const LayerActs *la, const LayerTensors *t, float *dx,
                               Error *err) {
  const MoeLayerParams p = moe_params(m, t);
  MoeLayerGrads g = moe_grads(m, t);
  const MoeCommOps *ops = m->ops->moe;
  ModelScratch *S = A->s;
  const size_t C = (size_t)A->C, router_n = (size_t)A->moe.E * C, shared_n = 3 * (size_t)A->moe.Fs * C;
  if (A->tp > 1) {
    vec_zero(S->moe_dw, router_n + shared_n);
    g.router = S->moe_dw;
    if (g.shared_gate_up) {
      g.shared_gate_up = S->moe_dw + router_n;
      g.shared_down = S->moe_dw + router_n + 2 * (size_t)A->moe.Fs * C;
    }
  }
  int rc;
  if (A->dispatcher == MODEL_MOE_ALLTOALL)
    rc = moe_a2a_backward(dx, &g, &S->a2a, A->dres, &la->a2a, la->ln2, &p, A->Nl, &A->moe, &A->ep, ops,
                          A->grad_scale, err);
  else
    rc = moe_ag_backward(dx, &g, &S->ag, A->dres, &la->ag, la->ln2, &p, A->Nl, &A->moe, &A->ep, ops, A->grad_scale,
                         err);
  if (rc || A->tp == 1) return rc;
  m->ops->allreduce_sum(m->ops->ctx, S->moe_dw, router_n + (t->shared_gate_up != NO_TENSOR ? shared_n : 0));
  vec_acc(m->grads + t->router, S->moe_dw, router_n);
  if (t->shared_gate_up != NO_TENSOR) {
    vec_acc(m->grads + t->shared_gate_up, S->moe_dw + router_n, 2 * (size_t)A->moe.Fs * C);
    vec_acc(m->grads + t->shared_down, S->moe_dw + router_n + 2 * (size_t)A->moe.Fs * C, (size_t)A->moe.Fs * C);
  }
  return 0;
}

int block_forward(Model *m, ModelActs *A, int l, double *aux, double *z, Error *err) {
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  ModelScratch *S = A->s;
  const float *P = m->params;
  const int N = A->N, C = A->C;
  const size_t NC = (size_t)N * C, NlC = (size_t)A->Nl * C;

  const int gpt2 = m->cfg.gpt2;
  OP_PROBE_LAYER(l);
  /* The previous block computed this norm with its residual add, unless a
   * rerun or the chunk's first block. */
  if (A->norm_done != l)
    norm_forward_gathered(m, A, la->ln1, la->rstd1, la->res_attn, P + t->attn_norm,
                          param_or_null(m, t->attn_norm_bias));
  A->norm_done = -1;
  OP_PROBED_GEMM(N, A->QD, C, linear_forward(la->q, la->ln1, P + t->wq, N, C, A->QD, 0));
  OP_PROBED_GEMM(N, A->KVD, C, linear_forward(la->k, la->ln1, P + t->wk, N, C, A->KVD, 0));
  OP_PROBED_GEMM(N, A->KVD, C, linear_forward(la->v, la->ln1, P + t->wv, N, C, A->KVD, 0));
  if (t->bq != NO_TENSOR) { /* before RoPE, as the projection's own bias */
    bias_add_rows(la->q, P + t->bq, N, A->QD);
    bias_add_rows(la->k, P + t->bk, N, A->KVD);
    bias_add_rows(la->v, P + t->bv, N, A->KVD);
  }
  if (!gpt2) {
    OP_PROBED(OP_PROBE_ROPE, rope_forward(la->q, A->pos, N, A->Hq, A->D, A->rope_cos, A->rope_sin));
    OP_PROBED(OP_PROBE_ROPE, rope_forward(la->k, A->pos, N, A->Hkv, A->D, A->rope_cos, A->rope_sin));
  }
  if (attention_core_forward(m, A, la, err)) return err ? err->code : ERR_INTERNAL;
  /* The output projection y of this rank's rows (summed over TP); the
   * residual add res_mlp = res_attn + y (+ bo) runs with the MLP's norm. */
  OP_PROBED_GEMM(N, C, A->QD, linear_forward(S->full, la->att, P + t->wo, N, A->QD, C, 0));
  const float *y = S->full;
  if (A->tp > 1) {
    tp_reduce_scatter_rows(m, S->dln_local, S->full, A->Nl, C);
    y = S->dln_local;
  }
  const float *bo = param_or_null(m, t->bo);

  float *out = l + 1 < A->layer_end ? A->layers[l + 1].res_attn : A->final_in;
  /* A rerun leaves the next block's input (or the chunk's output, maybe
   * still being sent) alone: it holds these values already. */
  if (A->recomputing && l == la->rc_end - 1) out = S->rc_out;
  /* The MLP's output ym of this rank's rows (summed over TP), before the
   * residual add out = res_mlp + ym (+ the proj bias). */
  float *ym = S->full;
  const float *mlp_bias = NULL;
  double layer_aux = 0, layer_z = 0;
  const int moe = is_moe(A, m, l);
  if (moe && A->moe_folded) {
    /* The dispatcher takes this rank's own rows: no gather. */
    add_norm_rows(m, la->res_mlp, la->ln2, la->rstd2, la->res_attn, y, bo, P + t->mlp_norm, NULL, A->Nl, C);
    vec_zero(ym, NlC);
    if (moe_folded_forward(m, A, la, t, ym, &layer_aux, &layer_z, err)) return err ? err->code : ERR_INTERNAL;
  } else {
    add_norm_forward_gathered(m, A, la->ln2, la->rstd2, la->res_mlp, la->res_attn, y, bo, P + t->mlp_norm,
                              param_or_null(m, t->mlp_norm_bias));
    if (gpt2) {
      gelu_mlp_forward(S->full, 0, la->mlp_h, S->moe.a, la->ln2, P + t->mlp_fc, P + t->mlp_fc_bias,
                       P + t->mlp_proj, N, C, A->F);
      mlp_bias = P + t->mlp_proj_bias;
    } else if (moe) {
      /* Under TP replicated experts over the whole sequence; this rank keeps its rows. */
      MoeLayerParams p = moe_params(m, t);
      vec_zero(S->full, NC);
      moe_layer_forward(S->full, &la->moe, &S->moe, la->ln2, &p, N, &A->moe, &layer_aux, &layer_z);
      ym = S->full + (size_t)A->tp_rank * NlC;
    } else {
      swiglu_mlp_forward(S->full, 0, la->mlp_h, S->moe.a, la->ln2, P + t->mlp_gate_up, P + t->mlp_down, N, C, A->F);
    }
    if (A->tp > 1 && !moe) {
      tp_reduce_scattered_into(m, A, S->dln_local, S->full);
      ym = S->dln_local;
    }
  }
  residual_to_next_norm(m, A, l, out, la->res_mlp, ym, mlp_bias);
  if (moe) {
    *aux += layer_aux;
    *z += layer_z;
    if (A->recomputing) return 0; /* the statistics are the forward's */
    const long *counts = !A->moe_folded                           ? la->moe.routing.counts
                         : A->dispatcher == MODEL_MOE_ALLTOALL ? la->a2a.group_counts
                                                                : la->ag.group_counts;
    for (int e = 0; e < A->moe.E; e++) m->expert_counts[(size_t)l * A->moe.E + e] = counts[e];
    A->dropped[l] = !A->moe_folded                           ? la->moe.perm.dropped
                    : A->dispatcher == MODEL_MOE_ALLTOALL ? la->a2a.perm.dropped
                                                           : la->ag.perm.dropped;
  }
  return 0;
}

/* ------------------------------------------------ selective recomputation */

/* The forward computed these norms with the residual add before them
 * (add_norm_rows, fused or not); the rebuild normalises the sum the block
 * kept, which is the unfused path's second half: the same float
 * operations, so the same bits (kern/fusion.h). */
void selective_rebuild_norm(Model *m, ModelActs *A, int l, int which) {
  if (!A->s->sel_ln) return;
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  const float *P = m->params;
  if (which == 1) {
    norm_forward_gathered(m, A, la->ln1, la->rstd1, la->res_attn, P + t->attn_norm, param_or_null(m, t->attn_norm_bias));
  } else if (is_moe(A, m, l) && A->moe_folded) {
    OP_PROBED(OP_PROBE_NORM,
              rmsnorm_forward(la->ln2, la->rstd2, la->res_mlp, P + t->mlp_norm, A->Nl, A->C, m->cfg.rms_norm_eps));
  } else {
    norm_forward_gathered(m, A, la->ln2, la->rstd2, la->res_mlp, P + t->mlp_norm, param_or_null(m, t->mlp_norm_bias));
  }
}

void selective_rebuild_h(Model *m, ModelActs *A, int l) {
  if (!A->s->sel_h || is_moe(A, m, l)) return;
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  const float *P = m->params;
  const int N = A->N, C = A->C, F = A->F;
  if (m->cfg.gpt2) {
    /* gelu_mlp_forward's first half; a is scratch the backward rewrites */
    OP_PROBED_GEMM(N, F, C, linear_forward(la->mlp_h, la->ln2, P + t->mlp_fc, N, C, F, 0));
    bias_gelu_forward(la->mlp_h, A->s->moe.a, P + t->mlp_fc_bias, N, F);
  } else {
    OP_PROBED_GEMM(N, 2 * F, C, linear_forward(la->mlp_h, la->ln2, P + t->mlp_gate_up, N, C, 2 * F, 0));
  }
}

/* On entry A->dres is the gradient of the block's output; on exit, of its
 * input. Under selective recomputation the dropped norm outputs and first
 * MLP product are rebuilt right before the products that read them. */
int block_backward(Model *m, ModelActs *A, int l, Error *err) {
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  ModelScratch *S = A->s;
  const float *P = m->params;
  float *G = m->grads;
  const int N = A->N, C = A->C;
  const size_t NlC = (size_t)A->Nl * C;
  MoeScratch *s = &S->moe;

  const int gpt2 = m->cfg.gpt2;
  OP_PROBE_LAYER(l);
  selective_rebuild_norm(m, A, l, 2);
  selective_rebuild_h(m, A, l);
  const float *dln;
  if (gpt2) {
    /* The replicated proj bias: every rank sums all gathered rows. */
    const float *dout = gathered_grad(m, A, A->dres);
    bias_backward_rows(G + t->mlp_proj_bias, dout, N, C);
    gelu_mlp_backward(S->dln, G + t->mlp_fc, G + t->mlp_fc_bias, G + t->mlp_proj, dout, la->ln2, la->mlp_h, s->a,
                      s->da, s->dh, P + t->mlp_fc, P + t->mlp_proj, N, C, A->F);
    dln = scattered_grad(m, A, S->dln);
  } else if (is_moe(A, m, l) && A->moe_folded) {
    if (moe_folded_backward(m, A, la, t, S->dln, err)) return err ? err->code : ERR_INTERNAL;
    dln = S->dln;
  } else if (is_moe(A, m, l)) {
    MoeLayerParams p = moe_params(m, t);
    MoeLayerGrads g = moe_grads(m, t);
    const float *dout = gathered_grad(m, A, A->dres);
    moe_layer_backward(S->dln, &g, s, dout, &la->moe, la->ln2, &p, N, &A->moe, A->grad_scale);
    dln = S->dln + (size_t)A->tp_rank * NlC; /* every rank computed all rows: no sum */
  } else {
    const float *dout = gathered_grad(m, A, A->dres);
    const int defer_mlp = A->deferring && la->keep_dh;
    swiglu_mlp_backward(S->dln, 0, defer_mlp ? NULL : G + t->mlp_gate_up, defer_mlp ? NULL : G + t->mlp_down, dout,
                        la->ln2, la->mlp_h, s->a, s->da, s->dh, P + t->mlp_gate_up, P + t->mlp_down, N, C, A->F);
    if (defer_mlp) {
      vec_copy(la->keep_dmlp, dout, (size_t)N * C);
      vec_copy(la->keep_dh, s->dh, (size_t)N * 2 * A->F);
    }
    dln = scattered_grad(m, A, S->dln);
  }
  norm_backward(m, A, 1, A->dres, G + t->mlp_norm, grad_or_null(m, t->mlp_norm_bias), dln, la->res_mlp, P + t->mlp_norm,
                la->rstd2);

  const float *datt_out = gathered_grad(m, A, A->dres);
  if (t->bo != NO_TENSOR) bias_backward_rows(G + t->bo, datt_out, N, C);
  /* A split backward keeps the projections' output gradients and leaves
   * their weight GEMMs to block_backward_weights (tp 1 only: no shared KV heads). */
  const int defer = A->deferring;
  if (defer) vec_copy(la->keep_datt, datt_out, (size_t)N * C);
  OP_PROBED_GEMM(N, C, 2 * A->QD,
                 linear_backward(S->datt, defer ? NULL : G + t->wo, datt_out, la->att, P + t->wo, N, A->QD, C, 0));
  if (attention_core_backward(m, A, la, err)) return err ? err->code : ERR_INTERNAL;
  if (!gpt2) {
    OP_PROBED(OP_PROBE_ROPE, rope_backward(S->dq, A->pos, N, A->Hq, A->D, A->rope_cos, A->rope_sin));
    OP_PROBED(OP_PROBE_ROPE, rope_backward(S->dk, A->pos, N, A->Hkv, A->D, A->rope_cos, A->rope_sin));
  }
  if (t->bq != NO_TENSOR) {
    /* The shard refuses biases on KV heads shared over TP, so k/v bias
     * gradients need no TP sum. */
    bias_backward_rows(G + t->bq, S->dq, N, A->QD);
    bias_backward_rows(G + t->bk, S->dk, N, A->KVD);
    bias_backward_rows(G + t->bv, S->dv, N, A->KVD);
  }
  if (defer) {
    vec_copy(la->keep_dq, S->dq, (size_t)N * A->QD);
    vec_copy(la->keep_dk, S->dk, (size_t)N * A->KVD);
    vec_copy(la->keep_dv, S->dv, (size_t)N * A->KVD);
  }
  selective_rebuild_norm(m, A, l, 1);
  OP_PROBED_GEMM(N, A->QD, 2 * C,
                 linear_backward(S->dln, defer ? NULL : G + t->wq, S->dq, la->ln1, P + t->wq, N, C, A->QD, 0));
  float *gk = G + t->wk, *gv = G + t->wv;
  const size_t kv_floats = (size_t)m->cfg.num_kv_heads * A->D * C;
  if (A->kv_shared) {
    /* KV heads several ranks hold: each rank's queries add to their
     * gradient, so it is summed over TP (laid out as the full [Hkv*D, C]). */
    vec_zero(S->kv_dw, 2 * kv_floats);
    gk = S->kv_dw + (size_t)A->kv_head0 * A->D * C;
    gv = S->kv_dw + kv_floats + (size_t)A->kv_head0 * A->D * C;
  }
  OP_PROBED_GEMM(N, A->KVD, 2 * C, linear_backward(S->dln, defer ? NULL : gk, S->dk, la->ln1, P + t->wk, N, C, A->KVD, 1));
  OP_PROBED_GEMM(N, A->KVD, 2 * C, linear_backward(S->dln, defer ? NULL : gv, S->dv, la->ln1, P + t->wv, N, C, A->KVD, 1));
  if (A->kv_shared) {
    m->ops->allreduce_sum(m->ops->ctx, S->kv_dw, 2 * kv_floats);
    vec_acc(G + t->wk, gk, (size_t)A->KVD * C);
    vec_acc(G + t->wv, gv, (size_t)A->KVD * C);
  }
  dln = scattered_grad(m, A, S->dln);
  norm_backward(m, A, 1, A->dres, G + t->attn_norm, grad_or_null(m, t->attn_norm_bias), dln, la->res_attn,
                P + t->attn_norm, la->rstd1);
  return 0;
}

/* ---------------------------------------------------------------- chunks */

static int check_chunk(const Model *m, int chunk, int slot, const char *who, Error *err) {
  if (chunk < 0 || chunk >= m->shard.num_chunks || slot < 0 || slot >= m->shard.num_slots)
    return error_set(err, ERR_ARG, "%s: chunk %d slot %d is out of range (%d chunks, %d slots)", who, chunk, slot,
                     m->shard.num_chunks, m->shard.num_slots);
  return 0;
}

static int chunk_forward(Model *m, int chunk, int slot, const int *tokens, const int *targets, const float *x_in,
                         int B, int T, int training, float grad_scale, ModelLoss *loss, const char *who, Error *err) {
  if (check_chunk(m, chunk, slot, who, err)) return ERR_ARG;
  ModelActs *A = model_acts(m, chunk, slot);
  if (B < 1 || T < 1 || B > m->max_B || T > m->max_T)
    return error_set(err, ERR_ARG, "%s: batch %d x sequence %d exceeds the model's buffers (%d x %d)", who, B, T,
                     m->max_B, m->max_T);
  const int V = m->cfg.vocab_size, C = A->C, cp = A->cp;
  if (cp > 1 && T % (2 * cp))
    return error_set(err, ERR_ARG, "%s: sequence %d is not divisible by 2 * cp_size = %d", who, T, 2 * cp);
  if (m->cfg.gpt2 && T > m->cfg.max_position_embeddings)
    return error_set(err, ERR_ARG, "%s: sequence %d is longer than the model's %d learned positions (n_positions)",
                     who, T, m->cfg.max_position_embeddings);
  const int N = B * (T / cp); /* this CP rank's rows */
  if (N % A->tp)
    return error_set(err, ERR_ARG,
                     "%s: %d tokens (batch %d x sequence %d / cp_size %d) are not divisible by tp_size %d", who, N, B,
                     T, cp, A->tp);
  if (A->has_embedding && !tokens) return error_set(err, ERR_ARG, "%s: chunk %d needs the tokens", who, chunk);
  if (!A->has_embedding && !x_in) return error_set(err, ERR_ARG, "%s: chunk %d needs its input rows x_in", who, chunk);
  for (int n = 0; n < B * T; n++) {
    if (A->has_embedding && (tokens[n] < 0 || tokens[n] >= V))
      return error_set(err, ERR_ARG, "%s: token %d at position %d is outside the vocabulary (0..%d)", who, tokens[n],
                       n, V - 1);
    if (A->has_head && targets && targets[n] >= V)
      return error_set(err, ERR_ARG, "%s: target %d at position %d is outside the vocabulary (0..%d)", who,
                       targets[n], n, V - 1);
  }
  if (A->weights_pending)
    return error_set(err, ERR_ARG, "%s: chunk %d slot %d still awaits the weight gradients of its last backward", who,
                     chunk, slot);
  A->B = B;
  A->T = T;
  A->N = N;
  A->Nl = N / A->tp;
  A->Tl = T / cp;
  A->training_pending = 0;
  A->grad_scale = grad_scale;
  const size_t NlC = (size_t)A->Nl * C;
  if (cp == 1) {
    if (A->has_embedding) memcpy(A->tokens, tokens, (size_t)N * sizeof *tokens);
    for (int n = 0; n < N; n++) A->pos[n] = n % T;
  } else {
    if (A->has_embedding) cp_split_rows(A->tokens, tokens, B, T, sizeof *tokens, cp, A->cp_rank);
    cp_local_positions(A->pos, T, cp, A->cp_rank);
    for (int n = A->Tl; n < N; n++) A->pos[n] = A->pos[n % A->Tl];
  }
  for (int l = A->layer_begin; l < A->layer_end; l++) {
    A->dropped[l] = 0;
    if (A->moe.E > 0) memset(m->expert_counts + (size_t)l * A->moe.E, 0, (size_t)A->moe.E * sizeof *m->expert_counts);
  }

  float *input = A->layer_end > A->layer_begin ? A->layers[A->layer_begin].res_attn : A->final_in;
  OP_PROBE_LAYER(-1);
  if (!A->has_embedding)
    vec_copy(input, x_in, NlC);
  else if (A->tp == 1)
    OP_PROBED(OP_PROBE_EMBEDDING, embedding_forward(input, A->tokens, m->params + A->embed, N, C));
  else
    OP_PROBED(OP_PROBE_EMBEDDING, tp_embedding_forward(m, A, input));
  if (A->has_embedding && A->pos_embed != NO_TENSOR) {
    /* This rank's rows are rows tp_rank * Nl.. of the N it holds. */
    const float *wpe = m->params + A->pos_embed;
    const int row0 = A->tp_rank * A->Nl;
    for (int i = 0; i < A->Nl; i++) vec_acc(input + (size_t)i * C, wpe + (size_t)A->pos[row0 + i] * C, (size_t)C);
  }
  double aux = 0, z = 0;
  A->norm_done = -1;
  for (int l = A->layer_begin; l < A->layer_end; l++)
    if (block_forward(m, A, l, &aux, &z, err)) return error_wrap(err, "%s: layer %d", who, l);
  m->dropped_assignments = 0;
  for (int l = 0; l < A->L; l++) m->dropped_assignments += A->dropped[l];

  double loss_sum = 0;
  long count = 0;
  if (A->has_head) {
    OP_PROBE_LAYER(-1);
    if (A->norm_done != A->layer_end)
      norm_forward_gathered(m, A, A->lnf, A->rstdf, A->final_in, m->params + A->final_norm,
                            param_or_null(m, A->final_norm_bias));
    A->norm_done = -1;
    if (targets && cp > 1) {
      cp_split_rows(A->s->targets_local, targets, B, T, sizeof *targets, cp, A->cp_rank);
      targets = A->s->targets_local;
    }
    if (targets)
      for (int n = 0; n < N; n++) count += targets[n] >= 0;
    if (targets && cp > 1) {
      /* The mean is over the whole micro-batch: every CP rank divides by
       * the same total count. */
      double total = (double)count;
      m->ops->cp->allreduce_sum_f64(m->ops->cp->ctx, &total, 1);
      count = (long)llround(total);
    }
    if (count > 0) {
      long counted = 0;
      if (A->tp == 1) {
        float *dh = training ? A->dlnf : NULL;
        float *dw = training ? m->grads + A->lm_head : NULL;
        OP_PROBE_BEGIN(head, OP_PROBE_LM_HEAD);
        lmhead_xent(A->lnf, m->params + A->lm_head, targets, N, C, A->V, grad_scale / (float)count, &loss_sum,
                    &counted, NULL, dh, dw, A->s->xent_scratch, A->s->xent_chunk);
        OP_PROBE_END_GEMM(head, N, A->V, C);
      } else {
        OP_PROBE_BEGIN(head, OP_PROBE_LM_HEAD);
        tp_lmhead_xent(m, A, targets, grad_scale / (float)count, &loss_sum, &counted, training);
        OP_PROBE_END_GEMM(head, N, A->V, C);
      }
      if (cp > 1) m->ops->cp->allreduce_sum_f64(m->ops->cp->ctx, &loss_sum, 1);
    } else if (training) {
      vec_zero(A->dlnf, NlC);
    }
  }
  if (loss) {
    loss->lm = count > 0 ? loss_sum / (double)count : 0.0;
    loss->aux = aux;
    loss->z = z;
    loss->tokens = count;
  }
  A->training_pending = training != 0;
  return 0;
}

int model_chunk_forward(Model *m, int chunk, int slot, const int *tokens, const int *targets, const float *x_in,
                        int B, int T, int training, float grad_scale, ModelLoss *loss, Error *err) {
  return chunk_forward(m, chunk, slot, tokens, targets, x_in, B, T, training, grad_scale, loss, "model_chunk_forward",
                       err);
}

/* Reports [begin, end) of the gradient buffer as final (model.h). */
static void grads_ready(Model *m, size_t begin, size_t end) {
  if (m->on_grads_ready && end > begin) m->on_grads_ready(m->on_grads_ready_ctx, begin, end - begin);
}

/* First parameter offset of block l of A's chunk; past its last block, the
 * final norm (head chunk) or the chunk's end. */
static size_t block_begin(const ModelActs *A, int l) {
  if (l < A->layer_end) return A->lt[l].attn_norm;
  return A->has_head ? A->final_norm : A->param_end;
}

/* Full recomputation: reruns the forward of the group [gb, ge) from its
 * checkpoint into the workspace, exactly as the training forward ran it
 * (same calls and collectives in the same order, so the same values);
 * losses and routing statistics stay those of that forward. */
static int recompute_group(Model *m, ModelActs *A, int gb, int ge, Error *err) {
  double aux = 0, z = 0;
  A->recomputing = 1;
  for (int l = gb; l < ge; l++)
    if (block_forward(m, A, l, &aux, &z, err)) {
      A->recomputing = 0;
      return err ? err->code : ERR_INTERNAL;
    }
  A->recomputing = 0;
  return 0;
}

int chunk_backward_pass(Model *m, int chunk, int slot, const float *dy, int defer, const char *who, Error *err) {
  if (check_chunk(m, chunk, slot, who, err)) return ERR_ARG;
  ModelActs *A = model_acts(m, chunk, slot);
  if (A->weights_pending)
    return error_set(err, ERR_ARG, "%s: chunk %d slot %d still awaits the weight gradients of its last backward", who,
                     chunk, slot);
  if (!A->training_pending)
    return error_set(err, ERR_ARG,
                     "%s: no training forward of chunk %d slot %d to differentiate (run its forward with training = "
                     "1 first)",
                     who, chunk, slot);
  if (!A->has_head && !dy)
    return error_set(err, ERR_ARG, "%s: chunk %d needs the gradient of its output (dy)", who, chunk);
  const int C = A->C;
  const size_t NlC = (size_t)A->Nl * C;
  if (A->has_head) {
    OP_PROBE_LAYER(-1);
    vec_zero(A->dres, NlC);
    norm_backward(m, A, 0, A->dres, m->grads + A->final_norm, grad_or_null(m, A->final_norm_bias), A->dlnf, A->final_in,
                  m->params + A->final_norm, A->rstdf);
    if (!defer) grads_ready(m, A->final_norm, A->param_end);
  } else {
    vec_copy(A->dres, dy, NlC);
  }
  for (int l = A->layer_end - 1; l >= A->layer_begin; l--) {
    const LayerActs *la = &A->layers[l];
    if (la->rc && l == la->rc_end - 1 && recompute_group(m, A, la->rc_begin, la->rc_end, err))
      return error_wrap(err, "%s: recomputing layers %d..%d", who, la->rc_begin, la->rc_end - 1);
    /* A recomputed block's activations do not outlive this pass: its
     * weight gradients are not deferred. */
    A->deferring = defer && A->split_ok && !la->rc;
    if (block_backward(m, A, l, err)) {
      A->deferring = 0;
      return error_wrap(err, "%s: layer %d", who, l);
    }
    if (!defer) grads_ready(m, block_begin(A, l), block_begin(A, l + 1));
  }
  A->deferring = 0;
  if (A->has_embedding) {
    OP_PROBE_LAYER(-1);
    if (A->tp == 1)
      OP_PROBED(OP_PROBE_EMBEDDING, embedding_backward(m->grads + A->embed, A->tokens, A->dres, A->N, C));
    else
      OP_PROBED(OP_PROBE_EMBEDDING, tp_embedding_backward(m, A, A->dres));
    if (A->pos_embed != NO_TENSOR) {
      /* Over all N rows (gathered by tp_embedding_backward under TP), so
       * every TP rank holds the whole gradient of the replicated table. */
      const float *d = A->tp == 1 ? A->dres : A->s->full;
      float *dwpe = m->grads + A->pos_embed;
      for (int n = 0; n < A->N; n++) vec_acc(dwpe + (size_t)A->pos[n] * C, d + (size_t)n * C, (size_t)C);
    }
    if (!defer) grads_ready(m, A->param_begin, block_begin(A, A->layer_begin));
  }
  A->training_pending = 0;
  A->weights_pending = defer;
  return 0;
}

void chunk_report_grads(Model *m, const ModelActs *A) {
  if (A->has_head) grads_ready(m, A->final_norm, A->param_end);
  for (int l = A->layer_end - 1; l >= A->layer_begin; l--) grads_ready(m, block_begin(A, l), block_begin(A, l + 1));
  if (A->has_embedding) grads_ready(m, A->param_begin, block_begin(A, A->layer_begin));
}

int model_chunk_backward(Model *m, int chunk, int slot, const float *dy, Error *err) {
  return chunk_backward_pass(m, chunk, slot, dy, 0, "model_chunk_backward", err);
}

const float *model_chunk_output(const Model *m, int chunk, int slot) {
  if (chunk < 0 || chunk >= m->shard.num_chunks || slot < 0 || slot >= m->shard.num_slots) return NULL;
  return model_acts(m, chunk, slot)->final_in;
}

const float *model_chunk_input_grad(const Model *m, int chunk, int slot) {
  if (chunk < 0 || chunk >= m->shard.num_chunks || slot < 0 || slot >= m->shard.num_slots) return NULL;
  return model_acts(m, chunk, slot)->dres;
}

/* ------------------------------------------------- the whole model at once */

static int check_whole(const Model *m, const char *who, Error *err) {
  if (!m->shard.has_embedding[0] || !m->shard.has_head[0])
    return error_set(err, ERR_ARG,
                     "%s: needs a shard whose chunk 0 holds both the embedding and the head (use model_chunk_forward "
                     "/ model_chunk_backward for pipeline chunks)",
                     who);
  return 0;
}

int model_forward(Model *m, const int *tokens, const int *targets, int B, int T, int training, float grad_scale,
                  ModelLoss *loss, Error *err) {
  if (check_whole(m, "model_forward", err)) return ERR_ARG;
  return chunk_forward(m, 0, 0, tokens, targets, NULL, B, T, training, grad_scale, loss, "model_forward", err);
}

int model_backward(Model *m, Error *err) {
  if (check_whole(m, "model_backward", err)) return ERR_ARG;
  return chunk_backward_pass(m, 0, 0, NULL, 0, "model_backward", err);
}

int model_logits(Model *m, const int *tokens, int B, int T, float *logits, Error *err) {
  if (m->shard.tp_size > 1 || m->shard.cp_size > 1 || m->shard.ep_size * m->shard.etp_size > 1)
    return error_set(err, ERR_ARG, "model_logits: needs tp_size, cp_size, ep_size and etp_size 1 (this shard has %d, %d, %d, %d)",
                     m->shard.tp_size, m->shard.cp_size, m->shard.ep_size, m->shard.etp_size);
  if (model_forward(m, tokens, NULL, B, T, 0, 1.0f, NULL, err)) return err ? err->code : ERR_ARG;
  ModelActs *A = m->acts;
  linear_forward(logits, A->lnf, m->params + A->lm_head, A->N, A->C, A->V, 0);
  return 0;
}
