/* AdamW update and the global-norm clipping factor, matching
 * torch.optim.AdamW (single-tensor, fp32) and
 * torch.nn.utils.clip_grad_norm_. */
#include "kern/adamw.h"

#include <math.h>

#include "kern/kern_util.h"

typedef struct AdamWConsts {
  float decay, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps, grad_scale;
} AdamWConsts;

static void adamw_range_scalar(float *param, const float *grad, float *m, float *v, size_t i0, size_t i1,
                               const AdamWConsts *k) {
  for (size_t i = i0; i < i1; i++) {
    float g = grad[i] * k->grad_scale;
    float p = param[i] * k->decay;
    float mi = m[i] + k->one_minus_beta1 * (g - m[i]);
    float vi = k->beta2 * v[i] + k->one_minus_beta2 * g * g;
    float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
    param[i] = p - k->step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

#if defined(__AVX__)
#include <immintrin.h>
/* The same update 8 lanes at a time: sqrtf keeps the plain loop scalar
 * (errno semantics forbid vectorising it without -fno-math-errno). */
static void adamw_range(float *param, const float *grad, float *m, float *v, size_t i0, size_t i1,
                        const AdamWConsts *k) {
  const __m256 grad_scale = _mm256_set1_ps(k->grad_scale), decay = _mm256_set1_ps(k->decay);
  const __m256 one_minus_beta1 = _mm256_set1_ps(k->one_minus_beta1), beta2 = _mm256_set1_ps(k->beta2);
  const __m256 one_minus_beta2 = _mm256_set1_ps(k->one_minus_beta2), step_size = _mm256_set1_ps(k->step_size);
  const __m256 bc2_sqrt = _mm256_set1_ps(k->bc2_sqrt), eps = _mm256_set1_ps(k->eps);
  size_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), grad_scale);
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param + i), decay);
    __m256 mi = _mm256_loadu_ps(m + i);
    mi = _mm256_add_ps(mi, _mm256_mul_ps(one_minus_beta1, _mm256_sub_ps(g, mi)));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(beta2, _mm256_loadu_ps(v + i)),
                              _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2_sqrt), eps);
    p = _mm256_sub_ps(p, _mm256_mul_ps(step_size, _mm256_div_ps(mi, denom)));
    _mm256_storeu_ps(param + i, p);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  adamw_range_scalar(param, grad, m, v, i, i1, k);
}
#else
#define adamw_range adamw_range_scalar
#endif

/* The operation order follows PyTorch's implementation so results agree to
 * float rounding: decay first, m by lerp, the denominator as
 * sqrt(v) / sqrt(1 - beta2^t) + eps, then p -= lr / (1 - beta1^t) * m / denom.
 * Scalars are computed once per call in double, as PyTorch does in Python. */
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, int t, const AdamWHyper *h,
                  float grad_scale) {
  const double bias_correction1 = 1.0 - pow((double)h->beta1, (double)t);
  const double bias_correction2 = 1.0 - pow((double)h->beta2, (double)t);
  AdamWConsts k = {
      .decay = (float)(1.0 - (double)h->lr * (double)h->weight_decay),
      .one_minus_beta1 = (float)(1.0 - (double)h->beta1),
      .beta2 = h->beta2,
      .one_minus_beta2 = (float)(1.0 - (double)h->beta2),
      .step_size = (float)((double)h->lr / bias_correction1),
      .bc2_sqrt = (float)sqrt(bias_correction2),
      .eps = h->eps,
      .grad_scale = grad_scale,
  };
  const size_t block = 8192;
  const size_t n_blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (size_t b = 0; b < n_blocks; b++) {
    size_t i0 = b * block, i1 = i0 + block < n ? i0 + block : n;
    adamw_range(param, grad, m, v, i0, i1, &k);
  }
}

float clip_grad_scale(double total_sumsq, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  double coef = (double)max_norm / (sqrt(total_sumsq) + 1e-6);
  return coef < 1.0 ? (float)coef : 1.0f;
}
