/* 2-D convolution and transposed convolution (conv2d / conv_transpose2d as
 * PyTorch defines them): forward, gradient of the input ("backward data")
 * and gradient of the weights and bias ("backward weights"), on oneDNN's
 * convolution and deconvolution primitives, in fp32 or with bf16 inputs and
 * fp32 accumulation. A direct double-precision reference of every pass
 * (conv2d_ref_*) exists for the tests.
 *
 * Layouts (all row-major, contiguous, float):
 *   x     [batch, in_channels, in_h, in_w]            (NCHW)
 *   y     [batch, out_channels, out_h, out_w]         (NCHW)
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

/* dx (=|+=) d loss / d x, given dy = d loss / d y. */
int conv2d_backward_data(const Conv2dShape *s, Conv2dPrecision prec, float *dx, const float *dy, const float *w,
                         int accumulate, Error *err);

/* dw (=|+=) d loss / d w and, when dbias is not NULL, dbias (=|+=) the sum
 * of dy over batch and space. */
int conv2d_backward_weights(const Conv2dShape *s, Conv2dPrecision prec, float *dw, float *dbias, const float *dy,
                            const float *x, int accumulate, Error *err);

/* Primitive cache: entries held now, and primitives created since start
 * (tests use it to prove that a repeated call creates nothing). */
size_t conv2d_cache_entries(void);
size_t conv2d_cache_creations(void);
/* Frees every cached primitive (at exit, or to bound memory). */
void conv2d_cache_clear(void);

/* Direct reference, fp32 inputs, double outputs (overwritten), plain loops:
 * slow, for tests only. */
int conv2d_ref_forward(const Conv2dShape *s, double *y, const float *x, const float *w, const float *bias,
                       Error *err);
int conv2d_ref_backward_data(const Conv2dShape *s, double *dx, const float *dy, const float *w, Error *err);
int conv2d_ref_backward_weights(const Conv2dShape *s, double *dw, double *dbias, const float *dy, const float *x,
                                Error *err);

#endif
