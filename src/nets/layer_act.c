/* ReLU, leaky ReLU and tanh (nets/layer_act.h). The slope of a leaky ReLU
 * lives in the impl pointer's float. Each element is computed alone, so the
 * loops are split over OpenMP threads from ACT_PARALLEL_MIN elements on
 * (results do not depend on the split): a network's other threads would
 * otherwise wait through every activation. */
#include "nets/layer_act.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

#include "kern/op_count.h"
#include "nets/layer_spec.h"

#define ACT_PARALLEL_MIN 32768

static size_t count(const Layer *l, int n) { return (size_t)n * layer_shape_numel(l->in); }
static float slope_of(const Layer *l) { return *(const float *)l->impl; }

static int relu_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train;
  (void)err;
  const size_t e = count(l, n);
#pragma omp parallel for schedule(static) if (e >= ACT_PARALLEL_MIN)
  for (size_t i = 0; i < e; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
  return 0;
}

static int relu_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)x;
  (void)err;
  if (!dx) return 0;
  const size_t e = count(l, n);
#pragma omp parallel for schedule(static) if (e >= ACT_PARALLEL_MIN)
  for (size_t i = 0; i < e; i++) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
  return 0;
}

static int leaky_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train;
  (void)err;
  float a = slope_of(l);
  size_t e = count(l, n);
#pragma omp parallel for schedule(static) if (e >= ACT_PARALLEL_MIN)
  for (size_t i = 0; i < e; i++) {
    float scaled = a * x[i];
    y[i] = x[i] > 0 ? x[i] : scaled;
  }
  op_count_mults((double)e); /* a x is computed for every input, positive or not */
  return 0;
}

static int leaky_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)y;
  (void)err;
  float a = slope_of(l);
  if (!dx) return 0;
  const size_t e = count(l, n);
#pragma omp parallel for schedule(static) if (e >= ACT_PARALLEL_MIN)
  for (size_t i = 0; i < e; i++) dx[i] = x[i] > 0 ? dy[i] : a * dy[i];
  return 0;
}

/* The mask of the last forward (1 where x > 0, the slope elsewhere)
 * applied to t: the same rule as backward, so the two agree at x = 0. */
static int leaky_jvp(Layer *l, const float *x, const float *y, const float *t, float *jt, int n, Error *err) {
  return leaky_backward(l, x, y, t, jt, n, err);
}

/* No parameters, and the mask's derivative is zero: nothing to add. */
static int leaky_double_backward(Layer *l, const float *x, const float *t, const float *dy, int n, Error *err) {
  (void)l;
  (void)x;
  (void)t;
  (void)dy;
  (void)n;
  (void)err;
  return 0;
}

static int tanh_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)train;
  (void)err;
  const size_t e = count(l, n);
#pragma omp parallel for schedule(static) if (e >= ACT_PARALLEL_MIN)
  for (size_t i = 0; i < e; i++) y[i] = tanhf(x[i]);
  return 0;
}

static int tanh_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)x;
  (void)err;
  if (!dx) return 0;
  const size_t e = count(l, n);
#pragma omp parallel for schedule(static) if (e >= ACT_PARALLEL_MIN)
  for (size_t i = 0; i < e; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
  return 0;
}

static void act_init(Layer *l, uint64_t seed, uint64_t stream) {
  (void)l;
  (void)seed;
  (void)stream;
}

static void act_free(Layer *l) { free(l->impl); }

static const LayerOps RELU_OPS = {.kind = "relu", .init = act_init, .forward = relu_forward,
                                  .backward = relu_backward, .free = act_free, .elementwise = 1};
static const LayerOps LEAKY_OPS = {.kind = "leaky_relu", .init = act_init, .forward = leaky_forward,
                                   .backward = leaky_backward, .jvp = leaky_jvp,
                                   .double_backward = leaky_double_backward, .free = act_free, .elementwise = 1};
static const LayerOps TANH_OPS = {.kind = "tanh", .init = act_init, .forward = tanh_forward,
                                  .backward = tanh_backward, .free = act_free, .elementwise = 1};

static int create_act(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin,
                      const LayerOps *ops, Error *err) {
  static const char *const NONE[] = {NULL}, *const SLOPE[] = {"slope", NULL};
  int leaky = ops == &LEAKY_OPS;
  double slope = 0.01;
  int rc = layer_spec_check_fields(spec, leaky ? SLOPE : NONE, origin, err);
  if (!rc && leaky) rc = layer_spec_double(spec, "slope", 0.01, 0.0, 1.0, &slope, origin, err);
  if (rc) return rc;
  float *a = malloc(sizeof *a);
  if (!a) return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  *a = (float)slope;
  l->impl = a;
  l->ops = ops;
  l->in = l->out = in;
  l->max_batch = max_batch;
  double numel = (double)layer_shape_numel(in);
  l->mults_per_sample = leaky ? numel : 0;
  l->adds_per_sample = ops == &TANH_OPS ? 0 : numel;
  return 0;
}

int layer_create_relu(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err) {
  return create_act(l, spec, in, max_batch, origin, &RELU_OPS, err);
}

int layer_create_leaky_relu(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin,
                            Error *err) {
  return create_act(l, spec, in, max_batch, origin, &LEAKY_OPS, err);
}

int layer_create_tanh(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err) {
  return create_act(l, spec, in, max_batch, origin, &TANH_OPS, err);
}
