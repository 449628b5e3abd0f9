/* GEMM backends (oneDNN and OpenBLAS, fp32; oneDNN bf16) against a double
 * reference: every transpose, tiny and odd shapes, leading dimensions
 * wider than the rows, alpha != 1, beta 0 / 1 / other, K = 0; bf16
 * rounding; oneDNN called from OpenMP workers concurrently; primitives not
 * multiplying with the shapes; the fixed-shape bf16 primitives. Registered twice: as is, and with
 * ONEDNN_MAX_CPU_ISA=AVX2 (kern.gemm_backends_avx2), where fp32 must still
 * pass and bf16 must be refused with a message naming the cause.
 *
 * Error bounds, with S = max|op(A)| * max|op(B)| over the product:
 *   fp32:  |err| <= |alpha| * 4 * (K + 2) * 2^-24 * S + 2^-23 * |beta C0|
 *          (worst-case fp32 summation of K products, c = 4),
 *   bf16:  |err| <= |alpha| * c * K * 2^-8 * S + fp32 bound, c = 2 + 2^-8
 *          (each input rounded to bf16's 8-bit significand: relative error
 *          u <= 2^-8 per input, so <= 2u + u^2 per product, summed over K),
 * and, tighter, bf16 against the double product of the bf16-ROUNDED inputs
 * within the fp32 bound: the only error bf16 may add is input rounding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>
#include <string.h>

#include "kern/bf16.h"
#include "kern/gemm.h"
#include "kern/kern_test_util.h"

typedef struct Shape {
  int M, N, K;
} Shape;

static const Shape SHAPES[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {1, 40, 9}, {23, 1, 31}, {64, 48, 129}, {5, 70, 2}};
enum { PAD = 3 };

static int capped_to_avx2(void) {
  const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
  if (!cap) cap = getenv("DNNL_MAX_CPU_ISA");
  return cap && strcasecmp(cap, "AVX2") == 0;
}

static double op_at(const float *X, int trans, int ld, int r, int c, int round_bf16) {
  float v = trans ? X[(long)c * ld + r] : X[(long)r * ld + c];
  return round_bf16 ? (double)bf16_round(v) : (double)v;
}

/* One case: returns the worst |err| / bound (must be <= 1). */
static double check_case(GemmBackend backend, KernPrecision prec, int ta, int tb, Shape s, float alpha, float beta,
                         uint64_t seed) {
  const int M = s.M, N = s.N, K = s.K;
  const int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
  const int rows_a = ta ? K : M, rows_b = tb ? N : K;
  float *A = test_alloc((size_t)rows_a * lda + 1), *B = test_alloc((size_t)rows_b * ldb + 1);
  float *C = test_alloc((size_t)M * ldc), *C0 = test_alloc((size_t)M * ldc);
  test_fill_normal(A, (size_t)rows_a * lda, seed, 1.0f);
  test_fill_normal(B, (size_t)rows_b * ldb, seed + 1, 2.0f);
  test_fill_normal(C0, (size_t)M * ldc, seed + 2, 1.0f);
  if (beta == 0.0f) C0[0] = NAN; /* beta 0 overwrites, NaN included */
  memcpy(C, C0, sizeof *C * (size_t)M * ldc);
  char err[512] = "";
  int rc = gemm_with(backend, prec, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, err, sizeof err);
  if (rc != 0)
    fail_msg("gemm_with(%s, %s) M=%d N=%d K=%d ta=%d tb=%d alpha=%g beta=%g failed: %s", kern_gemm_backend_name(backend),
             kern_precision_name(prec), M, N, K, ta, tb, alpha, beta, err);
  double amax = 0.0, bmax = 0.0;
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) amax = fmax(amax, fabs(op_at(A, ta, lda, i, k, 0)));
  for (int k = 0; k < K; k++)
    for (int j = 0; j < N; j++) bmax = fmax(bmax, fabs(op_at(B, tb, ldb, k, j, 0)));
  const double S = amax * bmax, u32 = ldexp(1.0, -24);
  const int is_bf16 = prec == KERN_PRECISION_BF16;
  double worst = 0.0;
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      double exact = 0.0, rounded = 0.0;
      for (int k = 0; k < K; k++) {
        exact += op_at(A, ta, lda, i, k, 0) * op_at(B, tb, ldb, k, j, 0);
        rounded += op_at(A, ta, lda, i, k, 1) * op_at(B, tb, ldb, k, j, 1);
      }
      const double c0 = beta == 0.0f ? 0.0 : (double)beta * C0[(long)i * ldc + j];
      const double fp32_bound = fabs(alpha) * 4.0 * (K + 2) * u32 * S + 2.0 * u32 * fabs(c0) + 1e-30;
      const double bound = fp32_bound + (is_bf16 ? fabs(alpha) * (2.0 + ldexp(1.0, -8)) * K * ldexp(1.0, -8) * S : 0.0);
      const double got = C[(long)i * ldc + j];
      double r = fabs(got - (alpha * exact + c0)) / bound;
      if (is_bf16) r = fmax(r, fabs(got - (alpha * rounded + c0)) / fp32_bound);
      if (isnan(got)) r = INFINITY;
      if (r > 1.0)
        print_message("  [%d,%d] got %.9g exact %.9g bf16-input product %.9g (beta C0 %.9g, bound %.3g)\n", i, j, got,
                      alpha * exact + c0, alpha * rounded + c0, c0, bound);
      worst = fmax(worst, r);
    }
    /* Columns past N belong to nobody's product. */
    for (int j = N; j < ldc; j++) assert_true(memcmp(&C[(long)i * ldc + j], &C0[(long)i * ldc + j], sizeof(float)) == 0);
  }
  free(A), free(B), free(C), free(C0);
  return worst;
}

