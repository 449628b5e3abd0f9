/* Pipeline partition: balanced splits (with and without embedding/head
 * weights) are optimal against brute force on small cases, explicit lists are
 * validated with clear messages, and the list parser rejects junk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/partition.h"

static SchedPartitionSpec spec_of(int layers, int pp, int vpp) {
  SchedPartitionSpec s;
  memset(&s, 0, sizeof s);
  s.num_layers = layers;
  s.pp = pp;
  s.vpp = vpp;
  return s;
}

static void assert_layers(const SchedPartition *p, const int *expect, int n) {
  assert_int_equal(p->num_stages, n);
  int first = 0;
  for (int s = 0; s < n; s++) {
    assert_int_equal(p->layers[s], expect[s]);
    assert_int_equal(p->first_layer[s], first);
    first += expect[s];
  }
  assert_int_equal(first, p->num_layers);
}

static void test_even_split(void **state) {
  (void)state;
  SchedPartition p;
  SchedPartitionSpec s = spec_of(8, 4, 1);
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  assert_layers(&p, (const int[]){2, 2, 2, 2}, 4);
  assert_true(p.max_weight == 2.0 && p.mean_weight == 2.0);
  sched_partition_free(&p);
  s = spec_of(10, 4, 1);
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  assert_layers(&p, (const int[]){3, 3, 2, 2}, 4);
  assert_int_equal(sched_partition_stage_of_layer(&p, 0), 0);
  assert_int_equal(sched_partition_stage_of_layer(&p, 5), 1);
  assert_int_equal(sched_partition_stage_of_layer(&p, 9), 3);
  assert_int_equal(sched_partition_stage_of_layer(&p, 10), -1);
  sched_partition_free(&p);
  /* Virtual stages: pp 2 x vpp 2 = 4 stages in stage order. */
  s = spec_of(12, 2, 2);
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  assert_layers(&p, (const int[]){3, 3, 3, 3}, 4);
  sched_partition_free(&p);
}

/* The lightest heaviest stage over every contiguous split, by enumeration. */
static double brute_force_best(int L, int S, const double *extra, int lo, int *layers, int stage) {
  if (stage == S - 1) {
    if (L < lo) return INFINITY;
    layers[stage] = L;
    return extra[stage] + L;
  }
  double best = INFINITY;
  for (int k = lo; k <= L - lo * (S - 1 - stage); k++) {
    layers[stage] = k;
    double rest = brute_force_best(L - k, S, extra, lo, layers, stage + 1);
    double w = fmax(extra[stage] + k, rest);
    if (w < best) best = w;
  }
  return best;
}

static void test_weighted_split_is_optimal(void **state) {
  (void)state;
  static const double weights[][2] = {{0, 0}, {1, 0}, {0, 2.5}, {1, 2}, {3, 3}, {0.5, 6}};
  int scratch[8];
  for (size_t w = 0; w < sizeof weights / sizeof weights[0]; w++)
    for (int S = 1; S <= 5; S++)
      for (int L = S; L <= 14; L++)
        for (int allow = 0; allow <= 1; allow++) {
          SchedPartitionSpec s = spec_of(L, S, 1);
          s.embedding_weight = weights[w][0];
          s.head_weight = weights[w][1];
          s.allow_empty = allow;
          SchedPartition p;
          assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
          double extra[8] = {0};
          extra[0] += s.embedding_weight;
          extra[S - 1] += s.head_weight;
          double best = brute_force_best(L, S, extra, allow ? 0 : 1, scratch, 0);
          if (fabs(p.max_weight - best) > 1e-9)
            print_error("L %d S %d emb %g head %g allow %d: got %g, best %g\n", L, S, s.embedding_weight, s.head_weight,
                        allow, p.max_weight, best);
          assert_true(fabs(p.max_weight - best) < 1e-9);
          int sum = 0;
          for (int st = 0; st < S; st++) {
            assert_true(p.layers[st] >= (allow ? 0 : 1));
            assert_true(fabs(p.weight[st] - (extra[st] + p.layers[st])) < 1e-12);
            sum += p.layers[st];
          }
          assert_int_equal(sum, L);
          sched_partition_free(&p);
        }
}

