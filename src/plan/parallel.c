/* Planner configurations: names, defaults, validation against the model and
 * the cluster, and the placement of each parallel group on the cluster
 * (rank r = device r; grid orders in parallel.h). */
#include "plan/parallel.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/builders.h"

static const char *const RECOMPUTE_NAMES[PLAN_NUM_RECOMPUTE] = {"none", "selective", "full"};
static const char *const ALGO_NAMES[PLAN_NUM_ALGOS] = {"auto", "ring", "tree", "hierarchical"};
static const char *const GROUP_NAMES[PLAN_NUM_GROUP_KINDS] = {"tp", "cp", "dp", "dp x cp", "pp", "etp", "ep", "edp"};

const char *plan_recompute_name(PlanRecompute r) {
  return (unsigned)r < PLAN_NUM_RECOMPUTE ? RECOMPUTE_NAMES[r] : "?";
}

int plan_recompute_from_name(const char *name, PlanRecompute *r) {
  for (int i = 0; i < PLAN_NUM_RECOMPUTE; i++)
    if (!strcmp(name, RECOMPUTE_NAMES[i])) {
      *r = (PlanRecompute)i;
      return 0;
    }
  return -1;
}

static const char *const MODULE_NAMES[] = {"core_attn", "layernorm", "mlp", "moe_act", "moe", "shared_experts"};
#define NUM_MODULES ((int)(sizeof MODULE_NAMES / sizeof MODULE_NAMES[0]))

int plan_recompute_modules_parse(const char *list, unsigned *modules, Error *err) {
  *modules = 0;
  const char *p = list;
  while (*p) {
    size_t len = strcspn(p, ",");
    int found = -1;
    for (int i = 0; i < NUM_MODULES; i++)
      if (strlen(MODULE_NAMES[i]) == len && !strncmp(p, MODULE_NAMES[i], len)) found = i;
    if (found < 0)
      return error_set(err, ERR_ARG, "recompute module \"%.*s\": expected core_attn, layernorm, mlp, moe_act, moe or "
                       "shared_experts (mla_up_proj needs multi-latent attention)", (int)len, p);
    *modules |= 1u << found;
    p += len + (p[len] == ',');
  }
  return *modules ? ERR_OK : error_set(err, ERR_ARG, "no recompute module given");
}

const char *plan_recompute_modules_describe(unsigned modules, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < NUM_MODULES; i++)
    if ((modules & (1u << i)) && used < size)
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? "," : "", MODULE_NAMES[i]);
  return buf;
}

const char *plan_algo_name(PlanCollAlgo algo) {
  return (unsigned)algo < PLAN_NUM_ALGOS ? ALGO_NAMES[algo] : "?";
}

const char *plan_group_name(PlanGroupKind kind) {
  return (unsigned)kind < PLAN_NUM_GROUP_KINDS ? GROUP_NAMES[kind] : "?";
}

/* Megatron-Core-like runtime defaults; docs/planner.md explains each. */
void plan_options_default(PlanOptions *o) {
  memset(o, 0, sizeof *o);
  o->moe_imbalance = 1.1;
  o->tp_overlap = 0.0;
  o->cp_overlap = 1.0;
  o->ep_overlap = 0.0;
  o->dp_overlap = 1.0;
  o->param_gather_overlap = 1.0;
  o->grad_reduce_bytes = 4;
  o->bucket_params = 40e6;
  o->fuse_swiglu = o->fuse_bias_gelu = o->fuse_norm_residual = 1;
  o->dropless_sync = 50e-6;
  o->send_overhead = 20e-6;
  o->algo = PLAN_ALGO_AUTO;
}

