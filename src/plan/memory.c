/* The memory model (accounting in memory.h): parameter counts per rank,
 * model-state bytes, activation bytes per block, and the peak over the
 * schedule found by walking its compute order. */
#include "plan/memory.h"

#include <stdlib.h>
#include <string.h>

#include "plan/cost.h"
#include "sched/builders.h"

static int is_moe(const ModelConfig *m, int layer) {
  return m->num_experts > 0 && layer >= 0 && layer < m->num_layers && m->is_moe_layer[layer];
}

/* Key/value heads a TP rank holds: replicated when there are fewer than TP. */
static double kv_heads_per_rank(const ModelConfig *m, int tp) {
  int g = model_config_kv_heads(m);
  return g >= tp ? (double)g / tp : 1.0;
}

PlanParams plan_layer_params(const ModelConfig *m, const PlanConfig *cfg, int layer) {
  const PlanParallel *p = &cfg->par;
  double h = m->hidden_size, d = model_config_head_dim(m);
  double a_t = (double)m->num_heads / p->tp, g_t = kv_heads_per_rank(m, p->tp);
  PlanParams out = {0, 0};
  /* QKV, output, two norms (LayerNorm, GPT-2's, has a bias too) */
  out.dense = h * (a_t + 2 * g_t) * d + a_t * d * h + (m->gpt2 ? 4 : 2) * h;
  if (m->qkv_bias || m->gpt2) out.dense += (a_t + 2 * g_t) * d;
  if (m->o_bias || m->gpt2) out.dense += h; /* replicated over TP, added after the sum */
  if (m->gpt2) {
    /* fc (sharded with its bias) and proj (its bias replicated) */
    out.dense += 2.0 * h * m->intermediate_size / p->tp + (double)m->intermediate_size / p->tp + h;
  } else if (is_moe(m, layer)) {
    out.dense += h * m->num_experts; /* router, replicated */
    out.dense += 3.0 * h * m->shared_expert_intermediate_size / p->tp;
    out.expert = (double)m->num_experts / p->ep * 3.0 * h * m->moe_intermediate_size / p->etp;
  } else {
    out.dense += 3.0 * h * m->intermediate_size / p->tp;
  }
  return out;
}

PlanParams plan_embedding_params(const ModelConfig *m, const PlanConfig *cfg) {
  PlanParams out = {(double)m->vocab_size * m->hidden_size / cfg->par.tp, 0};
  /* GPT-2's learned position table, replicated over TP. */
  if (m->gpt2) out.dense += (double)m->max_position_embeddings * m->hidden_size;
  return out;
}

PlanParams plan_head_params(const ModelConfig *m, const PlanConfig *cfg) {
  /* A tied head shares the embedding's weights when both sit on one rank. */
  int shared = m->tie_word_embeddings && cfg->par.pp == 1 && cfg->par.vpp == 1;
  double norm = (m->gpt2 ? 2.0 : 1.0) * m->hidden_size; /* the final norm (LayerNorm: and its bias) */
  PlanParams out = {norm + (shared ? 0.0 : (double)m->vocab_size * m->hidden_size / cfg->par.tp), 0};
  return out;
}

PlanParams plan_stage_params(const ModelConfig *m, const PlanConfig *cfg, const SchedPartition *part, int stage) {
  PlanParams out = {0, 0};
  for (int l = part->first_layer[stage]; l < part->first_layer[stage] + part->layers[stage]; l++) {
    PlanParams lp = plan_layer_params(m, cfg, l);
    out.dense += lp.dense;
    out.expert += lp.expert;
  }
  if (stage == 0) out.dense += plan_embedding_params(m, cfg).dense;
  if (stage == part->num_stages - 1) out.dense += plan_head_params(m, cfg).dense;
  return out;
}