static void sweep(GemmBackend backend, KernPrecision prec) {
  const float alphas[] = {1.0f, 0.7f}, betas[] = {0.0f, 1.0f, -1.5f};
  double worst = 0.0;
  uint64_t seed = 100;
  for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int ai = 0; ai < 2; ai++)
          for (int bi = 0; bi < 3; bi++) {
            double r = check_case(backend, prec, ta, tb, SHAPES[si], alphas[ai], betas[bi], seed += 3);
            if (r > 1.0)
              fail_msg("%s %s M=%d N=%d K=%d ta=%d tb=%d alpha=%g beta=%g: error %.3g x the bound",
                       kern_gemm_backend_name(backend), kern_precision_name(prec), SHAPES[si].M, SHAPES[si].N,
                       SHAPES[si].K, ta, tb, alphas[ai], betas[bi], r);
            worst = fmax(worst, r);
          }
  print_message("%s %s: worst error %.3g of the bound\n", kern_gemm_backend_name(backend), kern_precision_name(prec),
                worst);
}

static void test_openblas_fp32(void **state) {
  (void)state;
  sweep(GEMM_BACKEND_OPENBLAS, KERN_PRECISION_FP32);
}

static void test_onednn_fp32(void **state) {
  (void)state;
  print_message("oneDNN ISA: %s\n", kern_gemm_isa_name());
  if (capped_to_avx2()) assert_non_null(strstr(kern_gemm_isa_name(), "avx2"));
  sweep(GEMM_BACKEND_ONEDNN, KERN_PRECISION_FP32);
}

static void test_onednn_bf16(void **state) {
  (void)state;
  char why[512] = "";
  if (!kern_bf16_supported(why, sizeof why)) {
    /* Refused, with the reason named, and nothing computed. */
    print_message("bf16 unsupported here: %s\n", why);
    assert_non_null(strstr(why, "avx512"));
    float a = 1.0f, b = 1.0f, c = 5.0f;
    assert_int_equal(gemm_with(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c,
                               1, why, sizeof why),
                     -1);
    assert_true(c == 5.0f);
    assert_int_equal(kern_set_precision(KERN_PRECISION_BF16, why, sizeof why), -1);
    assert_int_equal(kern_precision(), KERN_PRECISION_FP32);
    if (capped_to_avx2()) assert_non_null(strstr(why, "ONEDNN_MAX_CPU_ISA"));
    skip();
  }
  assert_false(capped_to_avx2()); /* the cap must take bf16 away */
  sweep(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16);
}

