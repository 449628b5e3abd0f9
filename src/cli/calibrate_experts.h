/* How `fivefold calibrate` times the experts' fp32 products
 * (calibrate_experts.c): as model/moe.c runs them, each expert with
 * weights of its own, one expert after another, and each product's figure
 * the mean over the turns (compute.gemm_efficiency_rows_vary). */
#ifndef FIVEFOLD_CLI_CALIBRATE_EXPERTS_H
#define FIVEFOLD_CLI_CALIBRATE_EXPERTS_H

#include "plan/calibrate_fit.h"

/* Up to `cap` samples into out (one per product kind and shape: gate/up
 * and down forward, and their backward, two products each, counted as one
 * product of the mean time); returns the count, 0 when out of memory. */
int calib_measure_expert_gemms(int quick, CalibGemmSample *out, int cap);

#endif