PlanStateBytes plan_state_bytes(PlanDtype dtype, int distributed, double params, double d) {
  PlanStateBytes s;
  if (d < 1) d = 1;
  if (dtype == PLAN_DTYPE_FP32 || dtype == PLAN_DTYPE_TF32) {
    /* fp32 weights double as the master copy: 4 weights + 4 grads + 8 Adam. */
    s.weights = 4 * params;
    s.grads = 4 * params;
    s.optimizer = (distributed ? 8.0 / d : 8.0) * params;
  } else {
    s.weights = 2 * params;
    s.grads = 4 * params;
    s.optimizer = (distributed ? 12.0 / d : 12.0) * params;
  }
  return s;
}

double plan_bytes_per_param(PlanDtype dtype, int distributed, double d) {
  PlanStateBytes s = plan_state_bytes(dtype, distributed, 1.0, d);
  return s.weights + s.grads + s.optimizer;
}

/* The pieces of one block's stored activations (bytes, one micro-batch). */
typedef struct BlockActs {
  double input;     /* the block input (what full recomputation keeps) */
  double attention; /* norm, q/k/v, attention output */
  double attn_core; /* softmax statistics: what selective recomputation drops */
  double mlp;       /* norm, FFN or MoE tensors */
  /* Parts of the above that selective recomputation's modules drop: */
  double norm_out;  /* the two norms' outputs */
  double mlp_inner; /* a dense MLP's fc1 and activation outputs */
  double moe_inner; /* everything the MoE part stores past its input */
  double moe_act;   /* the experts' SwiGLU output */
  double shared;    /* the shared expert's fc1 and activation outputs */
} BlockActs;

static BlockActs block_acts(const ModelConfig *m, const PlanConfig *cfg, int layer, double load) {
  const PlanParallel *p = &cfg->par;
  double e = plan_dtype_bytes(cfg->dtype);
  double b = cfg->micro_batch_size, s = cfg->seq_len, h = m->hidden_size, d = model_config_head_dim(m);
  double t_sp = b * s / ((double)p->cp * p->tp); /* tokens per rank between blocks */
  double n = b * s / p->cp;                       /* tokens per rank inside attention / MLP */
  double a_t = (double)m->num_heads / p->tp, g_t = kv_heads_per_rank(m, p->tp);
  BlockActs a;
  a.input = e * t_sp * h;
  /* attention: norm input is the block input; norm output (kept sharded,
   * re-gathered for the weight gradient); q, k, v; the attention output */
  a.attention = e * (t_sp * h + n * (a_t + 2 * g_t) * d + n * a_t * d);
  a.attn_core = 4.0 * n * a_t; /* log-sum-exp per query and head */
  /* MLP: residual stream entering the norm, norm output */
  a.mlp = e * 2 * t_sp * h;
  a.norm_out = e * 2 * t_sp * h;
  a.mlp_inner = a.moe_inner = a.moe_act = a.shared = 0;
  if (is_moe(m, layer)) {
    double k = m->top_k, E = m->num_experts;
    double rows = t_sp * k * p->etp * load; /* routed rows this rank's experts see */
    double f = (double)m->moe_intermediate_size / p->etp;
    a.mlp += 4.0 * 2 * t_sp * E;             /* router logits and probabilities (fp32) */
    a.mlp += e * (rows * h + rows * 3 * f);   /* expert input, fc1 output (gate, up), SwiGLU output */
    a.mlp += e * t_sp * k * h;                /* expert outputs kept for the weighted combine */
    double fs = (double)m->shared_expert_intermediate_size / p->tp;
    if (fs > 0) a.mlp += e * n * 3 * fs;
    a.moe_inner = a.mlp - e * 2 * t_sp * h;
    a.moe_act = e * rows * f;
    a.shared = fs > 0 ? e * n * 3 * fs : 0;
  } else {
    /* SwiGLU keeps gate, up and its output; GPT-2's GeLU MLP fc's output and GeLU's */
    a.mlp_inner = e * n * (m->gpt2 ? 2.0 : 3.0) * m->intermediate_size / p->tp;
    a.mlp += a.mlp_inner;
  }
  return a;
}

