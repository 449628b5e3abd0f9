/* The rank grid over MPI: both grids' coordinates of this rank and one
 * communicator per process group (grid_math.h defines the groups and their
 * order). Creating the grid is collective over the world: every rank must
 * call it with the same sizes. Validation runs on every rank before any
 * communicator is made, so a bad configuration fails everywhere with the
 * same message instead of leaving some ranks waiting. */
#ifndef FIVEFOLD_COMM_GRID_H
#define FIVEFOLD_COMM_GRID_H

#include <stdio.h>

#include "comm/grid_math.h"
#include "comm/world.h"

typedef struct CommGrid {
  GridSizes sizes;    /* resolved (dp and edp derived) */
  GridCoords coords;  /* this rank */
  CommGroup groups[GRID_NUM_GROUPS];
} CommGrid;

/* sizes->world 0 means "the MPI world"; otherwise it must equal it. */
int comm_grid_create(const GridSizes *sizes, CommGrid *grid, Error *err);
void comm_grid_destroy(CommGrid *grid);

static inline const CommGroup *comm_grid_group(const CommGrid *grid, GridGroupKind kind) {
  return &grid->groups[kind];
}

/* A group of the ranks of `parent` that pass the same color, ordered by
 * key (MPI_Comm_split): the groups that are not one of the grid's, such
 * as the replicas of one pipeline stage under stage replication.
 * Collective over parent. comm_group_free releases it. */
int comm_group_split(const CommGroup *parent, int color, int key, const char *name, CommGroup *out, Error *err);
void comm_group_free(CommGroup *group);

/* grid_print_summary on world rank 0 only. */
void comm_grid_print_summary(const CommGrid *grid, FILE *out, int max_ranks);

#endif
