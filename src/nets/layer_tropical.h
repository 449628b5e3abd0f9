/* The tropical layer kinds of nets/ (docs/tropical.md), on the kernels of
 * kern/tropical.h:
 *
 *   {"type":"tropical_conv2d","inner":"max"|"min","outer":"sum"|"max"|"min",
 *    "out_channels":C,"kernel":K|[kh,kw],"stride":S,"padding":P}
 *       Per output pixel and input channel an inner max|min over the window
 *       of (x + w), then an outer sum|max|min over the channels: the six
 *       variants of the TCNN paper. Zero padding (padded taps take part
 *       with the value 0 + w), padding < kernel, stride defaults to 1,
 *       padding to 0. No bias. Parameter "weight" [C, Cin, kh, kw].
 *   {"type":"maxplus"|"minplus","out":N,"bias":true,"recenter":false,"init_range":1}
 *       y_j = max|min_i (x_i + w_ji) + b_j on the flattened input.
 *       Parameters "weight" [N, in] and, when bias (default true), "bias" [N].
 *       init_range r (1e-6..1000) sets the initial weights (below).
 *   {"type":"standardize","eps":1e-5}
 *       y = (x - mean) / sqrt(var + eps), mean and (biased) variance over
 *       the features of each sample; no parameters.
 *
 * Gradients are subgradients: each output's gradient goes to its winning
 * input and weight only. TIE RULE: the first (lowest) index wins, as in
 * kern/tropical.h (lowest k in a dense layer, lowest window position, then
 * lowest channel, in a convolution).
 *
 * Initialisation (layer.h's init). Tropical conv weights uniform in [0, 1),
 * as the TCNN authors do. Dense tropical weights uniform in [-r, r), r the
 * "init_range" (default 1): zero centred so that max-plus and min-plus
 * layers start symmetric, and by default spread as much as standardised
 * inputs are, so that different outputs pick different winners from the
 * first step (equal weights would make every output of a row the same
 * function). A smaller r lets the inputs rather than the weights decide
 * the winners at the start. Biases start at 0.
 *
 * Counting. mults_per_sample is 0 for all three tropical kinds except
 * standardize, which counts its squares and its scaling (2 per feature).
 * adds_per_sample counts every candidate x + w as one addition and every
 * reduction step as one comparison (or addition for the outer sum):
 *   dense   N (2 in - 1) (+ N for the bias)
 *   conv    C oh ow (Cin (2 kh kw - 1) + Cin - 1)
 *
 * Normalisation (min-max-plus networks, arXiv 2102.06358; docs/tropical.md
 * compares the candidates):
 *   * "recenter": true on a maxplus/minplus layer with a bias: after every
 *     optimizer update each row j of w is shifted by minus its mean and the
 *     bias absorbs it (b_j += mean_j). max_i(x_i + w_ji - c) + b_j + c is the
 *     same function, so training sees an unchanged network whose weights
 *     stay centred (the gradient of w is invariant to the shift too). It
 *     requires the bias (ERR_CONFIG otherwise).
 *   * the "standardize" kind before a tropical layer: per-sample statistics
 *     rather than running ones, so that train and eval agree and a
 *     data-parallel run computes exactly what one rank does. */
#ifndef FIVEFOLD_NETS_LAYER_TROPICAL_H
#define FIVEFOLD_NETS_LAYER_TROPICAL_H

#include "nets/layer.h"

int layer_create_tropical_conv2d(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                                 Error *err);
int layer_create_maxplus(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                         Error *err);
int layer_create_minplus(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                         Error *err);
int layer_create_standardize(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                             Error *err);

#endif
