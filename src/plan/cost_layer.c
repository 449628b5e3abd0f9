/* Per-layer costs: forward and backward of a dense or MoE transformer block,
 * the embedding and the LM head, for one micro-batch on one rank, split
 * into components (cost.h). The shapes follow Megatron-Core's layout:
 *  - sequence parallelism whenever TP > 1: between blocks a rank holds
 *    b s / (CP TP) tokens; an all-gather over TP precedes the column-parallel
 *    GEMMs (QKV, fc1) and a reduce-scatter follows the row-parallel ones
 *    (output projection, fc2). Backward mirrors both; the re-gather of the
 *    input for the weight gradient overlaps the data-gradient GEMM and is not
 *    charged. tp_overlap hides a share of the rest behind GEMMs.
 *  - CP: each rank attends its s/CP queries (two load-balanced chunks) to
 *    all keys, 1/CP of the causal work; the K/V ring takes CP - 1 steps, each
 *    overlapping one step of attention compute (cp_overlap); backward sends
 *    K/V and their gradients. Every step after the first merges its partial
 *    output (forward) or accumulates the gradients (backward) in a kernel of
 *    its own.
 *  - attention_unfused: the core as two batched GEMMs over the full score
 *    matrix with softmax and dropout between them (Megatron-LM of 2021).
 *  - MoE under TP without an MoE grid, when the runtime replicates it
 *    (PlanOptions.moe_tp_replicated): every TP rank routes the gathered
 *    sequence through all experts and keeps its rows.
 *  - MoE with EP/ETP (all-to-all dispatcher; the all-gather one gathers the
 *    group's tokens and reduce-scatters partial outputs instead): route, permute, all-to-all over EP, all-gather over
 *    ETP, sort by local expert, grouped expert GEMMs on the FFN slice f/ETP,
 *    then the reverse (reduce-scatter, all-to-all, unpermute with the
 *    weighted combine). The busiest rank sets the pace: expert GEMMs and the
 *    all-to-all are priced at the expert load (imbalance when dropless, the
 *    capacity factor when dropping with padding, the smaller of the two when
 *    dropping without). Dropless routing adds a host synchronisation per
 *    layer in forward (token counts decide buffer sizes) and a count
 *    exchange over EP.
 *  - backward GEMMs are two GEMMs of the forward's size each (data and
 *    weight gradients); flash attention's backward does 2.5x the forward's
 *    matmul work.
 *  - recomputation: selective adds the forward of the modules chosen
 *    (Megatron's --recompute-modules: by default the attention core; also
 *    the norms, a dense MLP, the experts' activation, the whole MoE part or
 *    the shared expert) to the backward, full adds the block's whole
 *    forward (communication included).
 *  - the GPT-2 family (ModelConfig.gpt2): a GeLU MLP of two matrices with
 *    biases instead of SwiGLU's three, no RoPE, LayerNorm (priced as the
 *    RMSNorm's memory traffic: one read, one write), bias gradients, and
 *    the learned position embedding added at the embedding. */
#include <math.h>
#include <string.h>

#include "plan/cost.h"

typedef struct Dims {
  double e;        /* bytes per element */
  double b, s;     /* micro-batch, sequence */
  double h, d;     /* hidden, head dim */
  double a_t, g_t; /* query and key/value heads per TP rank */
  double t_sp;     /* tokens per rank between blocks */
  double n;        /* tokens per rank inside attention / MLP (gathered over TP) */
  int tp, cp;
} Dims;

static Dims dims_of(const PlanCostModel *cm) {
  const ModelConfig *m = cm->model;
  const PlanConfig *c = cm->cfg;
  Dims D;
  D.e = plan_activation_bytes(cm->opt, c->dtype);
  D.b = c->micro_batch_size;
  D.s = c->seq_len;
  D.h = m->hidden_size;
  D.d = model_config_head_dim(m);
  D.tp = c->par.tp;
  D.cp = c->par.cp;
  D.a_t = (double)m->num_heads / D.tp;
  int g = model_config_kv_heads(m);
  D.g_t = g >= D.tp ? (double)g / D.tp : 1.0;
  D.t_sp = D.b * D.s / ((double)D.cp * D.tp);
  D.n = D.b * D.s / D.cp;
  if (cm->opt->no_sequence_parallel) D.t_sp = D.n;
  return D;
}

static double coll(const PlanCostModel *cm, PlanGroupKind g, PlanCollective kind, double bytes) {
  return plan_collective_time(cm->cluster, &cm->group[g], kind, bytes, cm->opt->algo, NULL);
}

