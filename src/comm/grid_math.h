/* Rank-grid arithmetic without MPI: the two grids that fold attention and
 * MoE layers onto the same ranks, each rank's coordinates in both, and the
 * members of every process group. The planner uses this without linking
 * MPI; comm/grid.c turns the same numbers into communicators, so the groups
 * the planner prices are exactly the groups the runtime builds.
 *
 *   attention grid  order tp-cp-dp-pp   rank = tp_i + tp (cp_i + cp (dp_i + dp pp_i))
 *   MoE grid        order etp-ep-edp-pp rank = etp_i + etp (ep_i + ep (edp_i + edp pp_i))
 *
 * TP and ETP vary fastest (neighbouring ranks, usually one node); PP varies
 * slowest in both grids, so pipeline groups coincide and a pipeline stage is
 * the same set of ranks whichever layer type runs on it.
 *
 * Within a group, members are ordered by their index: the mixed-radix value
 * of the group's dimensions in grid order (fastest first). That order is
 * also increasing world rank, and it is the rank each member gets in the
 * group's communicator. */
#ifndef FIVEFOLD_COMM_GRID_MATH_H
#define FIVEFOLD_COMM_GRID_MATH_H

#include <stdio.h>

#include "base/error.h"

typedef struct GridSizes {
  int world;         /* ranks in the job */
  int tp, cp, dp, pp; /* attention grid; dp 0 = derive world / (tp cp pp) */
  int etp, ep, edp;  /* MoE grid over the same ranks; edp 0 = derive world / (etp ep pp) */
} GridSizes;

typedef struct GridCoords {
  int tp, cp, dp, pp; /* position in the attention grid */
  int etp, ep, edp;   /* position in the MoE grid (its pp equals the attention pp) */
} GridCoords;

/* The process groups. Each is the set of ranks that differ only in the
 * named dimensions of one grid. */
typedef enum GridGroupKind {
  GRID_GROUP_TP = 0,   /* tensor parallel (and sequence parallel: SP is on whenever tp > 1) */
  GRID_GROUP_CP,       /* context parallel: the K/V ring */
  GRID_GROUP_DP,       /* data parallel */
  GRID_GROUP_PP,       /* pipeline: same in both grids */
  GRID_GROUP_DP_CP,    /* dense gradient reduction */
  GRID_GROUP_TP_CP,    /* the ranks that share one sequence (tokens split over cp and tp) */
  GRID_GROUP_TP_PP,    /* model parallel: one copy of the dense parameters (grad norm) */
  GRID_GROUP_ETP,      /* expert tensor parallel: all-gather-v of dispatched tokens */
  GRID_GROUP_EP,       /* expert parallel: the dispatcher's all-to-all-v */
  GRID_GROUP_EDP,      /* expert data parallel: expert gradient reduction */
  GRID_GROUP_EP_ETP,   /* one copy of one layer's experts */
  GRID_GROUP_ETP_EP_PP, /* expert model parallel: one copy of all expert parameters (grad norm) */
  GRID_NUM_GROUPS
} GridGroupKind;

/* "tp", "cp", "dp", "pp", "dp-cp", "tp-cp", "tp-pp", "etp", "ep", "edp",
 * "ep-etp", "etp-ep-pp"; NULL for an unknown kind. */
const char *grid_group_name(GridGroupKind kind);

/* Checks and completes the sizes: every size >= 1 after deriving dp and edp
 * when they are 0, W = tp cp dp pp = etp ep edp pp, and pipeline groups equal
 * in both grids. Messages say which product fails and what would fit. */
int grid_sizes_resolve(GridSizes *sizes, Error *err);

/* Coordinates of rank in both grids (sizes resolved, 0 <= rank < world). */
void grid_coords_of_rank(const GridSizes *sizes, int rank, GridCoords *coords);
int grid_attention_rank(const GridSizes *sizes, int tp, int cp, int dp, int pp);
int grid_moe_rank(const GridSizes *sizes, int etp, int ep, int edp, int pp);

/* Size of every group of this kind. */
int grid_group_size(const GridSizes *sizes, GridGroupKind kind);
/* rank's position in its group of this kind (0 .. size - 1). */
int grid_group_index(const GridSizes *sizes, GridGroupKind kind, int rank);
/* The lowest world rank of rank's group: one id per group (MPI_Comm_split's color). */
int grid_group_first_rank(const GridSizes *sizes, GridGroupKind kind, int rank);
/* Writes the world ranks of rank's group in index order into members (room
 * for grid_group_size entries) and returns how many. */
int grid_group_members(const GridSizes *sizes, GridGroupKind kind, int rank, int *members);

/* One line with the sizes, then rank -> coordinates in both grids, one rank
 * per line; at most max_ranks lines of ranks (<= 0: all). */
void grid_print_summary(FILE *out, const GridSizes *sizes, int max_ranks);

#endif
