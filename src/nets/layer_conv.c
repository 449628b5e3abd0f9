/* The conv2d layer (nets/layer_conv.h): a Conv2dShape kept per layer, the
 * batch filled in per call. */
#include "nets/layer_conv.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "kern/conv2d.h"
#include "kern/op_count.h"
#include "nets/layer_spec.h"
#include "nets/layer_util.h"

typedef struct ConvImpl {
  Conv2dShape shape; /* batch set per call */
  /* With a bias: a zero one, so that the jvp runs the forward's oneDNN
   * primitive (one without bias would be another cache entry). */
  float *zero_bias;
} ConvImpl;

static void conv_init(Layer *l, uint64_t seed, uint64_t stream) {
  const Conv2dShape *s = &((ConvImpl *)l->impl)->shape;
  layer_init_fan_in_uniform(l, (double)s->in_channels * s->kernel_h * s->kernel_w, seed, stream);
}

static Conv2dShape batch_shape(const Layer *l, int n) {
  Conv2dShape s = ((const ConvImpl *)l->impl)->shape;
  s.batch = n;
  return s;
}

static int conv_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train;
  Conv2dShape s = batch_shape(l, n);
  op_count_mults(conv2d_forward_flops(&s) / 2.0); /* the kernel's multiply-adds for this call's shape */
  return conv2d_forward(&s, layer_conv_precision(), y, x, l->param[0], l->num_params > 1 ? l->param[1] : NULL, err);
}

static int conv_forward_epilogue(Layer *l, const float *x, float *y, int n, int train, int accumulate, int relu,
                                 Error *err) {
  (void)train;
  Conv2dShape s = batch_shape(l, n);
  op_count_mults(conv2d_forward_flops(&s) / 2.0);
  return conv2d_forward_epilogue(&s, layer_conv_precision(), y, x, l->param[0], l->num_params > 1 ? l->param[1] : NULL,
                                 (Conv2dEpilogue){accumulate, relu}, err);
}

static int conv_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)y;
  Conv2dShape s = batch_shape(l, n);
  int rc = dx ? conv2d_backward_data(&s, layer_conv_precision(), dx, dy, l->param[0], 0, err) : 0;
  if (!rc)
    rc = conv2d_backward_weights(&s, layer_conv_precision(), l->grad[0], l->num_params > 1 ? l->grad[1] : NULL, dy, x, 1, err);
  return rc;
}

/* The map x -> W * x is linear: its Jacobian applied to t is the same
 * convolution of t, without the bias. */
static int conv_jvp(Layer *l, const float *x, const float *y, const float *t, float *jt, int n, Error *err) {
  (void)x;
  (void)y;
  Conv2dShape s = batch_shape(l, n);
  return conv2d_forward(&s, layer_conv_precision(), jt, t, l->param[0], ((ConvImpl *)l->impl)->zero_bias, err);
}

/* <t, W^T dy> = <W * t, dy>: the weight gradient of a convolution whose
 * input is t and whose output gradient is dy; the bias has none. */
static int conv_double_backward(Layer *l, const float *x, const float *t, const float *dy, int n, Error *err) {
  (void)x;
  Conv2dShape s = batch_shape(l, n);
  return conv2d_backward_weights(&s, layer_conv_precision(), l->grad[0], NULL, dy, t, 1, err);
}

/* Blocked activations on both sides also ask for Winograd (kern/conv2d.h:
 * a 3x3 stride-1 convolution then runs it; any other shape ignores it): a
 * network keeps its activations blocked for oneDNN's fastest kernels. */
static int conv_set_layout(Layer *l, int in, int out, Error *err) {
  Conv2dShape s = ((ConvImpl *)l->impl)->shape;
  s.x_layout = in, s.y_layout = out, s.winograd = in == CONV2D_NCHW16C && out == CONV2D_NCHW16C;
  int rc = conv2d_output_size(&s, NULL, NULL, err);
  if (rc) return error_wrap(err, "conv2d layer: layouts %d -> %d", in, out);
  ((ConvImpl *)l->impl)->shape = s;
  return 0;
}

static void conv_free(Layer *l) {
  ConvImpl *impl = l->impl;
  if (impl) free(impl->zero_bias);
  free(impl);
}

static const LayerOps CONV_OPS = {.kind = "conv2d", .init = conv_init, .forward = conv_forward,
                                  .backward = conv_backward, .jvp = conv_jvp,
                                  .double_backward = conv_double_backward, .free = conv_free,
                                  .set_layout = conv_set_layout, .forward_epilogue = conv_forward_epilogue};

int layer_create_conv2d(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err) {
  static const char *const FIELDS[] = {"out_channels", "kernel", "stride", "padding", "bias", NULL};
  Conv2dShape s = conv2d_shape_default();
  int bias;
  int rc = layer_spec_check_fields(spec, FIELDS, origin, err);
  if (!rc) rc = layer_spec_int(spec, "out_channels", 1, 0, 1, 1 << 16, &s.out_channels, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "kernel", 1, 0, 1, 1 << 12, &s.kernel_h, &s.kernel_w, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "stride", 0, 1, 1, 1 << 12, &s.stride_h, &s.stride_w, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "padding", 0, 0, 0, 1 << 12, &s.pad_h, &s.pad_w, origin, err);
  if (!rc) rc = layer_spec_bool(spec, "bias", 1, &bias, origin, err);
  if (rc) return rc;
  if (s.pad_h >= s.kernel_h || s.pad_w >= s.kernel_w)
    return error_set(err, ERR_CONFIG, "%s.padding: %d x %d, expected below the kernel %d x %d", origin, s.pad_h,
                     s.pad_w, s.kernel_h, s.kernel_w);
  s.batch = 1;
  s.in_channels = in.c;
  s.in_h = in.h;
  s.in_w = in.w;
  int oh, ow;
  Error why = {0};
  if (in.h + 2 * s.pad_h < s.kernel_h || in.w + 2 * s.pad_w < s.kernel_w || conv2d_output_size(&s, &oh, &ow, &why))
    return error_set(err, ERR_CONFIG, "%s.kernel: %d x %d does not fit the padded input %d x %d (expected a kernel "
                     "at most the input plus twice the padding)", origin, s.kernel_h, s.kernel_w, in.h + 2 * s.pad_h,
                     in.w + 2 * s.pad_w);
  ConvImpl *impl = calloc(1, sizeof *impl);
  if (!impl) return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  if (bias && !(impl->zero_bias = calloc((size_t)s.out_channels, sizeof(float)))) {
    free(impl);
    return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  }
  impl->shape = s;
  l->impl = impl;
  l->ops = &CONV_OPS;
  l->in = in;
  l->out = (LayerShape){s.out_channels, oh, ow};
  l->max_batch = max_batch;
  layer_declare_param(l, 0, "weight", 4, (const int64_t[]){s.out_channels, in.c, s.kernel_h, s.kernel_w}, 0);
  if (bias) layer_declare_param(l, 1, "bias", 1, (const int64_t[]){s.out_channels}, 1);
  double outputs = (double)s.out_channels * oh * ow, taps = (double)in.c * s.kernel_h * s.kernel_w;
  l->mults_per_sample = outputs * taps;
  l->adds_per_sample = outputs * (taps - 1 + (bias ? 1 : 0));
  return 0;
}