static double gemm(const PlanCostModel *cm, double m, double n, double k) {
  return plan_gemm_time(cm->cluster, cm->cfg->dtype, m, n, k);
}

static double mem(const PlanCostModel *cm, double bytes) {
  return plan_memory_time(cm->cluster, bytes);
}

/* One sequence-parallel all-gather + reduce-scatter pair over TP of an
 * n x h activation, with the overlap applied. */
static double tp_pair(const PlanCostModel *cm, const Dims *D) {
  if (D->tp <= 1) return 0.0;
  double bytes = D->n * D->h * D->e;
  double t = coll(cm, PLAN_GROUP_TP, PLAN_COLL_ALL_GATHER, bytes) + coll(cm, PLAN_GROUP_TP, PLAN_COLL_REDUCE_SCATTER, bytes);
  return t * (1.0 - cm->opt->tp_overlap);
}

/* Exposed ring time: steps transfers, each overlapping step_compute. */
static double ring_exposed(double steps, double transfer, double step_compute, double overlap) {
  if (steps <= 0) return 0.0;
  double hidden = overlap * step_compute;
  double exposed = transfer - hidden;
  if (exposed < (1.0 - overlap) * transfer) exposed = (1.0 - overlap) * transfer;
  return steps * (exposed > 0 ? exposed : 0.0);
}

/* The attention core before flash attention (PlanOptions.attention_unfused):
 * per rank b a_t heads of s/CP queries against s keys, QK^T and PV as
 * batched GEMMs over the full score matrix (the causal mask is applied, not
 * skipped), a fused scale-mask-softmax (reads and writes the scores) and the
 * attention dropout (reads them, writes them and a one-byte mask) between
 * them. Backward: two GEMMs per product, dropout's (gradient and mask in,
 * gradient out) and softmax's (output and gradient in, gradient out). */
static void unfused_attention(const PlanCostModel *cm, const Dims *D, double *core_f, double *core_b) {
  double heads = D->b * D->a_t, q = D->s / D->cp;
  double scores = heads * q * D->s;
  double qk = gemm(cm, heads * q, D->s, D->d), pv = gemm(cm, heads * q, D->d, D->s);
  double softmax_f = mem(cm, scores * 2 * D->e), dropout_f = mem(cm, scores * (2 * D->e + 1));
  double softmax_b = mem(cm, scores * 3 * D->e), dropout_b = mem(cm, scores * (2 * D->e + 1));
  *core_f = qk + pv + softmax_f + dropout_f;
  *core_b = 2 * (qk + pv) + softmax_b + dropout_b;
}

/* Per ring step beyond the first, context parallelism merges the step's
 * partial attention output into the running one with the online-softmax
 * statistics (read both outputs and statistics, write one) in forward; in
 * backward it accumulates the query gradient and the travelling key/value
 * gradients in fp32. Each merge is its own kernel, so short chunks pay the
 * kernel floor per step. */
static void ring_merge(const PlanCostModel *cm, const Dims *D, double *fwd, double *bwd) {
  double out = D->n * D->a_t * D->d, kv = 2 * D->n * D->g_t * D->d;
  double stats = 4.0 * D->n * D->a_t;
  double steps = D->cp - 1;
  *fwd = steps * mem(cm, 3 * out * D->e + 3 * stats);
  *bwd = steps * mem(cm, 3 * 4.0 * (out + kv));
}

