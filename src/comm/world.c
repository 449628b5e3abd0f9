/* MPI start-up and shut-down, the renumbering of the world by a device
 * mapping (comm_world_place), and the failure policy of world.h: the error
 * handler on MPI_COMM_WORLD, comm_abort, and the exit hook that turns a rank
 * leaving early into a job-wide abort with a message naming the rank. */
#include "comm/world.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comm/timeout.h"

static int g_initialized; /* between comm_init and comm_finalize */
static int g_started_mpi; /* comm_init called MPI_Init_thread (so it finalizes) */
static int g_exit_hook_set;
static volatile int g_aborting; /* abort in progress: the exit hook stays quiet */
static int g_rank = 0, g_size = 1;
static int g_launch_rank = 0;
static MPI_Comm g_placed = MPI_COMM_NULL; /* the renumbered world of comm_world_place */
static int g_tag_max = 32767;
static const char *g_operation;
static MPI_Errhandler g_errhandler = MPI_ERRHANDLER_NULL;
static MPI_Errhandler g_previous_world = MPI_ERRHANDLER_NULL, g_previous_self = MPI_ERRHANDLER_NULL;
static CommGroup g_world = {.comm = MPI_COMM_NULL, .size = 1, .rank = 0, .name = "world"};

static int mpi_is_running(void) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

static int clamp_exit_code(int code) { return code >= 1 && code <= 255 ? code : 1; }

/* Called by MPI on any error on a communicator derived from MPI_COMM_WORLD.
 * It must not return: returning would leave this rank's peers blocked. */
static void on_mpi_error(MPI_Comm *comm, int *code, ...) {
  char what[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  int len = 0;
  if (MPI_Error_string(*code, what, &len) != MPI_SUCCESS)
    snprintf(what, sizeof what, "MPI error code %d", *code);
  char name[MPI_MAX_OBJECT_NAME] = "?";
  if (comm && *comm != MPI_COMM_NULL) MPI_Comm_get_name(*comm, name, &len);
  fprintf(stderr, "fivefold: rank %d failed: %s in %s on group %s\n", g_rank, what,
          g_operation ? g_operation : "an MPI call", name[0] ? name : "(unnamed)");
  fflush(stderr);
  g_aborting = 1;
  MPI_Abort(MPI_COMM_WORLD, 1);
  _Exit(1); /* not reached: MPI_Abort does not return */
}

/* Runs on exit(), including a return from main. A rank that leaves before
 * comm_finalize while others still run would leave them waiting; say so and
 * take the job down. */
static void on_process_exit(int status, void *arg) {
  (void)arg;
  if (!g_initialized || g_aborting || !mpi_is_running()) return;
  g_aborting = 1;
  if (g_size > 1) {
    fprintf(stderr, "fivefold: rank %d failed: exited with status %d before comm_finalize\n",
            g_rank, status);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, clamp_exit_code(status));
  }
}

int comm_init(int *argc, char ***argv, Error *err) {
  if (g_initialized) return ERR_OK;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
      return error_set(err, ERR_IO,
                       "MPI_Init_thread failed (MPI code %d): check the MPI installation; for "
                       "several ranks start the program with mpirun",
                       rc);
    g_started_mpi = 1;
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      g_started_mpi = 0;
      return error_set(err, ERR_IO,
                       "MPI provides thread level %d, below MPI_THREAD_FUNNELED (%d) which "
                       "fivefold needs (OpenMP threads run while the main thread calls MPI)",
                       provided, MPI_THREAD_FUNNELED);
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  g_launch_rank = g_rank;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &g_previous_world);
  MPI_Comm_get_errhandler(MPI_COMM_SELF, &g_previous_self);
  MPI_Comm_create_errhandler(on_mpi_error, &g_errhandler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, g_errhandler);
  /* Errors that belong to no communicator are raised on MPI_COMM_SELF in MPI 4
   * and on MPI_COMM_WORLD before it; cover both. */
  MPI_Comm_set_errhandler(MPI_COMM_SELF, g_errhandler);
  MPI_Comm_set_name(MPI_COMM_WORLD, "world");
  int *tag_ub = NULL, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  if (flag && tag_ub && *tag_ub > 0) g_tag_max = *tag_ub;
  g_world.comm = MPI_COMM_WORLD;
  g_world.size = g_size;
  g_world.rank = g_rank;
  if (g_size > 1) log_set_rank(g_rank);
  g_aborting = 0;
  g_initialized = 1;
  if (!g_exit_hook_set) {
    /* on_exit rather than atexit: the hook reports the exit status. */
    on_exit(on_process_exit, NULL);
    g_exit_hook_set = 1;
  }
  return ERR_OK;
}

int comm_finalize(Error *err) {
  if (!g_initialized) return ERR_OK;
  g_initialized = 0;
  g_world.comm = MPI_COMM_NULL;
  comm_timeout_release();
  if (g_placed != MPI_COMM_NULL) MPI_Comm_free(&g_placed);
  g_placed = MPI_COMM_NULL;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, g_previous_world);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, g_previous_self);
  MPI_Errhandler_free(&g_previous_world);
  MPI_Errhandler_free(&g_previous_self);
  MPI_Errhandler_free(&g_errhandler);
  if (g_started_mpi) {
    g_started_mpi = 0;
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) return error_set(err, ERR_IO, "MPI_Finalize failed (MPI code %d)", rc);
  }
  log_set_rank(-1);
  return ERR_OK;
}

int comm_initialized(void) { return g_initialized; }

