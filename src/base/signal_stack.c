/* Alternate signal stacks for the OpenMP threads (signal_stack.h). */
#include "base/signal_stack.h"

#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/error.h"

/* Kept reachable for the life of the process: a thread may take a signal
 * on its stack at any moment until it exits. */
static void *g_stacks[SIGNAL_STACK_MAX_THREADS];
static int g_count;

/* The smallest alternate stack kept as it is: the kernel's signal frame
 * for this CPU's register state (glibc's _SC_MINSIGSTKSZ) and 16 KiB for
 * the handler. A thread's existing stack of that size is kept, not
 * replaced: its owner may free it when the thread exits (AddressSanitizer
 * unmaps the one it gave the thread, and aborted on finding ours there). */
static size_t smallest_kept(void) {
  long frame = sysconf(_SC_MINSIGSTKSZ);
  return (size_t)(frame > 0 ? frame : MINSIGSTKSZ) + 16384;
}

int signal_stack_present(void) {
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0) return 0;
  return !(cur.ss_flags & SS_DISABLE) && cur.ss_size >= smallest_kept();
}

/* 0, or the errno of the failure (ENOMEM for the allocation). */
static int install_here(void) {
  if (signal_stack_present()) return 0;
  void *mem = NULL;
  int full = 0;
#pragma omp critical(fivefold_signal_stack)
  {
    if (g_count >= SIGNAL_STACK_MAX_THREADS) full = 1;
    else if ((mem = malloc(SIGNAL_STACK_BYTES))) g_stacks[g_count++] = mem;
  }
  if (full) return 0; /* past the limit: left on its own stack */
  if (!mem) return ENOMEM;
  stack_t ss = {.ss_sp = mem, .ss_size = SIGNAL_STACK_BYTES, .ss_flags = 0};
  return sigaltstack(&ss, NULL) != 0 ? errno : 0;
}

int signal_stacks_install(int threads, Error *err) {
  int rc = install_here();
  if (rc) return error_set(err, rc == ENOMEM ? ERR_NOMEM : ERR_IO, "alternate signal stack of the main thread: %s",
                           error_errno_text(rc));
  int failed = 0, failed_thread = -1;
#pragma omp parallel num_threads(threads)
  {
    int e = install_here();
    if (e) {
#pragma omp critical(fivefold_signal_stack_error)
      if (!failed) failed = e, failed_thread = omp_get_thread_num();
    }
  }
  if (failed)
    return error_set(err, failed == ENOMEM ? ERR_NOMEM : ERR_IO, "alternate signal stack of OpenMP thread %d: %s",
                     failed_thread, error_errno_text(failed));
  return ERR_OK;
}
