/* conv_transpose2d and instance_norm layers (nets/layer_gan.h). The
 * transposed convolution is a thin shell over kern/conv2d.h; instance
 * normalisation is computed here, one (sample, channel) plane at a time,
 * with the plane's sums in double so that large planes keep their
 * precision. */
#include "nets/layer_gan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kern/conv2d.h"
#include "nets/layer_spec.h"
#include "nets/layer_util.h"

/* Each parameter tensor of a layer draws from its own stream. */
static uint64_t param_stream(uint64_t layer_stream, int param) {
  return rng_hash64(layer_stream ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(param + 1)));
}

static void set_param(LayerParamSpec *p, const char *suffix, int ndim, const int64_t *shape, int no_weight_decay) {
  memset(p, 0, sizeof *p);
  p->suffix = suffix, p->ndim = ndim, p->numel = 1, p->no_weight_decay = no_weight_decay;
  for (int d = 0; d < ndim; d++) p->shape[d] = shape[d], p->numel *= (size_t)shape[d];
}

static int check_batch(const Layer *l, int n, Error *err) {
  if (n < 1 || n > l->max_batch)
    return error_set(err, ERR_ARG, "%s: batch of %d samples, expected 1..%d (max_batch)", l->ops->kind, n,
                     l->max_batch);
  return 0;
}

/* ---- conv_transpose2d ---------------------------------------------------- */

typedef struct ConvTransposeImpl {
  Conv2dShape shape; /* batch set per call */
  int bias;
} ConvTransposeImpl;

static void conv_transpose_init(Layer *l, uint64_t seed, uint64_t stream) {
  const ConvTransposeImpl *c = l->impl;
  const double fan_in = (double)c->shape.out_channels * c->shape.kernel_h * c->shape.kernel_w;
  const double bound = 1.0 / sqrt(fan_in);
  for (int p = 0; p < l->num_params; p++) {
    const uint64_t s = param_stream(stream, p);
    for (size_t i = 0; i < l->params[p].numel; i++)
      l->param[p][i] = (float)(bound * (2.0 * rng_uniform(seed, s, i) - 1.0));
  }
}

static int conv_transpose_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train;
  ConvTransposeImpl *c = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  c->shape.batch = n;
  return conv2d_forward(&c->shape, layer_conv_precision(), y, x, l->param[0], c->bias ? l->param[1] : NULL, err);
}

static int conv_transpose_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n,
                                   Error *err) {
  (void)y;
  ConvTransposeImpl *c = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  c->shape.batch = n;
  if (dx && (rc = conv2d_backward_data(&c->shape, layer_conv_precision(), dx, dy, l->param[0], 0, err))) return rc;
  return conv2d_backward_weights(&c->shape, layer_conv_precision(), l->grad[0], c->bias ? l->grad[1] : NULL, dy, x, 1, err);
}

static int conv_transpose_set_layout(Layer *l, int in, int out, Error *err) {
  ConvTransposeImpl *c = l->impl;
  Conv2dShape s = c->shape;
  s.x_layout = in, s.y_layout = out;
  int rc = conv2d_output_size(&s, NULL, NULL, err);
  if (rc) return error_wrap(err, "conv_transpose2d layer: layouts %d -> %d", in, out);
  c->shape = s;
  return 0;
}

static void free_impl(Layer *l) {
  free(l->impl);
  l->impl = NULL;
}

static const LayerOps CONV_TRANSPOSE_OPS = {.kind = "conv_transpose2d", .init = conv_transpose_init,
                                            .forward = conv_transpose_forward, .backward = conv_transpose_backward,
                                            .free = free_impl, .set_layout = conv_transpose_set_layout};

