/* What `fivefold calibrate` measures for the networks of nets/: the
 * convolution passes (kern/conv2d.h) as implicit-GEMM samples for the
 * spec's conv_efficiency curves (one per pass), and the forward and
 * backward seconds per input element of the other layer kinds at two
 * sizes (compute.layer_seconds). Both
 * take the timer of calibrate's other measurements (the fastest of
 * repetitions within a budget). */
#ifndef FIVEFOLD_CLI_CALIBRATE_NETS_H
#define FIVEFOLD_CLI_CALIBRATE_NETS_H

#include "plan/calibrate_fit.h"

typedef double (*CalibTimer)(void (*fn)(void *ctx), void *ctx, double budget, int min_reps);

/* Three samples (forward, data gradient, weight and bias gradients) per
 * convolution shape at `batch` images, in bf16 when bf16 is 1; returns the
 * count (<= cap). Calibrate measures at each of CALIB_CONV_BATCHES: the
 * rate at equal FLOPs falls with the batch once activations leave the
 * caches. */
#define CALIB_NUM_CONV_BATCHES 2
extern const int CALIB_CONV_BATCHES[CALIB_NUM_CONV_BATCHES];
int calib_measure_convs(int quick, int bf16, int batch, CalibTimer timer, CalibGemmSample *out, int cap);

#define CALIB_NUM_LAYER_KINDS 5
#define CALIB_NUM_LAYER_SIZES 2
extern const char *const CALIB_LAYER_KINDS[CALIB_NUM_LAYER_KINDS];
/* fwd[k][z], bwd[k][z]: seconds per input element of CALIB_LAYER_KINDS[k]
 * over elements[z] input elements (0 when it could not be built), at sizes
 * in and out of the caches; returns the kinds measured. */
int calib_measure_layers(int quick, CalibTimer timer, double fwd[][CALIB_NUM_LAYER_SIZES],
                         double bwd[][CALIB_NUM_LAYER_SIZES], double elements[CALIB_NUM_LAYER_SIZES]);

#endif