/* A heavy LM head pushes blocks toward the first stages. */
static void test_heavy_head(void **state) {
  (void)state;
  SchedPartitionSpec s = spec_of(8, 4, 1);
  s.head_weight = 3;
  SchedPartition p;
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  assert_layers(&p, (const int[]){3, 2, 2, 1}, 4);
  assert_true(p.max_weight == 4.0);
  sched_partition_free(&p);
}

static void expect_error(SchedPartitionSpec s, const char *needle) {
  SchedPartition p;
  Error err = {0, ""};
  assert_int_equal(sched_partition_make(&s, &p, &err), ERR_CONFIG);
  if (!strstr(err.msg, needle)) print_error("message: %s\n", err.msg);
  assert_non_null(strstr(err.msg, needle));
  assert_null(p.layers);
}

static void test_explicit_lists(void **state) {
  (void)state;
  int ok[] = {2, 3, 3};
  SchedPartitionSpec s = spec_of(8, 3, 1);
  s.layers_per_stage = ok;
  s.num_given = 3;
  SchedPartition p;
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  assert_layers(&p, ok, 3);
  sched_partition_free(&p);
  s.num_layers = 0; /* take the sum */
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  assert_int_equal(p.num_layers, 8);
  sched_partition_free(&p);

  s.num_layers = 10;
  expect_error(s, "the layers per stage sum to 8 but the model has 10 layers");
  s = spec_of(8, 4, 1);
  s.layers_per_stage = ok;
  s.num_given = 3;
  expect_error(s, "3 layer counts given for 4 stages (pp 4 x vpp 1)");
  int empty[] = {4, 0, 4};
  s = spec_of(8, 3, 1);
  s.layers_per_stage = empty;
  s.num_given = 3;
  expect_error(s, "stage 1 (rank 1, chunk 0) has no layers");
  s.allow_empty = 1;
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  assert_int_equal(sched_partition_stage_of_layer(&p, 4), 2);
  sched_partition_free(&p);
  int negative[] = {9, -1, 0};
  s.layers_per_stage = negative;
  expect_error(s, "stage 1 has -1 layers");
  expect_error(spec_of(3, 4, 1), "3 layers cannot fill 4 stages");
  expect_error(spec_of(8, 0, 1), "pp (0)");
  SchedPartitionSpec bad = spec_of(8, 2, 1);
  bad.head_weight = -1;
  expect_error(bad, "weights must be finite and >= 0");
}

static void test_parse_list(void **state) {
  (void)state;
  int *v = NULL, n = 0;
  assert_int_equal(sched_partition_parse_list("2,3, 3", &v, &n, NULL), ERR_OK);
  assert_int_equal(n, 3);
  assert_int_equal(v[0], 2);
  assert_int_equal(v[2], 3);
  free(v);
  Error err = {0, ""};
  assert_int_equal(sched_partition_parse_list("2,,3", &v, &n, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "entry 2"));
  assert_int_equal(sched_partition_parse_list("2;3", &v, &n, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "comma-separated"));
  assert_int_equal(sched_partition_parse_list("-1", &v, &n, &err), ERR_ARG);
  assert_int_equal(sched_partition_parse_list("", &v, &n, &err), ERR_ARG);
  assert_null(v);
}

static void test_print(void **state) {
  (void)state;
  SchedPartitionSpec s = spec_of(10, 2, 2);
  s.embedding_weight = 1;
  s.head_weight = 2;
  SchedPartition p;
  assert_int_equal(sched_partition_make(&s, &p, NULL), ERR_OK);
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  sched_partition_print(&p, f);
  fclose(f);
  assert_non_null(strstr(buf, "+embedding"));
  assert_non_null(strstr(buf, "+head/loss"));
  assert_non_null(strstr(buf, "heaviest stage"));
  free(buf);
  sched_partition_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_even_split),     cmocka_unit_test(test_weighted_split_is_optimal),
      cmocka_unit_test(test_heavy_head),     cmocka_unit_test(test_explicit_lists),
      cmocka_unit_test(test_parse_list),     cmocka_unit_test(test_print),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
