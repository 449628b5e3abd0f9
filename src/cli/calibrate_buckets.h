/* The cost of one more gradient bucket in the runtime, which `fivefold
 * calibrate` measures under MPI (calibrate_buckets.c): the trainer's own
 * reduction (train/dp_grads.h) over one gradient cut into one bucket and
 * into many, with the collective timeout armed as a training run arms it.
 * The collectives' alpha-beta fit prices each bucket's message; what a
 * bucket costs beyond it (a non-blocking collective's schedule, the test
 * loop it is waited for in, staging) is what this adds, per bucket. */
#ifndef FIVEFOLD_CLI_CALIBRATE_BUCKETS_H
#define FIVEFOLD_CLI_CALIBRATE_BUCKETS_H

#include <stdio.h>

#include "base/error.h"
#include "plan/cluster.h"

/* Every rank calls it (MPI initialised, each rank with `threads` OpenMP
 * threads), after the links are in spec. *overhead (s, >= 0; 0 on one
 * rank): the reduction's time in many buckets less its time in one, per
 * extra bucket, less the latency spec's all-reduce fit already charges
 * each (PlanRuntimeFacts.bucket_overhead); logs the figures on rank 0 (log
 * NULL elsewhere). */
int calib_measure_bucket_overhead(int quick, int threads, const ClusterSpec *spec, double *overhead, FILE *log,
                                  Error *err);

#endif
