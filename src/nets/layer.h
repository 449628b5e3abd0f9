/* The layer interface of the feed-forward networks of nets/ (the vision
 * networks, the min-max-plus networks, a GAN's generator and critic): one
 * contract that every layer kind implements, so that a network is a list
 * of layers built from its config and the runtime sees it only through
 * nets/network.h.
 *
 * Data layout. A batch of n samples is a contiguous float array, sample
 * after sample; one sample is a LayerShape c x h x w (NCHW). A vector is
 * c x 1 x 1, so a dense layer after a convolution needs no reshape: the
 * flattening is the identity on memory. A network may switch layers that
 * allow it to other activation layouts (channels-last or blocked; see
 * set_layout below).
 *
 * Parameters. A layer declares up to LAYER_MAX_PARAMS tensors (usually
 * "weight" and "bias") with their shapes; the network lays them out in its
 * flat buffers and binds `param[i]` / `grad[i]` to them before init. The
 * checkpoint name of a tensor is "<layer name>.<suffix>" (for example
 * "layers.3.weight").
 *
 * Passes. forward writes y[n, out] from x[n, in] and may keep what backward
 * needs (masks, winner indices, normalisation statistics) in the layer's
 * own workspace, sized at creation for max_batch samples. backward reads
 * the x and y of the LAST forward, takes dy, writes dx (overwriting; dx is
 * NULL for a network's first layer, which then skips that work) and ADDS
 * its parameter gradients into grad[] (the runtime sums them over
 * micro-batches). Pass `train` = 0 to forward for evaluation (no state that
 * backward needs must then be kept, and layers with train/eval behaviour
 * use their eval form).
 *
 * Counting. `mults_per_sample` is the number of multiplications one
 * sample's forward performs (the banner's figure and the tropical
 * experiments' cost axis); layers count it analytically at creation.
 * `adds_per_sample` counts the additions and min/max comparisons likewise.
 * Every forward also adds the multiplications it really performs to the
 * instrumented counter of kern/op_count.h (free while counting is off), so
 * a test can hold the formula against what the kernels did
 * (vision_count_mults, tests/nets/test_vision_count.c). */
#ifndef FIVEFOLD_NETS_LAYER_H
#define FIVEFOLD_NETS_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define LAYER_MAX_PARAMS 4
#define LAYER_MAX_DIMS 4

struct cJSON;

typedef struct LayerShape {
  int c, h, w;
} LayerShape;

static inline size_t layer_shape_numel(LayerShape s) { return (size_t)s.c * (size_t)s.h * (size_t)s.w; }

typedef struct LayerParamSpec {
  const char *suffix; /* "weight", "bias", ... */
  int ndim;
  int64_t shape[LAYER_MAX_DIMS];
  size_t numel;
  int no_weight_decay; /* biases, norm scales */
} LayerParamSpec;

typedef struct Layer Layer;

typedef struct LayerOps {
  const char *kind; /* the config's "type": "linear", "conv2d", ... */
  /* Parameters from the seed (each layer's own scheme, e.g. N(0, 1/fan_in)
   * for linear maps); stream distinguishes the layers of one network. */
  void (*init)(Layer *l, uint64_t seed, uint64_t stream);
  int (*forward)(Layer *l, const float *x, float *y, int n, int train, Error *err);
  int (*backward)(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err);
  /* Optional (NULL for most kinds): called after every optimizer update of
   * the layer's parameters, for re-parametrisations that leave the function
   * unchanged (re-centring tropical weights into their bias). */
  void (*after_update)(Layer *l);
  /* Optional second-order passes, for a loss that holds an input gradient
   * (WGAN-GP's gradient penalty, nets/gan.c). Only piecewise-linear kinds
   * implement them (conv2d, linear, leaky_relu): their Jacobian at the last
   * forward is a fixed linear map (a weight product, a 0/1 or slope mask),
   * and the derivative of a mask is zero almost everywhere, so these two
   * passes are the whole double backward, as PyTorch's autograd computes it.
   * jvp: jt = J t, the Jacobian of the last forward (at x, y) applied to an
   * input-shaped t (the bias does not enter). double_backward: ADDS into
   * grad[] the gradient with respect to the parameters of <t, dx(dy)>,
   * dx(dy) being what backward would write for dy at the last forward.
   * NULL for every other kind (instance_norm, whose Jacobian depends on the
   * statistics of its input, conv_transpose2d, pooling, relu, tanh and the
   * tropical kinds): gan_create refuses a wgan-gp critic holding one. */
  int (*jvp)(Layer *l, const float *x, const float *y, const float *t, float *jt, int n, Error *err);
  int (*double_backward)(Layer *l, const float *x, const float *t, const float *dy, int n, Error *err);
  void (*free)(Layer *l); /* frees impl and the workspace, not the bound buffers */
  /* Activation layout. A network may keep the activations between its
   * layers in another layout than NCHW where every layer allows it
   * (nets/gan_chain.h: the generator's convolutions then run on the
   * activations as they are, without reorders on every call). Layouts are
   * kern/conv2d.h's Conv2dLayout values: CONV2D_NCHW, CONV2D_NHWC
   * (channels-last) and CONV2D_NCHW16C (blocked by 16 channels).
   * elementwise: 1 for kinds whose passes treat every element alike
   * (relu, leaky_relu, tanh), the same in any layout.
   * set_layout: optional; from now on the layer reads its input in layout
   * `in` and writes its output in layout `out`, and its gradients in the
   * same layouts (ERR_ARG for a layout the layer cannot take). The kinds
   * on kern/conv2d.h (conv2d, conv_transpose2d) have it. */
  int elementwise;
  int (*set_layout)(Layer *l, int in, int out, Error *err);
  /* Optional, for kinds whose backward never reads y (conv2d): forward
   * with an epilogue fused into the kernel's stores: accumulate = 1 adds
   * the output to what y holds (a residual skip), relu = 1 then clamps it
   * at zero (the ReLU layer after it). A network that uses it skips the
   * pass over memory of a separate add or ReLU (nets/gan_chain.c). */
  int (*forward_epilogue)(Layer *l, const float *x, float *y, int n, int train, int accumulate, int relu,
                          Error *err);
} LayerOps;

struct Layer {
  const LayerOps *ops;
  LayerShape in, out;
  int max_batch;
  int num_params;
  LayerParamSpec params[LAYER_MAX_PARAMS];
  float *param[LAYER_MAX_PARAMS], *grad[LAYER_MAX_PARAMS]; /* bound by the network */
  double mults_per_sample, adds_per_sample;
  void *impl;
};

/* A layer of kind spec["type"] from its config object, on inputs of shape
 * `in`; errors name origin (e.g. "cfg.json: model.layers[2]") and the
 * field with what was expected. */
int layer_create(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err);
/* The kinds layer_create knows, for error messages: "linear, conv2d, ...". */
const char *layer_kinds(void);
void layer_free(Layer *l);

#endif
