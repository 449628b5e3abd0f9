/* Max and average pooling (nets/layer_pool.h): plain loops over the
 * windows; max pooling keeps the winner of every output for backward. */
#include "nets/layer_pool.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "kern/op_count.h"
#include "nets/layer_spec.h"

static const LayerOps MAXPOOL_OPS;

typedef struct PoolImpl {
  int kh, kw, sh, sw;
  int *winner; /* max pool: [max_batch, out numel], the input index (within its sample) that won */
} PoolImpl;

/* Both poolings' forward: per output, the max of its window (keeping the
 * winner when training) or the window's sum scaled by 1 / (kh kw), each in
 * a fixed order. */
static int pool_forward(Layer *l, const float *x, float *y, int n, int train, Error *err) {
  (void)err;
  const PoolImpl *p = l->impl;
  int is_max = l->ops == &MAXPOOL_OPS;
  int C = l->in.c, H = l->in.h, W = l->in.w, OH = l->out.h, OW = l->out.w;
  float scale = 1.0f / (float)(p->kh * p->kw);
  size_t in_numel = layer_shape_numel(l->in), out_numel = layer_shape_numel(l->out), scaled = 0;
  for (int s = 0; s < n; s++)
    for (int c = 0; c < C; c++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          const float *xs = x + (size_t)s * in_numel;
          int best = (c * H + oh * p->sh) * W + ow * p->sw;
          float sum = 0;
          for (int i = 0; i < p->kh; i++)
            for (int j = 0; j < p->kw; j++) {
              int at = (c * H + oh * p->sh + i) * W + ow * p->sw + j;
              if (xs[at] > xs[best]) best = at; /* strictly greater: the first of equals keeps the window */
              sum += xs[at];
            }
          size_t o = (size_t)s * out_numel + ((size_t)c * OH + oh) * OW + ow;
          if (is_max) {
            y[o] = xs[best];
            if (train) p->winner[o] = best;
          } else {
            y[o] = sum * scale;
            scaled++;
          }
        }
  op_count_mults((double)scaled);
  return 0;
}

/* Max pooling: each output's gradient to its window's winner; average
 * pooling: spread evenly over the window. */
static int pool_backward(Layer *l, const float *x, const float *y, const float *dy, float *dx, int n, Error *err) {
  (void)x;
  (void)y;
  (void)err;
  if (!dx) return 0;
  const PoolImpl *p = l->impl;
  int C = l->in.c, H = l->in.h, W = l->in.w, OH = l->out.h, OW = l->out.w;
  float scale = 1.0f / (float)(p->kh * p->kw);
  size_t in_numel = layer_shape_numel(l->in), out_numel = layer_shape_numel(l->out);
  memset(dx, 0, (size_t)n * in_numel * sizeof(float));
  if (l->ops == &MAXPOOL_OPS) {
    for (int s = 0; s < n; s++)
      for (size_t o = 0; o < out_numel; o++)
        dx[(size_t)s * in_numel + p->winner[(size_t)s * out_numel + o]] += dy[(size_t)s * out_numel + o];
    return 0;
  }
  for (int s = 0; s < n; s++)
    for (int c = 0; c < C; c++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          float g = dy[(size_t)s * out_numel + ((size_t)c * OH + oh) * OW + ow] * scale;
          float *dxs = dx + (size_t)s * in_numel;
          for (int i = 0; i < p->kh; i++)
            for (int j = 0; j < p->kw; j++) dxs[(c * H + oh * p->sh + i) * W + ow * p->sw + j] += g;
        }
  return 0;
}

static void pool_init(Layer *l, uint64_t seed, uint64_t stream) {
  (void)l;
  (void)seed;
  (void)stream;
}

static void pool_free(Layer *l) {
  PoolImpl *p = l->impl;
  if (p) free(p->winner);
  free(p);
}

static const LayerOps MAXPOOL_OPS = {.kind = "maxpool", .init = pool_init, .forward = pool_forward,
                                     .backward = pool_backward, .free = pool_free};
static const LayerOps AVGPOOL_OPS = {.kind = "avgpool", .init = pool_init, .forward = pool_forward,
                                     .backward = pool_backward, .free = pool_free};

static int create_pool(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, int is_max,
                       Error *err) {
  static const char *const FIELDS[] = {"kernel", "stride", NULL};
  int kh, kw, sh, sw;
  int rc = layer_spec_check_fields(spec, FIELDS, origin, err);
  if (!rc) rc = layer_spec_pair(spec, "kernel", 1, 0, 1, 1 << 12, &kh, &kw, origin, err);
  if (!rc && !cJSON_GetObjectItemCaseSensitive(spec, "stride")) sh = kh, sw = kw;
  else if (!rc) rc = layer_spec_pair(spec, "stride", 1, 0, 1, 1 << 12, &sh, &sw, origin, err);
  if (rc) return rc;
  if (kh > in.h || kw > in.w)
    return error_set(err, ERR_CONFIG, "%s.kernel: %d x %d does not fit the input %d x %d (expected at most the "
                     "input)", origin, kh, kw, in.h, in.w);
  PoolImpl *p = calloc(1, sizeof *p);
  if (!p) return error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  *p = (PoolImpl){.kh = kh, .kw = kw, .sh = sh, .sw = sw};
  l->impl = p;
  l->ops = is_max ? &MAXPOOL_OPS : &AVGPOOL_OPS;
  l->in = in;
  l->out = (LayerShape){in.c, (in.h - kh) / sh + 1, (in.w - kw) / sw + 1};
  l->max_batch = max_batch;
  double outputs = (double)layer_shape_numel(l->out);
  if (is_max && !(p->winner = malloc((size_t)max_batch * layer_shape_numel(l->out) * sizeof(int))))
    return error_set(err, ERR_NOMEM, "%s: out of memory for the max pool's winners", origin);
  l->mults_per_sample = is_max ? 0 : outputs;
  l->adds_per_sample = outputs * (kh * kw - 1);
  return 0;
}

int layer_create_maxpool(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err) {
  return create_pool(l, spec, in, max_batch, origin, 1, err);
}

int layer_create_avgpool(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err) {
  return create_pool(l, spec, in, max_batch, origin, 0, err);
}
