/* What the runtime's own per-step machinery costs, measured by `fivefold
 * calibrate` on the trainer's code rather than modelled
 * (calibrate_runtime.c):
 *   - the update: the gradient zeroed, its norm and AdamW, per parameter
 *     (compute.optimizer_ns_per_param);
 *   - one more gradient bucket (under MPI): the trainer's own reduction
 *     (train/dp_grads.h) over one gradient cut into one bucket and into
 *     64, issued as a training run issues it.
 *     The collectives' alpha-beta fit prices each bucket's message; what a
 *     bucket costs beyond it (a non-blocking collective's schedule, the
 *     test loop it is waited for in, staging) is what this adds, per bucket
 *     (runtime.bucket_overhead_us);
 *   - the reduction of a gradient larger than the caches, in buckets of
 *     several sizes, against the collective's fitted price of the same
 *     buckets (runtime.grad_reduce_factor): a run's gradient streams from
 *     memory, and buckets of tens of MB leave the caches in the
 *     reduction's own buffers, neither of which the fit's small hot
 *     buffers see. */
#ifndef FIVEFOLD_CLI_CALIBRATE_RUNTIME_H
#define FIVEFOLD_CLI_CALIBRATE_RUNTIME_H

#include <stdio.h>

#include "base/error.h"
#include "plan/cluster.h"

/* Seconds per parameter of one update of a dedicated core (the fastest of
 * repetitions over 4 M parameters, 1 M with quick): the step's gradient
 * zeroing, its sum of squares and AdamW, as the trainer runs them; 0 when
 * out of memory. Not collective. */
double calib_measure_update(int quick);

/* Every rank calls it (MPI initialised, each rank with `threads` OpenMP
 * threads, the collective timeout armed as a training run arms it), after
 * the links are in spec. *overhead (s, >= 0; 0 on one
 * rank): the reduction's time in many buckets less its time in one, per
 * extra bucket, less the latency spec's all-reduce fit already charges
 * each (PlanRuntimeFacts.bucket_overhead); logs the figures on rank 0 (log
 * NULL elsewhere). */
int calib_measure_bucket_overhead(int quick, int threads, const ClusterSpec *spec, double *overhead, FILE *log,
                                  Error *err);

/* Every rank calls it (after calib_measure_bucket_overhead, whose
 * `overhead` it takes out of each bucket). *factor: per bucket size
 * (bytes), the reduction's time over the fit's (n 0 on one rank). */
int calib_measure_grad_reduce(int quick, int threads, const ClusterSpec *spec, double overhead, PlanCurve *factor,
                              FILE *log, Error *err);

#endif
