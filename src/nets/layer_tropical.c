/* The tropical layer kinds (nets/layer_tropical.h): tropical conv2d,
 * max-plus and min-plus dense layers on kern/tropical.h, their winner
 * workspaces and re-centring hook, and the per-sample standardisation
 * that may precede them. */
#include "nets/layer_tropical.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kern/op_count.h"
#include "kern/tropical.h"
#include "nets/layer_spec.h"

/* ---- shared ---- */

static int check_batch(const Layer *l, int n, Error *err) {
  if (n < 1 || n > l->max_batch)
    return error_set(err, ERR_ARG, "%s layer: batch of %d samples, expected 1..%d (its max_batch)", l->ops->kind, n,
                     l->max_batch);
  return 0;
}

static void fill_uniform(float *p, size_t n, float lo, float hi, uint64_t seed, uint64_t stream) {
  for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)rng_uniform(seed, stream, i);
}

static void set_param(LayerParamSpec *p, const char *suffix, int ndim, const int64_t *shape, int no_weight_decay) {
  memset(p, 0, sizeof *p);
  p->suffix = suffix;
  p->ndim = ndim;
  p->numel = 1;
  for (int d = 0; d < ndim; d++) p->shape[d] = shape[d], p->numel *= (size_t)shape[d];
  p->no_weight_decay = no_weight_decay;
}

/* Every impl below starts with its one workspace buffer. */
typedef struct TropImpl {
  void *work;
} TropImpl;

static void free_impl(Layer *l) {
  TropImpl *impl = l->impl;
  if (impl) free(impl->work);
  free(impl);
  l->impl = NULL;
}

/* ---- tropical conv2d ---- */

typedef struct TropConv {
  int32_t *winner;         /* for max_batch samples (first: TropImpl) */
  TropicalConvShape shape; /* batch is set per call */
} TropConv;

static void conv_init(Layer *l, uint64_t seed, uint64_t stream) {
  fill_uniform(l->param[0], l->params[0].numel, 0.0f, 1.0f, seed, stream);
}

static int conv_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train; /* the kernel always records winners */
  TropConv *c = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  c->shape.batch = n;
  /* no multiplications to count (kern/op_count.h): candidates are x + w */
  return tropical_conv2d_forward(&c->shape, x, l->param[0], y, c->winner, err);
}

static int conv_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)x, (void)y;
  TropConv *c = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  c->shape.batch = n;
  /* dx is overwritten and dw accumulates: two calls, as the kernel takes
   * one accumulate flag for both (its two loops are independent). */
  if (dx) rc = tropical_conv2d_backward(&c->shape, dy, c->winner, dx, NULL, 0, err);
  if (!rc) rc = tropical_conv2d_backward(&c->shape, dy, c->winner, NULL, l->grad[0], 1, err);
  return rc;
}

static const LayerOps TROPICAL_CONV_OPS = {.kind = "tropical_conv2d",
                                           .init = conv_init,
                                           .forward = conv_forward,
                                           .backward = conv_backward,
                                           .free = free_impl};