static void attention_block(const PlanCostModel *cm, const Dims *D, PlanPassCost *pc) {
  PlanBreakdown *f = &pc->fwd, *b = &pc->bwd;
  double qkv = gemm(cm, D->n, (D->a_t + 2 * D->g_t) * D->d, D->h);
  double out = gemm(cm, D->n, D->h, D->a_t * D->d);
  f->t[PLAN_COMP_ATTN_GEMM] += qkv + out;
  b->t[PLAN_COMP_ATTN_GEMM] += 2 * (qkv + out);
  /* Causal flash attention: 4 b a s^2 d / 2 matmul FLOPs in all, 1/CP per rank. */
  double flops = 2.0 * D->b * D->a_t * D->s * D->s * D->d / D->cp;
  double bytes = D->e * D->n * D->d * (2 * D->a_t + 2 * D->g_t);
  /* With CP each rank runs its two chunks of s / (2 CP) queries separately. */
  double q = D->cp > 1 ? D->s / (2.0 * D->cp) : D->s;
  double core_f = plan_attention_time(cm->cluster, cm->cfg->dtype, flops, bytes, q, 0);
  double core_b = plan_attention_time(cm->cluster, cm->cfg->dtype, 2.5 * flops, 2 * bytes, q, 1);
  if (D->cp > 1) {
    core_f = plan_ring_attention_time(cm->cluster, cm->cfg->dtype, flops, bytes, q, 0, core_f);
    core_b = plan_ring_attention_time(cm->cluster, cm->cfg->dtype, 2.5 * flops, 2 * bytes, q, 1, core_b);
  }
  if (cm->opt->attention_unfused) unfused_attention(cm, D, &core_f, &core_b);
  f->t[PLAN_COMP_ATTN_CORE] += core_f;
  b->t[PLAN_COMP_ATTN_CORE] += core_b;
  /* norm (read + write), residual add (2 reads + write), RoPE on q and k
   * (GPT-2 has learned positions instead, added once at the embedding) */
  const ModelConfig *m = cm->model;
  double rope = m->gpt2 ? 0.0 : D->e * 2 * D->n * (D->a_t + D->g_t) * D->d;
  f->t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 2 * D->t_sp * D->h) + mem(cm, D->e * 3 * D->t_sp * D->h) + mem(cm, rope);
  b->t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 3 * D->t_sp * D->h) + mem(cm, D->e * 3 * D->t_sp * D->h) + mem(cm, rope);
  /* Biases add in the GEMM epilogue; their gradients read the output
   * gradient once more (q/k/v on the gathered tokens, o after the sum). */
  if (m->qkv_bias || m->gpt2) b->t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * D->n * (D->a_t + 2 * D->g_t) * D->d);
  if (m->o_bias || m->gpt2) b->t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * D->t_sp * D->h);
  double tp = tp_pair(cm, D);
  f->t[PLAN_COMP_TP_COMM] += tp;
  b->t[PLAN_COMP_TP_COMM] += tp;
  if (D->cp > 1) {
    double kv = 2.0 * D->b * (D->s / D->cp) * D->g_t * D->d * D->e;
    double step = coll(cm, PLAN_GROUP_CP, PLAN_COLL_P2P, kv);
    double step2 = coll(cm, PLAN_GROUP_CP, PLAN_COLL_P2P, 2 * kv);
    f->t[PLAN_COMP_CP_COMM] += ring_exposed(D->cp - 1, step, core_f / D->cp, cm->opt->cp_overlap);
    b->t[PLAN_COMP_CP_COMM] += ring_exposed(D->cp - 1, step2, core_b / D->cp, cm->opt->cp_overlap);
    double merge_f, merge_b;
    ring_merge(cm, D, &merge_f, &merge_b);
    f->t[PLAN_COMP_ATTN_CORE] += merge_f;
    b->t[PLAN_COMP_ATTN_CORE] += merge_b;
  }
}

/* What an unfused activation adds over the fused kernel, on `elements` of
 * [tokens, ffn] (one rank's): each intermediate written to memory and read
 * back by the next kernel (kern/swiglu.h, kern/gelu.h). SwiGLU: forward
 * silu(gate) written and read again (5 floats per element instead of 3);
 * backward its four passes read and write 11 instead of 5, and the
 * activation it recomputes pays the forward's 2 again. Bias + GeLU: the
 * biased h read again by the GeLU, and dh read again by the bias gradient. */
static void unfused_traffic(const PlanCostModel *cm, const Dims *D, double elements, int gelu, PlanPassCost *pc) {
  const PlanOptions *o = cm->opt;
  if (gelu && !o->fuse_bias_gelu) {
    pc->fwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * elements);
    pc->bwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * elements);
  } else if (!gelu && !o->fuse_swiglu) {
    pc->fwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 2 * elements);
    pc->bwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 8 * elements);
  }
}

/* The MLP with FFN width ffn split over TP, on n tokens (dense layers and
 * the shared expert): SwiGLU's three matrices (gate and up fused, down),
 * or GPT-2's two (fc, proj) with a GeLU between and biases on both. */
static void mlp_block(const PlanCostModel *cm, const Dims *D, double ffn, int gelu, PlanPassCost *pc) {
  double f_t = ffn / D->tp;
  double g = gemm(cm, D->n, (gelu ? 1 : 2) * f_t, D->h) + gemm(cm, D->n, D->h, f_t);
  pc->fwd.t[PLAN_COMP_MLP_GEMM] += g;
  pc->bwd.t[PLAN_COMP_MLP_GEMM] += 2 * g;
  if (gelu) {
    /* GeLU reads fc's output and writes its own; backward reads the output
     * gradient and the input and writes the input gradient, and the two
     * bias gradients read fc's and proj's output gradients. */
    pc->fwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 2 * D->n * f_t);
    pc->bwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 4 * D->n * f_t) + mem(cm, D->e * D->t_sp * D->h);
  } else {
    /* SwiGLU reads gate and up and writes one; backward reads three, writes two. */
    pc->fwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 3 * D->n * f_t);
    pc->bwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 5 * D->n * f_t);
  }
  unfused_traffic(cm, D, D->n * f_t, gelu, pc);
  double tp = tp_pair(cm, D);
  pc->fwd.t[PLAN_COMP_TP_COMM] += tp;
  pc->bwd.t[PLAN_COMP_TP_COMM] += tp;
}

