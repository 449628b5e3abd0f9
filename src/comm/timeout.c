/* The collective timeout of timeout.h: the polled wait, the answers a
 * waiting rank gives to a peer that timed out, the report naming the ranks
 * that did not arrive, and the watchdog of blocking collectives that passed
 * their arrival check. */
#include "comm/timeout.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/timer.h"
#include "comm/waits.h"

enum { PING_TAG = 1, REPLY_TAG = 2 };
/* Tests between two looks at the clock and at pings (a clock read costs
 * about as much as a few tests). */
#define TESTS_PER_LOOK 256
#define MAX_ANSWER_WAIT_S 30.0

/* What a waiting rank answers a ping with. */
typedef struct WaitAnswer {
  int32_t ping;      /* the ping's number, so late answers to an older ping are told apart */
  int32_t world_rank;
  double waited_s;   /* how long it has waited so far */
  char operation[96];
  char group[16];
} WaitAnswer;

static double g_timeout_s;
static MPI_Comm g_watch = MPI_COMM_NULL; /* pings and answers, apart from every other message */
static int32_t g_pings;                  /* pings this rank has sent */
/* Every rank's host name, gathered when the timeout is first armed, so that
 * the report can say on which side of the network each silent rank is. */
#define HOST_CHARS 48
static char (*g_hosts)[HOST_CHARS];

/* The blocking collective running on this rank after its arrival check:
 * when it started (ns of timer_now; 0: none) and what it is, for the
 * watchdog thread. The names are written before the start is published. */
static _Atomic int64_t g_blocking_since_ns;
static char g_blocking_op[96], g_blocking_group[16];
static int g_watchdog_started;
static long g_blocking_calls;

/* Makes no MPI call (MPI_THREAD_FUNNELED): it can only end the process,
 * which takes the job down with it (mpirun ends the others). */
static void *blocking_watchdog(void *arg) {
  (void)arg;
  for (;;) {
    double timeout = g_timeout_s > 0 ? g_timeout_s : 1.0, nap = fmin(1.0, timeout / 4);
    struct timespec ts = {(time_t)nap, (long)((nap - floor(nap)) * 1e9)};
    nanosleep(&ts, NULL);
    int64_t since = atomic_load(&g_blocking_since_ns);
    if (!since || !(g_timeout_s > 0)) continue;
    double waited = timer_now() - (double)since * 1e-9;
    if (waited < g_timeout_s + fmin(g_timeout_s, MAX_ANSWER_WAIT_S)) continue;
    fprintf(stderr,
            "fivefold: rank %d failed: %s on group %s has run %.0f s in a blocking collective after every rank of "
            "the group arrived at it (the collective timeout is %g s): a rank stopped or hung inside it, which a "
            "blocking collective cannot ask about\n",
            comm_world_rank(), g_blocking_op, g_blocking_group, waited, g_timeout_s);
    fflush(stderr);
    _exit(1);
  }
  return NULL;
}

void comm_timeout_blocking_begin(const CommGroup *g, const char *operation) {
  static int stop_rank = -2; /* -2: not read yet; -1: no test stop */
  if (stop_rank == -2) {
    const char *s = getenv("FIVEFOLD_TEST_STOP_IN_COLLECTIVE");
    stop_rank = s && *s ? atoi(s) : -1;
  }
  snprintf(g_blocking_op, sizeof g_blocking_op, "%s", operation ? operation : "?");
  snprintf(g_blocking_group, sizeof g_blocking_group, "%s", g ? g->name : "?");
  atomic_store(&g_blocking_since_ns, (int64_t)(timer_now() * 1e9));
  g_blocking_calls++;
  if (stop_rank >= 0 && stop_rank == comm_world_rank()) {
    stop_rank = -1;
    raise(SIGSTOP);
  }
}

void comm_timeout_blocking_end(void) { atomic_store(&g_blocking_since_ns, 0); }

long comm_timeout_blocking_calls(void) { return g_blocking_calls; }

