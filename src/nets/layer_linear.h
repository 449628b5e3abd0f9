/* The dense layer: {"type": "linear", "out": N, "bias": true}. Its input is
 * any c x h x w sample taken as a vector of c h w features (NCHW order, so
 * after a convolution it is PyTorch's flatten); its output is out x 1 x 1.
 * Parameters "weight" [out, in] and, with bias (default true), "bias"
 * [out] (not decayed); both start U(-1/sqrt(in), 1/sqrt(in)) as PyTorch's
 * nn.Linear. Counts per sample: in x out multiplications, (in - 1) x out
 * additions plus out for the bias. */
#ifndef FIVEFOLD_NETS_LAYER_LINEAR_H
#define FIVEFOLD_NETS_LAYER_LINEAR_H

#include "nets/layer.h"

int layer_create_linear(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                        Error *err);

#endif
