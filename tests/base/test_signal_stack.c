/* Alternate signal stacks (base/signal_stack.h): after
 * signal_stacks_install the calling thread and every thread of the OpenMP
 * team have one; a second call changes nothing; a stack the thread already
 * had (the sanitizer's, or one of 128 KiB set here) is kept, not replaced;
 * and a handler installed with SA_ONSTACK runs on it, in the main thread
 * and in the team's threads (its local variable's address lies inside the
 * thread's alternate stack). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "base/signal_stack.h"

/* Per thread: how many of its handler runs were on its alternate stack. */
static _Thread_local volatile sig_atomic_t t_on_alt;

static void handler(int sig) {
  (void)sig;
  char here;
  stack_t cur;
  /* SS_ONSTACK: the handler runs on the alternate stack; check its address too. */
  if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_ONSTACK) && (char *)cur.ss_sp <= &here &&
      &here < (char *)cur.ss_sp + cur.ss_size)
    t_on_alt++;
}

static void test_every_thread_has_one(void **state) {
  (void)state;
  Error err = {0, ""};
  assert_int_equal(signal_stacks_install(3, &err), 0);
  assert_true(signal_stack_present());
  int missing = 0;
#pragma omp parallel num_threads(3) reduction(+ : missing)
  missing += !signal_stack_present();
  assert_int_equal(missing, 0);
  /* Installed once: the same stack stays. */
  stack_t before, after;
  assert_int_equal(sigaltstack(NULL, &before), 0);
  assert_int_equal(signal_stacks_install(3, &err), 0);
  assert_int_equal(sigaltstack(NULL, &after), 0);
  assert_ptr_equal(before.ss_sp, after.ss_sp);
}

/* In a thread of its own: the stack it had before the install is the one
 * it has after. Under AddressSanitizer that is the sanitizer's, which it
 * unmaps when the thread exits: replacing it made that exit abort. */
static void *keeps_existing(void *arg) {
  static char mine[128 * 1024];
  stack_t before, after, off = {.ss_flags = SS_DISABLE};
  int *ok = arg, set_here = 0;
  if (sigaltstack(NULL, &before) != 0) return NULL;
  if (before.ss_flags & SS_DISABLE) {
    stack_t ss = {.ss_sp = mine, .ss_size = sizeof mine, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) return NULL;
    before = ss, set_here = 1;
  }
  Error err = {0, ""};
  *ok = signal_stacks_install(1, &err) == 0 && sigaltstack(NULL, &after) == 0 && after.ss_sp == before.ss_sp;
  if (set_here) sigaltstack(&off, NULL);
  return NULL;
}

static void test_existing_stack_kept(void **state) {
  (void)state;
  pthread_t t;
  int ok = 0;
  assert_int_equal(pthread_create(&t, NULL, keeps_existing, &ok), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(ok, 1);
}

static void test_handler_runs_on_it(void **state) {
  (void)state;
  Error err = {0, ""};
  assert_int_equal(signal_stacks_install(2, &err), 0);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR2, &sa, &old), 0);
  t_on_alt = 0;
  raise(SIGUSR2); /* the main thread */
  assert_int_equal(t_on_alt, 1);
  int ok = 0;
#pragma omp parallel num_threads(2) reduction(+ : ok)
  {
    /* Each team thread signals itself: the frame goes on its own stack. */
    sig_atomic_t was = t_on_alt;
    pthread_kill(pthread_self(), SIGUSR2);
    ok += t_on_alt == was + 1;
  }
  assert_int_equal(ok, 2);
  assert_int_equal(sigaction(SIGUSR2, &old, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_thread_has_one),
      cmocka_unit_test(test_existing_stack_kept),
      cmocka_unit_test(test_handler_runs_on_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
