/* Alternate signal stacks for the calling thread and every OpenMP thread.
 *
 * Why: a handler's signal frame is written on the stack of the thread the
 * signal lands on, below its stack pointer; with AVX-512 and AMX state that
 * frame is several kilobytes. oneDNN's JIT kernels keep data below their
 * stack pointer while they run, and a frame written there corrupts it: a
 * one-rank `fivefold train` sent SIGINT forty times a run aborted with
 * "corrupted double-linked list" in 4 to 8 runs of 15 on the oneDNN
 * backend, none on OpenBLAS, none with the frames on a stack of their own.
 * A handler installed with SA_ONSTACK runs on the thread's alternate stack
 * instead, which nothing else uses. */
#ifndef FIVEFOLD_BASE_SIGNAL_STACK_H
#define FIVEFOLD_BASE_SIGNAL_STACK_H

#include <stddef.h>

#include "base/error.h"

/* Bytes of each alternate stack fivefold gives: room for the largest
 * signal frame (AVX-512 and AMX tile state) and a small handler, many
 * times over. */
#define SIGNAL_STACK_BYTES ((size_t)256 * 1024)
/* At most this many threads get one (more are left on their own stacks). */
#define SIGNAL_STACK_MAX_THREADS 1024

/* Gives the calling thread, and each thread of an OpenMP team of `threads`
 * (1: the calling thread alone), an alternate signal stack unless it has
 * one large enough for a signal frame and a small handler (a sanitizer's,
 * say, which is then left in place). The stacks live as long as the
 * process. Returns ERR_NOMEM or ERR_IO (sigaltstack refused) naming the
 * thread. */
int signal_stacks_install(int threads, Error *err);

/* Whether the calling thread has an alternate signal stack large enough
 * for a signal frame and a small handler (tests). */
int signal_stack_present(void);

#endif
