/* Compute primitives of the cost model (GEMM, fused attention,
 * bandwidth-bound kernels), the component names of a step breakdown, and the
 * group-topology cache the search shares between configurations. */
#include <math.h>
#include <string.h>

#include "plan/cost.h"

int plan_dtype_bytes(PlanDtype dtype) {
  switch (dtype) {
    case PLAN_DTYPE_FP8: return 1;
    case PLAN_DTYPE_BF16:
    case PLAN_DTYPE_FP16: return 2;
    default: return 4;
  }
}

int plan_activation_bytes(const PlanOptions *opt, PlanDtype dtype) {
  return opt && opt->fp32_activations ? 4 : plan_dtype_bytes(dtype);
}

double plan_peak_flops(const ClusterSpec *cl, PlanDtype dtype) {
  double p = cl->peak_flops[dtype];
  return p > 0 ? p : cl->peak_flops[PLAN_DTYPE_BF16];
}

double plan_memory_time(const ClusterSpec *cl, double bytes) {
  if (!(bytes > 0)) return 0.0;
  return fmax(bytes / (cl->memory_bandwidth * cl->memory_efficiency), cl->kernel_floor);
}

double plan_optimizer_time(const ClusterSpec *cl, double params, double update_bytes) {
  if (!(params > 0)) return 0.0;
  if (cl->optimizer_per_param > 0) return params * cl->optimizer_per_param;
  return plan_memory_time(cl, params * update_bytes);
}

/* Roofline with the size-dependent efficiency: a GEMM is never faster than
 * its FLOPs at the curve's share of peak, nor than streaming its three
 * matrices once through memory. */
static double gemm_time(const ClusterSpec *cl, PlanDtype dtype, double m, double n, double k, int rows_vary) {
  if (!(m > 0) || !(n > 0) || !(k > 0)) return 0.0;
  double flops = 2.0 * m * n * k;
  const PlanCurve *curve = &cl->gemm_efficiency;
  if (dtype == PLAN_DTYPE_BF16 && rows_vary && cl->gemm_efficiency_bf16_rows_vary.n > 0)
    curve = &cl->gemm_efficiency_bf16_rows_vary;
  else if (dtype == PLAN_DTYPE_BF16 && cl->gemm_efficiency_bf16.n > 0)
    curve = &cl->gemm_efficiency_bf16;
  else if (dtype == PLAN_DTYPE_FP32 && rows_vary && cl->gemm_efficiency_rows_vary.n > 0)
    curve = &cl->gemm_efficiency_rows_vary;
  double eff = plan_curve_eval(curve, flops);
  double compute = flops / (plan_peak_flops(cl, dtype) * eff);
  double bytes = (m * k + k * n + m * n) * plan_dtype_bytes(dtype);
  double memory = bytes / (cl->memory_bandwidth * cl->memory_efficiency);
  return fmax(fmax(compute, memory), cl->kernel_floor);
}

double plan_gemm_time(const ClusterSpec *cl, PlanDtype dtype, double m, double n, double k) {
  return gemm_time(cl, dtype, m, n, k, 0);
}

double plan_gemm_time_rows_vary(const ClusterSpec *cl, PlanDtype dtype, double m, double n, double k) {
  return gemm_time(cl, dtype, m, n, k, 1);
}

double plan_attention_time(const ClusterSpec *cl, PlanDtype dtype, double flops, double bytes, double query_tokens,
                           int backward) {
  if (!(flops > 0)) return 0.0;
  double eff = backward ? cl->attention_bwd_efficiency : cl->attention_fwd_efficiency;
  if (dtype == PLAN_DTYPE_BF16 && cl->attention_bf16_fwd_efficiency > 0 && cl->attention_bf16_bwd_efficiency > 0)
    eff = backward ? cl->attention_bf16_bwd_efficiency : cl->attention_bf16_fwd_efficiency;
  if (query_tokens > 0 && cl->attention_ref_tokens > 0 && query_tokens < cl->attention_ref_tokens)
    eff *= pow(query_tokens / cl->attention_ref_tokens, cl->attention_length_exponent);
  double compute = flops / (plan_peak_flops(cl, dtype) * eff);
  double memory = bytes / (cl->memory_bandwidth * cl->memory_efficiency);
  return fmax(fmax(compute, memory), cl->kernel_floor);
}

double plan_ring_attention_time(const ClusterSpec *cl, PlanDtype dtype, double flops, double bytes,
                                double chunk_tokens, int backward, double causal_time) {
  double eff = backward ? cl->attention_ring_bwd_efficiency : cl->attention_ring_fwd_efficiency;
  if (!(eff > 0) || !(flops > 0)) return causal_time;
  if (chunk_tokens > 0 && cl->attention_ring_query_tokens > 0)
    eff = fmin(1.0, eff * pow(chunk_tokens / cl->attention_ring_query_tokens, cl->attention_length_exponent));
  double compute = flops / (plan_peak_flops(cl, dtype) * eff);
  double memory = bytes / (cl->memory_bandwidth * cl->memory_efficiency);
  return fmax(fmax(compute, memory), cl->kernel_floor);
}

static const char *const COMPONENT_NAMES[PLAN_NUM_COMPONENTS] = {
    "attention GEMM", "attention core", "MLP GEMM",       "expert GEMM",   "routing/permute", "elementwise",
    "embedding",      "LM head + loss", "recompute",      "TP comm",       "CP comm",         "EP all-to-all",
    "ETP comm",       "PP send/recv",   "DP grad reduce", "optimizer",     "bubble/idle",
};

const char *plan_component_name(PlanComponent c) {
  return (unsigned)c < PLAN_NUM_COMPONENTS ? COMPONENT_NAMES[c] : "?";
}

int plan_component_is_comm(PlanComponent c) {
  return c == PLAN_COMP_TP_COMM || c == PLAN_COMP_CP_COMM || c == PLAN_COMP_EP_COMM || c == PLAN_COMP_ETP_COMM ||
         c == PLAN_COMP_PP_COMM || c == PLAN_COMP_DP_COMM;
}

double plan_breakdown_total(const PlanBreakdown *b) {
  double t = 0;
  for (int i = 0; i < PLAN_NUM_COMPONENTS; i++) t += b->t[i];
  return t;
}

void plan_breakdown_add(PlanBreakdown *dst, const PlanBreakdown *src, double scale) {
  for (int i = 0; i < PLAN_NUM_COMPONENTS; i++) dst->t[i] += scale * src->t[i];
}

int plan_group_topology_cached(PlanTopoCache *cache, const ClusterSpec *cl, const PlanConfig *cfg, PlanGroupKind kind,
                               PlanGroupTopo *out) {
  if (!cache) return plan_group_topology(cl, cfg, kind, out);
  /* Shape (size, stride) and world fix the placement: look it up first. */
  PlanGroupTopo probe;
  int rc = 0, world = plan_config_world(cfg), size, stride;
  plan_group_shape(cfg, kind, &size, &stride);
  for (int i = 0; i < cache->count; i++)
    if (cache->entry[i].size == size && cache->entry[i].stride == stride && cache->entry[i].world == world) {
      *out = cache->entry[i].topo;
      return 0;
    }
  rc = plan_group_topology(cl, cfg, kind, &probe);
  if (rc) return rc;
  *out = probe;
  int slot = cache->count < (int)(sizeof cache->entry / sizeof cache->entry[0]) ? cache->count++
                                                                                 : (int)(size * 31u + stride) % 512;
  cache->entry[slot].size = size;
  cache->entry[slot].stride = stride;
  cache->entry[slot].world = world;
  cache->entry[slot].topo = probe;
  return 0;
}