int comm_set_collective_timeout(double seconds, Error *err) {
  if (!(seconds >= 0))
    return error_set(err, ERR_ARG, "collective timeout of %g s (expected >= 0 seconds; 0 turns it off)", seconds);
  if (!comm_initialized() || comm_world_size() <= 1) return ERR_OK;
  if (seconds > 0 && g_watch == MPI_COMM_NULL) {
    comm_set_operation("comm_set_collective_timeout");
    int rc = MPI_Comm_dup(comm_world()->comm, &g_watch);
    if (rc != MPI_SUCCESS) return comm_check(rc, "comm_set_collective_timeout", comm_world(), err);
    MPI_Comm_set_name(g_watch, "timeout");
    char mine[HOST_CHARS] = "";
    if (gethostname(mine, sizeof mine - 1)) snprintf(mine, sizeof mine, "?");
    g_hosts = calloc((size_t)comm_world_size(), sizeof *g_hosts);
    if (!g_hosts) return error_set(err, ERR_NOMEM, "comm_set_collective_timeout: out of memory for the host names");
    rc = MPI_Allgather(mine, HOST_CHARS, MPI_CHAR, g_hosts, HOST_CHARS, MPI_CHAR, g_watch);
    if (rc != MPI_SUCCESS) return comm_check(rc, "comm_set_collective_timeout (host names)", comm_world(), err);
  }
  if (seconds > 0 && !g_watchdog_started) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int prc = pthread_create(&t, &attr, blocking_watchdog, NULL);
    pthread_attr_destroy(&attr);
    if (prc) return error_set(err, ERR_INTERNAL, "comm_set_collective_timeout: cannot start the watchdog thread (%s)",
                              strerror(prc));
    g_watchdog_started = 1;
  }
  g_timeout_s = seconds;
  return ERR_OK;
}

double comm_collective_timeout(void) { return g_timeout_s; }

int comm_timeout_armed(void) { return g_timeout_s > 0 && g_watch != MPI_COMM_NULL; }

void comm_timeout_release(void) {
  if (g_watch != MPI_COMM_NULL) MPI_Comm_free(&g_watch);
  g_watch = MPI_COMM_NULL;
  free(g_hosts);
  g_hosts = NULL;
  g_timeout_s = 0;
}

static const char *group_name(const CommGroup *g) { return g ? g->name : "(unknown)"; }

/* Answers every ping waiting for this rank: it is here, waiting in operation. */
static void answer_pings(const CommGroup *g, const char *operation, double waited_s) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, PING_TAG, g_watch, &flag, &st);
    if (!flag) return;
    WaitAnswer a = {.world_rank = comm_world_rank(), .waited_s = waited_s};
    MPI_Recv(&a.ping, 1, MPI_INT32_T, st.MPI_SOURCE, PING_TAG, g_watch, MPI_STATUS_IGNORE);
    snprintf(a.operation, sizeof a.operation, "%s", operation ? operation : "an MPI call");
    snprintf(a.group, sizeof a.group, "%s", group_name(g));
    /* A few dozen bytes: sent eagerly, this does not wait for the pinger. */
    MPI_Send(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, REPLY_TAG, g_watch);
  }
}

/* The world ranks of g other than this one (all others without g). */
static int peers_of(const CommGroup *g, int *peers) {
  int world = comm_world_size(), me = comm_world_rank(), n = 0;
  if (!g || g->comm == MPI_COMM_NULL) {
    for (int r = 0; r < world; r++)
      if (r != me) peers[n++] = r;
    return n;
  }
  MPI_Group mine, all;
  MPI_Comm_group(g->comm, &mine);
  MPI_Comm_group(comm_world()->comm, &all);
  int *local = malloc((size_t)g->size * sizeof *local), *global = malloc((size_t)g->size * sizeof *global);
  if (local && global) {
    for (int i = 0; i < g->size; i++) local[i] = i;
    MPI_Group_translate_ranks(mine, g->size, local, all, global);
    for (int i = 0; i < g->size; i++)
      if (global[i] != me && global[i] != MPI_UNDEFINED) peers[n++] = global[i];
  }
  free(local);
  free(global);
  MPI_Group_free(&mine);
  MPI_Group_free(&all);
  return n;
}

static const char *host_of(int world_rank) {
  return g_hosts && world_rank >= 0 && world_rank < comm_world_size() ? g_hosts[world_rank] : "?";
}

/* The message of comm_abort: who did not answer (and on which host), and
 * what the others wait in. When every silent rank is on another host and
 * the ranks of this host answer, the network between the hosts is the
 * likely cause, and the message says so, naming both sides. */
