/* Rank-grid arithmetic without MPI: coordinates and groups against an
 * independent brute-force reference (nested loops in the documented order,
 * groups as "ranks that agree on every other coordinate") for every valid
 * configuration up to 32 ranks and some larger ones, the published folding
 * example by hand, and the validation messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first. */
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid_math.h"

enum { MAX_W = 256 };

/* Reference coordinates: walk the ranks in the order string's loop nest,
 * slowest dimension outermost, counting ranks as we go. */
typedef struct RefCoords {
  int attn[4]; /* tp, cp, dp, pp */
  int moe[4];  /* etp, ep, edp, pp */
} RefCoords;

static void reference_coords(const GridSizes *s, RefCoords *ref) {
  int r = 0;
  for (int pp = 0; pp < s->pp; pp++)
    for (int dp = 0; dp < s->dp; dp++)
      for (int cp = 0; cp < s->cp; cp++)
        for (int tp = 0; tp < s->tp; tp++, r++) {
          ref[r].attn[0] = tp, ref[r].attn[1] = cp, ref[r].attn[2] = dp, ref[r].attn[3] = pp;
        }
  assert_int_equal(r, s->world);
  r = 0;
  for (int pp = 0; pp < s->pp; pp++)
    for (int edp = 0; edp < s->edp; edp++)
      for (int ep = 0; ep < s->ep; ep++)
        for (int etp = 0; etp < s->etp; etp++, r++) {
          ref[r].moe[0] = etp, ref[r].moe[1] = ep, ref[r].moe[2] = edp, ref[r].moe[3] = pp;
        }
  assert_int_equal(r, s->world);
}

/* Which grid and which of its dimensions each group varies over, restated
 * from the header's comments rather than taken from the implementation. */
static void reference_group(GridGroupKind k, int *moe, int vary[4]) {
  memset(vary, 0, 4 * sizeof *vary);
  *moe = 0;
  switch (k) {
    case GRID_GROUP_TP:
      vary[0] = 1;
      break;
    case GRID_GROUP_CP:
      vary[1] = 1;
      break;
    case GRID_GROUP_DP:
      vary[2] = 1;
      break;
    case GRID_GROUP_PP:
      vary[3] = 1;
      break;
    case GRID_GROUP_DP_CP:
      vary[1] = vary[2] = 1;
      break;
    case GRID_GROUP_TP_CP:
      vary[0] = vary[1] = 1;
      break;
    case GRID_GROUP_TP_PP:
      vary[0] = vary[3] = 1;
      break;
    case GRID_GROUP_ETP:
      *moe = 1, vary[0] = 1;
      break;
    case GRID_GROUP_EP:
      *moe = 1, vary[1] = 1;
      break;
    case GRID_GROUP_EDP:
      *moe = 1, vary[2] = 1;
      break;
    case GRID_GROUP_EP_ETP:
      *moe = 1, vary[0] = vary[1] = 1;
      break;
    case GRID_GROUP_ETP_EP_PP:
      *moe = 1, vary[0] = vary[1] = vary[3] = 1;
      break;
    default:
      fail_msg("unknown group kind %d", (int)k);
  }
}

static int same_group(const RefCoords *a, const RefCoords *b, int moe, const int vary[4]) {
  const int *ca = moe ? a->moe : a->attn, *cb = moe ? b->moe : b->attn;
  for (int d = 0; d < 4; d++)
    if (!vary[d] && ca[d] != cb[d]) return 0;
  return 1;
}