/* Pre-MLP norm and residual add, shared by dense and MoE blocks. Unfused
 * (kern/rmsnorm.h, kern/layernorm.h), per element of this rank's
 * [tokens, hidden], for each of the block's two residual adds (after
 * attention, before the MLP's norm; after the MLP, before the next block's
 * norm or the final one): forward the sum res + y written and read back by
 * the norm, 1 value more, 3 with a projection bias (its pass reads and
 * writes the sum once more: GPT-2's attention-output and proj biases, a
 * model's o_bias); backward each of the block's two norms writes its input
 * gradient and reads it back to add it to the residual gradient, 2 values
 * each. Priced on every layer, though a pipeline chunk's last block without
 * the head has no norm to fuse with (its add is the same either way). */
static void mlp_norm_residual(const PlanCostModel *cm, const Dims *D, PlanPassCost *pc) {
  pc->fwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 2 * D->t_sp * D->h) + mem(cm, D->e * 3 * D->t_sp * D->h);
  pc->bwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 3 * D->t_sp * D->h) + mem(cm, D->e * 3 * D->t_sp * D->h);
  if (!cm->opt->fuse_norm_residual) {
    const ModelConfig *m = cm->model;
    const double after_attn = m->o_bias || m->gpt2 ? 3 : 1, after_mlp = m->gpt2 ? 3 : 1;
    pc->fwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * (after_attn + after_mlp) * D->t_sp * D->h);
    pc->bwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 4 * D->t_sp * D->h);
  }
}

/* Dispatch by all-gather: over ETP then EP every rank gathers the group's
 * tokens as packed rows (x and the routing choices), and the partial outputs
 * go back by reduce-scatters over ETP then EP; backward mirrors it (output
 * gradients gathered, input gradients and routing-weight gradients
 * scattered). Returns one pass's communication. */
static double allgather_dispatch(const PlanCostModel *cm, const Dims *D, double row_elems) {
  const PlanParallel *p = &cm->cfg->par;
  double in_etp = D->t_sp * p->etp, in_group = in_etp * p->ep;
  double t = 0.0;
  if (p->etp > 1)
    t += coll(cm, PLAN_GROUP_ETP, PLAN_COLL_ALL_GATHER, in_etp * row_elems * D->e) +
         coll(cm, PLAN_GROUP_ETP, PLAN_COLL_REDUCE_SCATTER, in_group * D->h * D->e);
  if (p->ep > 1)
    t += coll(cm, PLAN_GROUP_EP, PLAN_COLL_ALL_GATHER, in_group * row_elems * D->e) +
         coll(cm, PLAN_GROUP_EP, PLAN_COLL_REDUCE_SCATTER, D->t_sp * p->ep * D->h * D->e);
  return t;
}

/* Rows this rank's experts process (the busiest rank's load) and their FFN slice. */
static void moe_rows(const PlanCostModel *cm, const Dims *D, double *rows, double *f_e) {
  const PlanParallel *p = &cm->cfg->par;
  int replicated = cm->opt->moe_tp_replicated && D->tp > 1 && p->ep == 1 && p->etp == 1 && D->cp == 1;
  double tokens = replicated ? D->n : D->t_sp;
  *rows = tokens * cm->model->top_k * p->etp * cm->expert_load;
  *f_e = (double)cm->model->moe_intermediate_size / p->etp;
}

/* One dispatch (or combine) of the DeepEP-style all-to-all across nodes
 * (PlanOptions.moe_node_dedup). With the top-k experts drawn evenly over
 * the EP group's N nodes, a token reaches (N - 1)(1 - (1 - 1/N)^k) remote
 * nodes on average, each over the sender's own NIC once; NVLink carries the
 * (token, expert) pairs for the node's other GPUs and forwards what arrives
 * from other nodes to its GPU. The two links run in parallel. */
