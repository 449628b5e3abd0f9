/* comm: everything that crosses a rank boundary.
 *
 * One MPI world, two rank grids over it (MoE parallel folding):
 *   attention layers  tp-cp-dp-pp     (TP fastest varying, PP slowest)
 *   MoE layers        etp-ep-edp-pp   (ETP fastest, same PP groups)
 * with W = tp cp dp pp = etp ep edp pp. Each rank has coordinates in both
 * grids; each process group is the set of ranks differing only in some
 * dimensions of one grid, built with MPI_Comm_split:
 *   tp, cp, dp, pp        the plain dimensions
 *   dp-cp                 dense gradient reduction
 *   tp-cp                 the ranks that share one sequence
 *   tp-pp                 model parallel (one copy of the dense parameters)
 *   etp, ep, edp          expert tensor / expert / expert data parallel
 *   ep-etp, etp-ep-pp     one copy of a layer's experts / of all experts
 *
 * Headers:
 *   comm/world.h        init/finalize, rank and size, CommGroup, the failure
 *                       policy (every failure ends the whole job with
 *                       "fivefold: rank R failed: ..."), comm_abort
 *   comm/grid_math.h    the grid arithmetic without MPI (the planner uses it)
 *   comm/grid.h         communicators for every group of the grid
 *   comm/collectives.h  all-reduce, reduce-scatter, all-gather(v),
 *                       all-to-all(v), broadcast, barrier, send/recv, each
 *                       blocking or asynchronous with a CommRequest
 *   comm/timeout.h      the collective timeout: a rank that does not arrive
 *                       ends the job with a message naming it
 *
 * Typical use:
 *   comm_init(&argc, &argv, &err);
 *   GridSizes sizes = {.tp = 2, .cp = 2, .dp = 2, .pp = 1, .etp = 1, .ep = 8};
 *   CommGrid grid;
 *   if (comm_grid_create(&sizes, &grid, &err)) comm_abort(2, "%s", err.msg);
 *   comm_allreduce_f32(comm_grid_group(&grid, GRID_GROUP_DP_CP), grads, n,
 *                      COMM_SUM, &req, &err);
 *   ... backward continues ...
 *   comm_wait(&req, &err);
 *   comm_grid_destroy(&grid);
 *   comm_finalize(&err);
 *
 * Only the thread that called comm_init calls into this module. */
#ifndef FIVEFOLD_COMM_COMM_H
#define FIVEFOLD_COMM_COMM_H

#include "comm/collectives.h"
#include "comm/grid.h"
#include "comm/grid_math.h"
#include "comm/host.h"
#include "comm/timeout.h"
#include "comm/waits.h"
#include "comm/world.h"

#endif
