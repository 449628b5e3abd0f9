/* The collective timeout: a rank that does not arrive (stopped with
 * SIGSTOP, hung, or stuck computing) ends the job within a bounded time,
 * with a message naming it, instead of leaving its peers waiting forever.
 *
 * How: while the timeout is armed, every blocking operation of
 * comm/collectives.h is started as its non-blocking form and waited for in
 * a loop of MPI_Test (comm_wait too), which is how MPI_Wait spends its time
 * anyway; the loop reads the clock every few hundred tests. A wait that
 * passes the timeout asks each other rank of its group, over a private
 * duplicate of the world communicator, whether it is there; ranks waiting
 * in such a loop answer at once (with what they wait in), ranks that are
 * stopped, hung or computing do not. After a second period as long as the
 * timeout (at most 30 s) the waiting rank ends the job (comm_abort) with
 *   fivefold: rank R failed: OP on group G waited T s (the collective
 *   timeout is X s): rank Q did not arrive (it does not answer: stopped,
 *   hung, or still computing)
 * When every rank that does not answer is on another host than the waiting
 * rank (host names are gathered when the timeout is first armed), the
 * message adds "every rank that does not answer is on another host (rank Q
 * on H2) than rank R (on H1)...: rank R and those ranks have lost each
 * other, the network between their hosts may be down", naming both sides.
 * If the operation completes meanwhile, the wait simply returns. So the job
 * ends at most about twice the timeout after the last rank stopped moving.
 * A watchdog thread could notice the stall but, under MPI_THREAD_FUNNELED,
 * could not ask the other ranks who is missing; polling keeps everything on
 * the thread that calls MPI.
 *
 * Large collectives (comm/collectives.c: 256 KB or more, not while waits
 * sleep) are the exception, because the non-blocking form is 2 to 3 times
 * slower than MPI's blocking algorithms there: a polled barrier of the
 * group first waits for every rank to arrive, with the diagnosis above,
 * then the blocking call runs. A rank that stops inside it after that
 * (stopped in MPI itself) cannot be asked about; a watchdog thread, which
 * makes no MPI call, ends the job when such a call has run for twice the
 * timeout (the timeout plus at most 30 s), with
 *   fivefold: rank R failed: OP on group G has run T s in a blocking
 *   collective after every rank of the group arrived at it (the collective
 *   timeout is X s): a rank stopped or hung inside it, which a blocking
 *   collective cannot ask about
 * and exit status 1.
 *
 * Not covered: MPI-IO of the distributed checkpoint and MPI calls made
 * outside comm/collectives.h. */
#ifndef FIVEFOLD_COMM_TIMEOUT_H
#define FIVEFOLD_COMM_TIMEOUT_H

#include "comm/world.h"

/* Arms the timeout for every later operation (seconds > 0) or disarms it
 * (0: blocking MPI calls as they are). Collective over the world the first
 * time it arms (it duplicates the world communicator); a world of one rank
 * never arms. */
int comm_set_collective_timeout(double seconds, Error *err);
double comm_collective_timeout(void); /* 0 when disarmed */

/* For comm/ itself. Whether blocking operations go through
 * comm_timeout_wait. */
int comm_timeout_armed(void);
/* Waits for *req (started on g, or on an unknown group when g is NULL: then
 * every rank is asked) under the timeout; returns MPI's code. Does not
 * return when the timeout expires. */
int comm_timeout_wait(MPI_Request *req, const CommGroup *g, const char *operation);
/* A blocking collective that passed its arrival check starts and ends
 * (comm/collectives.c); the watchdog times it. For tests only:
 * FIVEFOLD_TEST_STOP_IN_COLLECTIVE=R makes world rank R stop itself with
 * SIGSTOP at its first such begin. */
void comm_timeout_blocking_begin(const CommGroup *g, const char *operation);
void comm_timeout_blocking_end(void);
/* How many collectives ran blocking after their arrival check (tests). */
long comm_timeout_blocking_calls(void);
/* Frees the private communicator (comm_finalize). */
void comm_timeout_release(void);

#endif
