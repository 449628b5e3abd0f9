/* Communicators for the rank grid: one MPI_Comm_split of the world per group
 * kind, colored by the group's first rank and keyed by the rank's index in
 * the group, so communicator ranks are exactly grid_group_index. */
#include "comm/grid.h"

#include <stdio.h>
#include <string.h>

int comm_grid_create(const GridSizes *sizes, CommGrid *grid, Error *err) {
  memset(grid, 0, sizeof *grid);
  for (int k = 0; k < GRID_NUM_GROUPS; k++) grid->groups[k].comm = MPI_COMM_NULL;
  if (!comm_initialized()) return error_set(err, ERR_ARG, "comm_grid_create: call comm_init first");
  GridSizes s = *sizes;
  int world = comm_world_size(), rank = comm_world_rank();
  if (s.world == 0) s.world = world;
  if (s.world != world)
    return error_set(err, ERR_CONFIG,
                     "the parallel configuration is for %d ranks but the job has %d; start it "
                     "with mpirun -np %d or change the sizes",
                     s.world, world, s.world);
  int rc = grid_sizes_resolve(&s, err);
  if (rc) return rc;
  grid->sizes = s;
  grid_coords_of_rank(&s, rank, &grid->coords);
  for (int k = 0; k < GRID_NUM_GROUPS; k++) {
    CommGroup *g = &grid->groups[k];
    const char *name = grid_group_name((GridGroupKind)k);
    int color = grid_group_first_rank(&s, (GridGroupKind)k, rank);
    int key = grid_group_index(&s, (GridGroupKind)k, rank);
    comm_set_operation("comm_grid_create (MPI_Comm_split)");
    rc = comm_check(MPI_Comm_split(comm_world()->comm, color, key, &g->comm), "MPI_Comm_split",
                    comm_world(), err);
    if (rc) {
      comm_grid_destroy(grid);
      return error_wrap(err, "creating the %s group", name);
    }
    snprintf(g->name, sizeof g->name, "%s", name);
    MPI_Comm_set_name(g->comm, g->name);
    MPI_Comm_size(g->comm, &g->size);
    MPI_Comm_rank(g->comm, &g->rank);
    /* The other ranks are already in the next split: returning an error
     * here would leave them waiting, so a disagreement ends the job. */
    if (g->size != grid_group_size(&s, (GridGroupKind)k) || g->rank != key)
      comm_abort(70,
                 "comm_grid_create: MPI made the %s group with %d ranks and this rank at %d; the "
                 "grid says %d ranks, index %d (do all ranks pass the same sizes?)",
                 name, g->size, g->rank, grid_group_size(&s, (GridGroupKind)k), key);
  }
  return ERR_OK;
}

void comm_grid_destroy(CommGrid *grid) {
  for (int k = 0; k < GRID_NUM_GROUPS; k++) {
    CommGroup *g = &grid->groups[k];
    if (g->comm != MPI_COMM_NULL && comm_initialized()) MPI_Comm_free(&g->comm);
    g->comm = MPI_COMM_NULL;
    g->size = 0;
  }
}

void comm_grid_print_summary(const CommGrid *grid, FILE *out, int max_ranks) {
  if (comm_world_rank() == 0) {
    grid_print_summary(out, &grid->sizes, max_ranks);
    fflush(out);
  }
}

int comm_group_split(const CommGroup *parent, int color, int key, const char *name, CommGroup *out, Error *err) {
  memset(out, 0, sizeof *out);
  out->comm = MPI_COMM_NULL;
  if (!comm_initialized() || !parent) return error_set(err, ERR_ARG, "comm_group_split: call comm_init first");
  comm_set_operation("comm_group_split (MPI_Comm_split)");
  int rc = comm_check(MPI_Comm_split(parent->comm, color, key, &out->comm), "MPI_Comm_split", parent, err);
  if (rc) return error_wrap(err, "creating the %s group", name);
  snprintf(out->name, sizeof out->name, "%s", name);
  MPI_Comm_set_name(out->comm, out->name);
  MPI_Comm_size(out->comm, &out->size);
  MPI_Comm_rank(out->comm, &out->rank);
  return ERR_OK;
}

void comm_group_free(CommGroup *group) {
  if (group->size > 0 && group->comm != MPI_COMM_NULL && comm_initialized()) MPI_Comm_free(&group->comm);
  group->comm = MPI_COMM_NULL;
  group->size = 0;
}
