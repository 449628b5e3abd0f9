/* The experts' products timed as the runtime runs them, in the process's
 * precision (calibrate_experts.h).
 *
 * Why not the GEMM curve: calibrate's GEMM samples are the fastest of one
 * product repeated on the same operands, which stay in the core's cache
 * from one repetition to the next. In a run each expert's product reads
 * weights of its own that the other experts' products, and the other
 * layers', have pushed out since, and every call is a typical call rather
 * than the luckiest one: measured on the reference MoE's shapes, the
 * experts' products took 1.1 to 1.2 times their curve's price in a trained
 * step (docs/planner.md, "The parts priced as they run"). So here four
 * experts, each with its own gate/up and down weights, run their forward
 * and backward products in turn as model/moe.c calls them (SwiGLU left
 * out: the simulator prices it apart), and each product kind's figure is
 * its mean call over the turns after the first, leaving out calls slower
 * than twice the median. Why the mean: a step is the sum of its calls, and
 * the typical spread of the calls (the mean is 2 to 6% above the median)
 * is in every step. Why not every call: about one in a hundred was
 * interrupted, taking 2 to 10 times the median, which moved a 0.06 s
 * figure by up to 50% (one 2-rank calibration in three priced one size of
 * the experts 9% slower than the others did); a run's step median leaves
 * out such rare steps. Called in fp32 they give
 * compute.gemm_efficiency_rows_vary, in bf16 the bf16 expert curve. */
#include "cli/calibrate_experts.h"

#include <stdlib.h>

#include "base/timer.h"
#include "cli/calibrate_timing.h"
#include "kern/bf16_weights.h"
#include "kern/gemm.h"

enum { EXPERTS = 4, KINDS = 4, MAX_TURNS = 1024 };

typedef struct ExpertBuffers {
  float *x, *h, *a, *y, *dy, *da, *dh, *dx;
  float *w_gate_up[EXPERTS], *w_down[EXPERTS], *dw_gate_up[EXPERTS], *dw_down[EXPERTS];
} ExpertBuffers;

/* n floats from the arena at *at, each buffer 64-byte aligned as the
 * runtime's are; with all NULL, only counts. */
static float *take(float *all, size_t *at, size_t n) {
  float *p = all ? all + *at : NULL;
  *at += (n + 15) / 16 * 16;
  return p;
}

/* Lays the buffers out in `all` (NULL: counts them); returns the floats. */
static size_t lay_out(ExpertBuffers *b, float *all, size_t n, int C, int F) {
  size_t at = 0, rows = n;
  float **act[] = {&b->x, &b->h, &b->a, &b->y, &b->dy, &b->da, &b->dh, &b->dx};
  size_t sizes[] = {rows * C, rows * 2 * F, rows * F, rows * C, rows * C, rows * F, rows * 2 * F, rows * C};
  for (size_t i = 0; i < sizeof act / sizeof act[0]; i++) *act[i] = take(all, &at, sizes[i]);
  for (int e = 0; e < EXPERTS; e++) {
    b->w_gate_up[e] = take(all, &at, (size_t)2 * F * C), b->dw_gate_up[e] = take(all, &at, (size_t)2 * F * C);
    b->w_down[e] = take(all, &at, (size_t)C * F), b->dw_down[e] = take(all, &at, (size_t)C * F);
  }
  return at;
}

/* The experts of one shape taking turns: n rows per expert, hidden C,
 * expert width F; `turn` counts the turns run. */
typedef struct ExpertTurns {
  ExpertBuffers b;
  int n, C, F;
  long turn;
} ExpertTurns;

/* The next expert's turn: its two forward products and two backward calls,
 * each call's seconds in calls[KINDS] (NULL: untimed). */