int comm_mpi_finalized(void) {
  int done = 0;
  MPI_Finalized(&done);
  return done;
}

int comm_node_info(int *ranks_on_node, int *node_rank, int *nodes, void *mask, size_t bytes, Error *err) {
  *ranks_on_node = 1, *node_rank = 0, *nodes = 1;
  if (!g_initialized) return ERR_OK;
  if (bytes > (size_t)INT_MAX) return error_set(err, ERR_ARG, "comm_node_info: a %zu-byte mask is too large", bytes);
  comm_set_operation("comm_node_info");
  MPI_Comm node;
  int rc = MPI_Comm_split_type(g_world.comm, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return comm_check(rc, "comm_node_info (split by node)", &g_world, err);
  MPI_Comm_size(node, ranks_on_node);
  MPI_Comm_rank(node, node_rank);
  if (mask && bytes) rc = MPI_Allreduce(MPI_IN_PLACE, mask, (int)bytes, MPI_BYTE, MPI_BOR, node);
  int leader = *node_rank == 0;
  if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&leader, nodes, 1, MPI_INT, MPI_SUM, g_world.comm);
  MPI_Comm_free(&node);
  return rc == MPI_SUCCESS ? ERR_OK : comm_check(rc, "comm_node_info", &g_world, err);
}

int comm_world_place(const int *device_of_rank, int n, Error *err) {
  if (!g_initialized) return error_set(err, ERR_ARG, "comm_world_place: call comm_init first");
  if (n != g_size)
    return error_set(err, ERR_ARG, "the device mapping has %d entries, but the world has %d ranks", n, g_size);
  if (g_placed != MPI_COMM_NULL || comm_timeout_armed())
    return error_set(err, ERR_ARG, "comm_world_place: the world is numbered already (place the ranks once, first)");
  int rank_here = -1;
  for (int r = 0; r < n; r++) {
    if (device_of_rank[r] < 0 || device_of_rank[r] >= n)
      return error_set(err, ERR_ARG, "the device mapping gives rank %d device %d, outside [0, %d)", r,
                       device_of_rank[r], n);
    if (device_of_rank[r] == g_launch_rank) {
      if (rank_here >= 0)
        return error_set(err, ERR_ARG, "the device mapping gives device %d to ranks %d and %d (not a permutation)",
                         g_launch_rank, rank_here, r);
      rank_here = r;
    }
  }
  if (rank_here < 0)
    return error_set(err, ERR_ARG, "the device mapping gives device %d to no rank (not a permutation)", g_launch_rank);
  comm_set_operation("comm_world_place (MPI_Comm_split)");
  MPI_Comm placed;
  int rc = MPI_Comm_split(MPI_COMM_WORLD, 0, rank_here, &placed);
  if (rc != MPI_SUCCESS) return comm_check(rc, "comm_world_place", &g_world, err);
  MPI_Comm_set_errhandler(placed, g_errhandler);
  MPI_Comm_set_name(placed, "world");
  g_placed = placed;
  g_world.comm = placed;
  MPI_Comm_rank(placed, &g_rank);
  g_world.rank = g_rank;
  if (g_size > 1) log_set_rank(g_rank);
  return ERR_OK;
}

int comm_launch_rank(void) { return g_launch_rank; }

int comm_launch_is_node_major(int *is_node_major, int *per_node, Error *err) {
  *is_node_major = 1;
  if (per_node) *per_node = 1;
  if (!g_initialized || g_size == 1) return ERR_OK;
  comm_set_operation("comm_launch_is_node_major");
  MPI_Comm node;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_launch_rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return comm_check(rc, "comm_launch_is_node_major", &g_world, err);
  int size = 1, node_rank = 0, first = g_launch_rank;
  MPI_Comm_size(node, &size);
  MPI_Comm_rank(node, &node_rank);
  rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node);
  /* Node-major: this process is slot node_rank of a block that starts at a
   * multiple of the node size, and every node is as large as this one. */
  int ok = first + node_rank == g_launch_rank && first % size == 0;
  int sizes[2] = {size, -size};
  if (rc == MPI_SUCCESS) rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS) rc = MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return comm_check(rc, "comm_launch_is_node_major", &g_world, err);
  *is_node_major = ok && sizes[0] == -sizes[1];
  if (per_node) *per_node = size;
  return ERR_OK;
}
int comm_world_rank(void) { return g_rank; }
int comm_world_size(void) { return g_size; }
int comm_tag_max(void) { return g_tag_max; }
const CommGroup *comm_world(void) { return &g_world; }

void comm_abort(int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fivefold: rank %d failed: %s\n", g_rank, msg);
  fflush(stderr);
  g_aborting = 1;
  if (mpi_is_running()) MPI_Abort(MPI_COMM_WORLD, clamp_exit_code(code));
  exit(clamp_exit_code(code));
}

void comm_set_operation(const char *operation) { g_operation = operation; }
const char *comm_operation(void) { return g_operation; }

int comm_check(int mpi_rc, const char *operation, const CommGroup *group, Error *err) {
  if (mpi_rc == MPI_SUCCESS) return ERR_OK;
  char what[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  int len = 0;
  if (MPI_Error_string(mpi_rc, what, &len) != MPI_SUCCESS)
    snprintf(what, sizeof what, "MPI error code %d", mpi_rc);
  if (!group) return error_set(err, ERR_IO, "%s: %s", operation, what);
  return error_set(err, ERR_IO, "%s on group %s: %s", operation, group->name, what);
}