static double node_dedup_all_to_all(const PlanCostModel *cm, const Dims *D, double tokens, double load) {
  PlanGroupTopo g = cm->group[PLAN_GROUP_EP];
  double N = g.nodes, n = g.size, per = g.per_node, k = cm->model->top_k;
  double row = D->h * D->e * load;
  double off = tokens * (N - 1) * (1 - pow(1 - 1 / N, k)) * row;
  double on = tokens * k * row * (per - 1) / n + off * (per - 1) / per;
  double t_off = coll(cm, PLAN_GROUP_EP, PLAN_COLL_P2P, off);
  g.nodes = 1;
  double t_on = plan_collective_time(cm->cluster, &g, PLAN_COLL_P2P, on, cm->opt->algo, NULL);
  return fmax(t_off, t_on);
}

static void moe_block(const PlanCostModel *cm, const Dims *D, PlanPassCost *pc) {
  const ModelConfig *m = cm->model;
  const PlanParallel *p = &cm->cfg->par;
  const PlanOptions *o = cm->opt;
  PlanBreakdown *f = &pc->fwd, *b = &pc->bwd;
  double E = m->num_experts, k = m->top_k, load = cm->expert_load;
  /* Without an MoE grid a replicating runtime routes the whole gathered
   * sequence on every TP rank: n tokens instead of n / TP. */
  int replicated = o->moe_tp_replicated && D->tp > 1 && p->ep == 1 && p->etp == 1 && D->cp == 1;
  double tokens = replicated ? D->n : D->t_sp; /* tokens this rank routes */
  double local_rows = tokens * k;              /* (token, expert) pairs leaving this rank */
  double rows = local_rows * p->etp * load;    /* rows this rank's experts process */
  double experts_here = E / p->ep;
  double f_e = (double)m->moe_intermediate_size / p->etp;
  double per_expert = rows / experts_here;
  int allgather = o->moe_allgather && p->ep * p->etp > 1;

  /* router GEMM (fp32 logits), softmax + top-k, permutation by expert */
  double router = gemm(cm, tokens, E, D->h) + mem(cm, 4.0 * 3 * tokens * E);
  double permute = mem(cm, D->e * 2 * local_rows * D->h);
  /* Rows that arrive from other ranks (EP or ETP exchange, or the folded
   * MoE of a CP run) come grouped by source and are sorted by local expert;
   * without an exchange the permutation already groups them by expert, so
   * there is no sort (model/moe_dispatch_ep.c; Megatron-Core's alltoall
   * dispatcher likewise sorts only after its exchange). */
  int exchanged = p->ep * p->etp > 1 || D->cp > 1;
  int sorted = exchanged && (experts_here > 1 || p->etp > 1);
  double sort = sorted ? mem(cm, D->e * 2 * rows * D->h) : 0.0;
  double combine = mem(cm, D->e * (local_rows + tokens) * D->h);
  double dropless = !(m->capacity_factor > 0);
  double sync = dropless ? o->dropless_sync : 0.0;
  if (dropless && p->ep > 1 && !allgather) sync += coll(cm, PLAN_GROUP_EP, PLAN_COLL_ALL_TO_ALL, 8.0 * E);
  /* The all-gather dispatcher scans every gathered token for its own experts. */
  double scan = allgather ? mem(cm, D->e * D->t_sp * p->ep * p->etp * (D->h + 2 * k)) : 0.0;
  f->t[PLAN_COMP_ROUTING] += router + permute + 2 * sort + combine + sync + scan;
  b->t[PLAN_COMP_ROUTING] += 2 * router + permute + 2 * sort + combine + scan;

  if (replicated) {
    /* Gather of the normed rows in forward and of the output gradient in
     * backward; each rank keeps its own rows, so nothing is scattered. */
    double t = coll(cm, PLAN_GROUP_TP, PLAN_COLL_ALL_GATHER, D->n * D->h * D->e) * (1.0 - o->tp_overlap);
    f->t[PLAN_COMP_TP_COMM] += t;
    b->t[PLAN_COMP_TP_COMM] += t;
  }
  if (allgather) {
    double t = allgather_dispatch(cm, D, D->h + 2 * k);
    f->t[PLAN_COMP_EP_COMM] += t * (1.0 - o->ep_overlap);
    b->t[PLAN_COMP_EP_COMM] += t * (1.0 - o->ep_overlap);
  } else {
    double a2a = 0.0;
    if (p->ep > 1) a2a = 2 * coll(cm, PLAN_GROUP_EP, PLAN_COLL_ALL_TO_ALL, local_rows * D->h * D->e * load);
    if (p->ep > 1 && o->moe_node_dedup && cm->group[PLAN_GROUP_EP].nodes > 1)
      a2a = 2 * node_dedup_all_to_all(cm, D, tokens, load);
    f->t[PLAN_COMP_EP_COMM] += a2a * (1.0 - o->ep_overlap);
    b->t[PLAN_COMP_EP_COMM] += a2a * (1.0 - o->ep_overlap);
    if (p->etp > 1) {
      double bytes = rows * D->h * D->e;
      double t = coll(cm, PLAN_GROUP_ETP, PLAN_COLL_ALL_GATHER, bytes) + coll(cm, PLAN_GROUP_ETP, PLAN_COLL_REDUCE_SCATTER, bytes);
      f->t[PLAN_COMP_ETP_COMM] += t;
      b->t[PLAN_COMP_ETP_COMM] += t;
    }
  }
  /* An expert's row count follows the routing, so the runtime runs every
   * expert product on run-time-shape kernels (model/moe.c), priced on
   * their own curve. */
  const ClusterSpec *cl = cm->cluster;
  double g = experts_here * (plan_gemm_time_rows_vary(cl, cm->cfg->dtype, per_expert, 2 * f_e, D->h) +
                             plan_gemm_time_rows_vary(cl, cm->cfg->dtype, per_expert, D->h, f_e));
  f->t[PLAN_COMP_EXPERT_GEMM] += g;
  b->t[PLAN_COMP_EXPERT_GEMM] += 2 * g;
  f->t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 3 * rows * f_e);
  b->t[PLAN_COMP_ELEMENTWISE] += mem(cm, D->e * 5 * rows * f_e);
  unfused_traffic(cm, D, rows * f_e, 0, pc);
  if (m->shared_expert_intermediate_size > 0) mlp_block(cm, D, m->shared_expert_intermediate_size, 0, pc);
}