/* Everything about one configuration against the reference. */
static void check_configuration(const GridSizes *s) {
  RefCoords ref[MAX_W];
  assert_true(s->world <= MAX_W);
  reference_coords(s, ref);
  int members[MAX_W], expect[MAX_W];
  for (int r = 0; r < s->world; r++) {
    GridCoords c;
    grid_coords_of_rank(s, r, &c);
    assert_int_equal(c.tp, ref[r].attn[0]);
    assert_int_equal(c.cp, ref[r].attn[1]);
    assert_int_equal(c.dp, ref[r].attn[2]);
    assert_int_equal(c.pp, ref[r].attn[3]);
    assert_int_equal(c.etp, ref[r].moe[0]);
    assert_int_equal(c.ep, ref[r].moe[1]);
    assert_int_equal(c.edp, ref[r].moe[2]);
    assert_int_equal(c.pp, ref[r].moe[3]); /* pipeline stage agrees in both grids */
    assert_int_equal(grid_attention_rank(s, c.tp, c.cp, c.dp, c.pp), r);
    assert_int_equal(grid_moe_rank(s, c.etp, c.ep, c.edp, c.pp), r);
    for (int k = 0; k < GRID_NUM_GROUPS; k++) {
      int moe, vary[4];
      reference_group((GridGroupKind)k, &moe, vary);
      int n = 0, my_index = -1;
      for (int q = 0; q < s->world; q++) {
        if (!same_group(&ref[r], &ref[q], moe, vary)) continue;
        if (q == r) my_index = n;
        expect[n++] = q; /* increasing world rank = index order */
      }
      int got = grid_group_members(s, (GridGroupKind)k, r, members);
      assert_int_equal(got, n);
      assert_int_equal(grid_group_size(s, (GridGroupKind)k), n);
      assert_memory_equal(members, expect, (size_t)n * sizeof *members);
      assert_int_equal(grid_group_index(s, (GridGroupKind)k, r), my_index);
      assert_int_equal(grid_group_first_rank(s, (GridGroupKind)k, r), expect[0]);
    }
  }
  /* Pipeline groups are identical whichever grid defines them. */
  int vary_pp[4] = {0, 0, 0, 1};
  for (int r = 0; r < s->world; r++)
    for (int q = 0; q < s->world; q++)
      assert_int_equal(same_group(&ref[r], &ref[q], 0, vary_pp),
                       same_group(&ref[r], &ref[q], 1, vary_pp));
}

static GridSizes sizes_of(int world, int tp, int cp, int dp, int pp, int etp, int ep, int edp) {
  GridSizes s = {
      .world = world, .tp = tp, .cp = cp, .dp = dp, .pp = pp, .etp = etp, .ep = ep, .edp = edp};
  return s;
}