int layer_create_tropical_conv2d(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                                 Error *err) {
  static const char *const KNOWN[] = {"inner", "outer", "out_channels", "kernel", "stride", "padding", NULL};
  static const char *const INNER[] = {"max", "min", NULL}, *const OUTER[] = {"sum", "max", "min", NULL};
  memset(l, 0, sizeof *l);
  TropicalConvShape s = {.batch = max_batch, .in_channels = in.c, .in_h = in.h, .in_w = in.w};
  int inner = 0, outer = 0;
  int rc = layer_spec_check_fields(spec, KNOWN, origin, err);
  if (!rc) rc = layer_spec_choice(spec, "inner", 1, 0, INNER, &inner, origin, err);
  if (!rc) rc = layer_spec_choice(spec, "outer", 1, 0, OUTER, &outer, origin, err);
  if (!rc) rc = layer_spec_int(spec, "out_channels", 1, 0, 1, 1 << 16, &s.out_channels, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "kernel", 1, 0, 1, 64, &s.kernel_h, &s.kernel_w, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "stride", 0, 1, 1, 64, &s.stride_h, &s.stride_w, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "padding", 0, 0, 0, 63, &s.pad_h, &s.pad_w, origin, err);
  if (rc) return rc;
  s.inner = (TropicalInner)inner, s.outer = (TropicalOuter)outer;
  if (max_batch < 1) return error_set(err, ERR_ARG, "%s: max_batch %d, expected >= 1", origin, max_batch);
  if (s.pad_h >= s.kernel_h || s.pad_w >= s.kernel_w)
    return error_set(err, ERR_CONFIG, "%s.padding: %dx%d, expected below the kernel %dx%d (zero padding)", origin,
                     s.pad_h, s.pad_w, s.kernel_h, s.kernel_w);
  int oh = 0, ow = 0;
  Error shape_err = {0};
  if (tropical_conv2d_output_size(&s, &oh, &ow, &shape_err))
    return error_set(err, ERR_CONFIG, "%s: input %dx%dx%d does not fit this layer: %s", origin, in.c, in.h, in.w,
                     shape_err.msg);
  TropConv *c = calloc(1, sizeof *c);
  if (!c) return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  c->shape = s;
  c->winner = malloc(tropical_conv2d_winner_count(&s) * sizeof *c->winner);
  if (!c->winner) {
    free(c);
    return error_set(err, ERR_NOMEM, "%s: out of memory for the winners of %d samples", origin, max_batch);
  }
  l->ops = &TROPICAL_CONV_OPS;
  l->impl = c;
  l->in = in;
  l->out = (LayerShape){s.out_channels, oh, ow};
  l->max_batch = max_batch;
  l->num_params = 1;
  int64_t wshape[4] = {s.out_channels, in.c, s.kernel_h, s.kernel_w};
  set_param(&l->params[0], "weight", 4, wshape, 0);
  double kk = (double)s.kernel_h * s.kernel_w;
  l->mults_per_sample = 0.0;
  l->adds_per_sample = (double)s.out_channels * oh * ow * (in.c * (2.0 * kk - 1.0) + in.c - 1.0);
  return 0;
}

/* ---- max-plus / min-plus dense ---- */

typedef struct TropDense {
  int32_t *winner; /* [max_batch, out] (first: TropImpl) */
  TropicalSemiring semiring;
  int in, out, has_bias, recenter;
  float init_range; /* weights start uniform in [-init_range, init_range) */
} TropDense;

static void dense_init(Layer *l, uint64_t seed, uint64_t stream) {
  TropDense *d = l->impl;
  fill_uniform(l->param[0], l->params[0].numel, -d->init_range, d->init_range, seed, stream);
  if (d->has_bias) memset(l->param[1], 0, l->params[1].numel * sizeof(float));
}

static int dense_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  TropDense *d = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  /* no multiplications to count (kern/op_count.h): candidates are x + w */
  return tropical_matmul_forward(d->semiring, n, d->out, d->in, x, l->param[0], d->has_bias ? l->param[1] : NULL, y,
                                 train ? d->winner : NULL, err);
}

static int dense_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)x, (void)y;
  TropDense *d = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  if (dx) rc = tropical_matmul_backward(n, d->out, d->in, dy, d->winner, dx, NULL, NULL, 0, err);
  if (!rc)
    rc = tropical_matmul_backward(n, d->out, d->in, dy, d->winner, NULL, l->grad[0], d->has_bias ? l->grad[1] : NULL,
                                  1, err);
  return rc;
}

/* Row j of w minus its mean, the bias plus it: the same function. The mean
 * is summed in double so the shift itself adds no drift. */
static void dense_recenter(Layer *l) {
  TropDense *d = l->impl;
  if (!d->recenter) return;
  float *w = l->param[0], *b = l->param[1];
  for (int j = 0; j < d->out; j++) {
    float *row = w + (size_t)j * d->in;
    double sum = 0.0;
    for (int i = 0; i < d->in; i++) sum += row[i];
    float mean = (float)(sum / d->in);
    for (int i = 0; i < d->in; i++) row[i] -= mean;
    b[j] += mean;
  }
}

