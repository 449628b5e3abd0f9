/* Names of the signals that stop a run, and the test hold of
 * FIVEFOLD_TEST_HOLD_AFTER_STEP. See stop_request.h. */
#include "train/stop_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

const char *stop_request_name(int value) {
  switch (value) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a request";
  }
}

void stop_request_test_hold(int step, int world_rank, volatile sig_atomic_t *stop) {
  const char *spec = getenv("FIVEFOLD_TEST_HOLD_AFTER_STEP");
  char dir[1024];
  int at = 0;
  if (!spec || sscanf(spec, "%d:%1023s", &at, dir) != 2 || at != step) return;
  char path[1100];
  snprintf(path, sizeof path, "%s/rank-%d", dir, world_rank);
  /* Written whole, then renamed: the test reads the pid only once complete. */
  char tmp[1120];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f) {
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    rename(tmp, path);
  }
  snprintf(path, sizeof path, "%s/go", dir);
  /* A signal sent to this process is handled before the next system call
   * returns, so once the test has sent it and created go, the flag is set
   * before go is seen. Polled, because the hold may have to wait for mpirun
   * to forward a signal. */
  const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
  while (!(stop && *stop) && access(path, F_OK) != 0) nanosleep(&tick, NULL);
}