static void run_turn(ExpertTurns *x, double *calls) {
  const int e = (int)(x->turn++ % EXPERTS), n = x->n, C = x->C, F = x->F;
  ExpertBuffers *b = &x->b;
  /* The optimizer writes the weights after every step, so a run converts
   * each one to bf16 again for its next forward (kern/bf16_weights.h): a
   * turn here is a step's forward and backward of one expert. */
  bf16_weights_invalidate(b->w_gate_up[e], (size_t)2 * F * C);
  bf16_weights_invalidate(b->w_down[e], (size_t)C * F);
  double t0 = timer_now();
  linear_forward(b->h, b->x, b->w_gate_up[e], n, C, 2 * F, 0);
  double t1 = timer_now();
  linear_forward(b->y, b->a, b->w_down[e], n, F, C, 0);
  double t2 = timer_now();
  linear_backward(b->da, b->dw_down[e], b->dy, b->a, b->w_down[e], n, F, C, 0);
  double t3 = timer_now();
  linear_backward(b->dx, b->dw_gate_up[e], b->dh, b->x, b->w_gate_up[e], n, C, 2 * F, 0);
  double t4 = timer_now();
  if (calls) calls[0] = t1 - t0, calls[1] = t2 - t1, calls[2] = t3 - t2, calls[3] = t4 - t3;
}

static void untimed_turn(void *x) { run_turn(x, NULL); }

/* One shape: n rows per expert, hidden C, expert width F. Adds four
 * samples to out: the gate/up and down products forward, and each one's
 * backward (two products of the forward's shape, at half the call). With
 * ranks measuring together (calibrate_timing.h) the turns run in a window
 * all ranks share, as the experts of a run's ranks compute at once. */
static int measure_shape(int n, int C, int F, double budget, CalibGemmSample *out) {
  ExpertTurns x = {.n = n, .C = C, .F = F, .turn = 0};
  size_t total = lay_out(&x.b, NULL, (size_t)n, C, F);
  float *all = aligned_alloc(64, total * sizeof(float)); /* total is a multiple of 16 floats */
  calib_together_barrier(NULL, NULL);
  if (!all) {
    calib_together_barrier(NULL, NULL); /* every rank meets at both edges */
    return 0;
  }
  lay_out(&x.b, all, (size_t)n, C, F);
  calib_fill(all, total, 0.2f);
  /* The runtime's weights are in the bf16 weight cache (converted once a
   * step, kern/bf16_weights.h); so are these (fp32 products ignore it). */
  for (int e = 0; e < EXPERTS; e++) {
    bf16_weights_register(x.b.w_gate_up[e], 2L * F, C);
    bf16_weights_register(x.b.w_down[e], C, F);
  }
  static double calls[KINDS][MAX_TURNS];
  double one[KINDS];
  int turns = 0;
  const int vary = kern_gemm_rows_vary_begin();
  for (int e = 0; e < EXPERTS; e++) run_turn(&x, NULL); /* the first turn of each expert warms it up */
  double start = timer_now();
  /* At least two measured turns of every expert. */
  while (turns < MAX_TURNS && (turns < 2 * EXPERTS || timer_now() - start < budget)) {
    run_turn(&x, one);
    for (int k = 0; k < KINDS; k++) calls[k][turns] = one[k];
    turns++;
  }
  calib_together_barrier(untimed_turn, &x); /* the others may still be timing */
  kern_gemm_rows_vary_end(vary);
  bf16_weights_forget(all, total);
  free(all);
  double mean[KINDS];
  for (int k = 0; k < KINDS; k++) mean[k] = calib_typical_mean(calls[k], turns);
  /* A backward call is two products of its forward's shape (the input
   * gradient and the weight gradient): one sample of that shape at half
   * the call's figure. */
  out[0] = (CalibGemmSample){.m = n, .n = 2 * F, .k = C, .seconds = mean[0]};
  out[1] = (CalibGemmSample){.m = n, .n = C, .k = F, .seconds = mean[1]};
  out[2] = (CalibGemmSample){.m = n, .n = C, .k = F, .seconds = mean[2] / 2};
  out[3] = (CalibGemmSample){.m = n, .n = 2 * F, .k = C, .seconds = mean[3] / 2};
  return KINDS;
}

int calib_measure_expert_gemms(int quick, CalibGemmSample *out, int cap) {
  static const int rows_full[] = {32, 128, 512, 2048}, rows_quick[] = {64, 512};
  static const int shapes[][2] = {{256, 512}, {512, 1024}};
  const int *rows = quick ? rows_quick : rows_full;
  int nr = quick ? 2 : 4, ns = quick ? 1 : 2, count = 0;
  double budget = quick ? 0.01 : 0.12;
  for (int s = 0; s < ns; s++)
    for (int r = 0; r < nr && count + KINDS <= cap; r++) count += measure_shape(rows[r], shapes[s][0], shapes[s][1], budget, out + count);
  return count;
}
