/* 2-D convolution and transposed convolution (conv2d / conv_transpose2d as
 * PyTorch defines them): forward, gradient of the input ("backward data")
 * and gradient of the weights and bias ("backward weights"), on oneDNN's
 * convolution and deconvolution primitives, in fp32 or with bf16 inputs and
 * fp32 accumulation. A direct double-precision reference of every pass
 * (conv2d_ref_*) exists for the tests.
 *
 * Layouts (all row-major, contiguous, float):
 *   x     [batch, in_channels, in_h, in_w]            (NCHW, the default)
 *         or [batch, in_h, in_w, in_channels]         (NHWC: x_layout = CONV2D_NHWC)
 *   y     [batch, out_channels, out_h, out_w]         (NCHW, the default)
 *         or [batch, out_h, out_w, out_channels]      (NHWC: y_layout = CONV2D_NHWC)
 *         or [batch, channels / 16, h, w, 16]          (blocked: CONV2D_NCHW16C, oneDNN's
 *                                                      nChw16c; channels a multiple of 16)
 *   (dx has x's layout and dy has y's.) A chain of convolutions whose
 *   activations stay channels-last or blocked between layers runs oneDNN's
 *   kernels on the caller's memory; NCHW tensors are reordered to and from
 *   the blocked layout oneDNN picks on every call. With one channel NCHW
 *   and NHWC are the same memory.
 *   w     conv:       [out_channels, in_channels / groups, kernel_h, kernel_w]
 *         transposed: [in_channels, out_channels / groups, kernel_h, kernel_w]
 *         (both are PyTorch's weight layouts; group g owns the g-th slice
 *         of the first dimension)
 *   bias  [out_channels]
 *
 * Sizes, per spatial axis (k = dilation (kernel - 1) + 1):
 *   conv:       out = (in + 2 pad - k) / stride + 1        (floor)
 *   transposed: out = (in - 1) stride - 2 pad + k + output_pad
 * Input rows/columns a convolution's floor skips get no gradient (zero),
 * output rows/columns of a transposed convolution no kernel tap reaches
 * hold the bias, exactly as in PyTorch.
 *
 * What accumulates: forward overwrites y. The backward passes overwrite
 * their outputs when `accumulate` is 0 and add to them when it is 1 (the
 * trainer sums parameter gradients over micro-batches; a layer whose input
 * feeds a residual adds its dx).
 *
 * Direct kernels. A convolution with few channels on one side (at most
 * CONV2D_DIRECT_NARROW input or output channels: a grey or RGB image in, a
 * residual image out), stride 1, groups 1, not transposed, fp32, runs on
 * fivefold's own vectorised kernels (kern/conv2d_direct.c: AVX-512, AVX2 or
 * scalar, fixed at build time) instead of oneDNN, whose blocked kernels pad
 * such a side to 16 channels. Their results are bit-identical for any
 * number of threads (each output is summed by one thread in a fixed
 * order). Which passes of such a shape run there (conv2d_uses_direct),
 * as measured against oneDNN (bench_conv):
 *   - backward-data: always (oneDNN's few-channel data gradient ran 3 to 4
 *     times slower);
 *   - forward: always for a narrow output; for a narrow input only when
 *     the wide output is not NCHW (oneDNN's forward for few input channels
 *     is as fast as the direct one, which would transpose an NCHW output
 *     from channels-last on every call: 3.3 against 2.5 ms for 3 -> 64
 *     channels at 128 x 128, bench_conv's deblur_stem_7x7);
 *   - weight gradient: only while the wide side (all images) holds at most
 *     CONV2D_DIRECT_WEIGHTS_MAX floats: its kernel reads the wide tensor
 *     once per narrow channel and kernel row, which pays while the tensor
 *     stays in a core's cache (deblur_stem_7x7's 4 MiB: 11 ms direct
 *     against 3.4 ms on oneDNN; the deblurring generator's 1 MiB: 0.4 ms
 *     against 2.4 ms).
 * conv2d_set_direct(0) sends every pass to oneDNN (benchmarks compare the
 * two).
 *
 * Winograd. A shape with winograd = 1 that is a 3x3 convolution, stride
 * and dilation 1, groups 1, not transposed, fp32, with both sides'
 * channels multiples of 16, runs oneDNN's Winograd F(4x4, 3x3) kernels
 * (2.25 times fewer multiplications than direct; measured about 1.4 times
 * faster at 32 channels, 32 x 32, one thread); any other shape ignores the
 * hint. The backward-weights pass runs Winograd on one OpenMP thread only
 * (with more it measured no faster than direct). Its rounding error is larger than a direct convolution's (the
 * transforms add and scale terms of different magnitude): tests bound it
 * against the reference. oneDNN's Winograd kernels take blocked tensors
 * only: NCHW ones are reordered on every call (as for direct), and with a
 * channels-last side the hint is ignored. Winograd pays with blocked
 * tensors on both sides.
 *
 * Primitives are created on the first call of a shape and kept in a small
 * process-wide cache keyed by the full description (shape, pass,
 * precision, accumulate, bias, thread count), so that repeated calls of the
 * same layer create nothing; the cache is thread-safe (calls of one entry
 * from several threads run one after the other).
 *
 * Errors: ERR_ARG for a shape that is not a convolution (the message names
 * the field and what was expected), ERR_UNSUPPORTED for bf16 on a CPU (or
 * an oneDNN ISA cap) without AVX-512 BF16, ERR_INTERNAL when oneDNN fails,
 * ERR_NOMEM. */