/* K = 0 applies beta only; M or N = 0 touches nothing. */
static void test_empty_products(void **state) {
  (void)state;
  for (int b = 0; b < 3; b++) {
    const GemmBackend backend = b == 1 ? GEMM_BACKEND_OPENBLAS : GEMM_BACKEND_ONEDNN;
    const KernPrecision prec = b == 2 ? KERN_PRECISION_BF16 : KERN_PRECISION_FP32;
    if (prec == KERN_PRECISION_BF16 && !kern_bf16_supported(NULL, 0)) continue;
    float C[6] = {1, 2, 3, 4, 5, NAN}, dummy = 0.0f;
    assert_int_equal(gemm_with(backend, prec, 0, 0, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 2.0f, C, 3, NULL, 0), 0);
    assert_true(C[0] == 2.0f && C[4] == 10.0f);
    assert_int_equal(gemm_with(backend, prec, 1, 1, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 0.0f, C, 3, NULL, 0), 0);
    for (int i = 0; i < 6; i++) assert_true(C[i] == 0.0f);
    C[0] = 7.0f;
    assert_int_equal(gemm_with(backend, prec, 0, 0, 0, 3, 4, 1.0f, &dummy, 1, &dummy, 3, 0.0f, C, 3, NULL, 0), 0);
    assert_int_equal(gemm_with(backend, prec, 0, 0, 2, 0, 4, 1.0f, &dummy, 1, &dummy, 3, 0.0f, C, 3, NULL, 0), 0);
    assert_true(C[0] == 7.0f);
  }
}

/* Round-to-nearest-even at the 8-bit significand, ties included; the
 * vector packing agrees with the scalar rounding at every position. */
static void test_bf16_rounding(void **state) {
  (void)state;
  assert_true(bf16_round(1.0f + ldexpf(1.0f, -8)) == 1.0f);                          /* tie -> even (down) */
  assert_true(bf16_round(1.0f + 3.0f * ldexpf(1.0f, -8)) == 1.0f + ldexpf(1.0f, -6)); /* tie -> even (up) */
  assert_true(bf16_round(1.0f + 1.5f * ldexpf(1.0f, -8)) == 1.0f + ldexpf(1.0f, -7)); /* above the tie */
  assert_true(bf16_round(-2.5f) == -2.5f);
  assert_true(isinf(bf16_round(INFINITY)) && isnan(bf16_round(NAN)));
  assert_true(isinf(bf16_round(3.4028235e38f))); /* FLT_MAX rounds up past bf16's largest */
  enum { ROWS = 3, COLS = 37, LD = 41 };
  float src[ROWS * LD];
  test_fill_normal(src, ROWS * LD, 7, 3.0f);
  kern_bf16 packed[ROWS * COLS + 1];
  packed[ROWS * COLS] = 0xabcd;
  bf16_pack_rows(packed, src, ROWS, COLS, LD);
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) assert_int_equal(packed[r * COLS + c], bf16_from_float(src[r * LD + c]));
  assert_int_equal(packed[ROWS * COLS], 0xabcd); /* nothing written past the end */
}

/* Per-expert GEMMs: OpenMP workers call oneDNN concurrently with different
 * row counts on the one cached primitive; each result must equal the same
 * product run alone, and the number of primitives must not grow with the
 * shapes. */
