/* The layer kinds a deblurring GAN's generator adds to the image layers
 * (nets/layer.h): the transposed convolution of its decoder and instance
 * normalisation.
 *
 * conv_transpose2d, PyTorch's ConvTranspose2d (groups 1, dilation 1), on
 * kern/conv2d.h's oneDNN deconvolution:
 *   {"type": "conv_transpose2d", "out_channels": C, "kernel": K | [kh, kw],
 *    "stride": S | [sh, sw] (1), "padding": P | [ph, pw] (0),
 *    "output_padding": Q | [qh, qw] (0), "bias": true}
 *   out = (in - 1) stride - 2 padding + kernel + output_padding per axis;
 *   padding < kernel and output_padding < stride.
 *   Parameters "weight" [in_channels, C, kh, kw] and "bias" [C]; both
 *   initialised as PyTorch does, uniform in +-1/sqrt(fan_in) with
 *   fan_in = C kh kw (the weight's second dimension times the kernel).
 *   mults_per_sample: the multiply-adds, in_channels C kh kw in_h in_w;
 *   adds_per_sample the same plus one per output value with a bias.
 *
 * instance_norm, PyTorch's InstanceNorm2d with track_running_stats off (the
 * same in training and evaluation: every sample is normalised by its own
 * statistics, per channel, over the plane):
 *   {"type": "instance_norm", "affine": false, "eps": 1e-5}
 *   y = (x - mean) / sqrt(var + eps) (* weight[c] + bias[c] when affine),
 *   var the biased (population) variance. affine defaults to false, as in
 *   PyTorch; then the layer has no parameters. Parameters "weight" [C]
 *   (ones) and "bias" [C] (zeros), neither weight-decayed.
 *   mults_per_sample: 2 per value (the square for the variance and the
 *   scaling), 3 when affine; adds_per_sample: 3 per value (the two sums and
 *   the centring), 4 when affine.
 *   Its backward needs the statistics of the last forward with train = 1
 *   (kept for max_batch samples). */
#ifndef FIVEFOLD_NETS_LAYER_GAN_H
#define FIVEFOLD_NETS_LAYER_GAN_H

#include "nets/layer.h"

int layer_create_conv_transpose2d(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                                  Error *err);
int layer_create_instance_norm(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                               Error *err);

#endif
