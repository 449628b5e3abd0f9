/* A rank that fails must take the whole job down with a message naming it.
 * Usage: mpi_failure MODE [VICTIM]; the victim (default: the last rank)
 * fails in the way MODE says while every other rank waits in a barrier, so
 * a failure that did not propagate would hang (run_failure.sh bounds that
 * with a timeout and checks the messages):
 *   ok          nobody fails; exit 0
 *   abort       comm_abort(7, ...)
 *   mpi_error   a receive of 4 floats meets a message of 8 on the dp group
 *               (MPI_ERR_TRUNCATE goes to the error handler, which must be
 *               inherited by communicators split from the world)
 *   mpi_error_async   the same receive started asynchronously, failing in comm_wait
 *   exit        exit(3) before comm_finalize
 *   return      return 0 from main before comm_finalize
 *   kill        raise(SIGKILL): no message of ours is possible, mpirun names the rank
 * and, with the collective timeout armed at 1 s, an all-reduce of 1 MB
 * (past the arrival check's threshold, comm/timeout.h):
 *   late_large  the victim stops itself (SIGSTOP) before it: the others'
 *               arrival check names it
 *   stop_large  the victim stops inside it, after the arrival check
 *               (FIVEFOLD_TEST_STOP_IN_COLLECTIVE): the others' watchdogs
 *               end the job */
#include <signal.h>
#include <stdlib.h>

#include "comm/timeout.h"

#include "mpi_test_util.h"

int main(int argc, char **argv) {
  Error err = {0};
  if (comm_init(&argc, &argv, &err)) {
    fprintf(stderr, "mpi_failure: %s\n", err.msg);
    return 1;
  }
  const char *mode = argc > 1 ? argv[1] : "ok";
  const int w = comm_world_size(), me = comm_world_rank();
  const int victim = argc > 2 ? atoi(argv[2]) : w - 1;
  GridSizes sizes = {.tp = 1, .cp = 1, .dp = 0, .pp = 1, .etp = 1, .ep = 1};
  CommGrid grid;
  if (comm_grid_create(&sizes, &grid, &err)) comm_abort(2, "%s", err.msg);
  const CommGroup *dp = comm_grid_group(&grid, GRID_GROUP_DP);
  int truncation = !strcmp(mode, "mpi_error") || !strcmp(mode, "mpi_error_async");
  if (truncation && me == 0 && victim != 0) {
    float eight[8] = {0};
    CHECK_OK(comm_send_f32(dp, victim, 1, eight, 8, NULL, err));
  }
  if (!strcmp(mode, "late_large") || !strcmp(mode, "stop_large")) {
    CHECK_OK(comm_set_collective_timeout(1, err));
    if (!strcmp(mode, "stop_large")) {
      char rank[16];
      snprintf(rank, sizeof rank, "%d", victim);
      setenv("FIVEFOLD_TEST_STOP_IN_COLLECTIVE", rank, 1);
    }
    if (me == victim && !strcmp(mode, "late_large")) raise(SIGSTOP);
    const size_t n = (size_t)1 << 18;
    float *big = calloc(n, sizeof *big);
    CHECK_OK(comm_allreduce_f32(comm_world(), big, n, COMM_SUM, NULL, err));
    free(big);
    fprintf(stderr, "mpi_failure: the large all-reduce returned on rank %d\n", me);
  }
  if (me == victim) {
    if (!strcmp(mode, "abort")) comm_abort(7, "deliberate failure in the failure test (code 7)");
    if (truncation) {
      float four[4];
      CommRequest req = {0};
      int async = !strcmp(mode, "mpi_error_async");
      CHECK_OK(comm_recv_f32(dp, 0, 1, four, 4, async ? &req : NULL, err));
      CHECK_OK(comm_wait(&req, err));
      fprintf(stderr, "mpi_failure: the truncated receive returned\n");
    }
    if (!strcmp(mode, "exit")) exit(3);
    if (!strcmp(mode, "return")) return 0;
    if (!strcmp(mode, "kill")) raise(SIGKILL);
  }
  CHECK_OK(comm_barrier(comm_world(), NULL, err));
  comm_grid_destroy(&grid);
  return mpi_test_finish("mpi_failure");
}
