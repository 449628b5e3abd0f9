/* How `fivefold calibrate` times the experts' products (calibrate_experts.c):
 * as model/moe.c runs them, each expert with weights of its own, one
 * expert after another, and each product's figure its typical call over
 * the turns (calib_typical_mean; compute.gemm_efficiency_rows_vary in
 * fp32, the bf16 expert curve in bf16). */
#ifndef FIVEFOLD_CLI_CALIBRATE_EXPERTS_H
#define FIVEFOLD_CLI_CALIBRATE_EXPERTS_H

#include "plan/calibrate_fit.h"

/* Up to `cap` samples into out, four per shape: the gate/up and the down
 * product forward, and each one's backward call (two products of the
 * forward's shape) as one product of half its typical time. Returns the
 * count, 0 when out of memory. */
int calib_measure_expert_gemms(int quick, CalibGemmSample *out, int cap);

#endif