#ifndef FIVEFOLD_KERN_CONV2D_H
#define FIVEFOLD_KERN_CONV2D_H

#include <stddef.h>

#include "base/error.h"

typedef enum Conv2dLayout {
  CONV2D_NCHW = 0,    /* [batch, channels, h, w] */
  CONV2D_NHWC = 1,    /* [batch, h, w, channels]: channels-last */
  CONV2D_NCHW16C = 2, /* [batch, channels / 16, h, w, 16]: blocked, channels a multiple of 16 */
} Conv2dLayout;

/* At most this many channels on one side send a shape to the direct kernels. */
#define CONV2D_DIRECT_NARROW 4
/* The largest wide side (floats, all images) whose weight gradient runs direct: 2 MiB. */
#define CONV2D_DIRECT_WEIGHTS_MAX ((size_t)1 << 19)

typedef struct Conv2dShape {
  int batch;
  int in_channels, in_h, in_w;
  int out_channels;
  int kernel_h, kernel_w;
  int stride_h, stride_w;     /* >= 1 */
  int pad_h, pad_w;           /* zero padding on both sides, 0 <= pad < k */
  int dilation_h, dilation_w; /* >= 1; 1 is an ordinary kernel */
  int groups;                 /* >= 1, divides in_channels and out_channels */
  int transposed;             /* 0: conv2d, 1: conv_transpose2d */
  int output_pad_h, output_pad_w; /* transposed only: < max(stride, dilation) */
  int x_layout, y_layout;         /* Conv2dLayout of x (and dx) and of y (and dy); 0 is NCHW */
  int winograd; /* 1: Winograd F(4x4, 3x3) where oneDNN has it (below), else ignored */
} Conv2dShape;

typedef enum Conv2dPrecision {
  CONV2D_FP32 = 0, /* fp32 inputs, fp32 accumulation */
  CONV2D_BF16 = 1, /* x, w, dy rounded to bf16; fp32 accumulation and outputs */
} Conv2dPrecision;

/* A Conv2dShape with stride, dilation and groups 1 and no padding. */
Conv2dShape conv2d_shape_default(void);

/* Checks the shape and computes the output size. */
int conv2d_output_size(const Conv2dShape *s, int *out_h, int *out_w, Error *err);

/* Element counts of x, y and w; 0 when the shape is invalid. */
size_t conv2d_input_count(const Conv2dShape *s);
size_t conv2d_output_count(const Conv2dShape *s);
size_t conv2d_weight_count(const Conv2dShape *s);

