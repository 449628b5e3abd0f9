/* How `fivefold calibrate` times a kernel: the fastest of repetitions
 * within a budget (other processes only add time), and with several ranks
 * of a node on cores of their own, in windows all ranks share, so that the
 * fastest repetition still ran while the neighbours computed
 * (calib_set_together). calib_sleeping_barrier is the barrier of ranks
 * that take turns on shared cores; calib_typical_mean the figure of a
 * kernel priced by its mean call. */
#ifndef FIVEFOLD_CLI_CALIBRATE_TIMING_H
#define FIVEFOLD_CLI_CALIBRATE_TIMING_H

#include <stddef.h>

typedef void (*CalibTimedFn)(void *ctx);

/* Fastest time of fn over repetitions for about `budget` seconds (at least
 * min_reps, at most 64) after one warm-up call. */
double calib_fastest_time(CalibTimedFn fn, void *ctx, double budget, int min_reps);
/* 1: every rank of the world measures each kernel in a shared window
 * (MPI must be initialised; every rank makes the same calls). */
void calib_set_together(int on);
/* With calib_set_together(1), the edge of such a window: a barrier of the
 * world during which this rank keeps calling fn (NULL: only waits), so
 * that a rank done early keeps loading the cores as the others finish;
 * without it, nothing. */
void calib_together_barrier(CalibTimedFn fn, void *ctx);
void calib_sleeping_barrier(void);
/* Mean time of fn in a window of max(10 x budget, 40 ms) that every
 * rank runs at once, sharing cores if it must (a collective call). */
double calib_shared_mean_time(CalibTimedFn fn, void *ctx, double budget, int min_reps);
/* The mean of the calls v[0, n) no slower than twice their median (sorts
 * v; 0 for n < 1): a kernel's typical call, the spread of its calls
 * included and the rare interrupted one (2 to 10 times the median) left
 * out. For kernels priced by their mean call (calibrate_experts.c). */
double calib_typical_mean(double *v, int n);
/* The inputs calibrate's kernels run on: n values spread over
 * [-scale / 2, scale / 2), the same on every rank and every run. */
void calib_fill(float *p, size_t n, float scale);

#endif
