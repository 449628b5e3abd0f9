/* Element-wise activations, output shape = input shape, no parameters:
 *   {"type": "relu"}                      y = max(x, 0); gradient 0 at x = 0 (as PyTorch)
 *   {"type": "leaky_relu", "slope": 0.2}  y = x (x > 0), slope x otherwise (slope default 0.01,
 *                                         PyTorch's, in [0, 1])
 *   {"type": "tanh"}
 * Counts per sample (numel = c h w): relu numel comparisons; leaky_relu
 * numel multiplications (branch-free: the product is always formed) and
 * numel comparisons; tanh none (a transcendental function, which the
 * multiplication counts of the tropical experiments leave out, as the
 * papers do). */
#ifndef FIVEFOLD_NETS_LAYER_ACT_H
#define FIVEFOLD_NETS_LAYER_ACT_H

#include "nets/layer.h"

int layer_create_relu(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                      Error *err);
int layer_create_leaky_relu(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                            Error *err);
int layer_create_tanh(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                      Error *err);

#endif
