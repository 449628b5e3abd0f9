/* The MPI world: start-up and shut-down, this process's rank, the group type
 * every collective takes, and the failure policy.
 *
 * Failure policy: a failing rank ends the whole job with one line that names
 * it, instead of leaving the other ranks blocked in a collective forever.
 *   - comm_abort() is how higher layers give up:
 *       fivefold: rank R failed: <message>
 *   - an MPI error on any communicator made from MPI_COMM_WORLD goes to an
 *     error handler that prints
 *       fivefold: rank R failed: <MPI error string> in <operation> on group <name>
 *     and aborts the job (the operation is the wrapper that was running, see
 *     comm_set_operation);
 *   - a rank that calls exit() between comm_init and comm_finalize prints
 *       fivefold: rank R failed: exited with status S before comm_finalize
 *     and aborts the job (a rank that simply vanished would otherwise leave
 *     its peers waiting);
 *   - a rank killed by a signal cannot speak; mpirun reports it
 *     ("process rank R ... exited on signal N") and kills the others.
 *
 * Threading: MPI_THREAD_FUNNELED. Only the thread that called comm_init
 * calls MPI; OpenMP worker threads never do.
 *
 * A program started without mpirun runs as a world of one rank (singleton
 * start-up), so every tool works the same on a laptop. */
#ifndef FIVEFOLD_COMM_WORLD_H
#define FIVEFOLD_COMM_WORLD_H

#include <mpi.h>

#include "base/error.h"

/* A process group: what every collective and point-to-point call takes. */
typedef struct CommGroup {
  MPI_Comm comm; /* MPI_COMM_NULL when the group is not set up */
  int size;      /* ranks in the group */
  int rank;      /* this rank's index in the group, 0 .. size - 1 */
  char name[16]; /* "world", "tp", "dp-cp", ...: used in failure messages */
} CommGroup;

/* Starts MPI (unless something else already did), installs the failure
 * policy on MPI_COMM_WORLD, and tags log lines with the rank when there is
 * more than one. argc/argv may be NULL. Calling it twice is harmless. */
int comm_init(int *argc, char ***argv, Error *err);

/* Shuts MPI down if comm_init started it. Every rank must call it; after it
 * no comm_* call but comm_initialized may be made. */
int comm_finalize(Error *err);

int comm_initialized(void); /* 1 between comm_init and comm_finalize */
/* 1 once MPI itself has been shut down in this process (by comm_finalize
 * or anyone else): MPI cannot start again, so a later run is one rank. */
int comm_mpi_finalized(void);
int comm_world_rank(void);  /* 0 before comm_init */
int comm_world_size(void);  /* 1 before comm_init */
int comm_tag_max(void);     /* largest usable point-to-point tag (>= 32767) */

/* The group of all ranks; valid between comm_init and comm_finalize. */
const CommGroup *comm_world(void);

/* Ends every rank of the job: prints "fivefold: rank R failed: <message>"
 * to stderr and calls MPI_Abort (plain exit before comm_init or after
 * comm_finalize). code becomes the exit status (1 if outside 1..255). */
void comm_abort(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Places the ranks by a device mapping: the process the launcher started
 * as rank d (its "device": launchers number processes node by node, slot
 * by slot) becomes world rank r where device_of_rank[r] = d, so that the
 * grids, built from world ranks afterwards, put rank r's coordinates on
 * device device_of_rank[r]. device_of_rank must be a permutation of the
 * world (n = world size). Collective over the world; call it before any
 * group, grid or collective timeout is made (they would keep the old
 * numbering). Every world rank, message and log tag is the new one from
 * here on; comm_launch_rank keeps the launcher's. */
int comm_world_place(const int *device_of_rank, int n, Error *err);
/* The rank the launcher gave this process (the world rank unless
 * comm_world_place renumbered the world). */
int comm_launch_rank(void);
/* 1 when the launcher numbered processes node by node: the processes of
 * each node are consecutive launch ranks and every node has as many, so
 * that launch rank d is slot d % per_node of node d / per_node. per_node
 * gets the processes per node (may be NULL). Collective over the world. */
int comm_launch_is_node_major(int *is_node_major, int *per_node, Error *err);

/* Where this rank runs: how many ranks share its node (shared memory),
 * its rank among them, and how many nodes the world spans. mask (bytes
 * long, may be NULL) is OR-ed over the node's ranks in place: a CPU
 * affinity mask becomes the node's cores in use. Collective over the world. */
int comm_node_info(int *ranks_on_node, int *node_rank, int *nodes, void *mask, size_t bytes, Error *err);

/* Names the operation in progress for the failure message of the MPI error
 * handler. Every comm_* wrapper sets it; code that calls MPI directly may
 * too. The string must outlive the call (a literal). */
void comm_set_operation(const char *operation);
const char *comm_operation(void);

/* Turns an MPI return code into an Error ("<operation> on group <name>:
 * <MPI error string>", code ERR_IO). Only reached if someone replaced the
 * aborting error handler; the wrappers still check every call. */
int comm_check(int mpi_rc, const char *operation, const CommGroup *group, Error *err);

#endif
