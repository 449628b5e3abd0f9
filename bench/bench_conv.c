/* Throughput of the convolution kernels (kern/conv2d.h) at DeblurGAN- and
 * LeNet-like layer shapes: GFLOP/s of the forward pass and of the backward
 * pass (backward-data + backward-weights + bias), fp32 and bf16 (bf16 only
 * where the CPU has AVX-512 BF16), on the OpenMP threads of the
 * environment. One key=value line per shape and precision, in the format
 * bench/torch_conv_bench.py prints for PyTorch, so bench/bench_conv.sh can
 * take ratios; a shape some of whose passes conv2d runs on its direct
 * kernels (few channels on one side; conv2d.h says which passes) gets a
 * second fp32 line with every pass on oneDNN (path=onednn) beside the one
 * as conv2d chooses (path=direct). The deblurring
 * generator's shapes keep their activations channels-last (x_layout /
 * y_layout NHWC) as nets/gan.c does. Figures are the fastest of the runs
 * made in the time given; nothing passes or fails.
 *
 * FLOP convention: forward 2 * multiply-adds (conv2d_forward_flops), the
 * backward pass twice that (data and weights gradients cost one forward
 * each; the bias sum is not counted).
 * Usage: bench_conv [seconds per figure, default 0.4] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "base/timer.h"
#include "kern/conv2d.h"

typedef struct BenchConv {
  const char *name;
  int transposed, n, cin, h, w, cout, k, stride, pad, output_pad, groups;
  int x_nhwc, y_nhwc; /* channels-last tensors (PyTorch: channels_last memory format) */
} BenchConv;

/* Keep in step with bench/torch_conv_bench.py. */
static const BenchConv kShapes[] = {
    {"deblur_stem_7x7", 0, 1, 3, 128, 128, 64, 7, 1, 3, 0, 1, 0, 0},
    {"deblur_down_3x3_s2", 0, 1, 64, 128, 128, 128, 3, 2, 1, 0, 1, 0, 0},
    {"deblur_res_3x3", 0, 1, 256, 32, 32, 256, 3, 1, 1, 0, 1, 0, 0},
    {"deblur_up_convT_3x3_s2", 1, 1, 256, 32, 32, 128, 3, 2, 1, 1, 1, 0, 0},
    {"lenet_c1_5x5", 0, 64, 1, 32, 32, 6, 5, 1, 0, 0, 1, 0, 0},
    {"lenet_c3_5x5", 0, 64, 6, 14, 14, 16, 5, 1, 0, 0, 1, 0, 0},
    /* the full-resolution deblurring generator (configs/gan/deblur-lfw.json), micro-batch 8 */
    {"gen_in_7x7", 0, 8, 1, 32, 32, 32, 7, 1, 3, 0, 1, 0, 1},
    {"gen_res_3x3", 0, 8, 32, 32, 32, 32, 3, 1, 1, 0, 1, 1, 1},
    {"gen_out_7x7", 0, 8, 32, 32, 32, 1, 7, 1, 3, 0, 1, 1, 0},
};

