/* Helpers shared by the planner tests: paths to the shipped configs (found
 * from this file's location, so tests run from any directory), loading
 * them, and a cluster on which communication and memory traffic are free. */
#ifndef FIVEFOLD_TESTS_PLAN_UTIL_H
#define FIVEFOLD_TESTS_PLAN_UTIL_H

#include <stdio.h>
#include <string.h>

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/parallel.h"

/* The repository root: __FILE__ is tests/plan/plan_test_util.h. */
static inline const char *plan_test_root(void) {
  static char root[4096];
  if (!root[0]) {
    snprintf(root, sizeof root, "%s", __FILE__);
    char *cut = strstr(root, "/tests/plan/");
    if (cut) *cut = '\0';
    else snprintf(root, sizeof root, ".");
  }
  return root;
}

static inline void plan_test_path(char *buf, size_t size, const char *rel) {
  snprintf(buf, size, "%s/%s", plan_test_root(), rel);
}

static inline int plan_test_load_model(ModelConfig *m, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/configs/models/%s.json", plan_test_root(), name);
  Error err = {0, ""};
  int rc = model_config_load(m, path, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  return rc;
}

static inline int plan_test_load_cluster(ClusterSpec *c, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/configs/clusters/%s.json", plan_test_root(), name);
  Error err = {0, ""};
  int rc = cluster_spec_load(c, path, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  return rc;
}

/* The 4-layer MoE of bench/plan_accuracy.sh (hidden 256, 4 heads, 4
 * experts top-2 of width 512, vocabulary 512): small enough that its
 * gradient reductions and GEMMs are the sizes a CPU run sees. */
static inline ModelConfig plan_test_tiny_moe(void) {
  ModelConfig m;
  model_config_defaults(&m);
  m.vocab_size = 512;
  m.hidden_size = 256;
  m.num_layers = 4;
  m.num_heads = m.num_kv_heads = 4;
  m.intermediate_size = m.moe_intermediate_size = 512;
  m.num_experts = 4;
  m.top_k = 2;
  model_config_set_moe_layer_freq(&m, 1);
  return m;
}

/* A cluster where only GEMMs and attention take time: links and memory are
 * effectively infinitely fast, latencies and the kernel floor are zero, and
 * GEMMs run at a flat half of peak. */
static inline void plan_test_free_cluster(ClusterSpec *c, int nodes, int per_node) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "free");
  snprintf(c->origin, sizeof c->origin, "<test>");
  c->nodes = nodes;
  c->devices_per_node = per_node;
  for (int d = 0; d < PLAN_NUM_DTYPES; d++) c->peak_flops[d] = 1e15;
  c->memory_capacity = 1e15;
  c->memory_bandwidth = 1e30;
  c->memory_efficiency = 1.0;
  for (int l = 0; l < PLAN_NUM_LEVELS; l++) {
    c->link[l].bandwidth = 1e30;
    c->link[l].latency = 0;
    c->link_efficiency[l] = 1.0;
  }
  c->gemm_efficiency.n = 1;
  c->gemm_efficiency.x[0] = 1.0;
  c->gemm_efficiency.y[0] = 0.5;
  c->attention_fwd_efficiency = c->attention_bwd_efficiency = 0.5;
  c->kernel_floor = 0;
}

/* Options with every overhead the runtime adds switched off. */
static inline void plan_test_free_options(PlanOptions *o) {
  plan_options_default(o);
  o->send_overhead = 0;
  o->dropless_sync = 0;
  o->moe_imbalance = 1.0;
}

#endif