void plan_options_from_runtime(const PlanRuntimeFacts *rt, unsigned given, PlanOptions *o, PlanDtype *dtype) {
  if (!rt || !rt->given) return;
  if (dtype && !(given & PLAN_GIVEN_DTYPE)) *dtype = rt->dtype;
  if (!(given & PLAN_GIVEN_MOE_TP)) o->moe_tp_replicated = rt->moe_tp_replicated;
  o->fp32_activations = !strcmp(rt->device, "cpu");
  if (!(given & PLAN_GIVEN_DP_OVERLAP)) o->dp_overlap = rt->async_progress ? 1.0 : 0.0;
  if (!(given & PLAN_GIVEN_PARAM_GATHER)) o->param_gather_overlap = rt->async_progress ? 1.0 : 0.0;
  /* The ring's K/V shift is started before the block's attention and
   * waited for after it (model/attention_cp.c): without a progress thread
   * its rendezvous transfer moves only inside the wait. */
  if (!(given & PLAN_GIVEN_CP_OVERLAP)) o->cp_overlap = rt->async_progress ? 1.0 : 0.0;
  if (!(given & PLAN_GIVEN_DROPLESS_SYNC)) o->dropless_sync = rt->device_sync ? rt->dropless_sync : 0.0;
  o->bucket_overhead = rt->bucket_overhead;
  o->grad_reduce_factor = rt->grad_reduce_factor;
  if (!(given & PLAN_GIVEN_BUCKET) && rt->bucket_bytes > 0) {
    o->bucket_params = rt->bucket_bytes / o->grad_reduce_bytes;
    o->bucket_max_share = rt->bucket_max_share;
  }
}

const char *plan_runtime_facts_describe(const PlanRuntimeFacts *rt, char *buf, size_t size) {
  if (!rt || !rt->given) {
    snprintf(buf, size, "%s", "");
    return buf;
  }
  char cap[64] = "";
  if (rt->bucket_max_share > 0) snprintf(cap, sizeof cap, " (at most %.2g of a rank's gradient)", rt->bucket_max_share);
  snprintf(buf, size,
           "%s runtime%s%s: %s, MoE %s, %s, dropless sync %.0f us, buckets %.3g MB%s",
           rt->device, rt->host[0] ? " on " : "", rt->host, plan_dtype_name(rt->dtype),
           rt->moe_tp_replicated ? "replicated on every TP rank" : "split over the TP ranks",
           rt->async_progress ? "asynchronous progress (dp overlap 1)" : "no asynchronous progress (dp overlap 0)",
           rt->device_sync ? rt->dropless_sync * 1e6 : 0.0, rt->bucket_bytes / 1e6, cap);
  return buf;
}

void plan_config_init(PlanConfig *c, int seq_len, int global_batch, int micro_batch) {
  memset(c, 0, sizeof *c);
  c->par.tp = c->par.cp = c->par.dp = c->par.pp = c->par.vpp = 1;
  c->par.ep = c->par.etp = c->par.edp = 1;
  c->seq_len = seq_len;
  c->global_batch_size = global_batch;
  c->micro_batch_size = micro_batch;
  c->dtype = PLAN_DTYPE_BF16;
  c->schedule = SCHED_SCHEDULE_NONE;
}

int plan_config_world(const PlanConfig *c) {
  return c->par.tp * c->par.cp * c->par.dp * c->par.pp;
}

int plan_config_devices(const PlanConfig *c) {
  if (!c->num_stage_widths) return plan_config_world(c);
  int n = 0;
  for (int s = 0; s < c->num_stage_widths; s++) n += c->stage_width[s];
  return n;
}

int plan_config_is_folded(const PlanConfig *c) {
  const PlanParallel *p = &c->par;
  if (p->ep == 1 && p->etp == p->tp) return 0;
  return !(p->etp == p->tp && p->cp == 1 && p->dp % p->ep == 0);
}

const char *plan_config_describe(const PlanConfig *c, char *buf, size_t size) {
  const PlanParallel *p = &c->par;
  char modules[96] = "";
  if (c->recompute == PLAN_RECOMPUTE_SELECTIVE && c->recompute_modules) {
    char list[80];
    snprintf(modules, sizeof modules, " (%s)", plan_recompute_modules_describe(c->recompute_modules, list, sizeof list));
  } else if (c->recompute == PLAN_RECOMPUTE_FULL && (c->recompute_method == 1 || c->recompute_num_layers > 1)) {
    snprintf(modules, sizeof modules, " (%s, %d layers)", c->recompute_method == 1 ? "block" : "uniform",
             c->recompute_num_layers);
  }
  snprintf(buf, size, "tp%d cp%d dp%d pp%d vpp%d | ep%d etp%d edp%d | mbs%d m%d %s, recompute %s%s%s", p->tp, p->cp,
           p->dp, p->pp, p->vpp, p->ep, p->etp, p->edp, c->micro_batch_size, c->microbatches,
           sched_schedule_name(c->schedule), plan_recompute_name(c->recompute), modules,
           c->distributed_optimizer ? ", distopt" : "");
  return buf;
}