int layer_create_conv_transpose2d(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin,
                                  Error *err) {
  static const char *const KNOWN[] = {"out_channels", "kernel", "stride", "padding", "output_padding", "bias", NULL};
  memset(l, 0, sizeof *l);
  Conv2dShape s = conv2d_shape_default();
  int rc = layer_spec_check_fields(spec, KNOWN, origin, err), bias = 1;
  if (!rc) rc = layer_spec_int(spec, "out_channels", 1, 0, 1, 1 << 16, &s.out_channels, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "kernel", 1, 0, 1, 64, &s.kernel_h, &s.kernel_w, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "stride", 0, 1, 1, 64, &s.stride_h, &s.stride_w, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "padding", 0, 0, 0, 63, &s.pad_h, &s.pad_w, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "output_padding", 0, 0, 0, 63, &s.output_pad_h, &s.output_pad_w, origin, err);
  if (!rc) rc = layer_spec_bool(spec, "bias", 1, &bias, origin, err);
  if (rc) return rc;
  if (s.pad_h >= s.kernel_h || s.pad_w >= s.kernel_w)
    return error_set(err, ERR_CONFIG, "%s.padding: %d x %d, expected below the kernel (%d x %d)", origin, s.pad_h,
                     s.pad_w, s.kernel_h, s.kernel_w);
  if (s.output_pad_h >= s.stride_h || s.output_pad_w >= s.stride_w)
    return error_set(err, ERR_CONFIG, "%s.output_padding: %d x %d, expected below the stride (%d x %d)", origin,
                     s.output_pad_h, s.output_pad_w, s.stride_h, s.stride_w);
  if (max_batch < 1) return error_set(err, ERR_ARG, "%s: max_batch %d, expected >= 1", origin, max_batch);
  s.transposed = 1, s.batch = 1;
  s.in_channels = in.c, s.in_h = in.h, s.in_w = in.w;
  int oh, ow;
  if ((rc = conv2d_output_size(&s, &oh, &ow, err)))
    return error_wrap(err, "%s (input %d x %d x %d)", origin, in.c, in.h, in.w);
  ConvTransposeImpl *c = calloc(1, sizeof *c);
  if (!c) return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  c->shape = s, c->bias = bias;
  l->ops = &CONV_TRANSPOSE_OPS, l->impl = c;
  l->in = in, l->out = (LayerShape){s.out_channels, oh, ow}, l->max_batch = max_batch;
  const int64_t wshape[4] = {in.c, s.out_channels, s.kernel_h, s.kernel_w}, bshape[1] = {s.out_channels};
  set_param(&l->params[0], "weight", 4, wshape, 0);
  l->num_params = 1;
  if (bias) set_param(&l->params[l->num_params++], "bias", 1, bshape, 1);
  l->mults_per_sample = conv2d_forward_flops(&s) / 2.0; /* it counts a multiply-add as 2 flops */
  l->adds_per_sample = l->mults_per_sample + (bias ? (double)layer_shape_numel(l->out) : 0.0);
  return 0;
}

/* ---- instance_norm ------------------------------------------------------- */

typedef struct InstanceNormImpl {
  int affine;
  double eps;
  int stats_batch;     /* samples whose statistics are kept (0: none) */
  double *mean, *rstd; /* [max_batch, C] */
} InstanceNormImpl;

static void instance_norm_init(Layer *l, uint64_t seed, uint64_t stream) {
  (void)seed, (void)stream;
  const InstanceNormImpl *in = l->impl;
  if (!in->affine) return;
  for (size_t i = 0; i < l->params[0].numel; i++) l->param[0][i] = 1.0f, l->param[1][i] = 0.0f;
}

static int instance_norm_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  InstanceNormImpl *in = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  const int C = l->in.c;
  const size_t plane = (size_t)l->in.h * (size_t)l->in.w;
  const float *gamma = in->affine ? l->param[0] : NULL, *beta = in->affine ? l->param[1] : NULL;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < n * C; p++) {
    const float *xp = x + (size_t)p * plane;
    float *yp = y + (size_t)p * plane;
    double sum = 0.0;
    for (size_t i = 0; i < plane; i++) sum += xp[i];
    const double mean = sum / (double)plane;
    double sq = 0.0;
    for (size_t i = 0; i < plane; i++) sq += (xp[i] - mean) * (xp[i] - mean);
    const double rstd = 1.0 / sqrt(sq / (double)plane + in->eps);
    const int c = p % C;
    const double scale = rstd * (gamma ? gamma[c] : 1.0f), shift = beta ? beta[c] : 0.0f;
    for (size_t i = 0; i < plane; i++) yp[i] = (float)((xp[i] - mean) * scale + shift);
    if (train) in->mean[p] = mean, in->rstd[p] = rstd;
  }
  in->stats_batch = train ? n : 0;
  return 0;
}

