/* A request to stop a run early (a preemption signal, Ctrl-C) as the
 * trainer sees it: the value in TrainerOptions.stop is the signal number
 * that asked (or 1 for a request without a signal); the ranks agree on it
 * at the end of every step (the largest value wins), so whichever rank
 * received it, every rank stops after the same step.
 *
 * Test hook: FIVEFOLD_TEST_HOLD_AFTER_STEP="N:DIR" makes every rank, after
 * step N and before the ranks agree on stopping, create DIR/rank-R
 * (holding its pid) and then wait until this rank is asked to stop or
 * DIR/go exists. A test that signals a rank while it holds knows which step
 * the request lands in, without racing the run. */
#ifndef FIVEFOLD_TRAIN_STOP_REQUEST_H
#define FIVEFOLD_TRAIN_STOP_REQUEST_H

#include <signal.h>

/* "SIGTERM", "SIGUSR1", ... for the signals that ask a run to stop; "a
 * request" for a value that is no signal (1) or one without a name here. */
const char *stop_request_name(int value);

/* The test hold after `step` (see above); nothing without the variable or
 * at another step. world_rank names the marker file. */
void stop_request_test_hold(int step, int world_rank, volatile sig_atomic_t *stop);

#endif
