/* `fivefold calibrate --from-trace`: refits the local cost-model parameters
 * from a Chrome trace written by fivefold's tracer (src/trace/).
 *
 *  - GEMM operation events with their shape -> the efficiency curve;
 *  - collective operation events with bytes and group -> alpha-beta of
 *    their kind (the group size comes from the trace's grid sizes);
 *  - without operation events, the per-action times: the median FWD and BWD
 *    of each stage against what the cost model predicts for the run the
 *    trace describes (its otherData model and training config) give one
 *    compute scale, applied to the GEMM curve and the attention
 *    efficiencies (compute-bound reading: bandwidth terms are kept).
 * Whatever the trace cannot support is kept from the input spec and named
 * on the log. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_calibrate.h"
#include "plan/calibrate_fit.h"
#include "plan/simulate.h"
#include "trace/chrome_writer.h"
#include "trace/run.h"

typedef struct DVec {
  double *v;
  int n, cap;
} DVec;

static int dvec_push(DVec *d, double x) {
  if (d->n == d->cap) {
    int cap = d->cap ? 2 * d->cap : 64;
    double *v = realloc(d->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    d->v = v, d->cap = cap;
  }
  d->v[d->n++] = x;
  return 0;
}

static int op_collective(int op, PlanCollective *kind) {
  switch (op) {
    case TRACE_OP_ALLREDUCE: *kind = PLAN_COLL_ALL_REDUCE; return 1;
    case TRACE_OP_REDUCE_SCATTER:
    case TRACE_OP_MOE_REDUCE_SCATTER: *kind = PLAN_COLL_REDUCE_SCATTER; return 1;
    case TRACE_OP_ALLGATHER:
    case TRACE_OP_MOE_ALLGATHER: *kind = PLAN_COLL_ALL_GATHER; return 1;
    case TRACE_OP_ALLTOALL:
    case TRACE_OP_MOE_A2A:
    case TRACE_OP_MOE_A2A_COMBINE: *kind = PLAN_COLL_ALL_TO_ALL; return 1;
    case TRACE_OP_SEND: *kind = PLAN_COLL_P2P; return 1;
    default: return 0;
  }
}

static int group_size(const TraceGridSizes *g, int group) {
  switch (group) {
    case TRACE_GROUP_TP: return g->tp;
    case TRACE_GROUP_CP: return g->cp;
    case TRACE_GROUP_DP: return g->dp;
    case TRACE_GROUP_PP: return g->pp;
    case TRACE_GROUP_DP_CP: return g->dp * g->cp;
    case TRACE_GROUP_TP_CP: return g->tp * g->cp;
    case TRACE_GROUP_TP_PP: return g->tp * g->pp;
    case TRACE_GROUP_ETP: return g->etp;
    case TRACE_GROUP_EP: return g->ep;
    case TRACE_GROUP_EDP: return g->edp;
    case TRACE_GROUP_EP_ETP: return g->ep * g->etp;
    case TRACE_GROUP_ETP_EP_PP: return g->etp * g->ep * g->pp;
    case TRACE_GROUP_WORLD: return g->world;
    default: return 0;
  }
}

static const cJSON *find_path(const cJSON *o, const char *a, const char *b) {
  const cJSON *x = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, a) : NULL;
  return b && x ? cJSON_GetObjectItemCaseSensitive(x, b) : x;
}

static int json_int(const cJSON *v, int fallback) {
  return cJSON_IsNumber(v) && v->valuedouble >= 1 ? (int)v->valuedouble : fallback;
}

/* Predicted forward + backward of every stage for the traced run, summed
 * over stages; 0 when the trace does not say enough to price it. */
