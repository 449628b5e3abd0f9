/* Embedding: forward is an exact row copy; backward scatter-adds repeated
 * tokens (against a reference and by finite differences) and accumulates,
 * on both the serial and the column-parallel path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/embedding.h"
#include "kern/kern_test_util.h"

typedef struct EmbCase {
  int N, C, V;
  int *tokens;
  float *table, *out, *r;
} EmbCase;

static EmbCase emb_case_make(int N, int C, int V, uint64_t seed) {
  EmbCase c = {.N = N, .C = C, .V = V};
  c.tokens = calloc((size_t)N, sizeof *c.tokens);
  c.table = test_alloc((size_t)V * C), c.out = test_alloc((size_t)N * C), c.r = test_alloc((size_t)N * C);
  /* few distinct tokens so that repeats are certain */
  for (int n = 0; n < N; n++) c.tokens[n] = (int)(rng_u64(seed, 3, (uint64_t)n) % (uint64_t)(V < 5 ? V : 5));
  test_fill_normal(c.table, (size_t)V * C, seed + 1, 1.0f);
  test_fill_normal(c.r, (size_t)N * C, seed + 2, 1.0f);
  return c;
}

static void emb_case_free(EmbCase *c) { free(c->tokens), free(c->table), free(c->out), free(c->r); }

static double emb_loss(void *ctx) {
  EmbCase *c = ctx;
  embedding_forward(c->out, c->tokens, c->table, c->N, c->C);
  return test_dot_loss(c->out, c->r, (size_t)c->N * c->C);
}

static void check_embedding(int N, int C, int V, uint64_t seed, int do_gradcheck) {
  EmbCase c = emb_case_make(N, C, V, seed);
  embedding_forward(c.out, c.tokens, c.table, N, C);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < C; k++) assert_true(c.out[(long)n * C + k] == c.table[(long)c.tokens[n] * C + k]);

  float *dtable = test_alloc((size_t)V * C);
  double *ref = test_alloc_d((size_t)V * C);
  for (long i = 0; i < (long)V * C; i++) dtable[i] = 0.5f, ref[i] = 0.5;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < C; k++) ref[(long)c.tokens[n] * C + k] += c.r[(long)n * C + k];
  embedding_backward(dtable, c.tokens, c.r, N, C);
  assert_true(test_rel_err(dtable, ref, (size_t)V * C, 1.0) < 1e-6);

  if (do_gradcheck) {
    for (long i = 0; i < (long)V * C; i++) dtable[i] = 0.0f;
    embedding_backward(dtable, c.tokens, c.r, N, C);
    double e = test_gradcheck(c.table, dtable, (size_t)V * C, emb_loss, &c, 1e-2f, 1000);
    print_message("embedding gradcheck: %.3g\n", e);
    assert_true(e < 1e-3);
  }
  free(dtable), free(ref);
  emb_case_free(&c);
}

static void test_embedding_small(void **state) {
  (void)state;
  check_embedding(12, 7, 9, 1, 1);
}

static void test_embedding_parallel(void **state) {
  (void)state;
  check_embedding(300, 200, 50, 2, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embedding_small),
      cmocka_unit_test(test_embedding_parallel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
