/* Tropical (max-plus / min-plus) kernels: the dense tropical product and the
 * six tropical convolutions of the TCNN paper, forward with winner indices
 * and the backward pass that routes each output's gradient to its winners
 * (a subgradient). Plain double-loop references (tropical_*_ref_*) exist
 * for the tests.
 *
 * Dense product, weights stored [out, in] like a linear layer:
 *   max-plus  y[m, j] = max_k (x[m, k] + w[j, k]) + bias[j]
 *   min-plus  y[m, j] = min_k (x[m, k] + w[j, k]) + bias[j]
 *   winner[m, j] = the k that attains it.
 *
 * Convolution (NCHW, stride, zero padding, no bias), per output pixel
 * (n, o, i, j) and input channel c:
 *   inner[c] = max|min over (a, b) in the kh x kw window of
 *              (xpad[n, c, i sh - ph + a, j sw - pw + b] + w[o, c, a, b])
 *   y[n, o, i, j] = sum|max|min over c of inner[c]
 * where xpad is x with zeros outside it: padded taps take part, with the
 * value 0 + w (the authors' unfold-based code does the same).
 *
 * TIE RULE, for every path (AVX-512, AVX2, scalar, reference): among equal
 * candidates the FIRST (lowest) index wins: the lowest k in the product;
 * the lowest window position (a kw + b) in an inner reduction; the lowest
 * channel c in an outer max/min. A candidate replaces the running best only
 * when strictly better, so NaN candidates never win; if no candidate beats
 * the starting value (-inf for max, +inf for min, e.g. all candidates
 * -inf) the winner is index 0.
 *
 * Winner layouts (int32; q = n out_h out_w + i out_w + j runs over the
 * output pixels of the whole batch):
 *   product             winner[m, j] = k*                        [m, n]
 *   conv, outer sum     winner[c, o, q] = a* kw + b*             [in_channels, out_channels, batch out_h out_w]
 *   conv, outer max/min winner[o, q] = c* kh kw + a* kw + b*     [out_channels, batch out_h out_w]
 * Pixels are fastest because the convolution vectorises over them; an
 * outer max/min keeps only the winning channel's inner winner, the one its
 * backward needs.
 *
 * Backward (winners from the forward; x and w are not needed):
 *   product  dx[m, k*] += dy[m, j]; dw[j, k*] += dy[m, j]; dbias[j] += dy[m, j]
 *   conv     outer sum: for every channel c, the input tap and weight of
 *            c's inner winner get dy; outer max/min: only the winning
 *            channel's. Padded taps give no dx.
 * `accumulate` 0 overwrites dx/dw/dbias, 1 adds to them; any of them may be
 * NULL to skip it. Every sum runs in a fixed order (dx by row / image
 * ownership over ascending j / (o, p); dw and dbias by output-row
 * ownership over ascending m / (n, p)), so results are bit-identical for
 * any thread count, and equal to the reference's.
 *
 * Threads: OpenMP over blocks of outputs; each output is computed by one
 * thread in a fixed order. The dense product packs w into panels of
 * 16 (AVX-512) or 8 (AVX2, scalar) outputs and runs register tiles of
 * 8 (AVX-512) or 4 rows against one panel, K blocked by 256 so the panel
 * block stays in L1. With winners, the tile keeps only each chunk of 8
 * candidates' best and the first chunk that strictly improved each
 * output (a compare and two selects per 8 candidates instead of per
 * candidate); the winner inside that chunk is found afterwards as the
 * first candidate equal to the output, which is the same tie rule. The convolution is a transposed im2col (one row per
 * channel and tap, output pixels of the whole batch contiguous) and a
 * direct register tile of up to 6 (AVX-512) or 2 output channels x 16 or
 * 8 output pixels that does the inner and outer reductions of all six
 * variants in registers. Vectorising over pixels rather than output
 * channels keeps every lane busy at the few-channel shapes of tropical
 * CNNs (4-16 channels); im2col plus the product would waste 3/4 of the
 * lanes at 4 channels and cannot express the mixed variants. Packing and
 * im2col buffers are per calling thread
 * and reused across calls (tropical_scratch_release frees them). */