double plan_layer_full_activation_bytes(const ModelConfig *m, const PlanConfig *cfg, int layer, double load) {
  BlockActs a = block_acts(m, cfg, layer, load);
  return a.input + a.attention + a.attn_core + a.mlp;
}

double plan_layer_split_keep_bytes(const ModelConfig *m, const PlanConfig *cfg, int layer) {
  const PlanParallel *p = &cfg->par;
  if (cfg->schedule != SCHED_SCHEDULE_ZB_H1 || p->tp != 1) return 0;
  double e = plan_dtype_bytes(cfg->dtype);
  double n = (double)cfg->micro_batch_size * cfg->seq_len / p->cp, h = m->hidden_size, d = model_config_head_dim(m);
  /* the gradients of wo's output (h), q (heads x d), k and v (kv heads x d) */
  double keep = e * n * (h + ((double)m->num_heads + 2.0 * kv_heads_per_rank(m, 1)) * d);
  /* a dense SwiGLU MLP: of w_down's output (h) and w_gate_up's (2 f) */
  if (!is_moe(m, layer) && !m->gpt2) keep += e * n * (h + 2.0 * m->intermediate_size);
  return keep;
}

double plan_layer_activation_bytes(const ModelConfig *m, const PlanConfig *cfg, int layer, double load) {
  BlockActs a = block_acts(m, cfg, layer, load);
  switch (plan_config_layer_recompute(cfg, layer)) {
    case PLAN_RECOMPUTE_FULL: return a.input;
    case PLAN_RECOMPUTE_SELECTIVE: {
      unsigned mod = plan_config_recompute_modules(cfg);
      double kept = a.input + a.attention + a.attn_core + a.mlp;
      if (mod & PLAN_RECOMPUTE_CORE_ATTN) kept -= a.attn_core;
      if (mod & PLAN_RECOMPUTE_LAYERNORM) kept -= a.norm_out;
      if (mod & PLAN_RECOMPUTE_MLP) kept -= a.mlp_inner;
      if (mod & PLAN_RECOMPUTE_MOE) kept -= a.moe_inner;
      else kept -= ((mod & PLAN_RECOMPUTE_MOE_ACT) ? a.moe_act : 0) + ((mod & PLAN_RECOMPUTE_SHARED_EXPERTS) ? a.shared : 0);
      return kept;
    }
    default: return a.input + a.attention + a.attn_core + a.mlp;
  }
}

