/* The 2-D convolution: {"type": "conv2d", "out_channels": C, "kernel": K |
 * [kh, kw], "stride": S | [sh, sw] (default 1), "padding": P | [ph, pw]
 * (default 0, zeros, below the kernel size), "bias": true} on
 * kern/conv2d.h (oneDNN, or its direct kernels for few channels), in the
 * process-wide precision (kern/precision.h). A network may switch its
 * activations to channels-last or blocked (set_layout; blocked on both
 * sides also asks for Winograd) and fuse a following ReLU or a residual
 * add into its forward (forward_epilogue): nets/layer.h.
 * Output size per axis floor((in + 2 P - K) / S) + 1, as PyTorch's.
 * Parameters "weight" [C, in_channels, kh, kw] and "bias" [C] (not
 * decayed), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in =
 * in_channels kh kw, as PyTorch's nn.Conv2d. Counts per sample: every
 * kernel tap of every output, padded ones included (the dense product
 * multiplies them by zero): C oh ow in_channels kh kw multiplications, one
 * addition fewer per output, plus one per output for the bias. */
#ifndef FIVEFOLD_NETS_LAYER_CONV_H
#define FIVEFOLD_NETS_LAYER_CONV_H

#include "nets/layer.h"

int layer_create_conv2d(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                        Error *err);

#endif