static float *random_buffer(size_t n, uint64_t stream) {
  float *x = alloc_big(n * sizeof *x);
  if (!x) {
    fprintf(stderr, "bench_conv: cannot allocate %zu floats\n", n);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(11, stream, i);
  return x;
}

static void check(int rc, const Error *err) {
  if (rc) {
    fprintf(stderr, "bench_conv: %s\n", err->msg);
    exit(1);
  }
}

/* Fastest of repeated runs within `seconds` (at least 3), after a warm-up
 * that creates the primitives. */
typedef struct Timings {
  double fwd, bwd;
} Timings;

static Timings measure(const Conv2dShape *s, Conv2dPrecision prec, double seconds, float *y, const float *x,
                       const float *w, const float *b, const float *dy, float *dx, float *dw, float *db) {
  Error err = {0};
  check(conv2d_forward(s, prec, y, x, w, b, &err), &err);
  check(conv2d_backward_data(s, prec, dx, dy, w, 0, &err), &err);
  check(conv2d_backward_weights(s, prec, dw, db, dy, x, 0, &err), &err);
  Timings best = {1e30, 1e30};
  double start = timer_now();
  for (int it = 0; it < 3 || timer_now() - start < seconds; it++) {
    double t0 = timer_now();
    check(conv2d_forward(s, prec, y, x, w, b, &err), &err);
    double t1 = timer_now();
    check(conv2d_backward_data(s, prec, dx, dy, w, 0, &err), &err);
    check(conv2d_backward_weights(s, prec, dw, db, dy, x, 0, &err), &err);
    double t2 = timer_now();
    if (t1 - t0 < best.fwd) best.fwd = t1 - t0;
    if (t2 - t1 < best.bwd) best.bwd = t2 - t1;
  }
  return best;
}

int main(int argc, char **argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 0.4;
  char why[160];
  int bf16 = conv2d_bf16_supported(why, sizeof why);
  printf("conv benchmark, %d OpenMP threads, %.2f s per figure%s%s\n", omp_get_max_threads(), seconds,
         bf16 ? "" : "; bf16 skipped: ", bf16 ? "" : why);
  for (size_t i = 0; i < sizeof kShapes / sizeof kShapes[0]; i++) {
    const BenchConv *c = &kShapes[i];
    Conv2dShape s = conv2d_shape_default();
    s.transposed = c->transposed, s.batch = c->n, s.in_channels = c->cin, s.in_h = c->h, s.in_w = c->w;
    s.out_channels = c->cout, s.kernel_h = s.kernel_w = c->k, s.stride_h = s.stride_w = c->stride;
    s.pad_h = s.pad_w = c->pad, s.output_pad_h = s.output_pad_w = c->output_pad, s.groups = c->groups;
    s.x_layout = c->x_nhwc ? CONV2D_NHWC : CONV2D_NCHW, s.y_layout = c->y_nhwc ? CONV2D_NHWC : CONV2D_NCHW;
    size_t nx = conv2d_input_count(&s), ny = conv2d_output_count(&s), nw = conv2d_weight_count(&s);
    float *x = random_buffer(nx, 1), *w = random_buffer(nw, 2), *b = random_buffer(c->cout, 3);
    float *dy = random_buffer(ny, 4), *y = random_buffer(ny, 5), *dx = random_buffer(nx, 6);
    float *dw = random_buffer(nw, 7), *db = random_buffer(c->cout, 8);
    double flops = conv2d_forward_flops(&s);
    int direct = conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_FORWARD) ||
                 conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_BACKWARD_DATA) ||
                 conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_BACKWARD_WEIGHTS);
    /* run 0: as conv2d chooses; run 1 (direct shapes only): fp32 on oneDNN */
    for (int run = 0; run < 1 + bf16 + direct; run++) {
      int on_onednn = run == 1 + bf16;
      Conv2dPrecision prec = run == 1 && bf16 ? CONV2D_BF16 : CONV2D_FP32;
      conv2d_set_direct(!on_onednn);
      Timings t = measure(&s, prec, seconds, y, x, w, b, dy, dx, dw, db);
      conv2d_set_direct(1);
      printf("fivefold_conv shape=%s precision=%s threads=%d fwd_ms=%.3f bwd_ms=%.3f fwd_gflops=%.1f "
             "bwd_gflops=%.1f path=%s\n",
             c->name, prec == CONV2D_BF16 ? "bf16" : "fp32", omp_get_max_threads(), t.fwd * 1e3, t.bwd * 1e3,
             flops / t.fwd * 1e-9, 2.0 * flops / t.bwd * 1e-9,
             direct && prec == CONV2D_FP32 && !on_onednn ? "direct" : "onednn");
      fflush(stdout);
    }
    alloc_big_free(x), alloc_big_free(w), alloc_big_free(b), alloc_big_free(dy), alloc_big_free(y);
    alloc_big_free(dx), alloc_big_free(dw), alloc_big_free(db);
  }
  conv2d_cache_clear();
  return 0;
}