static double predicted_compute(const TraceRun *run, const ClusterSpec *spec, FILE *log) {
  const cJSON *od = run->other_data;
  const cJSON *mj = find_path(od, "model", NULL);
  if (!cJSON_IsObject(mj)) mj = find_path(od, "config", "model");
  const cJSON *cfgj = find_path(od, "config", NULL);
  int mbs = json_int(find_path(cfgj, "training", "micro_batch_size"), json_int(find_path(cfgj, "micro_batch_size", NULL), 0));
  int seq = json_int(find_path(cfgj, "training", "seq_len"), json_int(find_path(cfgj, "seq_len", NULL), 0));
  if (!cJSON_IsObject(mj) || !mbs || !seq || !run->program) {
    if (log)
      fprintf(log, "  per-action times not refitted: the trace's otherData lacks the model config, the micro-batch "
              "size or the sequence length\n");
    return 0;
  }
  ModelConfig model;
  Error err = {0, ""};
  if (model_config_from_json(&model, mj, "trace otherData.model", &err)) {
    if (log) fprintf(log, "  per-action times not refitted: %s\n", err.msg);
    return 0;
  }
  const SchedConfig *sc = &run->program->config;
  const TraceGridSizes *g = &run->grid;
  PlanConfig cfg;
  int dp = g->dp > 0 ? g->dp : 1, m = sc->microbatches > 0 ? sc->microbatches : 1;
  plan_config_init(&cfg, seq, mbs * m * dp, mbs);
  cfg.par.tp = g->tp > 0 ? g->tp : 1;
  cfg.par.cp = g->cp > 0 ? g->cp : 1;
  cfg.par.dp = dp;
  cfg.par.pp = sc->pp > 0 ? sc->pp : 1;
  cfg.par.vpp = sc->vpp > 0 ? sc->vpp : 1;
  cfg.par.ep = g->ep > 0 ? g->ep : 1;
  cfg.par.etp = g->etp > 0 ? g->etp : 1;
  cfg.dtype = PLAN_DTYPE_FP32;
  if (sc->schedule == SCHED_SCHEDULE_GPIPE) cfg.schedule = SCHED_SCHEDULE_GPIPE;
  if (sc->schedule == SCHED_SCHEDULE_ZB_H1 || sc->warmup_set) { /* the traced order, warm-up depths included */
    cfg.schedule = sc->schedule;
    cfg.schedule_given = 1;
    cfg.warmup_set = sc->warmup_set;
    memcpy(cfg.warmup, sc->warmup, sizeof cfg.warmup);
  }
  /* The order costs the traced program was built with: the program priced
   * is then the one that ran, action for action (0: the defaults). */
  cfg.order_given = 1;
  cfg.order_fwd_cost = sc->order_fwd_cost;
  cfg.order_bwd_cost = sc->order_bwd_cost;
  int gpus = cfg.par.tp * cfg.par.cp * dp * cfg.par.pp;
  ClusterSpec big = *spec;
  big.link_devices = 0, big.link_bandwidth = big.link_latency = NULL;
  if (cluster_spec_total_devices(&big) < gpus) big.devices_per_node = gpus, big.nodes = 1;
  PlanOptions opt;
  plan_options_default(&opt);
  PlanResult r;
  if (plan_config_finish(&cfg, &model, &big, gpus, &err) || plan_simulate(&model, &big, &opt, &cfg, NULL, NULL, &r, &err)) {
    if (log) fprintf(log, "  per-action times not refitted: cannot price the traced run: %s\n", err.msg);
    return 0;
  }
  double total = 0;
  for (int s = 0; s < r.num_stages; s++) total += r.stage[s].fwd_total + r.stage[s].bwd_total;
  plan_result_free(&r);
  return total;
}

