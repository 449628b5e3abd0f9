/* Fused LM head + cross-entropy: loss, per-token losses, dh and dw against a
 * naive double reference that builds the full logits, for chunk sizes that
 * do and do not divide N, ignored targets (including a whole ignored chunk),
 * grad_scale, dw accumulation and the loss-only mode; then dh and dw by
 * finite differences of the loss itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/cross_entropy.h"
#include "kern/kern_test_util.h"

typedef struct XentCase {
  int N, C, V;
  float *h, *w;
  int *targets;
} XentCase;

static XentCase xent_case_make(int N, int C, int V, uint64_t seed) {
  XentCase c = {.N = N, .C = C, .V = V};
  c.h = test_alloc((size_t)N * C), c.w = test_alloc((size_t)V * C);
  c.targets = calloc((size_t)N, sizeof *c.targets);
  test_fill_normal(c.h, (size_t)N * C, seed, 1.0f);
  test_fill_normal(c.w, (size_t)V * C, seed + 1, 0.5f);
  for (int n = 0; n < N; n++) c.targets[n] = (int)(rng_u64(seed, 2, (uint64_t)n) % (uint64_t)V);
  return c;
}

static void xent_case_free(XentCase *c) { free(c->h), free(c->w), free(c->targets); }

/* Full [N, V] logits in double; dh/dw of grad_scale * sum of losses. */
static double xent_reference(const XentCase *c, float grad_scale, double *losses, double *dh, double *dw,
                             long *count) {
  int N = c->N, C = c->C, V = c->V;
  double *logits = test_alloc_d((size_t)V), total = 0.0;
  *count = 0;
  for (size_t i = 0; i < (size_t)N * C; i++) dh[i] = 0.0;
  for (size_t i = 0; i < (size_t)V * C; i++) dw[i] = 0.0;
  for (int n = 0; n < N; n++) {
    losses[n] = 0.0;
    int t = c->targets[n];
    if (t < 0) continue;
    double m = -INFINITY, s = 0.0;
    for (int v = 0; v < V; v++) {
      double z = 0.0;
      for (int k = 0; k < C; k++) z += (double)c->h[(long)n * C + k] * c->w[(long)v * C + k];
      logits[v] = z;
      m = z > m ? z : m;
    }
    for (int v = 0; v < V; v++) s += exp(logits[v] - m);
    losses[n] = m + log(s) - logits[t];
    total += losses[n];
    (*count)++;
    for (int v = 0; v < V; v++) {
      double g = grad_scale * (exp(logits[v] - m) / s - (v == t));
      for (int k = 0; k < C; k++) {
        dh[(long)n * C + k] += g * c->w[(long)v * C + k];
        dw[(long)v * C + k] += g * c->h[(long)n * C + k];
      }
    }
  }
  free(logits);
  return total;
}

static void check_against_reference(XentCase *c, int chunk, float grad_scale) {
  int N = c->N, C = c->C, V = c->V;
  int eff_chunk = chunk > N ? N : chunk;
  float *scratch = test_alloc((size_t)eff_chunk * V), *losses = test_alloc((size_t)N);
  float *dh = test_alloc((size_t)N * C), *dw = test_alloc((size_t)V * C);
  double *ref_losses = test_alloc_d((size_t)N), *ref_dh = test_alloc_d((size_t)N * C);
  double *ref_dw = test_alloc_d((size_t)V * C);
  long ref_count = 0, count = -1;
  double ref_total = xent_reference(c, grad_scale, ref_losses, ref_dh, ref_dw, &ref_count);

  for (size_t i = 0; i < (size_t)N * C; i++) dh[i] = NAN; /* dh is overwritten */
  for (size_t i = 0; i < (size_t)V * C; i++) dw[i] = 1.0f; /* dw accumulates */
  double total = -1.0;
  lmhead_xent(c->h, c->w, c->targets, N, C, V, grad_scale, &total, &count, losses, dh, dw, scratch, chunk);
  for (size_t i = 0; i < (size_t)V * C; i++) dw[i] -= 1.0f;

  assert_int_equal(count, ref_count);
  double e_loss = fabs(total - ref_total) / fmax(1.0, fabs(ref_total));
  double e_losses = test_rel_err(losses, ref_losses, (size_t)N, 1.0);
  double e_dh = test_rel_err(dh, ref_dh, (size_t)N * C, 1e-3);
  double e_dw = test_rel_err(dw, ref_dw, (size_t)V * C, 1e-3);
  print_message("xent N=%d V=%d chunk=%d: loss %.2g losses %.2g dh %.2g dw %.2g\n", N, V, chunk, e_loss,
                e_losses, e_dh, e_dw);
  assert_true(e_loss < 1e-5 && e_losses < 1e-5 && e_dh < 1e-4 && e_dw < 1e-4);
  for (int n = 0; n < N; n++)
    if (c->targets[n] < 0) assert_true(losses[n] == 0.0f);

  /* loss only: same numbers, gradients untouched */
  double total2 = -1.0;
  long count2 = -1;
  lmhead_xent(c->h, c->w, c->targets, N, C, V, grad_scale, &total2, &count2, NULL, NULL, NULL, scratch, chunk);
  assert_int_equal(count2, ref_count);
  assert_true(fabs(total2 - total) <= 1e-6 * fmax(1.0, fabs(total)));

  free(scratch), free(losses), free(dh), free(dw), free(ref_losses), free(ref_dh), free(ref_dw);
}