static void finish_pass(PlanPassCost *pc) {
  pc->fwd_total = plan_breakdown_total(&pc->fwd);
  pc->bwd_total = plan_breakdown_total(&pc->bwd);
}

/* The forward time of each module selective recomputation can repeat. */
typedef struct ModuleCosts {
  double core, norms, mlp, moe, moe_act, shared;
} ModuleCosts;

static double forward_of(PlanPassCost *pc) {
  double t = plan_breakdown_total(&pc->fwd);
  memset(pc, 0, sizeof *pc);
  return t;
}

static ModuleCosts module_costs(const PlanCostModel *cm, const Dims *D, const PlanPassCost *attention) {
  const ModelConfig *m = cm->model;
  ModuleCosts mc;
  PlanPassCost tmp;
  memset(&tmp, 0, sizeof tmp);
  mc.core = attention->fwd.t[PLAN_COMP_ATTN_CORE];
  mc.norms = 2 * mem(cm, D->e * 2 * D->t_sp * D->h);
  if (m->intermediate_size > 0) mlp_block(cm, D, m->intermediate_size, m->gpt2, &tmp);
  mc.mlp = forward_of(&tmp);
  if (m->shared_expert_intermediate_size > 0) mlp_block(cm, D, m->shared_expert_intermediate_size, 0, &tmp);
  mc.shared = forward_of(&tmp);
  mc.moe = mc.moe_act = 0;
  if (m->num_experts > 0) {
    moe_block(cm, D, &tmp);
    mc.moe = forward_of(&tmp);
    double rows, f_e;
    moe_rows(cm, D, &rows, &f_e);
    mc.moe_act = mem(cm, D->e * 3 * rows * f_e);
  }
  return mc;
}

/* Recomputation charges forward work again inside the backward pass: full
 * the block's whole forward, selective the modules chosen
 * (PlanConfig.recompute_modules; moe covers its experts' activation and the
 * shared expert). */
static void add_recompute(PlanRecompute recompute, const ModuleCosts *mc, unsigned modules, int moe,
                          PlanPassCost *pc) {
  if (recompute == PLAN_RECOMPUTE_FULL) {
    pc->bwd.t[PLAN_COMP_RECOMPUTE] += plan_breakdown_total(&pc->fwd);
    return;
  }
  if (recompute != PLAN_RECOMPUTE_SELECTIVE) return;
  double t = 0;
  if (modules & PLAN_RECOMPUTE_CORE_ATTN) t += mc->core;
  if (modules & PLAN_RECOMPUTE_LAYERNORM) t += mc->norms;
  if ((modules & PLAN_RECOMPUTE_MLP) && !moe) t += mc->mlp;
  if (moe && (modules & PLAN_RECOMPUTE_MOE)) t += mc->moe;
  if (moe && !(modules & PLAN_RECOMPUTE_MOE) && (modules & PLAN_RECOMPUTE_MOE_ACT)) t += mc->moe_act;
  if (moe && !(modules & PLAN_RECOMPUTE_MOE) && (modules & PLAN_RECOMPUTE_SHARED_EXPERTS)) t += mc->shared;
  pc->bwd.t[PLAN_COMP_RECOMPUTE] += t;
}

