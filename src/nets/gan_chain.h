/* Internal to nets/: a chain of registry layers (nets/layer.h) with
 * residual skips, the form of the deblurring GAN's generator and critic
 * (nets/gan.c): its buffers, forward and backward, and the switch of its
 * inner activations to channels-last.
 *
 * Layers run in order; a layer with skip_from[i] = j >= 0 has the output
 * of layer j added to its own (the end of a residual block), kept apart
 * from the layer's raw output, which its backward reads.
 *
 * Layouts. The chain's input and output are NCHW. gan_chain_inner_layout
 * keeps the activations between its layout-setting layers (nets/layer.h's
 * set_layout) in another layout, when every layer either sets layouts or
 * is elementwise: blocked by 16 channels (kern/conv2d.h's CONV2D_NCHW16C)
 * when all of them have a multiple of 16 channels, which also runs its
 * 3x3 convolutions on Winograd, else channels-last (CONV2D_NHWC). The
 * layers on kern/conv2d.h then hand oneDNN (or the direct kernels) the
 * activations as they are, where NCHW ones are reordered on every call.
 *
 * Fusion. A layer with a forward epilogue (nets/layer.h: conv2d) writes a
 * residual block's sum itself (added onto a copy of the skip) and the
 * output of a ReLU that follows it; its raw output is then not kept (its
 * backward does not read it). */
#ifndef FIVEFOLD_NETS_GAN_CHAIN_H
#define FIVEFOLD_NETS_GAN_CHAIN_H

#include "base/error.h"
#include "nets/layer.h"

#define GAN_MAX_LAYERS 200

typedef struct Chain {
  int num_layers, max_batch;
  int inner_layout; /* Conv2dLayout of the inner activations (gan_chain_inner_layout) */
  LayerShape in;
  Layer layers[GAN_MAX_LAYERS];
  int skip_from[GAN_MAX_LAYERS];
  float *act[GAN_MAX_LAYERS];  /* raw outputs (not written where gan_chain_forward fuses them away) */
  float *sum[GAN_MAX_LAYERS];  /* outputs plus the skip; NULL without one */
  float *grad[GAN_MAX_LAYERS]; /* d loss / d output (of the sum where there is one) */
  float *arena;                /* act, grad and sum live in it */
} Chain;

LayerShape gan_chain_out_shape(const Chain *c);
/* The output of layer i (with its skip added), or x for i = -1. */
const float *gan_chain_output_of(const Chain *c, int i, const float *x);
/* Appends the layer of JSON text `spec` on the chain's current output;
 * skip_from >= 0 adds that layer's output to the new layer's. */
int gan_chain_add(Chain *c, const char *spec, int skip_from, Error *err);
/* Puts the inner activations in the layout above where every layer allows
 * it; *chosen is that layout (CONV2D_NCHW when it left them). Call before
 * gan_chain_alloc. */
int gan_chain_inner_layout(Chain *c, int *chosen, Error *err);
int gan_chain_alloc(Chain *c);
void gan_chain_free(Chain *c);
int gan_chain_forward(Chain *c, const float *x, int n, int train, Error *err);
/* dy: d loss / d chain output; dx (NULL: not needed) gets d loss / d x.
 * Parameter gradients add into the layers' bound grad buffers; grad[i]
 * holds d loss / d output of layer i afterwards (the gradient penalty's
 * double backward reads it). */
int gan_chain_backward(Chain *c, const float *x, const float *dy, float *dx, int n, Error *err);
double gan_chain_mults(const Chain *c);

#endif