static int divides(long a, long b) {
  return a > 0 && b % a == 0;
}

int plan_config_finish(PlanConfig *c, const ModelConfig *m, const ClusterSpec *cl, int gpus, Error *err) {
  PlanParallel *p = &c->par;
  if (gpus < 1) return error_set(err, ERR_CONFIG, "the GPU count must be >= 1 (got %d)", gpus);
  if (cl && gpus > cluster_spec_total_devices(cl))
    return error_set(err, ERR_CONFIG, "%d GPUs requested but cluster %s has %d (%d nodes x %d); raise \"nodes\" in %s",
                     gpus, cl->name, cluster_spec_total_devices(cl), cl->nodes, cl->devices_per_node, cl->origin);
  if (p->tp < 1 || p->cp < 1 || p->pp < 1 || p->vpp < 1 || p->ep < 1 || p->etp < 1)
    return error_set(err, ERR_CONFIG, "tp, cp, pp, vpp, ep and etp must all be >= 1");
  if (m && m->num_experts == 0) {
    /* A dense model has no MoE grid of its own: it mirrors attention. */
    if (p->ep != 1 || (p->etp != 1 && p->etp != p->tp))
      return error_set(err, ERR_CONFIG, "ep and etp must be 1 for a dense model (got ep %d, etp %d)", p->ep, p->etp);
    p->etp = p->tp;
  }
  if (c->seq_len < 1 || c->micro_batch_size < 1 || c->global_batch_size < 1)
    return error_set(err, ERR_CONFIG, "sequence length, micro-batch size and global batch size must be >= 1");
  long tcp = (long)p->tp * p->cp * p->pp;
  if (gpus % tcp)
    return error_set(err, ERR_CONFIG, "tp x cp x pp = %ld does not divide the %d GPUs; the data-parallel size would "
                     "not be whole", tcp, gpus);
  int dp = (int)(gpus / tcp);
  if (p->dp > 0 && p->dp != dp)
    return error_set(err, ERR_CONFIG, "dp %d does not match %d GPUs / (tp %d x cp %d x pp %d) = %d", p->dp, gpus,
                     p->tp, p->cp, p->pp, dp);
  p->dp = dp;
  long moe_block = (long)p->etp * p->ep * p->pp;
  if (gpus % moe_block)
    return error_set(err, ERR_CONFIG, "etp x ep x pp = %ld does not divide the %d GPUs; the expert data-parallel "
                     "size would not be whole", moe_block, gpus);
  p->edp = (int)(gpus / moe_block);
  long per_step = (long)dp * c->micro_batch_size;
  if (c->global_batch_size % per_step)
    return error_set(err, ERR_CONFIG, "global batch %d is not a multiple of dp %d x micro-batch %d = %ld",
                     c->global_batch_size, dp, c->micro_batch_size, per_step);
  c->microbatches = (int)(c->global_batch_size / per_step);
  if (m) {
    int kv = model_config_kv_heads(m);
    if (!divides(p->tp, m->num_heads))
      return error_set(err, ERR_CONFIG, "tp %d must divide the %d attention heads", p->tp, m->num_heads);
    if (!divides(p->tp, kv) && !divides(kv, p->tp))
      return error_set(err, ERR_CONFIG, "tp %d and the %d key/value heads must divide one another", p->tp, kv);
    if (c->seq_len % (2 * p->cp))
      return error_set(err, ERR_CONFIG, "cp %d needs the sequence length (%d) to split into 2 x cp = %d chunks",
                       p->cp, c->seq_len, 2 * p->cp);
    /* Megatron lets the embedding and the loss fill a stage each. */
    if ((long)p->pp * p->vpp > m->num_layers + 2L)
      return error_set(err, ERR_CONFIG, "pp %d x vpp %d = %d stages but the model has only %d layers (at most two "
                       "stages, the embedding's and the loss's, may hold no layer)", p->pp, p->vpp, p->pp * p->vpp,
                       m->num_layers);
    if (m->num_experts > 0) {
      if (!divides(p->ep, m->num_experts))
        return error_set(err, ERR_CONFIG, "ep %d must divide the %d experts", p->ep, m->num_experts);
      if (!divides(p->etp, m->moe_intermediate_size))
        return error_set(err, ERR_CONFIG, "etp %d must divide the expert FFN size %d", p->etp,
                         m->moe_intermediate_size);
    }
    if (m->intermediate_size > 0 && m->num_layers > model_config_num_moe_layers(m) &&
        !divides(p->tp, m->intermediate_size))
      return error_set(err, ERR_CONFIG, "tp %d must divide the FFN size %d", p->tp, m->intermediate_size);
    if (m->shared_expert_intermediate_size > 0 && !divides(p->tp, m->shared_expert_intermediate_size))
      return error_set(err, ERR_CONFIG, "tp %d must divide the shared-expert FFN size %d", p->tp,
                       m->shared_expert_intermediate_size);
    if (!divides(p->tp, m->vocab_size))
      return error_set(err, ERR_CONFIG, "tp %d must divide the vocabulary (%d) for the vocab-parallel LM head", p->tp,
                       m->vocab_size);
  }
  if (!c->schedule_given && c->schedule != SCHED_SCHEDULE_GPIPE)
    c->schedule = p->vpp > 1 ? SCHED_SCHEDULE_INTERLEAVED : p->pp > 1 ? SCHED_SCHEDULE_1F1B : SCHED_SCHEDULE_NONE;
  else if (p->vpp > 1 && c->schedule != SCHED_SCHEDULE_INTERLEAVED)
    return error_set(err, ERR_CONFIG, "schedule %s runs one chunk per rank: vpp must be 1 (got %d)",
                     sched_schedule_name(c->schedule), p->vpp);
  SchedConfig sc;
  plan_config_sched(c, &sc);
  int rc = sched_config_validate(&sc, err);
  if (rc) return rc;
  if (c->num_given_layers) {
    if (c->num_given_layers != p->pp * p->vpp)
      return error_set(err, ERR_CONFIG, "%d layer counts given for pp %d x vpp %d = %d stages", c->num_given_layers,
                       p->pp, p->vpp, p->pp * p->vpp);
    long sum = 0;
    for (int s = 0; s < c->num_given_layers; s++) {
      if (c->layers_per_stage[s] < 0)
        return error_set(err, ERR_CONFIG, "stage %d has %d layers; counts must be >= 0", s, c->layers_per_stage[s]);
      sum += c->layers_per_stage[s];
    }
    if (m && sum != m->num_layers)
      return error_set(err, ERR_CONFIG, "the layers per stage sum to %ld but the model has %d layers", sum,
                       m->num_layers);
  }
  if (c->dtype != PLAN_DTYPE_BF16 && c->dtype != PLAN_DTYPE_FP32 && c->dtype != PLAN_DTYPE_FP16)
    return error_set(err, ERR_CONFIG, "training precision %s is not modelled (use bf16, fp16 or fp32)",
                     plan_dtype_name(c->dtype));
  if (cl && !(cl->peak_flops[c->dtype] > 0))
    return error_set(err, ERR_CONFIG, "cluster %s gives no peak for %s (peak_tflops.%s in %s)", cl->name,
                     plan_dtype_name(c->dtype), plan_dtype_name(c->dtype), cl->origin);
  return ERR_OK;
}