static void test_concurrent_and_cached(void **state) {
  (void)state;
  enum { EXPERTS = 12, K = 40, N = 24 };
  const int rows[EXPERTS] = {1, 7, 33, 0, 64, 5, 17, 2, 90, 11, 3, 48};
  int total = 0;
  for (int e = 0; e < EXPERTS; e++) total += rows[e];
  float *x = test_alloc((size_t)total * K), *w = test_alloc((size_t)EXPERTS * N * K);
  float *y = test_alloc((size_t)total * N), *y_alone = test_alloc((size_t)total * N);
  test_fill_normal(x, (size_t)total * K, 40, 1.0f);
  test_fill_normal(w, (size_t)EXPERTS * N * K, 41, 1.0f);
  const int precisions = kern_bf16_supported(NULL, 0) ? 2 : 1;
  for (int p = 0; p < precisions; p++) {
    const KernPrecision prec = p ? KERN_PRECISION_BF16 : KERN_PRECISION_FP32;
    int off = 0;
    for (int e = 0; e < EXPERTS; e++) {
      gemm_with(GEMM_BACKEND_ONEDNN, prec, 0, 1, rows[e], N, K, 1.0f, x + (size_t)off * K, K, w + (size_t)e * N * K, K,
                0.0f, y_alone + (size_t)off * N, N, NULL, 0);
      off += rows[e];
    }
    const int before = kern_gemm_primitive_count();
    int failures = 0;
    for (int rep = 0; rep < 4; rep++) {
      memset(y, 0xff, sizeof *y * (size_t)total * N);
#pragma omp parallel for schedule(dynamic, 1) num_threads(4) reduction(+ : failures)
      for (int e = 0; e < EXPERTS; e++) {
        int start = 0;
        for (int f = 0; f < e; f++) start += rows[f];
        failures += gemm_with(GEMM_BACKEND_ONEDNN, prec, 0, 1, rows[e], N, K, 1.0f, x + (size_t)start * K, K,
                              w + (size_t)e * N * K, K, 0.0f, y + (size_t)start * N, N, NULL, 0) != 0;
      }
      assert_int_equal(failures, 0);
      for (int i = 0; i < total * N; i++)
        if (fabsf(y[i] - y_alone[i]) > 1e-5f * (1.0f + fabsf(y_alone[i])))
          fail_msg("%s: concurrent expert product differs at %d: %g vs %g", kern_precision_name(prec), i, y[i],
                   y_alone[i]);
    }
    assert_int_equal(kern_gemm_primitive_count(), before);
  }
  /* All 16 fp32 kinds and the bf16 ones: bounded by the key space. */
  assert_true(kern_gemm_primitive_count() <= 32);
  free(x), free(w), free(y), free(y_alone);
}

/* Fixed-shape bf16 primitives (FIVEFOLD_GEMM_FIXED_SHAPES): forced on, a
 * shape's first product makes its own primitive, kept for the next, and
 * every product still meets the bounds; products marked as varying rows
 * make none; forced off, none is made; a bad value of the variable is
 * refused naming it. On a CPU without bf16 only the variable is checked. */
