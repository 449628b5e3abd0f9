/* The zero-bubble H1 compute order (after Qi et al., "Zero Bubble Pipeline
 * Parallelism", ZB-H1) and the in-flight count that bounds its memory.
 *
 * The order comes from a unit-cost run of the pipeline (F = B = W = 1 time
 * unit, transfers free), stepped one unit at a time: at each moment a free
 * rank takes, in this priority,
 *   1. the next backward (B, input gradient only) once its forward ran here
 *      and its output gradient arrived: the previous stage waits for it;
 *   2. the next forward once its input arrived, while fewer than warm-up + 1
 *      micro-batches have run forward without their W (1F1B's peak, so the
 *      order keeps 1F1B's activation memory);
 *   3. the oldest pending weight gradient (W), which nothing waits for
 *      except the optimizer: it fills time the rank would idle.
 * The run is an execution in which every dependency is met, so the order
 * cannot deadlock (sched_lower then places the transfers). With these
 * costs and m >= p the makespan is 3m + p - 1 units against 1F1B's
 * 3m + 3(p - 1): the cool-down bubble shrinks from F + B + W to F + B - W
 * per stage, ZB-H1's figure. */
#include <stdlib.h>
#include <string.h>

#include "sched/builders.h"

typedef struct ZbRank {
  int next_f, next_b;  /* next micro-batch to run forward / backward */
  int w_head, w_tail;  /* pending weight gradients: micro-batches [w_head, w_tail) */
  long busy_until;     /* the unit at which the running compute ends */
  int limit;           /* micro-batches allowed between F and W */
} ZbRank;

int sched_zb_h1_order(const SchedConfig *c, SchedComputeOrder *o, Error *err) {
  memset(o, 0, sizeof *o);
  int P = c->pp, M = c->microbatches;
  if (c->vpp != 1) return error_set(err, ERR_CONFIG, "schedule zb-h1 has one chunk per rank: vpp must be 1 (got %d)", c->vpp);
  ZbRank *rk = calloc((size_t)P, sizeof *rk);
  long *f_done = malloc((size_t)P * M * sizeof *f_done); /* unit at which F(r, mb) finished, -1 not yet */
  long *b_done = malloc((size_t)P * M * sizeof *b_done);
  o->num_ranks = P;
  o->items = calloc((size_t)P, sizeof *o->items);
  o->counts = calloc((size_t)P, sizeof *o->counts);
  int ok = rk && f_done && b_done && o->items && o->counts;
  for (int r = 0; ok && r < P; r++) ok = (o->items[r] = malloc((size_t)3 * M * sizeof *o->items[r])) != NULL;
  if (!ok) {
    free(rk);
    free(f_done);
    free(b_done);
    sched_compute_order_free(o);
    return error_set(err, ERR_NOMEM, "schedule zb-h1: out of memory building the order");
  }
  for (long i = 0; i < (long)P * M; i++) f_done[i] = b_done[i] = -1;
  for (int r = 0; r < P; r++) rk[r].limit = sched_warmup_forwards(c, r) + 1;
#define F_DONE(r, mb) f_done[(size_t)(r) * M + (mb)]
#define B_DONE(r, mb) b_done[(size_t)(r) * M + (mb)]
  long remaining = 3L * P * M;
  for (long t = 0; remaining > 0; t++) {
    if (t > 6L * P * M + 16) {
      sched_compute_order_free(o);
      free(rk);
      free(f_done);
      free(b_done);
      return error_set(err, ERR_INTERNAL, "schedule zb-h1: the unit-cost run did not finish (pp %d, m %d)", P, M);
    }
    for (int r = 0; r < P; r++) {
      ZbRank *k = &rk[r];
      if (k->busy_until > t) continue;
      SchedComputeItem it = {SCHED_FWD, -1, 0};
      int b = k->next_b, f = k->next_f;
      int b_ready = b < M && F_DONE(r, b) >= 0 && F_DONE(r, b) <= t &&
                    (r == P - 1 || (B_DONE(r + 1, b) >= 0 && B_DONE(r + 1, b) <= t));
      int f_ready = f < M && f - k->w_head < k->limit && (r == 0 || (F_DONE(r - 1, f) >= 0 && F_DONE(r - 1, f) <= t));
      if (b_ready) {
        it.kind = SCHED_BWD;
        it.microbatch = b;
        B_DONE(r, b) = t + 1;
        k->next_b++;
        k->w_tail++;
      } else if (f_ready) {
        it.microbatch = f;
        F_DONE(r, f) = t + 1;
        k->next_f++;
      } else if (k->w_head < k->w_tail) {
        it.kind = SCHED_BWD_WEIGHT;
        it.microbatch = k->w_head++;
      } else {
        continue;
      }
      o->items[r][o->counts[r]++] = it;
      k->busy_until = t + 1;
      remaining--;
    }
  }
#undef F_DONE
#undef B_DONE
  free(rk);
  free(f_done);
  free(b_done);
  return ERR_OK;
}

int sched_rank_peak_in_flight(const SchedProgram *prog, int rank) {
  int n;
  const SchedAction *list = sched_program_rank_actions(prog, rank, &n);
  SchedActionKind ends = prog->config.split_backward ? SCHED_BWD_WEIGHT : SCHED_BWD;
  int live = 0, peak = 0;
  for (int i = 0; i < n; i++) {
    if (list[i].kind == SCHED_FWD && ++live > peak) peak = live;
    if (list[i].kind == ends) live--;
  }
  return peak;
}
