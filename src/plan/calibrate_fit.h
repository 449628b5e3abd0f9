/* Calibration without MPI: turning measurements (GEMM timings by shape,
 * collective timings by message size, streaming bandwidth) into the
 * parameters of the cost model, and writing a cluster spec in the format
 * cluster.c reads. `fivefold calibrate` (src/cli/cmd_calibrate.c) measures;
 * everything here is plain arithmetic so the planner stays MPI-free and the
 * fits can be tested on synthetic data.
 *
 * The fitted forms are exactly the cost model's (cost.h):
 *  - GEMM: time = FLOPs / (peak x eff(FLOPs)) with eff a piecewise curve in
 *    log FLOPs: one point per bin of measured shapes, the bin's median;
 *  - collectives on n ranks of one node: time = c_a(kind, n) alpha +
 *    c_b(kind, n) bytes / beta, the ring formulas of cost_collective.c
 *    (all-reduce 2(n-1), 2(n-1)/n; reduce-scatter and all-gather half of
 *    that; all-to-all (n-1), (n-1)/n; p2p 1, 1), fitted by least squares
 *    on relative error (small messages count as much as large ones). */
#ifndef FIVEFOLD_PLAN_CALIBRATE_FIT_H
#define FIVEFOLD_PLAN_CALIBRATE_FIT_H

#include "base/error.h"
#include "plan/cluster.h"

typedef struct cJSON cJSON;

/* t = intercept + slope x minimising sum ((fit - t) / t)^2; the intercept is
 * kept >= 0 (refitted through the origin when the free fit goes negative).
 * Needs n >= 2 distinct x and positive t; the slope must come out > 0. */
int calib_fit_line(const double *x, const double *t, int n, double *intercept, double *slope, Error *err);

/* The coefficients of alpha and of bytes / beta in the cost model's time of
 * one collective on n >= 2 ranks of one node. */
void calib_collective_terms(PlanCollective kind, int n, double *c_alpha, double *c_beta);

/* Effective alpha-beta of a collective from timings on n ranks (bytes as
 * cost.h defines them per kind). */
int calib_fit_collective(PlanCollective kind, int n, const double *bytes, const double *seconds, int count,
                         PlanLink *out, Error *err);

typedef struct CalibGemmSample {
  double m, n, k;  /* C[m x n] = A[m x k] B[k x n] */
  double seconds;
} CalibGemmSample;

/* The efficiency curve over FLOPs (2 m n k) against peak_flops: samples are
 * grouped in bins of bin_decades in log10 FLOPs (<= 0: half a decade); each
 * bin gives one point at the geometric mean of its FLOPs with the median
 * efficiency, clamped to (0, 1]. At most PLAN_MAX_CURVE_POINTS bins. */
int calib_fit_gemm_curve(const CalibGemmSample *samples, int count, double peak_flops, double bin_decades,
                         PlanCurve *out, Error *err);

/* The median of v[0..n) (v is reordered); 0 when n == 0. */
double calib_median(double *v, int n);

/* The spec a single machine starts from before anything is measured: one
 * node of `devices` ranks, shared-memory links (intra_node 5 GB/s, 2 us;
 * inter_node 10 Gb/s Ethernet, 30 us; efficiency 1), the default compute
 * section, memory 16 GiB per device at 10 GB/s. Measurements replace what
 * they cover. */
void calib_spec_local_default(ClusterSpec *spec, int devices);

/* What fivefold's CPU runtime (src/train/) does, as a spec's "runtime"
 * section records it: fp32 training; the MoE replicated on every TP rank
 * when there is no MoE grid (model.h, "sharding"); no asynchronous progress
 * (MPI advances a non-blocking reduction only inside MPI calls on the
 * computing thread, so buckets started in backward complete in the wait
 * before the optimizer: dp and parameter-gather overlap 0); no device, so a
 * dropless MoE layer's token counts are already on the host (no sync; the
 * count exchange under EP is priced as its own all-to-all); gradient
 * buckets of 25 MiB, at most a quarter of a rank's gradient (dp_grads.h). */
void calib_runtime_facts_cpu(PlanRuntimeFacts *rt, const char *host);

/* The spec as JSON in cluster.c's format (every field it reads, so the file
 * loads back to the same spec); NULL when out of memory. */
cJSON *calib_spec_to_json(const ClusterSpec *spec, const char *description);
int calib_spec_write(const ClusterSpec *spec, const char *description, const char *path, Error *err);

#endif