static void price_layers(PlanCostModel *cm) {
  Dims D = dims_of(cm);
  const ModelConfig *m = cm->model;
  memset(&cm->dense_layer, 0, sizeof cm->dense_layer);
  memset(&cm->moe_layer, 0, sizeof cm->moe_layer);
  attention_block(cm, &D, &cm->dense_layer);
  cm->moe_layer = cm->dense_layer;
  mlp_norm_residual(cm, &D, &cm->dense_layer);
  mlp_norm_residual(cm, &D, &cm->moe_layer);
  if (m->intermediate_size > 0) mlp_block(cm, &D, m->intermediate_size, m->gpt2, &cm->dense_layer);
  if (m->num_experts > 0) moe_block(cm, &D, &cm->moe_layer);
  ModuleCosts mc = module_costs(cm, &D, &cm->dense_layer);
  unsigned modules = plan_config_recompute_modules(cm->cfg);
  for (int r = 0; r < PLAN_NUM_RECOMPUTE; r++) {
    cm->layer_by_recompute[0][r] = cm->dense_layer;
    cm->layer_by_recompute[1][r] = cm->moe_layer;
    for (int kind = 0; kind < 2; kind++) {
      add_recompute((PlanRecompute)r, &mc, modules, kind, &cm->layer_by_recompute[kind][r]);
      finish_pass(&cm->layer_by_recompute[kind][r]);
    }
  }
  add_recompute(cm->cfg->recompute, &mc, modules, 0, &cm->dense_layer);
  add_recompute(cm->cfg->recompute, &mc, modules, 1, &cm->moe_layer);
  finish_pass(&cm->dense_layer);
  finish_pass(&cm->moe_layer);

  /* Embedding: vocab-parallel lookup, partial rows reduce-scattered to the
   * sequence-parallel layout; backward gathers the gradient and scatter-adds
   * it into the fp32 table gradient. */
  PlanPassCost *em = &cm->embedding;
  memset(em, 0, sizeof *em);
  em->fwd.t[PLAN_COMP_EMBEDDING] += mem(cm, D.e * 2 * D.n * D.h);
  em->bwd.t[PLAN_COMP_EMBEDDING] += mem(cm, (D.e + 8.0) * D.n * D.h);
  /* GPT-2's learned positions: one more row read and added per token, and
   * its gradient accumulated into the fp32 position table. */
  if (m->gpt2) {
    em->fwd.t[PLAN_COMP_EMBEDDING] += mem(cm, D.e * D.n * D.h);
    em->bwd.t[PLAN_COMP_EMBEDDING] += mem(cm, (D.e + 8.0) * D.n * D.h);
  }
  if (D.tp > 1) {
    double bytes = D.n * D.h * D.e;
    em->fwd.t[PLAN_COMP_TP_COMM] += coll(cm, PLAN_GROUP_TP, PLAN_COLL_REDUCE_SCATTER, bytes) * (1 - cm->opt->tp_overlap);
    em->bwd.t[PLAN_COMP_TP_COMM] += coll(cm, PLAN_GROUP_TP, PLAN_COLL_ALL_GATHER, bytes) * (1 - cm->opt->tp_overlap);
  }
  finish_pass(em);

  /* LM head: final norm, gather, vocab-parallel output GEMM, cross-entropy
   * over the vocabulary shard (read logits, fp32 softmax; two tiny
   * all-reduces for the max and the sum), and the mirror in backward. */
  PlanPassCost *hd = &cm->head;
  memset(hd, 0, sizeof *hd);
  double v_t = (double)m->vocab_size / D.tp;
  double out = gemm(cm, D.n, v_t, D.h);
  double loss = mem(cm, D.n * v_t * (D.e + 4.0));
  hd->fwd.t[PLAN_COMP_LM_HEAD] += out + loss;
  hd->bwd.t[PLAN_COMP_LM_HEAD] += 2 * out + loss;
  hd->fwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D.e * 2 * D.t_sp * D.h);
  hd->bwd.t[PLAN_COMP_ELEMENTWISE] += mem(cm, D.e * 3 * D.t_sp * D.h);
  if (D.tp > 1) {
    double bytes = D.n * D.h * D.e;
    double tiny = 2 * coll(cm, PLAN_GROUP_TP, PLAN_COLL_ALL_REDUCE, 4.0 * D.n);
    hd->fwd.t[PLAN_COMP_TP_COMM] += coll(cm, PLAN_GROUP_TP, PLAN_COLL_ALL_GATHER, bytes) * (1 - cm->opt->tp_overlap) + tiny;
    hd->bwd.t[PLAN_COMP_TP_COMM] += coll(cm, PLAN_GROUP_TP, PLAN_COLL_REDUCE_SCATTER, bytes) * (1 - cm->opt->tp_overlap);
  }
  finish_pass(hd);
}