static void report(const CommGroup *g, const char *operation, double waited_s, const int *peers, int n,
                   const WaitAnswer *answers, const int *answered) {
  char msg[1200];
  const char *here = host_of(comm_world_rank());
  size_t len = (size_t)snprintf(msg, sizeof msg, "%s on group %s waited %.0f s (the collective timeout is %g s): ",
                                operation, group_name(g), waited_s, g_timeout_s);
  int missing = 0, missing_here = 0, answered_here = 0;
  for (int i = 0; i < n; i++) {
    int same_host = !strcmp(host_of(peers[i]), here);
    missing += !answered[i];
    missing_here += !answered[i] && same_host;
    answered_here += answered[i] && same_host;
  }
  for (int i = 0, k = 0; i < n && len < sizeof msg; i++) {
    if (answered[i]) continue;
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d", k ? ", " : "", peers[i]);
    k++;
  }
  if (missing && len < sizeof msg)
    len += (size_t)snprintf(msg + len, sizeof msg - len,
                            " did not arrive (%s not answer: stopped, hung, or still computing)",
                            missing == 1 ? "it does" : "they do");
  else if (len < sizeof msg)
    len += (size_t)snprintf(msg + len, sizeof msg - len, "every rank answers, but they wait in different operations");
  if (missing && !missing_here && g_hosts && len < sizeof msg) {
    len += (size_t)snprintf(msg + len, sizeof msg - len, "; every rank that does not answer is on another host (");
    for (int i = 0, k = 0; i < n && len < sizeof msg; i++) {
      if (answered[i]) continue;
      len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d on %s", k++ ? ", " : "", peers[i],
                              host_of(peers[i]));
    }
    if (len < sizeof msg)
      len += (size_t)snprintf(msg + len, sizeof msg - len,
                              ") than rank %d (on %s)%s: rank %d and those ranks have lost each other, the network "
                              "between their hosts may be down",
                              comm_world_rank(), here, answered_here ? ", while the ranks on its own host answer" : "",
                              comm_world_rank());
  }
  for (int i = 0; i < n && len < sizeof msg; i++)
    if (answered[i])
      len += (size_t)snprintf(msg + len, sizeof msg - len, "; rank %d waits in %s on group %s (%.0f s)", peers[i],
                              answers[i].operation, answers[i].group, answers[i].waited_s);
  comm_abort(1, "%s", msg);
}

/* The timeout expired: asks the peers, keeps testing req meanwhile, and ends
 * the job unless req completes. Returns MPI's code when it does. */
static int diagnose(MPI_Request *req, const CommGroup *g, const char *operation, double start) {
  int world = comm_world_size();
  int *peers = calloc((size_t)world, sizeof *peers), *answered = calloc((size_t)world, sizeof *answered);
  WaitAnswer *answers = calloc((size_t)world, sizeof *answers);
  if (!peers || !answered || !answers) comm_abort(1, "%s: timed out, and out of memory to find out why", operation);
  int n = peers_of(g, peers);
  int32_t ping = ++g_pings;
  for (int i = 0; i < n; i++) MPI_Send(&ping, 1, MPI_INT32_T, peers[i], PING_TAG, g_watch);
  double until = timer_now() + (g_timeout_s < MAX_ANSWER_WAIT_S ? g_timeout_s : MAX_ANSWER_WAIT_S);
  int got = 0, rc = MPI_SUCCESS, done = 0;
  for (unsigned spin = 1;; spin++) {
    rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) break;
    if (spin % TESTS_PER_LOOK) continue;
    double now = timer_now();
    answer_pings(g, operation, now - start);
    int flag = 1;
    while (flag) {
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, REPLY_TAG, g_watch, &flag, &st);
      if (!flag) break;
      WaitAnswer a;
      MPI_Recv(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, REPLY_TAG, g_watch, MPI_STATUS_IGNORE);
      a.operation[sizeof a.operation - 1] = a.group[sizeof a.group - 1] = '\0';
      for (int i = 0; i < n; i++)
        if (peers[i] == st.MPI_SOURCE && a.ping == ping && !answered[i]) {
          answered[i] = 1;
          answers[i] = a;
          got++;
        }
    }
    /* Everyone answered and it still does not complete: a mismatch, no
     * point waiting longer. */
    if (now >= until || got == n) report(g, operation, now - start, peers, n, answers, answered);
  }
  free(peers);
  free(answered);
  free(answers);
  return rc;
}

int comm_timeout_wait(MPI_Request *req, const CommGroup *g, const char *operation) {
  double start = timer_now(), deadline = start + g_timeout_s;
  WaitPacer pacer;
  comm_wait_pacer_start(&pacer);
  for (unsigned spin = 1;; spin++) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    /* A rank that slept looks at once; a spinning one every few hundred
     * tests. */
    if (!comm_wait_pace(&pacer) && spin % TESTS_PER_LOOK) continue;
    double now = timer_now();
    answer_pings(g, operation, now - start);
    if (now >= deadline) return diagnose(req, g, operation, start);
  }
}