int calibrate_from_trace(const char *path, const ClusterSpec *base, ClusterSpec *out, FILE *log, Error *err) {
  TraceRun run;
  memset(&run, 0, sizeof run);
  int rc = trace_chrome_read(path, &run, err);
  if (rc) return rc;
  *out = *base;
  out->link_devices = 0, out->link_bandwidth = out->link_latency = NULL; /* dropped: refits are per level */
  int ns = 0, cap = 0;
  CalibGemmSample *gs = NULL;
  DVec bytes[PLAN_NUM_COLLECTIVES] = {{0}}, secs[PLAN_NUM_COLLECTIVES] = {{0}};
  int size_of[PLAN_NUM_COLLECTIVES] = {0};
  int num_stages = run.program ? run.program->config.pp * (run.program->config.vpp > 0 ? run.program->config.vpp : 1) : 0;
  DVec *stage_fwd = num_stages ? calloc((size_t)num_stages, sizeof(DVec)) : NULL;
  DVec *stage_bwd = num_stages ? calloc((size_t)num_stages, sizeof(DVec)) : NULL;
  /* A split backward (zb-h1): its weight-gradient halves, added to the B median. */
  DVec *stage_w = num_stages ? calloc((size_t)num_stages, sizeof(DVec)) : NULL;
  int multi_host = 0;
  for (int r = 0; r < run.num_ranks; r++) {
    const TraceRankBuffer *rb = &run.ranks[r];
    if (r > 0 && strcmp(rb->info.host, run.ranks[0].info.host)) multi_host = 1;
    for (size_t i = 0; i < rb->count; i++) {
      const TraceEvent *e = &rb->events[i];
      if (!(e->end > e->begin)) continue;
      double dt = (double)(e->end - e->begin) * 1e-9;
      PlanCollective kind;
      if (e->type == TRACE_EVENT_OP && e->id == TRACE_OP_GEMM && e->m > 0 && e->n > 0 && e->k > 0) {
        if (ns == cap) {
          cap = cap ? 2 * cap : 256;
          CalibGemmSample *g2 = realloc(gs, (size_t)cap * sizeof *gs);
          if (!g2) continue;
          gs = g2;
        }
        gs[ns++] = (CalibGemmSample){e->m, e->n, e->k, dt};
      } else if (e->type == TRACE_EVENT_OP && op_collective(e->id, &kind) && e->bytes > 0) {
        int n = kind == PLAN_COLL_P2P ? 2 : group_size(&run.grid, e->group);
        if (n < 2) continue;
        if (!size_of[kind]) size_of[kind] = n;
        if (n != size_of[kind]) continue; /* one group size per kind: the first seen */
        dvec_push(&bytes[kind], (double)e->bytes);
        dvec_push(&secs[kind], dt);
      } else if (e->type == TRACE_EVENT_ACTION && run.program) {
        const SchedAction *a = sched_program_action(run.program, e->id);
        if (!a || a->stage < 0 || a->stage >= num_stages || !stage_fwd || !stage_bwd || !stage_w) continue;
        if (a->kind == SCHED_BWD_WEIGHT) dvec_push(&stage_w[a->stage], dt);
        if (a->kind == SCHED_FWD) dvec_push(&stage_fwd[a->stage], dt);
        if (a->kind == SCHED_BWD) dvec_push(&stage_bwd[a->stage], dt);
      }
    }
  }
  int level = multi_host ? PLAN_LEVEL_INTER : PLAN_LEVEL_INTRA;
  if (log) fprintf(log, "refitting from %s (%d rank(s))\n", path, run.num_ranks);
  int refit_gemm = 0;
  if (ns > 0) {
    double peak = base->peak_flops[PLAN_DTYPE_FP32] > 0 ? base->peak_flops[PLAN_DTYPE_FP32] : base->peak_flops[0];
    PlanCurve curve;
    Error ferr = {0, ""};
    if (calib_fit_gemm_curve(gs, ns, peak, 0.5, &curve, &ferr) == 0) {
      out->gemm_efficiency = curve;
      refit_gemm = 1;
      if (log) fprintf(log, "  GEMM efficiency refitted from %d GEMM events (%d curve points)\n", ns, curve.n);
    } else if (log) {
      fprintf(log, "  GEMM efficiency not refitted: %s\n", ferr.msg);
    }
  }
  for (int k = 0; k < PLAN_NUM_COLLECTIVES; k++) {
    const char *name = plan_collective_name((PlanCollective)k);
    if (bytes[k].n == 0) {
      if (log) fprintf(log, "  %s not refitted: no %s events with bytes in the trace\n", name, name);
      continue;
    }
    PlanLink l;
    Error ferr = {0, ""};
    if (calib_fit_collective((PlanCollective)k, size_of[k], bytes[k].v, secs[k].v, bytes[k].n, &l, &ferr)) {
      if (log) fprintf(log, "  %s not refitted: %s\n", name, ferr.msg);
      continue;
    }
    out->collective[k][level] = l;
    out->has_collective[k][level] = 1;
    if (log)
      fprintf(log, "  %s refitted from %d events on groups of %d: %.2f us, %.2f GB/s\n", name, bytes[k].n, size_of[k],
              l.latency * 1e6, l.bandwidth / 1e9);
  }
  if (!refit_gemm) {
    /* Per-action times: one compute scale from the stages' medians. */
    double measured = 0;
    int have = num_stages > 0;
    for (int s = 0; s < num_stages && have; s++) {
      have = stage_fwd[s].n > 0 && stage_bwd[s].n > 0;
      if (have) measured += calib_median(stage_fwd[s].v, stage_fwd[s].n) + calib_median(stage_bwd[s].v, stage_bwd[s].n);
      if (have && stage_w[s].n > 0) measured += calib_median(stage_w[s].v, stage_w[s].n);
    }
    if (!have) {
      if (log) fprintf(log, "  GEMM efficiency not refitted: no GEMM events and no FWD/BWD of every stage\n");
    } else {
      if (log) fprintf(log, "  no GEMM events: fitting the per-action times (median FWD + BWD over %d stage(s) = %.2f ms)\n",
                       num_stages, measured * 1e3);
      double predicted = predicted_compute(&run, base, log);
      if (predicted > 0) {
        double scale = predicted / measured; /* > 1: the machine is faster than the spec says */
        for (int i = 0; i < out->gemm_efficiency.n; i++)
          out->gemm_efficiency.y[i] = fmin(1.0, fmax(1e-6, out->gemm_efficiency.y[i] * scale));
        out->attention_fwd_efficiency = fmin(1.0, out->attention_fwd_efficiency * scale);
        out->attention_bwd_efficiency = fmin(1.0, out->attention_bwd_efficiency * scale);
        out->attention_ring_fwd_efficiency = fmin(1.0, out->attention_ring_fwd_efficiency * scale);
        out->attention_ring_bwd_efficiency = fmin(1.0, out->attention_ring_bwd_efficiency * scale);
        if (log)
          fprintf(log, "  predicted %.2f ms from the input spec: GEMM and attention efficiencies scaled by %.3f "
                  "(bandwidth-bound terms and the curve's shape kept)\n", predicted * 1e3, scale);
      }
    }
  }
  free(gs);
  for (int k = 0; k < PLAN_NUM_COLLECTIVES; k++) free(bytes[k].v), free(secs[k].v);
  for (int s = 0; s < num_stages && stage_fwd && stage_bwd && stage_w; s++)
    free(stage_fwd[s].v), free(stage_bwd[s].v), free(stage_w[s].v);
  free(stage_w);
  free(stage_fwd);
  free(stage_bwd);
  trace_run_free(&run);
  return cluster_spec_validate(out, err);
}
