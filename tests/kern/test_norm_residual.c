/* The residual add and the norm after it (kern/rmsnorm.h,
 * kern/layernorm.h; kern/fusion.h: norm_residual), for RMSNorm and for
 * LayerNorm with GPT-2's biases: the fused forward and backward are bit
 * for bit the unfused chains (vec_add, bias_add_rows, the norm; the norm's
 * input gradient written and then added by vec_acc), called directly and
 * through the switch, with and without the projection's bias, at sizes on
 * both sides of the parallel threshold; and the fused kernels' gradients in
 * the residual, the sublayer output, the projection bias and the norm's
 * weight (and bias) by finite differences of a loss that reads both the
 * norm's output and the new residual stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/fusion.h"
#include "kern/kern_test_util.h"
#include "kern/layernorm.h"
#include "kern/rmsnorm.h"

static const float kEps = 1e-5f;

static void set_norm_residual(int fused) {
  KernFusion f = kern_fusion();
  f.norm_residual = fused;
  kern_set_fusion(f);
}

/* One kind's four entry points behind one signature (b NULL for RMSNorm). */
static void fwd(int ln, int how, float *x_out, float *out, float *rstd, const float *res, const float *y,
                const float *bias, const float *w, const float *b, int N, int C) {
  if (ln) {
    if (how == 0) add_layernorm_forward_fused(x_out, out, rstd, res, y, bias, w, b, N, C, kEps);
    else if (how == 1) add_layernorm_forward_unfused(x_out, out, rstd, res, y, bias, w, b, N, C, kEps);
    else add_layernorm_forward(x_out, out, rstd, res, y, bias, w, b, N, C, kEps);
  } else {
    if (how == 0) add_rmsnorm_forward_fused(x_out, out, rstd, res, y, bias, w, N, C, kEps);
    else if (how == 1) add_rmsnorm_forward_unfused(x_out, out, rstd, res, y, bias, w, N, C, kEps);
    else add_rmsnorm_forward(x_out, out, rstd, res, y, bias, w, N, C, kEps);
  }
}

static void bwd(int ln, int how, float *dres, float *tmp, float *dw, float *db, const float *dout, const float *x,
                const float *w, const float *rstd, int N, int C) {
  if (ln) {
    if (how == 0) add_layernorm_backward_fused(dres, dw, db, dout, x, w, rstd, N, C);
    else if (how == 1) add_layernorm_backward_unfused(dres, tmp, dw, db, dout, x, w, rstd, N, C);
    else add_layernorm_backward(dres, tmp, dw, db, dout, x, w, rstd, N, C);
  } else {
    if (how == 0) add_rmsnorm_backward_fused(dres, dw, dout, x, w, rstd, N, C);
    else if (how == 1) add_rmsnorm_backward_unfused(dres, tmp, dw, dout, x, w, rstd, N, C);
    else add_rmsnorm_backward(dres, tmp, dw, dout, x, w, rstd, N, C);
  }
}

/* how: 0 fused, 1 unfused, 2 the switch set to unfused, 3 the switch set to fused. */
static void check_bit_identical(int ln, int with_bias, int N, int C, uint64_t seed) {
  const size_t nc = (size_t)N * C;
  float *res = test_alloc(nc), *y = test_alloc(nc), *bias = test_alloc(C), *w = test_alloc(C), *b = test_alloc(C);
  float *dout = test_alloc(nc), *dres0 = test_alloc(nc), *tmp = test_alloc(nc);
  test_fill_normal(res, nc, seed, 2.0f);
  test_fill_normal(y, nc, seed + 1, 1.0f);
  test_fill_normal(bias, C, seed + 2, 0.5f);
  test_fill_normal(w, C, seed + 3, 1.0f);
  test_fill_normal(b, C, seed + 4, 0.5f);
  test_fill_normal(dout, nc, seed + 5, 1.0f);
  test_fill_normal(dres0, nc, seed + 6, 1.0f);
  float *x[4], *out[4], *rstd[4], *dres[4], *dw[4], *db[4];
  for (int how = 0; how < 4; how++) {
    x[how] = test_alloc(nc), out[how] = test_alloc(nc), rstd[how] = test_alloc(N), dres[how] = test_alloc(nc);
    dw[how] = test_alloc(C), db[how] = test_alloc(C);
    for (size_t i = 0; i < nc; i++) dres[how][i] = dres0[i];
    for (int c = 0; c < C; c++) dw[how][c] = 0.25f, db[how][c] = -0.5f; /* both accumulate */
    if (how >= 2) set_norm_residual(how == 3);
    const int kind = how >= 2 ? 2 : how;
    fwd(ln, kind, x[how], out[how], rstd[how], res, y, with_bias ? bias : NULL, w, ln ? b : NULL, N, C);
    bwd(ln, kind, dres[how], tmp, dw[how], db[how], dout, x[0], w, rstd[0], N, C);
  }
  set_norm_residual(1);
  for (int how = 1; how < 4; how++) {
    assert_memory_equal(x[0], x[how], nc * sizeof(float));
    assert_memory_equal(out[0], out[how], nc * sizeof(float));
    assert_memory_equal(rstd[0], rstd[how], (size_t)N * sizeof(float));
    assert_memory_equal(dres[0], dres[how], nc * sizeof(float));
    assert_memory_equal(dw[0], dw[how], (size_t)C * sizeof(float));
    if (ln) assert_memory_equal(db[0], db[how], (size_t)C * sizeof(float));
  }
  for (int how = 0; how < 4; how++) free(x[how]), free(out[how]), free(rstd[how]), free(dres[how]), free(dw[how]), free(db[how]);
  free(res), free(y), free(bias), free(w), free(b), free(dout), free(dres0), free(tmp);
}