static const LayerOps MAXPLUS_OPS = {.kind = "maxplus",
                                     .init = dense_init,
                                     .forward = dense_forward,
                                     .backward = dense_backward,
                                     .after_update = dense_recenter,
                                     .free = free_impl};
static const LayerOps MINPLUS_OPS = {.kind = "minplus",
                                     .init = dense_init,
                                     .forward = dense_forward,
                                     .backward = dense_backward,
                                     .after_update = dense_recenter,
                                     .free = free_impl};

static int create_dense(Layer *l, const LayerOps *ops, TropicalSemiring semiring, const struct cJSON *spec,
                        LayerShape in, int max_batch, const char *origin, Error *err) {
  static const char *const KNOWN[] = {"out", "bias", "recenter", "init_range", NULL};
  memset(l, 0, sizeof *l);
  int out = 0, has_bias = 1, recenter = 0;
  double init_range = 1.0;
  int rc = layer_spec_check_fields(spec, KNOWN, origin, err);
  if (!rc) rc = layer_spec_int(spec, "out", 1, 0, 1, 1 << 20, &out, origin, err);
  if (!rc) rc = layer_spec_bool(spec, "bias", 1, &has_bias, origin, err);
  if (!rc) rc = layer_spec_bool(spec, "recenter", 0, &recenter, origin, err);
  /* a half-width: above 0 (equal weights would make every output the same function) and
   * far below float's range (x + w must stay exact enough to pick winners) */
  if (!rc) rc = layer_spec_double(spec, "init_range", 1.0, 1e-6, 1e3, &init_range, origin, err);
  if (rc) return rc;
  if (recenter && !has_bias)
    return error_set(err, ERR_CONFIG, "%s.recenter: true needs \"bias\": true (the bias absorbs the shift)", origin);
  if (max_batch < 1) return error_set(err, ERR_ARG, "%s: max_batch %d, expected >= 1", origin, max_batch);
  size_t fan_in = layer_shape_numel(in);
  if (fan_in < 1 || fan_in > (size_t)1 << 28)
    return error_set(err, ERR_CONFIG, "%s: input of %zu features, expected 1..%d", origin, fan_in, 1 << 28);
  TropDense *d = calloc(1, sizeof *d);
  if (!d) return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  d->semiring = semiring, d->in = (int)fan_in, d->out = out, d->has_bias = has_bias, d->recenter = recenter;
  d->init_range = (float)init_range;
  d->winner = malloc((size_t)max_batch * (size_t)out * sizeof *d->winner);
  if (!d->winner) {
    free(d);
    return error_set(err, ERR_NOMEM, "%s: out of memory for the winners of %d samples", origin, max_batch);
  }
  l->ops = ops;
  l->impl = d;
  l->in = in;
  l->out = (LayerShape){out, 1, 1};
  l->max_batch = max_batch;
  l->num_params = has_bias ? 2 : 1;
  int64_t wshape[2] = {out, (int64_t)fan_in}, bshape[1] = {out};
  set_param(&l->params[0], "weight", 2, wshape, 0);
  if (has_bias) set_param(&l->params[1], "bias", 1, bshape, 1);
  l->mults_per_sample = 0.0;
  l->adds_per_sample = (double)out * (2.0 * (double)fan_in - 1.0) + (has_bias ? out : 0);
  return 0;
}

int layer_create_maxplus(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                         Error *err) {
  return create_dense(l, &MAXPLUS_OPS, TROPICAL_MAX_PLUS, spec, in, max_batch, origin, err);
}

int layer_create_minplus(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                         Error *err) {
  return create_dense(l, &MINPLUS_OPS, TROPICAL_MIN_PLUS, spec, in, max_batch, origin, err);
}

/* ---- per-sample standardisation ---- */

