/* Learning-rate schedule values at warm-up, middle and end for cosine,
 * linear and constant decay, and parsing of the decay names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "kern/lr_schedule.h"

static int close_to(float a, double b) { return fabs((double)a - b) <= 1e-6 * fmax(1e-3, fabs(b)); }

static void test_warmup_is_linear_from_one_step(void **state) {
  (void)state;
  LrSchedule s = {.max_lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .total_steps = 110,
                  .decay = LR_DECAY_COSINE};
  assert_true(close_to(lr_schedule_at(&s, 0), 1e-4));
  assert_true(close_to(lr_schedule_at(&s, 4), 5e-4));
  assert_true(close_to(lr_schedule_at(&s, 9), 1e-3));
}

static void test_cosine(void **state) {
  (void)state;
  LrSchedule s = {.max_lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .total_steps = 110,
                  .decay = LR_DECAY_COSINE};
  assert_true(close_to(lr_schedule_at(&s, 10), 1e-3));             /* decay starts at max */
  assert_true(close_to(lr_schedule_at(&s, 60), 5.5e-4));           /* half way: mean of max and min */
  assert_true(close_to(lr_schedule_at(&s, 35), 1e-4 + 9e-4 * 0.5 * (1 + cos(M_PI * 0.25))));
  assert_true(close_to(lr_schedule_at(&s, 110), 1e-4));            /* end */
  assert_true(close_to(lr_schedule_at(&s, 500), 1e-4));            /* constant after */
}

static void test_linear(void **state) {
  (void)state;
  LrSchedule s = {.max_lr = 2.0f, .min_lr = 0.0f, .warmup_steps = 0, .total_steps = 100, .decay = LR_DECAY_LINEAR};
  assert_true(close_to(lr_schedule_at(&s, 0), 2.0));
  assert_true(close_to(lr_schedule_at(&s, 25), 1.5));
  assert_true(close_to(lr_schedule_at(&s, 50), 1.0));
  assert_true(close_to(lr_schedule_at(&s, 100), 0.0));
  assert_true(close_to(lr_schedule_at(&s, 101), 0.0));
}

static void test_constant(void **state) {
  (void)state;
  LrSchedule s = {.max_lr = 0.5f, .min_lr = 0.1f, .warmup_steps = 4, .total_steps = 10,
                  .decay = LR_DECAY_CONSTANT};
  assert_true(close_to(lr_schedule_at(&s, 1), 0.25));
  assert_true(close_to(lr_schedule_at(&s, 4), 0.5));
  assert_true(close_to(lr_schedule_at(&s, 1000), 0.5));
}

static void test_parse(void **state) {
  (void)state;
  assert_int_equal(lr_decay_parse("cosine"), LR_DECAY_COSINE);
  assert_int_equal(lr_decay_parse("linear"), LR_DECAY_LINEAR);
  assert_int_equal(lr_decay_parse("constant"), LR_DECAY_CONSTANT);
  assert_int_equal(lr_decay_parse("Cosine"), -1);
  assert_int_equal(lr_decay_parse(NULL), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_warmup_is_linear_from_one_step),
      cmocka_unit_test(test_cosine),
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_constant),
      cmocka_unit_test(test_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
