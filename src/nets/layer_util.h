/* Small pieces the layer kinds of nets/ share: PyTorch's default
 * initialisation of weights and biases and the bookkeeping of a parameter
 * spec, so that every kind starts from the same scheme; the precision the
 * convolution kinds run in; and the entries a network built from layers
 * (vision.c, gan.c) makes in its parameter table. */
#ifndef FIVEFOLD_NETS_LAYER_UTIL_H
#define FIVEFOLD_NETS_LAYER_UTIL_H

#include <math.h>
#include <stdint.h>

#include "base/rng.h"
#include "kern/conv2d.h"
#include "kern/precision.h"
#include "nets/layer.h"
#include "nets/network.h"

/* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for every tensor of l, as PyTorch's
 * nn.Linear and nn.Conv2d start; tensor i draws from counter block i of
 * (seed, stream), so layers (streams) and tensors never share draws. */
static inline void layer_init_fan_in_uniform(Layer *l, double fan_in, uint64_t seed, uint64_t stream) {
  double bound = 1.0 / sqrt(fan_in);
  for (int t = 0; t < l->num_params; t++)
    for (size_t i = 0; i < l->params[t].numel; i++)
      l->param[t][i] = (float)(bound * (2.0 * rng_uniform(seed, stream, ((uint64_t)t << 40) + i) - 1.0));
}

/* The run's precision (training.precision, kern_set_precision) for
 * convolutions and transposed convolutions alike: bf16 inputs with fp32
 * accumulation, or fp32. */
static inline Conv2dPrecision layer_conv_precision(void) {
  return kern_precision() == KERN_PRECISION_BF16 ? CONV2D_BF16 : CONV2D_FP32;
}

/* Declares parameter `t` of l: suffix, shape (ndim values), element count. */
static inline void layer_declare_param(Layer *l, int t, const char *suffix, int ndim, const int64_t *shape,
                                       int no_weight_decay) {
  LayerParamSpec *p = &l->params[t];
  p->suffix = suffix;
  p->ndim = ndim;
  p->numel = 1;
  for (int d = 0; d < ndim; d++) {
    p->shape[d] = shape[d];
    p->numel *= (size_t)shape[d];
  }
  p->no_weight_decay = no_weight_decay;
  if (l->num_params < t + 1) l->num_params = t + 1;
}

/* The floats of the parameters of layers[0, n); their tensors are added to *tensors. */
static inline size_t layer_param_floats(const Layer *layers, int n, int *tensors) {
  size_t values = 0;
  for (int i = 0; i < n; i++) {
    *tensors += layers[i].num_params;
    for (int t = 0; t < layers[i].num_params; t++) values += layers[i].params[t].numel;
  }
  return values;
}

/* Entry p of a network's table for tensor t of l, at `offset` floats into
 * its buffers (group 0, reduced over the data-parallel replicas), and l's
 * binding to that place. */
static inline void layer_bind_param(Layer *l, int t, NetParam *p, const char *name, float *values, float *grads,
                                    size_t offset) {
  const LayerParamSpec *s = &l->params[t];
  p->name = name;
  p->ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++) p->shape[d] = s->shape[d];
  p->offset = offset;
  p->numel = s->numel;
  p->reduce = NET_REDUCE_DENSE;
  p->no_weight_decay = s->no_weight_decay;
  l->param[t] = values + offset;
  l->grad[t] = grads + offset;
}

#endif
