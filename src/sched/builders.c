/* The compute orders of the named schedules (no pipelining, GPipe, 1F1B,
 * interleaved 1F1B) and their validation. Everything that is not the order of
 * computes (sends, receives, reductions, the optimizer step) is added by
 * sched_lower in lower.c, identically for every schedule. */
#include "sched/builders.h"

#include <stdlib.h>
#include <string.h>

/* Keeps programs (about six actions per micro-batch and stage) far from int
 * overflow and from sizes no pipeline uses. */
#define SCHED_MAX_MICROBATCH_STAGES 4000000L

/* Warm-up depths of the interleaved order. Every rank runs the same
 * sequence of forwards F_0, F_1, ... and of backwards B_0, B_1, ...
 * (interleaved_item below); with depth w (at most m v - 1 counts: one
 * short of all forwards is the same order as all) F_k runs before B_j
 * exactly when k <= w + j. Following the dependencies around one
 * micro-batch's path gives three conditions, together enough for the order
 * to run (then sched_lower places the sends so the program cannot
 * deadlock):
 *  - the last rank's backward of chunk v-1 needs that micro-batch's forward
 *    through chunk v-1, (v-1)p forwards later: w[p-1] >= (v-1)p;
 *  - as in 1F1B, B_j on rank r waits for B_j on rank r+1, which runs after
 *    F_{w[r+1]+j} there, which needs rank r's: w[r] >= w[r+1];
 *  - rank 0's backward of chunk c feeds the last rank's of chunk c-1 p
 *    backwards later, and rank 0's forwards of chunk c need the last
 *    rank's of chunk c-1 p forwards earlier: once rank 0 runs more than 2p
 *    forwards ahead of the last rank the two wait for each other:
 *    w[0] <= w[p-1] + 2p.
 * The third is a bound on every chain that crosses from the last rank to
 * rank 0 and back; with more than 2p micro-batches a few deeper rank-0
 * depths whose waits fall between groups would still run, and are refused
 * too. Megatron-Core's depths 2(p-r-1) + (v-1)p meet all three. */
static int interleaved_warmup_validate(const SchedConfig *c, Error *err) {
  int p = c->pp, v = c->vpp, all = c->microbatches * v - 1, eff[SCHED_MAX_WARMUP_RANKS];
  for (int r = 0; r < p; r++) eff[r] = c->warmup[r] < all ? c->warmup[r] : all;
  int low = (v - 1) * p;
  if (eff[p - 1] < low)
    return error_set(err, ERR_CONFIG,
                     "schedule interleaved: warm-up depth of rank %d (the last) is %d, below the bound (vpp-1)*pp = %d: "
                     "its first backward needs the forward through the last chunk, %d forwards in",
                     p - 1, c->warmup[p - 1], low, low + 1);
  for (int r = 0; r + 1 < p; r++)
    if (eff[r + 1] > eff[r])
      return error_set(err, ERR_CONFIG,
                       "schedule interleaved: warm-up depth of rank %d is %d, below the bound %d (rank %d's depth): "
                       "depths must not grow along the pipeline",
                       r, c->warmup[r], eff[r + 1], r + 1);
  if (eff[0] > eff[p - 1] + 2 * p)
    return error_set(err, ERR_CONFIG,
                     "schedule interleaved: warm-up depth of rank 0 is %d, above the bound %d (rank %d's depth %d + "
                     "2*pp): rank 0 would wait for the last rank's forwards while the last waits for its backwards",
                     c->warmup[0], eff[p - 1] + 2 * p, p - 1, eff[p - 1]);
  return ERR_OK;
}

