/* Pooling over k x k windows of each channel, no padding:
 * {"type": "maxpool" | "avgpool", "kernel": K | [kh, kw], "stride": S |
 * [sh, sw]} (stride defaults to the kernel). Output size per axis
 * floor((in - K) / S) + 1, as PyTorch's MaxPool2d / AvgPool2d.
 *
 * Max pooling sends each output's gradient to the input that won its
 * window. Tie rule: the FIRST input in the window's row-major order wins
 * (a later one must be strictly greater), as PyTorch's CPU max pool does.
 * Counts per sample: max pool 0 multiplications and kh kw - 1 comparisons
 * per output; average pool kh kw - 1 additions and one multiplication
 * (by 1 / (kh kw)) per output. */
#ifndef FIVEFOLD_NETS_LAYER_POOL_H
#define FIVEFOLD_NETS_LAYER_POOL_H

#include "nets/layer.h"

int layer_create_maxpool(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                         Error *err);
int layer_create_avgpool(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                         Error *err);

#endif
