/* The wait pacing of comm/waits.h: the mode from FIVEFOLD_WAIT_SLEEP, the
 * decision, and the spin-then-sleep step of a wait loop. */
#include "comm/waits.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "base/timer.h"

static int g_sleeping;
static char g_reason[160] = "spinning";

int comm_waits_parse(const char *value, const char *source, WaitSleepMode *mode, Error *err) {
  if (!value || !*value || !strcmp(value, "auto")) *mode = WAIT_SLEEP_AUTO;
  else if (!strcmp(value, "on")) *mode = WAIT_SLEEP_ON;
  else if (!strcmp(value, "off")) *mode = WAIT_SLEEP_OFF;
  else
    return error_set(err, ERR_ARG, "%s=\"%s\": expected on, off or auto (sleep between MPI tests while waiting)",
                     source, value);
  return ERR_OK;
}

int comm_waits_decide(int host_threads, int host_cores, Error *err) {
  WaitSleepMode mode;
  int rc = comm_waits_parse(getenv("FIVEFOLD_WAIT_SLEEP"), "FIVEFOLD_WAIT_SLEEP", &mode, err);
  if (rc) return rc;
  int over = host_threads > host_cores;
  int local = mode == WAIT_SLEEP_ON || (mode == WAIT_SLEEP_AUTO && over);
  /* Whether waits sleep also decides whether a collective is MPI's
   * blocking call or its non-blocking form polled (comm/collectives.c),
   * and MPI never matches the two: every rank of the job must decide
   * alike, so one oversubscribed host (or one rank asking) makes them all
   * sleep. */
  int any = local, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
    return error_set(err, ERR_IO, "comm_waits_decide: agreeing on sleeping waits across the ranks failed");
  g_sleeping = any;
  /* Linux lets a sleep run 50 us past its end by default (timer slack),
   * longer than the first pauses; a sleeping waiter asks for 1 us. */
  if (g_sleeping) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const char *why = any && !local ? "; another rank sleeps, and all must wait alike" : "";
  if (mode == WAIT_SLEEP_AUTO)
    snprintf(g_reason, sizeof g_reason, "%s (auto: %d thread%s on %d core%s%s)", g_sleeping ? "sleeping" : "spinning",
             host_threads, host_threads == 1 ? "" : "s", host_cores, host_cores == 1 ? "" : "s", why);
  else
    snprintf(g_reason, sizeof g_reason, "%s (FIVEFOLD_WAIT_SLEEP=%s%s)", g_sleeping ? "sleeping" : "spinning",
             mode == WAIT_SLEEP_ON ? "on" : "off", why);
  return ERR_OK;
}

const char *comm_waits_reason(void) { return g_reason; }

int comm_waits_sleeping(void) { return g_sleeping; }
void comm_waits_set_sleeping(int on) { g_sleeping = on != 0; }

void comm_wait_pacer_start(WaitPacer *p) {
  p->start = g_sleeping ? timer_now() : 0;
  p->pause_us = WAIT_PAUSE_MIN_US;
}

int comm_wait_pace(WaitPacer *p) {
  if (!g_sleeping) return 0;
  if ((timer_now() - p->start) * 1e6 < WAIT_SPIN_US) return 0;
  struct timespec ts = {0, (long)(p->pause_us * 1e3)};
  nanosleep(&ts, NULL);
  p->pause_us = p->pause_us * 2 < WAIT_PAUSE_MAX_US ? p->pause_us * 2 : WAIT_PAUSE_MAX_US;
  return 1;
}