static void test_folding_example(void **state) {
  (void)state;
  /* 8 ranks, attention TP2 CP2 DP2, MoE ETP1 EP8 EDP1 (edp derived). */
  GridSizes s = sizes_of(8, 2, 2, 2, 1, 1, 8, 0);
  Error err = {0};
  assert_int_equal(grid_sizes_resolve(&s, &err), ERR_OK);
  assert_int_equal(s.edp, 1);
  assert_int_equal(s.dp, 2);
  GridCoords c;
  grid_coords_of_rank(&s, 5, &c);
  assert_int_equal(c.tp, 1);
  assert_int_equal(c.cp, 0);
  assert_int_equal(c.dp, 1);
  assert_int_equal(c.pp, 0);
  assert_int_equal(c.etp, 0);
  assert_int_equal(c.ep, 5);
  assert_int_equal(c.edp, 0);
  int m[8];
  struct {
    GridGroupKind kind;
    int n;
    int ranks[8];
  } expect[] = {
      {GRID_GROUP_TP, 2, {4, 5}},
      {GRID_GROUP_CP, 2, {5, 7}},
      {GRID_GROUP_DP, 2, {1, 5}},
      {GRID_GROUP_PP, 1, {5}},
      {GRID_GROUP_DP_CP, 4, {1, 3, 5, 7}},
      {GRID_GROUP_TP_CP, 4, {4, 5, 6, 7}},
      {GRID_GROUP_TP_PP, 2, {4, 5}},
      {GRID_GROUP_ETP, 1, {5}},
      {GRID_GROUP_EP, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {GRID_GROUP_EDP, 1, {5}},
      {GRID_GROUP_EP_ETP, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {GRID_GROUP_ETP_EP_PP, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
  };
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    assert_int_equal(grid_group_members(&s, expect[i].kind, 5, m), expect[i].n);
    assert_memory_equal(m, expect[i].ranks, (size_t)expect[i].n * sizeof(int));
  }
  assert_int_equal(grid_group_index(&s, GRID_GROUP_DP_CP, 5), 2); /* cp 0 + 2 x dp 1 */
  assert_int_equal(grid_group_index(&s, GRID_GROUP_EP, 5), 5);
  check_configuration(&s);
}

static void test_pipeline_and_expert_data_parallel_by_hand(void **state) {
  (void)state;
  /* 16 ranks: attention TP2 DP4 PP2, MoE EP4 EDP2 PP2. */
  GridSizes s = sizes_of(16, 2, 1, 4, 2, 1, 4, 0);
  assert_int_equal(grid_sizes_resolve(&s, NULL), ERR_OK);
  assert_int_equal(s.edp, 2);
  GridCoords c;
  grid_coords_of_rank(&s, 13, &c);
  assert_int_equal(c.tp, 1);
  assert_int_equal(c.dp, 2);
  assert_int_equal(c.pp, 1);
  assert_int_equal(c.ep, 1);
  assert_int_equal(c.edp, 1);
  int m[16];
  assert_int_equal(grid_group_members(&s, GRID_GROUP_PP, 13, m), 2);
  assert_int_equal(m[0], 5);
  assert_int_equal(m[1], 13);
  assert_int_equal(grid_group_members(&s, GRID_GROUP_EP, 13, m), 4);
  assert_memory_equal(m, ((int[]){12, 13, 14, 15}), 4 * sizeof(int));
  assert_int_equal(grid_group_members(&s, GRID_GROUP_EDP, 13, m), 2);
  assert_memory_equal(m, ((int[]){9, 13}), 2 * sizeof(int));
  assert_int_equal(grid_group_members(&s, GRID_GROUP_DP, 13, m), 4);
  assert_memory_equal(m, ((int[]){9, 11, 13, 15}), 4 * sizeof(int));
  assert_int_equal(grid_group_members(&s, GRID_GROUP_TP_PP, 13, m), 4);
  assert_memory_equal(m, ((int[]){4, 5, 12, 13}), 4 * sizeof(int));
  assert_int_equal(grid_group_members(&s, GRID_GROUP_ETP_EP_PP, 13, m), 8);
  assert_memory_equal(m, ((int[]){4, 5, 6, 7, 12, 13, 14, 15}), 8 * sizeof(int));
  check_configuration(&s);
}

/* Every (tp, cp, pp, etp, ep) that fits W, dp and edp derived. */
static int check_all_configurations(int world) {
  int checked = 0;
  for (int pp = 1; pp <= world; pp++) {
    if (world % pp) continue;
    for (int tp = 1; tp <= world / pp; tp++)
      for (int cp = 1; cp <= world / pp; cp++) {
        if ((world / pp) % (tp * cp)) continue;
        for (int etp = 1; etp <= world / pp; etp++)
          for (int ep = 1; ep <= world / pp; ep++) {
            if ((world / pp) % (etp * ep)) continue;
            GridSizes s = sizes_of(world, tp, cp, 0, pp, etp, ep, 0);
            Error err = {0};
            if (grid_sizes_resolve(&s, &err) != ERR_OK) fail_msg("W=%d: %s", world, err.msg);
            assert_int_equal(s.tp * s.cp * s.dp * s.pp, world);
            assert_int_equal(s.etp * s.ep * s.edp * s.pp, world);
            check_configuration(&s);
            checked++;
          }
      }
  }
  return checked;
}

static void test_all_configurations_up_to_32_ranks(void **state) {
  (void)state;
  int total = 0;
  for (int w = 1; w <= 32; w++) total += check_all_configurations(w);
  /* W = 1 has exactly one configuration; the sum proves the loops ran. */
  assert_true(total > 1000);
}

static void test_larger_worlds(void **state) {
  (void)state;
  GridSizes cases[] = {
      sizes_of(64, 2, 2, 4, 4, 1, 8, 0),   sizes_of(64, 8, 1, 1, 8, 2, 4, 0),
      sizes_of(96, 4, 3, 2, 4, 1, 12, 0),  sizes_of(128, 8, 2, 2, 4, 4, 8, 1),
      sizes_of(192, 2, 4, 6, 4, 2, 24, 0), sizes_of(256, 4, 4, 4, 4, 1, 64, 0),
      sizes_of(240, 5, 3, 2, 8, 3, 5, 0),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Error err = {0};
    if (grid_sizes_resolve(&cases[i], &err) != ERR_OK) fail_msg("case %zu: %s", i, err.msg);
    check_configuration(&cases[i]);
  }
}

static void expect_error(GridSizes s, int code, const char *const *needles) {
  Error err = {0};
  int rc = grid_sizes_resolve(&s, &err);
  if (rc != code) fail_msg("expected code %d, got %d (%s)", code, rc, err.msg);
  for (; *needles; needles++)
    if (!strstr(err.msg, *needles)) fail_msg("message lacks \"%s\": %s", *needles, err.msg);
}

static void test_validation_messages(void **state) {
  (void)state;
  expect_error(sizes_of(8, 2, 2, 1, 1, 1, 8, 0), ERR_CONFIG,
               (const char *[]){"attention (tp-cp-dp-pp)", "tp 2 x cp 2 x dp 1 x pp 1 = 4 ranks",
                                "the world has 8", "dp 2 would make it match", NULL});
  expect_error(sizes_of(8, 3, 1, 0, 1, 1, 1, 0), ERR_CONFIG,
               (const char *[]){"tp 3 x cp 1 x pp 1 = 3 does not divide the world size 8",
                                "one of: 1, 2, 4, 8)", NULL});
  expect_error(sizes_of(8, 2, 2, 2, 1, 1, 3, 0), ERR_CONFIG,
               (const char *[]){"MoE (etp-ep-edp-pp)", "etp 1 x ep 3 x pp 1 = 3 does not divide",
                                "edp = 8 / 3 is not whole", NULL});
  expect_error(sizes_of(8, 2, 2, 2, 1, 2, 2, 1), ERR_CONFIG,
               (const char *[]){"MoE (etp-ep-edp-pp)", "etp 2 x ep 2 x edp 1 x pp 1 = 4 ranks",
                                "edp 2 would make it match", NULL});
  expect_error(sizes_of(8, 1, 1, 0, 3, 1, 1, 0), ERR_CONFIG,
               (const char *[]){"pp 3 does not divide the world size 8", NULL});
  expect_error(sizes_of(8, 0, 1, 0, 1, 1, 1, 0), ERR_CONFIG,
               (const char *[]){"tp must be >= 1 (got 0)", NULL});
  expect_error(sizes_of(8, 1, 1, -1, 1, 1, 1, 0), ERR_CONFIG,
               (const char *[]){"dp must be >= 1 or 0 to derive it (got -1)", NULL});
  expect_error(sizes_of(8, 16, 1, 0, 1, 1, 1, 0), ERR_CONFIG,
               (const char *[]){"tp 16 is more than the 8 ranks", NULL});
  expect_error(sizes_of(0, 1, 1, 1, 1, 1, 1, 1), ERR_CONFIG,
               (const char *[]){"world size must be >= 1", NULL});
  /* Many divisors: the smallest and largest few, the middle elided. */
  expect_error(sizes_of(720720, 17, 1, 0, 1, 1, 1, 0), ERR_CONFIG,
               (const char *[]){"one of: 1, 2, 3, 4, 5, 6, 7, 8, ..., 90090, 102960",
                                "360360, 720720)", NULL});
  /* And the valid neighbours of those cases resolve. */
  GridSizes ok = sizes_of(8, 2, 2, 0, 1, 2, 2, 0);
  assert_int_equal(grid_sizes_resolve(&ok, NULL), ERR_OK);
  assert_int_equal(ok.dp, 2);
  assert_int_equal(ok.edp, 2);
}

static void test_group_names(void **state) {
  (void)state;
  const char *expect[GRID_NUM_GROUPS] = {"tp",    "cp",  "dp", "pp",  "dp-cp",  "tp-cp",
                                         "tp-pp", "etp", "ep", "edp", "ep-etp", "etp-ep-pp"};
  for (int k = 0; k < GRID_NUM_GROUPS; k++)
    assert_string_equal(grid_group_name((GridGroupKind)k), expect[k]);
  assert_null(grid_group_name(GRID_NUM_GROUPS));
}

static void test_summary(void **state) {
  (void)state;
  GridSizes s = sizes_of(8, 2, 2, 2, 1, 1, 8, 0);
  assert_int_equal(grid_sizes_resolve(&s, NULL), ERR_OK);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  grid_print_summary(f, &s, 0);
  grid_print_summary(f, &s, 2);
  fclose(f);
  assert_non_null(strstr(text,
                         "8 ranks = tp 2 x cp 2 x dp 2 x pp 1 (attention, tp-cp-dp-pp) = "
                         "etp 1 x ep 8 x edp 1 x pp 1 (MoE, etp-ep-edp-pp)"));
  assert_non_null(strstr(text, "rank 5: tp 1 cp 0 dp 1 pp 0 | etp 0 ep 5 edp 0 pp 0\n"));
  assert_non_null(strstr(text, "rank 7: tp 1 cp 1 dp 1 pp 0 | etp 0 ep 7 edp 0 pp 0\n"));
  assert_non_null(strstr(text, "... 6 more ranks"));
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_folding_example),
      cmocka_unit_test(test_pipeline_and_expert_data_parallel_by_hand),
      cmocka_unit_test(test_all_configurations_up_to_32_ranks),
      cmocka_unit_test(test_larger_worlds),
      cmocka_unit_test(test_validation_messages),
      cmocka_unit_test(test_group_names),
      cmocka_unit_test(test_summary),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
