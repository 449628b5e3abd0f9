/* The dense layer (nets/layer_linear.h) on kern/gemm.h's products. */
#include "nets/layer_linear.h"

#include <cjson/cJSON.h>

#include "kern/gemm.h"
#include "kern/op_count.h"
#include "nets/layer_spec.h"
#include "nets/layer_util.h"

static int in_features(const Layer *l) { return (int)layer_shape_numel(l->in); }

static void linear_init(Layer *l, uint64_t seed, uint64_t stream) {
  layer_init_fan_in_uniform(l, in_features(l), seed, stream);
}

static int dense_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train;
  (void)err;
  int in = in_features(l), out = l->out.c;
  linear_forward(y, x, l->param[0], n, in, out, 0);
  op_count_mults((double)n * in * out); /* the product's multiply-adds; the bias adds */
  if (l->num_params > 1)
    for (int s = 0; s < n; s++)
      for (int o = 0; o < out; o++) y[(size_t)s * out + o] += l->param[1][o];
  return 0;
}

static int dense_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)y;
  (void)err;
  int in = in_features(l), out = l->out.c;
  linear_backward(dx, l->grad[0], dy, x, l->param[0], n, in, out, 0);
  if (l->num_params > 1)
    for (int o = 0; o < out; o++) {
      float sum = 0;
      for (int s = 0; s < n; s++) sum += dy[(size_t)s * out + o];
      l->grad[1][o] += sum;
    }
  return 0;
}

/* Linear in x: J t = W t (no bias). */
static int dense_jvp(Layer *l, const float *x, const float *y, const float *t, float *jt, int n, Error *err) {
  (void)x;
  (void)y;
  (void)err;
  linear_forward(jt, t, l->param[0], n, in_features(l), l->out.c, 0);
  return 0;
}

/* <t, W^T dy> = <W t, dy>: dW += dy^T t; the bias has no gradient. */
static int dense_double_backward(Layer *l, const float *x, const float *t, const float *dy, int n, Error *err) {
  (void)x;
  (void)err;
  linear_backward(NULL, l->grad[0], dy, t, l->param[0], n, in_features(l), l->out.c, 0);
  return 0;
}

static void linear_free(Layer *l) { (void)l; }

static const LayerOps LINEAR_OPS = {.kind = "linear", .init = linear_init, .forward = dense_forward,
                                    .backward = dense_backward, .jvp = dense_jvp,
                                    .double_backward = dense_double_backward, .free = linear_free};

int layer_create_linear(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err) {
  static const char *const FIELDS[] = {"out", "bias", NULL};
  int out, bias;
  int rc = layer_spec_check_fields(spec, FIELDS, origin, err);
  if (!rc) rc = layer_spec_int(spec, "out", 1, 0, 1, 1 << 20, &out, origin, err);
  if (!rc) rc = layer_spec_bool(spec, "bias", 1, &bias, origin, err);
  if (rc) return rc;
  size_t features = layer_shape_numel(in);
  if (features > (1u << 24))
    return error_set(err, ERR_CONFIG, "%s: a linear layer on %zu inputs (expected at most %d)", origin, features,
                     1 << 24);
  l->ops = &LINEAR_OPS;
  l->in = in;
  l->out = (LayerShape){out, 1, 1};
  l->max_batch = max_batch;
  layer_declare_param(l, 0, "weight", 2, (const int64_t[]){out, (int64_t)features}, 0);
  if (bias) layer_declare_param(l, 1, "bias", 1, (const int64_t[]){out}, 1);
  l->mults_per_sample = (double)features * out;
  l->adds_per_sample = ((double)features - 1) * out + (bias ? out : 0);
  return 0;
}