/* Multiply-adds of the forward pass (each backward pass costs the same). */
double conv2d_forward_flops(const Conv2dShape *s);

/* 1 when bf16 convolutions can run here (AVX-512 BF16 in the CPU and in
 * oneDNN's effective ISA), 0 otherwise; `why` (if not NULL) says which. */
int conv2d_bf16_supported(char *why, size_t why_size);

/* y = conv(x, w) + bias (bias may be NULL). */
int conv2d_forward(const Conv2dShape *s, Conv2dPrecision prec, float *y, const float *x, const float *w,
                   const float *bias, Error *err);

/* What a forward pass does with its result before it stores it, inside the
 * kernel (oneDNN's post-ops; the direct kernels' stores): a network saves
 * the pass over memory that a separate residual add or ReLU would take. */
typedef struct Conv2dEpilogue {
  int accumulate; /* 1: y = y + conv(x, w) + bias (y holds a residual, say) */
  int relu;       /* 1: then y = max(y, 0) */
} Conv2dEpilogue;

int conv2d_forward_epilogue(const Conv2dShape *s, Conv2dPrecision prec, float *y, const float *x, const float *w,
                            const float *bias, Conv2dEpilogue ep, Error *err);

/* dx (=|+=) d loss / d x, given dy = d loss / d y. */
int conv2d_backward_data(const Conv2dShape *s, Conv2dPrecision prec, float *dx, const float *dy, const float *w,
                         int accumulate, Error *err);

/* dw (=|+=) d loss / d w and, when dbias is not NULL, dbias (=|+=) the sum
 * of dy over batch and space. */
int conv2d_backward_weights(const Conv2dShape *s, Conv2dPrecision prec, float *dw, float *dbias, const float *dy,
                            const float *x, int accumulate, Error *err);

typedef enum Conv2dPass {
  CONV2D_PASS_FORWARD = 0,
  CONV2D_PASS_BACKWARD_DATA = 1,
  CONV2D_PASS_BACKWARD_WEIGHTS = 2,
} Conv2dPass;

/* 1 when this pass of this shape and precision runs on the direct kernels
 * (see "Direct kernels" above), 0 when on oneDNN (or when the shape is
 * invalid). */
int conv2d_uses_direct(const Conv2dShape *s, Conv2dPrecision prec, Conv2dPass pass);
/* Process-wide: 1 (default) lets conv2d_uses_direct's passes run on the
 * direct kernels, 0 runs every pass on oneDNN. Set it between calls, not
 * while another thread convolves. */
void conv2d_set_direct(int enabled);
int conv2d_direct_enabled(void);
/* Passes run on the direct kernels, and on oneDNN's Winograd kernels,
 * since start (tests prove the dispatch). */
size_t conv2d_direct_calls(void);
size_t conv2d_winograd_calls(void);
/* The instruction set the direct kernels were built for: "avx512", "avx2"
 * or "scalar". */
const char *conv2d_direct_isa(void);

/* Primitive cache: entries held now, and primitives created since start
 * (tests use it to prove that a repeated call creates nothing). */
size_t conv2d_cache_entries(void);
size_t conv2d_cache_creations(void);
/* Frees every cached primitive (at exit, or to bound memory). */
void conv2d_cache_clear(void);

/* Direct reference, fp32 inputs, double outputs (overwritten), plain loops:
 * slow, for tests only. NCHW tensors only (ERR_ARG for a shape with an NHWC
 * layout): the tests transpose, so that the reference stays independent of
 * the layout code it checks. */
int conv2d_ref_forward(const Conv2dShape *s, double *y, const float *x, const float *w, const float *bias,
                       Error *err);
int conv2d_ref_backward_data(const Conv2dShape *s, double *dx, const float *dy, const float *w, Error *err);
int conv2d_ref_backward_weights(const Conv2dShape *s, double *dw, double *dbias, const float *dy, const float *x,
                                Error *err);

#endif