typedef struct Standardize {
  float *rstd; /* [max_batch]: 1 / sqrt(var + eps) of the last forward (first: TropImpl) */
  double eps;
} Standardize;

static void standardize_init(Layer *l, uint64_t seed, uint64_t stream) { (void)l, (void)seed, (void)stream; }

static int standardize_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train; /* the same form in training and evaluation */
  Standardize *s = l->impl;
  int rc = check_batch(l, n, err);
  if (rc) return rc;
  size_t f = layer_shape_numel(l->in), mults = 0;
  for (int m = 0; m < n; m++) {
    const float *xm = x + (size_t)m * f;
    float *ym = y + (size_t)m * f;
    double mean = 0.0, var = 0.0;
    for (size_t i = 0; i < f; i++) mean += xm[i];
    mean /= (double)f;
    for (size_t i = 0; i < f; i++) var += ((double)xm[i] - mean) * ((double)xm[i] - mean);
    mults += f; /* the squares */
    var /= (double)f;
    double rstd = 1.0 / sqrt(var + s->eps);
    s->rstd[m] = (float)rstd;
    for (size_t i = 0; i < f; i++) ym[i] = (float)(((double)xm[i] - mean) * rstd);
    mults += f; /* the scaling; the two divisions by f and the 1/sqrt per sample are not counted */
  }
  op_count_mults((double)mults);
  return 0;
}

/* dx = rstd (dy - mean(dy) - y mean(dy y)), the layernorm backward without
 * an affine part; y is the forward's output. */
static int standardize_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n,
                                Error *err) {
  (void)x;
  Standardize *s = l->impl;
  int rc = check_batch(l, n, err);
  if (rc || !dx) return rc;
  size_t f = layer_shape_numel(l->in);
  for (int m = 0; m < n; m++) {
    const float *ym = y + (size_t)m * f, *gm = dy + (size_t)m * f;
    float *dxm = dx + (size_t)m * f;
    double mean_g = 0.0, mean_gy = 0.0;
    for (size_t i = 0; i < f; i++) mean_g += gm[i], mean_gy += (double)gm[i] * ym[i];
    mean_g /= (double)f, mean_gy /= (double)f;
    for (size_t i = 0; i < f; i++) dxm[i] = (float)(s->rstd[m] * ((double)gm[i] - mean_g - ym[i] * mean_gy));
  }
  return 0;
}

static const LayerOps STANDARDIZE_OPS = {.kind = "standardize",
                                         .init = standardize_init,
                                         .forward = standardize_forward,
                                         .backward = standardize_backward,
                                         .free = free_impl};

int layer_create_standardize(Layer *l, const struct cJSON *spec, LayerShape in, int max_batch, const char *origin,
                             Error *err) {
  static const char *const KNOWN[] = {"eps", NULL};
  memset(l, 0, sizeof *l);
  double eps = 1e-5;
  int rc = layer_spec_check_fields(spec, KNOWN, origin, err);
  if (!rc) rc = layer_spec_double(spec, "eps", 1e-5, 1e-12, 1.0, &eps, origin, err);
  if (rc) return rc;
  if (max_batch < 1) return error_set(err, ERR_ARG, "%s: max_batch %d, expected >= 1", origin, max_batch);
  if (layer_shape_numel(in) < 2)
    return error_set(err, ERR_CONFIG, "%s: input of %zu features, expected at least 2 to standardise", origin,
                     layer_shape_numel(in));
  Standardize *s = calloc(1, sizeof *s);
  if (!s || !(s->rstd = malloc((size_t)max_batch * sizeof *s->rstd))) {
    free(s);
    return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  }
  s->eps = eps;
  l->ops = &STANDARDIZE_OPS;
  l->impl = s;
  l->in = l->out = in;
  l->max_batch = max_batch;
  l->num_params = 0;
  double f = (double)layer_shape_numel(in);
  l->mults_per_sample = 2.0 * f;
  l->adds_per_sample = 3.0 * f;
  return 0;
}