static void test_xent_matches_reference_over_chunk_sizes(void **state) {
  (void)state;
  XentCase c = xent_case_make(11, 16, 37, 1);
  c.targets[2] = -1;
  c.targets[7] = -100;
  const int chunks[] = {1, 3, 4, 11, 64};
  for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) check_against_reference(&c, chunks[i], 1.0f);
  check_against_reference(&c, 4, 0.125f);
  xent_case_free(&c);
}

static void test_xent_whole_chunk_ignored(void **state) {
  (void)state;
  XentCase c = xent_case_make(10, 8, 20, 2);
  for (int n = 3; n < 6; n++) c.targets[n] = -1; /* chunk [3, 6) when chunk = 3 */
  check_against_reference(&c, 3, 0.5f);
  for (int n = 0; n < 10; n++) c.targets[n] = -1; /* nothing counted at all */
  check_against_reference(&c, 4, 1.0f);
  xent_case_free(&c);
}

/* Rows large enough for the parallel softmax; chunk does not divide N. */
static void test_xent_parallel_sizes(void **state) {
  (void)state;
  XentCase c = xent_case_make(40, 24, 1500, 3);
  c.targets[5] = -1;
  check_against_reference(&c, 24, 1.0f);
  xent_case_free(&c);
}

typedef struct XentFd {
  XentCase *c;
  float *scratch;
  int chunk;
} XentFd;

static double xent_loss(void *ctx) {
  XentFd *f = ctx;
  double total;
  long count;
  lmhead_xent(f->c->h, f->c->w, f->c->targets, f->c->N, f->c->C, f->c->V, 1.0f, &total, &count, NULL, NULL, NULL,
              f->scratch, f->chunk);
  return total;
}

static void test_xent_gradcheck(void **state) {
  (void)state;
  XentCase c = xent_case_make(7, 6, 13, 4);
  c.targets[4] = -1;
  XentFd f = {.c = &c, .scratch = test_alloc((size_t)3 * c.V), .chunk = 3};
  float *dh = test_alloc((size_t)c.N * c.C), *dw = test_alloc((size_t)c.V * c.C);
  double total;
  long count;
  lmhead_xent(c.h, c.w, c.targets, c.N, c.C, c.V, 1.0f, &total, &count, NULL, dh, dw, f.scratch, f.chunk);
  double eh = test_gradcheck(c.h, dh, (size_t)c.N * c.C, xent_loss, &f, 1e-2f, 1000);
  double ew = test_gradcheck(c.w, dw, (size_t)c.V * c.C, xent_loss, &f, 1e-2f, 1000);
  print_message("xent gradcheck: dh %.3g dw %.3g\n", eh, ew);
  assert_true(eh < 2e-3);
  assert_true(ew < 2e-3);
  /* the ignored token gets no gradient */
  for (int k = 0; k < c.C; k++) assert_true(dh[4 * c.C + k] == 0.0f);
  free(f.scratch), free(dh), free(dw);
  xent_case_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_xent_matches_reference_over_chunk_sizes),
      cmocka_unit_test(test_xent_whole_chunk_ignored),
      cmocka_unit_test(test_xent_parallel_sizes),
      cmocka_unit_test(test_xent_gradcheck),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