int plan_memory_estimate(const ModelConfig *m, const ClusterSpec *cl, const PlanConfig *cfg,
                         const SchedPartition *part, double load, PlanRankMemory *out, Error *err) {
  const PlanParallel *p = &cfg->par;
  int P = p->pp, V = p->vpp, S = P * V;
  if (part->num_stages != S)
    return error_set(err, ERR_INTERNAL, "memory: partition has %d stages, config %d", part->num_stages, S);
  double e = plan_dtype_bytes(cfg->dtype);
  double b = cfg->micro_batch_size, s = cfg->seq_len, h = m->hidden_size;
  double t_sp = b * s / ((double)p->cp * p->tp), n = b * s / p->cp;
  double d_dense = (double)p->dp * p->cp, d_expert = p->edp;

  double *stage_act = calloc((size_t)S, sizeof *stage_act);
  double *stage_work = calloc((size_t)S, sizeof *stage_work);
  /* zb-h1: output gradients kept from each B to its W (plan_layer_split_keep_bytes) */
  double *stage_keep = calloc((size_t)S, sizeof *stage_keep);
  if (!stage_act || !stage_work || !stage_keep) {
    free(stage_keep);
    free(stage_act);
    free(stage_work);
    return error_set(err, ERR_NOMEM, "memory: out of memory");
  }
  /* Uniform full recomputation over groups of g blocks keeps one input per
   * group and rebuilds a whole group at a time. */
  int g = cfg->recompute == PLAN_RECOMPUTE_FULL && !cfg->num_layer_recompute && cfg->recompute_method == 0 &&
                  cfg->recompute_num_layers > 1
              ? cfg->recompute_num_layers
              : 1;
  for (int st = 0; st < S; st++) {
    double group = 0;
    for (int l = part->first_layer[st], i = 0; l < part->first_layer[st] + part->layers[st]; l++, i++) {
      if (g == 1 || i % g == 0) stage_act[st] += plan_layer_activation_bytes(m, cfg, l, load);
      stage_keep[st] += plan_layer_split_keep_bytes(m, cfg, l);
      if (plan_config_layer_recompute(cfg, l) == PLAN_RECOMPUTE_FULL) {
        double w = plan_layer_full_activation_bytes(m, cfg, l, load);
        group = (i % g == 0 ? 0 : group) + w;
        if (group > stage_work[st]) stage_work[st] = group;
      }
    }
    if (st == S - 1) {
      stage_act[st] += e * 2 * t_sp * h; /* final norm input and output */
      /* Logits and the fp32 softmax of the loss live between the head's
       * forward and its backward, which run back to back on the last stage. */
      double logits = n * ((double)m->vocab_size / p->tp) * (e + 4.0);
      if (logits > stage_work[st]) stage_work[st] = logits;
    }
  }

  SchedConfig sc;
  plan_config_sched(cfg, &sc);
  /* With a split backward the activations live until the weight gradient. */
  const int split = cfg->schedule == SCHED_SCHEDULE_ZB_H1;
  SchedComputeOrder order;
  int rc = sched_compute_order(&sc, &order, err);
  if (rc) {
    free(stage_keep);
    free(stage_act);
    free(stage_work);
    return rc;
  }
  for (int r = 0; r < P; r++) {
    PlanRankMemory *o = &out[r];
    memset(o, 0, sizeof *o);
    PlanParams params = {0, 0};
    for (int c = 0; c < V; c++) {
      PlanParams sp = plan_stage_params(m, cfg, part, c * P + r);
      params.dense += sp.dense;
      params.expert += sp.expert;
    }
    PlanStateBytes ds = plan_state_bytes(cfg->dtype, cfg->distributed_optimizer, params.dense, d_dense);
    PlanStateBytes es = plan_state_bytes(cfg->dtype, cfg->distributed_optimizer, params.expert, d_expert);
    o->weights = ds.weights + es.weights;
    o->grads = ds.grads + es.grads;
    o->optimizer = ds.optimizer + es.optimizer;
    double cur = 0, peak = 0, transient = 0;
    int alive = 0, peak_alive = 0;
    for (int i = 0; i < order.counts[r]; i++) {
      const SchedComputeItem *it = &order.items[r][i];
      int st = it->chunk * P + r;
      if (it->kind == SCHED_FWD) {
        cur += stage_act[st];
        alive++;
        if (cur > peak) peak = cur, peak_alive = alive;
      } else if (it->kind == SCHED_BWD) {
        /* The backward's working set sits on top of everything still alive. */
        if (cur + stage_work[st] > peak + transient) transient = cur + stage_work[st] - peak;
        if (!split) {
          cur -= stage_act[st], alive--;
        } else {
          /* B frees nothing: the forward's activations stay for W, and the
           * output gradients W multiplies with are kept on top of them. */
          cur += stage_keep[st];
          if (cur > peak) peak = cur, peak_alive = alive;
        }
      } else if (it->kind == SCHED_BWD_WEIGHT) {
        cur -= stage_act[st] + stage_keep[st];
        alive--;
      }
    }
    o->activations = peak;
    o->transient = transient;
    o->peak_inflight = peak_alive;
    o->reserved = cl ? cl->memory_reserved : 0;
    o->total = o->weights + o->grads + o->optimizer + o->activations + o->transient + o->reserved;
  }
  (void)e;
  sched_compute_order_free(&order);
  free(stage_keep);
  free(stage_act);
  free(stage_work);
  return ERR_OK;
}