int sched_config_validate(const SchedConfig *c, Error *err) {
  const char *name = sched_schedule_name(c->schedule);
  if (c->pp < 1) return error_set(err, ERR_CONFIG, "schedule: pp (pipeline ranks) must be >= 1, got %d", c->pp);
  if (c->vpp < 1) return error_set(err, ERR_CONFIG, "schedule: vpp (chunks per rank) must be >= 1, got %d", c->vpp);
  if (c->microbatches < 1)
    return error_set(err, ERR_CONFIG, "schedule: microbatches must be >= 1, got %d", c->microbatches);
  if ((long)c->pp * c->vpp * c->microbatches > SCHED_MAX_MICROBATCH_STAGES)
    return error_set(err, ERR_CONFIG, "schedule: pp*vpp*microbatches = %ld is larger than the supported %ld",
                     (long)c->pp * c->vpp * c->microbatches, SCHED_MAX_MICROBATCH_STAGES);
  if (c->param_groups < 0 || c->param_groups > SCHED_MAX_PARAM_GROUPS)
    return error_set(err, ERR_CONFIG, "schedule: param_groups must be in 0..%d (0 or 1: one group), got %d",
                     SCHED_MAX_PARAM_GROUPS, c->param_groups);
  if (c->order_fwd_cost < 0 || c->order_bwd_cost < 0)
    return error_set(err, ERR_CONFIG, "schedule: order costs must be >= 0 (0 selects the defaults 1 and 2)");
  if (c->warmup_set) {
    if (c->schedule != SCHED_SCHEDULE_1F1B && c->schedule != SCHED_SCHEDULE_ZB_H1 &&
        c->schedule != SCHED_SCHEDULE_INTERLEAVED)
      return error_set(err, ERR_CONFIG, "schedule %s has no warm-up depth to set (only 1f1b, zb-h1 and interleaved do)",
                       name);
    if (c->warmup_set != c->pp)
      return error_set(err, ERR_CONFIG, "schedule: %d warm-up depths given for pp %d (one per pipeline rank)",
                       c->warmup_set, c->pp);
    if (c->pp > SCHED_MAX_WARMUP_RANKS)
      return error_set(err, ERR_CONFIG, "schedule: warm-up depths are supported for up to %d pipeline ranks, pp is %d",
                       SCHED_MAX_WARMUP_RANKS, c->pp);
    for (int r = 0; r < c->pp; r++)
      if (c->warmup[r] < 0)
        return error_set(err, ERR_CONFIG, "schedule: warm-up depth of rank %d must be >= 0, got %d", r, c->warmup[r]);
    if (c->schedule != SCHED_SCHEDULE_INTERLEAVED) { /* interleaved: checked below, once its shape is */
      /* Rank r's first backward waits for rank r+1's, which runs after
       * warmup[r+1] + 1 of rank r's forwards: more than rank r sends first
       * would deadlock. */
      for (int r = 0; r + 1 < c->pp; r++) {
        int here = c->warmup[r] < c->microbatches ? c->warmup[r] : c->microbatches;
        int next = c->warmup[r + 1] < c->microbatches ? c->warmup[r + 1] : c->microbatches;
        if (next > here)
          return error_set(err, ERR_CONFIG,
                           "schedule: warm-up depths must not grow along the pipeline (rank %d runs %d forwards before "
                           "its first backward, rank %d %d, more than it receives before it waits)",
                           r, here, r + 1, next);
      }
    }
  }
  switch (c->schedule) {
    case SCHED_SCHEDULE_NONE:
      if (c->pp != 1 || c->vpp != 1)
        return error_set(err, ERR_CONFIG,
                         "schedule none (gradient accumulation on one stage) needs pp = 1 and vpp = 1, got pp %d vpp %d; "
                         "use 1f1b, gpipe or interleaved for a pipeline",
                         c->pp, c->vpp);
      return ERR_OK;
    case SCHED_SCHEDULE_GPIPE:
    case SCHED_SCHEDULE_1F1B:
    case SCHED_SCHEDULE_ZB_H1:
      if (c->vpp != 1)
        return error_set(err, ERR_CONFIG, "schedule %s has one chunk per rank: vpp must be 1 (got %d); use interleaved for vpp > 1",
                         name, c->vpp);
      return ERR_OK;
    case SCHED_SCHEDULE_INTERLEAVED:
      if (c->vpp < 2)
        return error_set(err, ERR_CONFIG, "schedule interleaved needs vpp >= 2 chunks per rank (got %d); use 1f1b for vpp = 1",
                         c->vpp);
      if (c->microbatches % c->pp) {
        int below = c->microbatches / c->pp * c->pp, above = below + c->pp;
        if (below == 0)
          return error_set(err, ERR_CONFIG,
                           "schedule interleaved needs microbatches to be a multiple of pp: %d is not a multiple of %d (use %d)",
                           c->microbatches, c->pp, above);
        return error_set(err, ERR_CONFIG,
                         "schedule interleaved needs microbatches to be a multiple of pp: %d is not a multiple of %d "
                         "(use %d or %d)",
                         c->microbatches, c->pp, below, above);
      }
      return c->warmup_set ? interleaved_warmup_validate(c, err) : ERR_OK;
    default:
      return error_set(err, ERR_CONFIG, "schedule: '%s' cannot be built from a configuration (none, gpipe, 1f1b, zb-h1 or interleaved)",
                       name);
  }
}

int sched_warmup_forwards(const SchedConfig *c, int rank) {
  if (sched_config_validate(c, NULL) || rank < 0 || rank >= c->pp) return -1;
  int p = c->pp, v = c->vpp, m = c->microbatches, w;
  switch (c->schedule) {
    case SCHED_SCHEDULE_NONE: return 0;
    case SCHED_SCHEDULE_GPIPE: return m;
    case SCHED_SCHEDULE_1F1B:
    case SCHED_SCHEDULE_ZB_H1:
      w = c->warmup_set ? c->warmup[rank] : p - rank - 1;
      return w < m ? w : m;
    case SCHED_SCHEDULE_INTERLEAVED:
      w = c->warmup_set ? c->warmup[rank] : 2 * (p - rank - 1) + (v - 1) * p;
      return w < m * v ? w : m * v;
    default: return -1;
  }
}

