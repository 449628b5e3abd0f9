/* The measurements `fivefold calibrate` makes for the networks of nets/
 * (calibrate_nets.h): the convolution passes through kern/conv2d.h and the
 * other layer kinds through their own forward and backward, so that
 * `simulate --net` prices a CNN with the rates of the kernels it runs
 * rather than with the GEMM curve (oneDNN's direct convolutions on a few
 * channels run far below a GEMM of the same FLOPs) or the memory
 * bandwidth (the pooling loops are scalar). */
#include "cli/calibrate_nets.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cli/calibrate_timing.h"
#include "kern/conv2d.h"
#include "nets/layer.h"

/* Convolutions of small image CNNs: a first layer on one or three
 * channels, then wider ones on smaller images; 5x5 and 3x3, padded or not. */
static const int SHAPES[][6] = {
    /* in_c, size, out_c, kernel, pad, stride */
    {1, 28, 6, 5, 2, 1},  {6, 14, 16, 5, 0, 1}, {1, 28, 16, 3, 1, 1}, {16, 14, 32, 3, 1, 1},
    {3, 32, 16, 3, 1, 1}, {32, 8, 64, 3, 1, 1}, {64, 8, 64, 3, 1, 1}, {1, 28, 4, 3, 1, 2},
};
#define NUM_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

typedef struct ConvCtx {
  Conv2dShape s;
  Conv2dPrecision prec;
  int pass; /* 0 forward, 1 data gradient, 2 weight and bias gradients */
  float *x, *w, *b, *y, *dy, *dx, *dw, *db;
} ConvCtx;

static void run_conv(void *p) {
  ConvCtx *c = p;
  Error e = {0, ""};
  if (c->pass == 0) conv2d_forward(&c->s, c->prec, c->y, c->x, c->w, c->b, &e);
  else if (c->pass == 1) conv2d_backward_data(&c->s, c->prec, c->dx, c->dy, c->w, 0, &e);
  else conv2d_backward_weights(&c->s, c->prec, c->dw, c->db, c->dy, c->x, 1, &e);
}

static float *filled(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  if (p) calib_fill(p, n, 1.0f);
  return p;
}

const int CALIB_CONV_BATCHES[CALIB_NUM_CONV_BATCHES] = {32, 256};

int calib_measure_convs(int quick, int bf16, int batch, CalibTimer timer, CalibGemmSample *out, int cap) {
  int count = 0, shapes = quick ? 4 : NUM_SHAPES;
  double budget = quick ? 0.004 : 0.02;
  for (int i = 0; i < shapes && count + 3 <= cap; i++) {
    ConvCtx c;
    memset(&c, 0, sizeof c);
    c.s = conv2d_shape_default();
    c.s.batch = batch;
    c.s.in_channels = SHAPES[i][0];
    c.s.in_h = c.s.in_w = SHAPES[i][1];
    c.s.out_channels = SHAPES[i][2];
    c.s.kernel_h = c.s.kernel_w = SHAPES[i][3];
    c.s.pad_h = c.s.pad_w = SHAPES[i][4];
    c.s.stride_h = c.s.stride_w = SHAPES[i][5];
    c.prec = bf16 ? CONV2D_BF16 : CONV2D_FP32;
    int oh = 0, ow = 0;
    if (conv2d_output_size(&c.s, &oh, &ow, NULL)) continue;
    size_t nx = conv2d_input_count(&c.s), ny = conv2d_output_count(&c.s), nw = conv2d_weight_count(&c.s);
    c.x = filled(nx), c.dx = filled(nx), c.y = filled(ny), c.dy = filled(ny);
    c.w = filled(nw), c.dw = filled(nw), c.b = filled((size_t)c.s.out_channels), c.db = filled((size_t)c.s.out_channels);
    if (c.x && c.dx && c.y && c.dy && c.w && c.dw && c.b && c.db)
      for (c.pass = 0; c.pass < 3; c.pass++) {
        /* As the implicit GEMM the cost model prices: samples x positions by
         * output channels, a window of every input channel as the inner size. */
        CalibGemmSample *s = &out[count++];
        s->m = (double)batch * oh * ow;
        s->n = c.s.out_channels;
        s->k = (double)c.s.in_channels * c.s.kernel_h * c.s.kernel_w;
        s->seconds = timer(run_conv, &c, budget, 3);
      }
    free(c.x), free(c.dx), free(c.y), free(c.dy), free(c.w), free(c.dw), free(c.b), free(c.db);
  }
  return count;
}

typedef struct LayerCtx {
  Layer l;
  int n, backward;
  float *x, *y, *dy, *dx;
} LayerCtx;

static void run_layer(void *p) {
  LayerCtx *c = p;
  Error e = {0, ""};
  if (c->backward) c->l.ops->backward(&c->l, c->x, c->y, c->dy, c->dx, c->n, &e);
  else c->l.ops->forward(&c->l, c->x, c->y, c->n, 1, &e);
}

const char *const CALIB_LAYER_KINDS[CALIB_NUM_LAYER_KINDS] = {"relu", "leaky_relu", "tanh", "maxpool", "avgpool"};

/* Images of 16 x 28 x 28 at each size: the first stays in the caches
 * (between layers of a small CNN the activations do), the second, 16
 * times larger, streams from memory. */
const int CALIB_LAYER_IMAGES[CALIB_NUM_LAYER_SIZES] = {32, 512};

int calib_measure_layers(int quick, CalibTimer timer, double fwd[][CALIB_NUM_LAYER_SIZES],
                         double bwd[][CALIB_NUM_LAYER_SIZES], double elements[CALIB_NUM_LAYER_SIZES]) {
  static const char *const SPECS[CALIB_NUM_LAYER_KINDS] = {
      "{\"type\": \"relu\"}", "{\"type\": \"leaky_relu\"}", "{\"type\": \"tanh\"}",
      "{\"type\": \"maxpool\", \"kernel\": 2}", "{\"type\": \"avgpool\", \"kernel\": 2}"};
  LayerShape in = {16, 28, 28};
  double budget = quick ? 0.004 : 0.02;
  int measured = 0;
  for (int z = 0; z < CALIB_NUM_LAYER_SIZES; z++) {
    int n = CALIB_LAYER_IMAGES[z] / (quick ? 2 : 1);
    elements[z] = (double)n * layer_shape_numel(in);
    for (int k = 0; k < CALIB_NUM_LAYER_KINDS; k++) {
      fwd[k][z] = bwd[k][z] = 0;
      cJSON *spec = cJSON_Parse(SPECS[k]);
      LayerCtx c;
      memset(&c, 0, sizeof c);
      Error e = {0, ""};
      if (!spec || layer_create(&c.l, spec, in, n, "calibrate", &e)) {
        cJSON_Delete(spec);
        continue;
      }
      cJSON_Delete(spec);
      size_t nx = (size_t)n * layer_shape_numel(in), ny = (size_t)n * layer_shape_numel(c.l.out);
      c.n = n;
      c.x = filled(nx), c.dx = filled(nx), c.y = filled(ny), c.dy = filled(ny);
      if (c.x && c.dx && c.y && c.dy) {
        c.backward = 0;
        fwd[k][z] = timer(run_layer, &c, budget, 3) / elements[z];
        c.backward = 1;
        bwd[k][z] = timer(run_layer, &c, budget, 3) / elements[z];
        measured += z == 0;
      }
      free(c.x), free(c.dx), free(c.y), free(c.dy);
      layer_free(&c.l);
    }
  }
  return measured;
}