#ifndef FIVEFOLD_KERN_TROPICAL_H
#define FIVEFOLD_KERN_TROPICAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum TropicalSemiring {
  TROPICAL_MAX_PLUS = 0,
  TROPICAL_MIN_PLUS = 1,
} TropicalSemiring;

typedef enum TropicalInner {
  TROPICAL_INNER_MAX = 0,
  TROPICAL_INNER_MIN = 1,
} TropicalInner;

typedef enum TropicalOuter {
  TROPICAL_OUTER_SUM = 0,
  TROPICAL_OUTER_MAX = 1,
  TROPICAL_OUTER_MIN = 2,
} TropicalOuter;

typedef struct TropicalConvShape {
  int batch;
  int in_channels, in_h, in_w;
  int out_channels;
  int kernel_h, kernel_w;
  int stride_h, stride_w; /* >= 1 */
  int pad_h, pad_w;       /* zero padding on both sides, 0 <= pad < kernel */
  TropicalInner inner;
  TropicalOuter outer;
} TropicalConvShape;

/* "avx512", "avx2" or "scalar": the path this build runs. */
const char *tropical_isa(void);

/* Frees the calling thread's packing / im2col buffers. */
void tropical_scratch_release(void);

/* y (m x n) and winner (m x n, may be NULL for inference: then the faster
 * value-only kernel runs) from x (m x k) and w (n x k); bias may be NULL.
 * ERR_ARG when m, n or k < 1. */
int tropical_matmul_forward(TropicalSemiring semiring, int m, int n, int k, const float *x, const float *w,
                            const float *bias, float *y, int32_t *winner, Error *err);

/* dx (m x k), dw (n x k), dbias (n) from dy (m x n) and the forward's
 * winners; see the contract above. */
int tropical_matmul_backward(int m, int n, int k, const float *dy, const int32_t *winner, float *dx, float *dw,
                             float *dbias, int accumulate, Error *err);

/* Checks the shape and computes the output size; the message names the
 * field and what was expected. */
int tropical_conv2d_output_size(const TropicalConvShape *s, int *out_h, int *out_w, Error *err);

/* Element counts; 0 when the shape is invalid. */
size_t tropical_conv2d_input_count(const TropicalConvShape *s);
size_t tropical_conv2d_output_count(const TropicalConvShape *s);
size_t tropical_conv2d_weight_count(const TropicalConvShape *s);
size_t tropical_conv2d_winner_count(const TropicalConvShape *s);

/* Tropical multiply-adds (x + w candidates) of the forward pass. */
double tropical_conv2d_forward_ops(const TropicalConvShape *s);

/* "max_sum", "min_max", ...: inner then outer reduction. */
const char *tropical_conv2d_variant_name(TropicalInner inner, TropicalOuter outer);

/* y [batch, out_channels, out_h, out_w] and winner (layout above; not NULL). */
int tropical_conv2d_forward(const TropicalConvShape *s, const float *x, const float *w, float *y, int32_t *winner,
                            Error *err);

/* dx [batch, in_channels, in_h, in_w] and dw [out_channels, in_channels,
 * kh, kw] from dy and the forward's winners. */
int tropical_conv2d_backward(const TropicalConvShape *s, const float *dy, const int32_t *winner, float *dx, float *dw,
                             int accumulate, Error *err);

/* References: plain loops in float with the same rounding and tie rule, so
 * that every fast path must equal them exactly. The backward references
 * find the winners again from x and w (they do not trust the fast
 * forward's) and overwrite their outputs. */
int tropical_matmul_ref_forward(TropicalSemiring semiring, int m, int n, int k, const float *x, const float *w,
                                const float *bias, float *y, int32_t *winner, Error *err);
int tropical_matmul_ref_backward(TropicalSemiring semiring, int m, int n, int k, const float *x, const float *w,
                                 const float *dy, float *dx, float *dw, float *dbias, Error *err);
int tropical_conv2d_ref_forward(const TropicalConvShape *s, const float *x, const float *w, float *y,
                                int32_t *winner, Error *err);
int tropical_conv2d_ref_backward(const TropicalConvShape *s, const float *x, const float *w, const float *dy,
                                 float *dx, float *dw, Error *err);

#endif