void sched_compute_order_free(SchedComputeOrder *order) {
  if (!order) return;
  if (order->items)
    for (int r = 0; r < order->num_ranks; r++) free(order->items[r]);
  free(order->items);
  free(order->counts);
  memset(order, 0, sizeof *order);
}

static void put(SchedComputeOrder *o, int rank, SchedActionKind kind, int mb, int chunk) {
  SchedComputeItem *it = &o->items[rank][o->counts[rank]++];
  it->kind = kind;
  it->microbatch = mb;
  it->chunk = chunk;
}

/* Megatron-Core's interleaved order: micro-batches go in groups of pp; a
 * group runs through chunk 0, then chunk 1, ... forward, and backward visits
 * the chunks in reverse. k is the index of the forward (or backward) pass on
 * this rank, 0 <= k < m * v. */
static void interleaved_item(int p, int v, int k, int forward, int *mb, int *chunk) {
  int group = k / (p * v), within = k % (p * v);
  int c = within / p;
  *mb = group * p + within % p;
  *chunk = forward ? c : v - 1 - c;
}

int sched_compute_order(const SchedConfig *c, SchedComputeOrder *o, Error *err) {
  memset(o, 0, sizeof *o);
  int rc = sched_config_validate(c, err);
  if (rc) return rc;
  if (c->schedule == SCHED_SCHEDULE_ZB_H1) return sched_zb_h1_order(c, o, err);
  int p = c->pp, v = c->vpp, m = c->microbatches;
  o->num_ranks = p;
  o->items = calloc((size_t)p, sizeof *o->items);
  o->counts = calloc((size_t)p, sizeof *o->counts);
  if (!o->items || !o->counts) goto nomem;
  for (int r = 0; r < p; r++) {
    o->items[r] = malloc((size_t)2 * m * v * sizeof *o->items[r]);
    if (!o->items[r]) goto nomem;
    int warm = sched_warmup_forwards(c, r);
    switch (c->schedule) {
      case SCHED_SCHEDULE_NONE:
        for (int i = 0; i < m; i++) {
          put(o, r, SCHED_FWD, i, 0);
          put(o, r, SCHED_BWD, i, 0);
        }
        break;
      case SCHED_SCHEDULE_GPIPE:
        for (int i = 0; i < m; i++) put(o, r, SCHED_FWD, i, 0);
        for (int i = 0; i < m; i++) put(o, r, SCHED_BWD, i, 0);
        break;
      case SCHED_SCHEDULE_1F1B: {
        int steady = m - warm;
        for (int i = 0; i < warm; i++) put(o, r, SCHED_FWD, i, 0);
        for (int i = 0; i < steady; i++) {
          put(o, r, SCHED_FWD, warm + i, 0);
          put(o, r, SCHED_BWD, i, 0);
        }
        for (int i = steady; i < m; i++) put(o, r, SCHED_BWD, i, 0);
        break;
      }
      case SCHED_SCHEDULE_INTERLEAVED: {
        int total = m * v, steady = total - warm, mb, ch;
        for (int k = 0; k < warm; k++) {
          interleaved_item(p, v, k, 1, &mb, &ch);
          put(o, r, SCHED_FWD, mb, ch);
        }
        for (int k = 0; k < steady; k++) {
          interleaved_item(p, v, warm + k, 1, &mb, &ch);
          put(o, r, SCHED_FWD, mb, ch);
          interleaved_item(p, v, k, 0, &mb, &ch);
          put(o, r, SCHED_BWD, mb, ch);
        }
        for (int k = steady; k < total; k++) {
          interleaved_item(p, v, k, 0, &mb, &ch);
          put(o, r, SCHED_BWD, mb, ch);
        }
        break;
      }
      default: break; /* rejected by validation */
    }
  }
  return ERR_OK;
nomem:
  sched_compute_order_free(o);
  return error_set(err, ERR_NOMEM, "schedule: out of memory building the compute order");
}

int sched_build(const SchedConfig *config, SchedProgram **out, Error *err) {
  *out = NULL;
  SchedComputeOrder order;
  int rc = sched_compute_order(config, &order, err);
  if (rc) return rc;
  SchedConfig one = *config;
  one.param_groups = 0;
  one.split_backward = config->schedule == SCHED_SCHEDULE_ZB_H1 || config->split_backward;
  for (int g = 0; g < SCHED_MAX_PARAM_GROUPS; g++) one.phase_repeats[g] = 0;
  SchedProgram *prog = NULL;
  rc = sched_lower(&one, &order, &prog, err);
  sched_compute_order_free(&order);
  if (rc || config->param_groups <= 1) {
    *out = prog;
    return rc;
  }
  rc = sched_program_phases(prog, config, out, err);
  sched_program_free(prog);
  return rc;
}