int plan_attention_rank(const PlanParallel *p, int tp_i, int cp_i, int dp_i, int pp_i) {
  return tp_i + p->tp * (cp_i + p->cp * (dp_i + p->dp * pp_i));
}

void plan_group_shape(const PlanConfig *c, PlanGroupKind kind, int *size, int *stride) {
  const PlanParallel *p = &c->par;
  switch (kind) {
    case PLAN_GROUP_TP: *size = p->tp, *stride = 1; break;
    case PLAN_GROUP_CP: *size = p->cp, *stride = p->tp; break;
    case PLAN_GROUP_DP: *size = p->dp, *stride = p->tp * p->cp; break;
    case PLAN_GROUP_DPCP: *size = p->dp * p->cp, *stride = p->tp; break;
    case PLAN_GROUP_PP: *size = p->pp, *stride = p->tp * p->cp * p->dp; break;
    case PLAN_GROUP_ETP: *size = p->etp, *stride = 1; break;
    case PLAN_GROUP_EP: *size = p->ep, *stride = p->etp; break;
    case PLAN_GROUP_EDP: *size = p->edp, *stride = p->etp * p->ep; break;
    default: *size = 1, *stride = 1; break;
  }
}

static int compare_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static int slower(PlanLink a, PlanLink b) {
  return a.bandwidth < b.bandwidth || (a.bandwidth == b.bandwidth && a.latency > b.latency);
}