static void test_bit_identical(void **state) {
  (void)state;
  /* 5 x 37: one thread; 300 x 200 (60000 >= the parallel threshold) and a
   * column count past one 32-wide column block. */
  const int sizes[][2] = {{5, 37}, {300, 200}, {1, 1}};
  for (int ln = 0; ln < 2; ln++)
    for (int with_bias = 0; with_bias < 2; with_bias++)
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        check_bit_identical(ln, with_bias, sizes[k][0], sizes[k][1], 100 + 10 * k + 3 * ln + with_bias);
}

/* loss = <out, r> + <x_out, s>: the norm's output and the new residual
 * stream both carry a gradient, as in a block. */
typedef struct Case {
  int ln, N, C;
  float *res, *y, *bias, *w, *b, *x, *out, *rstd, *r, *s;
} Case;

static double loss(void *ctx) {
  Case *c = ctx;
  fwd(c->ln, 0, c->x, c->out, c->rstd, c->res, c->y, c->bias, c->w, c->ln ? c->b : NULL, c->N, c->C);
  const size_t nc = (size_t)c->N * c->C;
  return test_dot_loss(c->out, c->r, nc) + test_dot_loss(c->x, c->s, nc);
}

static void test_gradcheck_fused(void **state) {
  (void)state;
  for (int ln = 0; ln < 2; ln++) {
    Case c = {.ln = ln, .N = 4, .C = 45};
    const size_t nc = (size_t)c.N * c.C;
    c.res = test_alloc(nc), c.y = test_alloc(nc), c.bias = test_alloc(c.C), c.w = test_alloc(c.C);
    c.b = test_alloc(c.C), c.x = test_alloc(nc), c.out = test_alloc(nc), c.rstd = test_alloc(c.N);
    c.r = test_alloc(nc), c.s = test_alloc(nc);
    test_fill_normal(c.res, nc, 200 + ln, 1.0f);
    test_fill_normal(c.y, nc, 210 + ln, 1.0f);
    test_fill_normal(c.bias, c.C, 220 + ln, 0.5f);
    test_fill_normal(c.w, c.C, 230 + ln, 1.0f);
    test_fill_normal(c.b, c.C, 240 + ln, 0.5f);
    test_fill_normal(c.r, nc, 250 + ln, 1.0f);
    test_fill_normal(c.s, nc, 260 + ln, 1.0f);
    loss(&c);
    /* dres starts as the new residual stream's own gradient s; the fused
     * backward adds the norm's input gradient: the gradient in res and in y. */
    float *dres = test_alloc(nc), *dw = test_alloc(c.C), *db = test_alloc(c.C), *dbias = test_alloc(c.C);
    for (size_t i = 0; i < nc; i++) dres[i] = c.s[i];
    for (int k = 0; k < c.C; k++) dw[k] = db[k] = dbias[k] = 0.0f;
    bwd(ln, 0, dres, NULL, dw, db, c.r, c.x, c.w, c.rstd, c.N, c.C);
    for (int n = 0; n < c.N; n++)
      for (int k = 0; k < c.C; k++) dbias[k] += dres[(size_t)n * c.C + k];
    const double er = test_gradcheck(c.res, dres, nc, loss, &c, 1e-2f, 1000);
    const double ey = test_gradcheck(c.y, dres, nc, loss, &c, 1e-2f, 1000);
    const double ebias = test_gradcheck(c.bias, dbias, (size_t)c.C, loss, &c, 1e-2f, 1000);
    const double ew = test_gradcheck(c.w, dw, (size_t)c.C, loss, &c, 1e-2f, 1000);
    const double eb = ln ? test_gradcheck(c.b, db, (size_t)c.C, loss, &c, 1e-2f, 1000) : 0.0;
    print_message("%s + residual gradcheck: dres %.3g dy %.3g dbias %.3g dw %.3g db %.3g\n",
                  ln ? "layernorm" : "rmsnorm", er, ey, ebias, ew, eb);
    assert_true(er < 2e-3 && ey < 2e-3 && ebias < 2e-3 && ew < 2e-3 && eb < 2e-3);
    free(c.res), free(c.y), free(c.bias), free(c.w), free(c.b), free(c.x), free(c.out), free(c.rstd), free(c.r);
    free(c.s), free(dres), free(dw), free(db), free(dbias);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bit_identical),
      cmocka_unit_test(test_gradcheck_fused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
