/* Flash attention in bf16: the vdpbf16ps tile product against a double
 * reference over the same bf16-rounded operands (odd and tiny shapes, a
 * transposed A, accumulate and overwrite), and whole attention forward and
 * backward in bf16 against fp32.
 *
 * Bounds. The tile product's inputs are rounded to bf16 exactly as the
 * reference rounds them, so the only difference is fp32 summation of k
 * exact products: |err| <= 4 * (k + 2) * 2^-24 * sum_p |a_ip b_pj| (+ the
 * accumulated C term). Whole attention: scores and P.V see bf16 inputs
 * (relative error u = 2^-8 per input), so outputs and gradients are
 * stated relative to fp32 within 8 u = 2^-5 of their max magnitude, and
 * must differ from fp32 (the bf16 path really ran). SKIPs where bf16 cannot
 * run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "kern/attention.h"
#include "kern/attention_internal.h"
#include "kern/bf16.h"
#include "kern/kern_test_util.h"
#include "kern/precision.h"

static void check_tile(int m, int n, int k, int trans_a, int accumulate, uint64_t seed) {
  const long lda = trans_a ? m + 5 : k + 3, ldb = n + 2, ldc = n + 1;
  const long rsa = trans_a ? 1 : lda, csa = trans_a ? lda : 1;
  const size_t a_elems = (size_t)(trans_a ? k : m) * lda, b_elems = (size_t)k * ldb, c_elems = (size_t)m * ldc;
  float *a = test_alloc(a_elems), *b = test_alloc(b_elems), *c = test_alloc(c_elems), *c0 = test_alloc(c_elems);
  test_fill_normal(a, a_elems, seed, 1.0f);
  test_fill_normal(b, b_elems, seed + 1, 1.0f);
  test_fill_normal(c0, c_elems, seed + 2, 1.0f);
  memcpy(c, c0, c_elems * sizeof *c);
  attn_tile_gemm_bf16(m, n, k, a, rsa, csa, b, ldb, c, ldc, accumulate);
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      double ref = accumulate ? c0[i * ldc + j] : 0.0, mag = fabs(ref);
      for (int p = 0; p < k; p++) {
        const double prod = (double)bf16_round(a[i * rsa + p * csa]) * (double)bf16_round(b[p * ldb + j]);
        ref += prod;
        mag += fabs(prod);
      }
      const double bound = 4.0 * (k + 2) * ldexp(1.0, -24) * mag + 1e-30;
      const double got = c[i * ldc + j];
      if (!(fabs(got - ref) <= bound))
        fail_msg("tile m=%d n=%d k=%d trans_a=%d acc=%d [%d,%d]: %.9g vs %.9g (bound %.3g)", m, n, k, trans_a,
                 accumulate, i, j, got, ref, bound);
    }
    for (int j = n; j < ldc; j++) assert_true(c[i * ldc + j] == c0[i * ldc + j]); /* outside the tile */
  }
  free(a), free(b), free(c), free(c0);
}

static void test_tile_product(void **state) {
  (void)state;
  /* Shapes run through both the vector kernel and its edges (rows not a
   * multiple of 6, columns not of 16 or 32, odd k) on any machine; where
   * the build lacks AVX-512 BF16 they exercise the scalar path. */
  static const int dims[][3] = {{1, 1, 1}, {6, 16, 2}, {7, 17, 3}, {5, 33, 9}, {64, 64, 64}, {64, 64, 80},
                                {13, 48, 64}, {64, 128, 64}, {2, 31, 65}};
  uint64_t seed = 500;
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int t = 0; t < 2; t++)
      for (int acc = 0; acc < 2; acc++) check_tile(dims[d][0], dims[d][1], dims[d][2], t, acc, seed += 3);
}

static double max_abs(const float *x, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

/* max |a - b| / max |b|, and whether any element differs at all. */
static double rel_diff(const float *a, const float *b, size_t n, int *differs) {
  double d = 0.0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    if (a[i] != b[i]) *differs = 1;
  }
  return d / fmax(max_abs(b, n), 1e-30);
}

static void test_attention_bf16_against_fp32(void **state) {
  (void)state;
  char why[512];
  if (!kern_bf16_supported(why, sizeof why)) {
    print_message("bf16 unsupported here: %s\n", why);
    skip();
  }
  const int B = 2, T = 75, Hq = 4, Hkv = 2, D = 32;
  const size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * Hq * T;
  float *q = test_alloc(nq), *k = test_alloc(nk), *v = test_alloc(nk), *dout = test_alloc(nq);
  test_fill_normal(q, nq, 1, 1.0f);
  test_fill_normal(k, nk, 2, 1.0f);
  test_fill_normal(v, nk, 3, 1.0f);
  test_fill_normal(dout, nq, 4, 1.0f);
  float *out[2], *lse[2], *dq[2], *dk[2], *dv[2];
  for (int p = 0; p < 2; p++) {
    out[p] = test_alloc(nq), lse[p] = test_alloc(nl), dq[p] = test_alloc(nq), dk[p] = test_alloc(nk);
    dv[p] = test_alloc(nk);
    assert_int_equal(kern_set_precision(p ? KERN_PRECISION_BF16 : KERN_PRECISION_FP32, why, sizeof why), 0);
    attention_forward(out[p], lse[p], q, k, v, B, T, Hq, Hkv, D);
    attention_backward(dq[p], dk[p], dv[p], dout, out[p], lse[p], q, k, v, B, T, Hq, Hkv, D);
  }
  assert_int_equal(kern_set_precision(KERN_PRECISION_FP32, why, sizeof why), 0);
  const double bound = ldexp(1.0, -5);
  int differs = 0;
  const double e_out = rel_diff(out[1], out[0], nq, &differs), e_lse = rel_diff(lse[1], lse[0], nl, &differs);
  const double e_dq = rel_diff(dq[1], dq[0], nq, &differs), e_dk = rel_diff(dk[1], dk[0], nk, &differs);
  const double e_dv = rel_diff(dv[1], dv[0], nk, &differs);
  print_message("bf16 vs fp32 attention (relative to max): out %.3g lse %.3g dq %.3g dk %.3g dv %.3g (bound %.3g)\n",
                e_out, e_lse, e_dq, e_dk, e_dv, bound);
  assert_true(differs); /* the bf16 path ran */
  assert_true(e_out < bound && e_lse < bound && e_dq < bound && e_dk < bound && e_dv < bound);
  for (int p = 0; p < 2; p++) free(out[p]), free(lse[p]), free(dq[p]), free(dk[p]), free(dv[p]);
  free(q), free(k), free(v), free(dout);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tile_product),
      cmocka_unit_test(test_attention_bf16_against_fp32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