int plan_group_topology(const ClusterSpec *cl, const PlanConfig *c, PlanGroupKind kind, PlanGroupTopo *out) {
  memset(out, 0, sizeof *out);
  int n, st;
  plan_group_shape(c, kind, &n, &st);
  out->size = n;
  out->stride = st;
  out->nodes = 1;
  out->per_node = n;
  out->intra = cl->link[PLAN_LEVEL_INTRA];
  out->inter = cl->link[PLAN_LEVEL_INTER];
  int world = plan_config_world(c);
  if (n <= 1) return ERR_OK;
  int D = cl->devices_per_node;
  int worst_nodes = 0, worst_per_node = INT_MAX;
  int have_intra = 0, have_inter = 0;
  /* On a regular cluster a group's shape depends only on its first
   * device's position inside its node, so one group per position suffices;
   * with a matrix, tiers or a mapping every group is placed. */
  int irregular = cluster_spec_is_irregular(cl);
  unsigned char *seen = irregular ? NULL : calloc((size_t)D, 1);
  int *member_node = malloc((size_t)n * sizeof *member_node);
  if (!member_node) {
    free(seen);
    return ERR_NOMEM;
  }
  for (int base = 0; base < world; base++) {
    if ((base / st) % n) continue; /* not the first member of its group */
    if (seen) {
      if (seen[base % D]) continue;
      seen[base % D] = 1;
    }
    for (int i = 0; i < n; i++) {
      int rank = base + i * st;
      int node = cluster_spec_node_of(cl, rank);
      member_node[i] = node;
      if (irregular) {
        int next = base + ((i + 1) % n) * st;
        PlanLink l = cluster_spec_device_link(cl, rank, next);
        if (cluster_spec_node_of(cl, next) == node) {
          if (!have_intra || slower(l, out->intra)) out->intra = l;
          have_intra = 1;
        } else {
          if (!have_inter || slower(l, out->inter)) out->inter = l;
          have_inter = 1;
        }
      }
    }
    /* Distinct nodes and the fewest members on one of them (a mapping may
     * scatter a group's members over nodes in any order). */
    qsort(member_node, (size_t)n, sizeof *member_node, compare_int);
    int nodes = 0, per_node = INT_MAX;
    for (int i = 0; i < n;) {
      int j = i;
      while (j < n && member_node[j] == member_node[i]) j++;
      nodes++;
      if (j - i < per_node) per_node = j - i;
      i = j;
    }
    if (nodes > worst_nodes || (nodes == worst_nodes && per_node < worst_per_node)) {
      worst_nodes = nodes;
      worst_per_node = per_node;
    }
  }
  free(member_node);
  free(seen);
  out->nodes = worst_nodes;
  out->per_node = worst_per_node;
  return ERR_OK;
}

void plan_config_sched(const PlanConfig *cfg, SchedConfig *out) {
  memset(out, 0, sizeof *out);
  out->schedule = cfg->schedule;
  out->pp = cfg->par.pp;
  out->vpp = cfg->par.vpp;
  out->microbatches = cfg->microbatches;
  out->warmup_set = cfg->warmup_set;
  memcpy(out->warmup, cfg->warmup, sizeof out->warmup);
  out->order_fwd_cost = cfg->order_fwd_cost;
  out->order_bwd_cost = cfg->order_bwd_cost;
}