static void test_fixed_shapes(void **state) {
  (void)state;
  char why[512] = "";
  const int env_set = getenv("FIVEFOLD_GEMM_FIXED_SHAPES") != NULL; /* read once, at the first product */
  setenv("FIVEFOLD_GEMM_FIXED_SHAPES", "sometimes", 1);
  assert_int_equal(kern_gemm_fixed_shapes_check_env(why, sizeof why), -1);
  assert_non_null(strstr(why, "FIVEFOLD_GEMM_FIXED_SHAPES"));
  assert_non_null(strstr(why, "sometimes"));
  setenv("FIVEFOLD_GEMM_FIXED_SHAPES", "on", 1);
  assert_int_equal(kern_gemm_fixed_shapes_check_env(why, sizeof why), 0);
  unsetenv("FIVEFOLD_GEMM_FIXED_SHAPES");
  print_message("fixed shapes by default here: %s (oneDNN ISA %s)\n", kern_gemm_fixed_shapes_active() ? "on" : "off",
                kern_gemm_isa_name());
  if (!env_set) assert_int_equal(kern_gemm_fixed_shapes_active(), strstr(kern_gemm_isa_name(), "amx") != NULL);
  if (!kern_bf16_supported(NULL, 0)) skip();
  const GemmFixedShapes was = kern_gemm_fixed_shapes_mode();
  kern_gemm_set_fixed_shapes(GEMM_FIXED_SHAPES_OFF);
  const int none = kern_gemm_fixed_shape_count();
  sweep(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16);
  sweep(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16);
  assert_int_equal(kern_gemm_fixed_shape_count(), none);
  kern_gemm_set_fixed_shapes(GEMM_FIXED_SHAPES_ON);
  assert_true(kern_gemm_fixed_shapes_active());
  const int runtime_before = kern_gemm_primitive_count();
  /* A shape no other test uses: its first call makes its primitive, later
   * calls reuse it. Marked as varying rows, another new shape makes none. */
  const Shape fresh = {37, 29, 53}, varying = {41, 29, 53};
  for (int call = 1; call <= 3; call++) {
    const int before = kern_gemm_fixed_shape_count();
    const long products = kern_gemm_fixed_shape_products();
    const double r = check_case(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16, 1, 0, fresh, 1.0f, 1.0f, 900 + call);
    if (r > 1.0) fail_msg("fixed-shape bf16 product, call %d: error %.3g x the bound", call, r);
    assert_int_equal(kern_gemm_fixed_shape_count() - before, call == 1);
    assert_int_equal(kern_gemm_fixed_shape_products() - products, 1); /* it ran on its own primitive */
  }
  const int outer = kern_gemm_rows_vary_begin(), inner = kern_gemm_rows_vary_begin();
  kern_gemm_rows_vary_end(inner); /* nested: still marked */
  const int before_vary = kern_gemm_fixed_shape_count();
  const long products_vary = kern_gemm_fixed_shape_products();
  if (check_case(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16, 0, 1, varying, 1.0f, 0.0f, 950) > 1.0)
    fail_msg("varying-rows bf16 product out of bounds");
  assert_int_equal(kern_gemm_fixed_shape_count(), before_vary);
  assert_int_equal(kern_gemm_fixed_shape_products(), products_vary);
  kern_gemm_rows_vary_end(outer);
  assert_int_equal(outer, 0);
  /* Every kind of the sweep on fixed primitives. */
  sweep(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16);
  const int made = kern_gemm_fixed_shape_count();
  print_message("fixed-shape primitives made: %d\n", made);
  assert_true(made > 1);
  sweep(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16);
  assert_int_equal(kern_gemm_fixed_shape_count(), made);
  assert_int_equal(kern_gemm_primitive_count(), runtime_before);
  kern_gemm_set_fixed_shapes(was);
}

static void test_backend_selection(void **state) {
  (void)state;
  GemmBackend b;
  assert_int_equal(kern_gemm_backend_parse("onednn", &b), 0);
  assert_int_equal(b, GEMM_BACKEND_ONEDNN);
  assert_int_equal(kern_gemm_backend_parse("openblas", &b), 0);
  assert_int_equal(b, GEMM_BACKEND_OPENBLAS);
  assert_int_equal(kern_gemm_backend_parse("mkl", &b), -1);
  assert_int_equal(kern_gemm_backend(), GEMM_BACKEND_ONEDNN); /* the default */
  char err[256];
  assert_int_equal(kern_gemm_set_backend(GEMM_BACKEND_OPENBLAS, err, sizeof err), 0);
  assert_string_equal(kern_gemm_backend_name(kern_gemm_backend()), "openblas");
  /* gemm() follows the selection; both agree on a product. */
  float a[6] = {1, 2, 3, 4, 5, 6}, bm[6] = {1, 0, 2, 1, 0, 3}, c1[4], c2[4];
  gemm(0, 0, 2, 2, 3, 1.0f, a, 3, bm, 2, 0.0f, c1, 2);
  assert_int_equal(kern_gemm_set_backend(GEMM_BACKEND_ONEDNN, err, sizeof err), 0);
  gemm(0, 0, 2, 2, 3, 1.0f, a, 3, bm, 2, 0.0f, c2, 2);
  for (int i = 0; i < 4; i++) assert_true(c1[i] == c2[i]);
  assert_true(c2[0] == 5.0f && c2[3] == 23.0f);
  KernPrecision p;
  assert_int_equal(kern_precision_parse("bf16", &p), 0);
  assert_int_equal(p, KERN_PRECISION_BF16);
  assert_int_equal(kern_precision_parse("fp16", &p), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_backend_selection), cmocka_unit_test(test_openblas_fp32),
      cmocka_unit_test(test_onednn_fp32),       cmocka_unit_test(test_onednn_bf16),
      cmocka_unit_test(test_empty_products),    cmocka_unit_test(test_bf16_rounding),
      cmocka_unit_test(test_concurrent_and_cached), cmocka_unit_test(test_fixed_shapes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
