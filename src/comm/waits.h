/* How a rank waits for MPI: spinning on MPI_Test, or spinning briefly and
 * then sleeping between tests with a growing pause.
 *
 * Why: a waiting rank that spins takes a whole core. When the ranks of a
 * host have more threads than the host has cores (ranks sharing cores, as
 * in an oversubscribed test or a three-stage pipeline on two cores), the
 * spinning rank takes that core from a rank that computes, and the step
 * gets slower by the share it steals. Sleeping hands the core back; the
 * price is a wake-up latency of at most one pause (WAIT_PAUSE_MAX_US) on
 * waits that last longer than the spin (WAIT_SPIN_US). The mode:
 *   FIVEFOLD_WAIT_SLEEP=on    always sleep after the spin
 *   FIVEFOLD_WAIT_SLEEP=off   always spin (MPI's own behaviour)
 *   FIVEFOLD_WAIT_SLEEP=auto  (default) sleep only when the trainer found
 *                             its host oversubscribed (comm_waits_decide)
 * Sleeping changes when a rank looks at a request, never what it
 * computes, so results are bit-identical in every mode. */
#ifndef FIVEFOLD_COMM_WAITS_H
#define FIVEFOLD_COMM_WAITS_H

#include "base/error.h"

/* Spin this long before the first pause; pauses double from
 * WAIT_PAUSE_MIN_US up to WAIT_PAUSE_MAX_US. */
#define WAIT_SPIN_US 50.0
#define WAIT_PAUSE_MIN_US 10.0
#define WAIT_PAUSE_MAX_US 200.0

typedef enum { WAIT_SLEEP_AUTO = 0, WAIT_SLEEP_ON, WAIT_SLEEP_OFF } WaitSleepMode;

/* Parses a mode ("on", "off", "auto"); NULL or "" is auto. A bad value is
 * ERR_ARG naming `source` (the variable) and the values expected. */
int comm_waits_parse(const char *value, const char *source, WaitSleepMode *mode, Error *err);

/* Reads FIVEFOLD_WAIT_SLEEP and decides whether this rank sleeps: on, off,
 * or (auto) whether its host's ranks have more threads than it has cores;
 * then every rank takes the world's MAX of that (collective over the world
 * once MPI is up), since the decision also picks the blocking or
 * non-blocking form of a collective (comm/collectives.c) and MPI never
 * matches the two. Returns the error of a bad variable. */
int comm_waits_decide(int host_threads, int host_cores, Error *err);
/* The decision and why, for the run's banner: "sleeping (auto: 3 threads
 * on 2 cores)". */
const char *comm_waits_reason(void);

/* Whether waits sleep now, and setting it directly (tests). */
int comm_waits_sleeping(void);
void comm_waits_set_sleeping(int on);

/* The state of one wait loop. */
typedef struct WaitPacer {
  double start;   /* when the wait began (timer_now) */
  double pause_us; /* the next pause */
} WaitPacer;

void comm_wait_pacer_start(WaitPacer *p);
/* Called after every test that did not complete: returns 0 at once while
 * spinning (or when waits do not sleep), otherwise sleeps one pause, grows
 * the next and returns 1 (so the loop may look at its clock now). */
int comm_wait_pace(WaitPacer *p);

#endif