static int instance_norm_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n,
                                  Error *err) {
  (void)y;
  InstanceNormImpl *in = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  if (in->stats_batch != n)
    return error_set(err, ERR_INTERNAL, "instance_norm: backward of %d samples without a training forward of them", n);
  const int C = l->in.c;
  const size_t plane = (size_t)l->in.h * (size_t)l->in.w;
  const float *gamma = in->affine ? l->param[0] : NULL;
  /* Per-plane parameter gradients, summed over the batch afterwards in a
   * fixed order so that the result does not depend on the thread count. */
  double *dg = NULL, *db = NULL;
  if (in->affine) {
    dg = calloc((size_t)n * C, sizeof *dg), db = calloc((size_t)n * C, sizeof *db);
    if (!dg || !db) {
      free(dg), free(db);
      return error_set(err, ERR_NOMEM, "instance_norm: out of memory");
    }
  }
#pragma omp parallel for schedule(static)
  for (int p = 0; p < n * C; p++) {
    const float *xp = x + (size_t)p * plane, *dyp = dy + (size_t)p * plane;
    const double mean = in->mean[p], rstd = in->rstd[p], g = gamma ? gamma[p % C] : 1.0;
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (size_t i = 0; i < plane; i++) {
      const double xhat = (xp[i] - mean) * rstd;
      sum_dy += dyp[i], sum_dy_xhat += dyp[i] * xhat;
    }
    if (dg) dg[p] = sum_dy_xhat, db[p] = sum_dy;
    if (dx) {
      float *dxp = dx + (size_t)p * plane;
      const double m_dy = sum_dy / (double)plane, m_dy_xhat = sum_dy_xhat / (double)plane;
      for (size_t i = 0; i < plane; i++) {
        const double xhat = (xp[i] - mean) * rstd;
        dxp[i] = (float)(g * rstd * (dyp[i] - m_dy - xhat * m_dy_xhat));
      }
    }
  }
  if (in->affine) {
    for (int c = 0; c < C; c++) {
      double sg = 0.0, sb = 0.0;
      for (int s = 0; s < n; s++) sg += dg[s * C + c], sb += db[s * C + c];
      l->grad[0][c] += (float)sg, l->grad[1][c] += (float)sb;
    }
    free(dg), free(db);
  }
  return 0;
}

static void instance_norm_free(Layer *l) {
  InstanceNormImpl *in = l->impl;
  if (in) free(in->mean), free(in->rstd);
  free_impl(l);
}

static const LayerOps INSTANCE_NORM_OPS = {.kind = "instance_norm", .init = instance_norm_init,
                                           .forward = instance_norm_forward, .backward = instance_norm_backward,
                                           .free = instance_norm_free};

int layer_create_instance_norm(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin,
                               Error *err) {
  static const char *const KNOWN[] = {"affine", "eps", NULL};
  memset(l, 0, sizeof *l);
  int affine = 0;
  double eps = 1e-5;
  int rc = layer_spec_check_fields(spec, KNOWN, origin, err);
  if (!rc) rc = layer_spec_bool(spec, "affine", 0, &affine, origin, err);
  if (!rc) rc = layer_spec_double(spec, "eps", 1e-5, 1e-12, 1.0, &eps, origin, err);
  if (rc) return rc;
  if (in.c < 1 || in.h < 1 || in.w < 1)
    return error_set(err, ERR_CONFIG, "%s: input %d x %d x %d, expected every size >= 1", origin, in.c, in.h, in.w);
  if (max_batch < 1) return error_set(err, ERR_ARG, "%s: max_batch %d, expected >= 1", origin, max_batch);
  InstanceNormImpl *impl = calloc(1, sizeof *impl);
  if (impl) {
    impl->mean = calloc((size_t)max_batch * in.c, sizeof(double));
    impl->rstd = calloc((size_t)max_batch * in.c, sizeof(double));
  }
  if (!impl || !impl->mean || !impl->rstd) {
    if (impl) free(impl->mean), free(impl->rstd);
    free(impl);
    return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  }
  impl->affine = affine, impl->eps = eps;
  l->ops = &INSTANCE_NORM_OPS, l->impl = impl;
  l->in = l->out = in, l->max_batch = max_batch;
  if (affine) {
    const int64_t shape[1] = {in.c};
    set_param(&l->params[0], "weight", 1, shape, 1);
    set_param(&l->params[1], "bias", 1, shape, 1);
    l->num_params = 2;
  }
  const double values = (double)layer_shape_numel(in);
  l->mults_per_sample = (affine ? 3.0 : 2.0) * values;
  l->adds_per_sample = (affine ? 4.0 : 3.0) * values;
  return 0;
}