double plan_expert_rank_load(const ModelConfig *m, const PlanOptions *o, int ep) {
  int E = m->num_experts;
  if (E <= 1 || ep <= 1) return 1.0;
  int rows = o->expert_load && o->num_expert_load >= E && o->num_expert_load % E == 0 ? o->num_expert_load / E : 0;
  if (rows) {
    /* Every MoE layer is priced alike: at the mean over the measured rows
     * (layers) of each one's busiest rank. */
    double sum = 0;
    int counted = 0, per = E / ep;
    for (int i = 0; i < rows; i++) {
      const double *row = o->expert_load + (size_t)i * E;
      double total = 0, worst = 0;
      for (int e = 0; e < E; e++) total += row[e];
      if (!(total > 0)) continue;
      for (int r = 0; r < ep; r++) {
        double s = 0;
        for (int e = r * per; e < (r + 1) * per; e++) s += row[e];
        worst = fmax(worst, s);
      }
      sum += worst * ep / total;
      counted++;
    }
    if (counted) return sum / counted;
  }
  double imb = o->moe_imbalance > 1.0 ? o->moe_imbalance : 1.0;
  return 1.0 + (imb - 1.0) * sqrt((double)(ep - 1) / (E - 1));
}

const PlanPassCost *plan_layer_cost(const PlanCostModel *cm, int layer) {
  const ModelConfig *m = cm->model;
  int moe = m->num_experts > 0 && layer >= 0 && layer < m->num_layers && m->is_moe_layer[layer];
  if (cm->cfg->num_layer_recompute > 0)
    return &cm->layer_by_recompute[moe][plan_config_layer_recompute(cm->cfg, layer)];
  return moe ? &cm->moe_layer : &cm->dense_layer;
}

double plan_pp_transfer_time(const PlanCostModel *cm, int from, int to, double bytes) {
  const PlanParallel *p = &cm->cfg->par;
  const ClusterSpec *cl = cm->cluster;
  int S = p->tp * p->cp * p->dp;
  /* On a regular cluster only a device's position inside its node matters. */
  int bases = cluster_spec_is_irregular(cl) ? S : (S < cl->devices_per_node ? S : cl->devices_per_node);
  double worst = 0;
  for (int base = 0; base < bases; base++) {
    double t = plan_p2p_time(cl, base + from * S, base + to * S, bytes);
    if (t > worst) worst = t;
  }
  return worst;
}

int plan_cost_model_init(PlanCostModel *cm, const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *opt,
                         const PlanConfig *cfg, PlanTopoCache *cache, Error *err) {
  memset(cm, 0, sizeof *cm);
  cm->model = m;
  cm->cluster = cl;
  cm->opt = opt;
  cm->cfg = cfg;
  if (plan_config_world(cfg) > cluster_spec_total_devices(cl))
    return error_set(err, ERR_CONFIG, "the configuration needs %d devices, cluster %s has %d", plan_config_world(cfg),
                     cl->name, cluster_spec_total_devices(cl));
  for (int g = 0; g < PLAN_NUM_GROUP_KINDS; g++) {
    int rc = plan_group_topology_cached(cache, cl, cfg, (PlanGroupKind)g, &cm->group[g]);
    if (rc) return error_set(err, ERR_INTERNAL, "cannot place the %s groups", plan_group_name((PlanGroupKind)g));
  }
  cm->expert_rank_load = plan_expert_rank_load(m, opt, cfg->par.ep);
  cm->expert_load = cm->expert_rank_load;
  if (m->capacity_factor > 0) {
    double cap = m->capacity_factor;
    cm->expert_load = m->pad_to_capacity ? cap : fmin(cm->expert_rank_load, cap);
  }
  Dims D = dims_of(cm);
  cm->p2p_bytes = D.n / D.tp * D.h * D.e;
  price_layers(cm);
  return ERR_OK;
}
