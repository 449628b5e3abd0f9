/* The communicators comm_grid_create makes contain exactly the ranks the
 * grid arithmetic says, in index order, for several configurations of the
 * world size this runs on (the published folding example on 8 ranks among
 * them). Membership is read back with raw MPI (an all-gather of world ranks
 * over each group's communicator), not with the wrappers. Also: a
 * configuration that does not fit the world fails on every rank with the
 * same message, and the summary names every rank. */
#include <stdlib.h>

#include "mpi_test_util.h"

static void check_grid(const GridSizes *requested) {
  Error err = {0};
  CommGrid grid;
  if (comm_grid_create(requested, &grid, &err)) {
    CHECK(0, "comm_grid_create: %s", err.msg);
    return;
  }
  const GridSizes *s = &grid.sizes;
  const int me = comm_world_rank(), w = comm_world_size();
  GridCoords c;
  grid_coords_of_rank(s, me, &c);
  CHECK(memcmp(&c, &grid.coords, sizeof c) == 0, "coordinates differ from grid_coords_of_rank");
  int *expect = malloc((size_t)w * sizeof *expect), *got = malloc((size_t)w * sizeof *got);
  for (int k = 0; k < GRID_NUM_GROUPS; k++) {
    const CommGroup *g = comm_grid_group(&grid, (GridGroupKind)k);
    int n = grid_group_members(s, (GridGroupKind)k, me, expect);
    int size = 0, rank = -1;
    MPI_Comm_size(g->comm, &size);
    MPI_Comm_rank(g->comm, &rank);
    CHECK(size == n && g->size == n, "group %s: size %d (struct %d), expected %d", g->name, size,
          g->size, n);
    CHECK(rank == grid_group_index(s, (GridGroupKind)k, me) && g->rank == rank,
          "group %s: rank %d (struct %d), expected %d", g->name, rank, g->rank,
          grid_group_index(s, (GridGroupKind)k, me));
    CHECK(strcmp(g->name, grid_group_name((GridGroupKind)k)) == 0, "group name %s", g->name);
    if (size != n) continue;
    MPI_Allgather(&me, 1, MPI_INT, got, 1, MPI_INT, g->comm);
    int same = memcmp(got, expect, (size_t)n * sizeof *got) == 0;
    CHECK(same,
          "group %s of rank %d (tp %d cp %d dp %d pp %d | etp %d ep %d edp %d): members "
          "differ from the grid arithmetic (first: %d vs %d)",
          g->name, me, c.tp, c.cp, c.dp, c.pp, c.etp, c.ep, c.edp, got[0], expect[0]);
  }
  comm_grid_destroy(&grid);
  for (int k = 0; k < GRID_NUM_GROUPS; k++)
    CHECK(grid.groups[k].comm == MPI_COMM_NULL, "group %d not freed", k);
  free(expect);
  free(got);
}

static void check_summary(void) {
  GridSizes sizes = {.tp = 2, .cp = 2, .dp = 2, .pp = 1, .etp = 1, .ep = 8};
  Error err = {0};
  CommGrid grid;
  if (comm_grid_create(&sizes, &grid, &err)) {
    CHECK(0, "folding example: %s", err.msg);
    return;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  comm_grid_print_summary(&grid, f, 0);
  fclose(f);
  if (comm_world_rank() == 0) {
    CHECK(strstr(text, "tp 2 x cp 2 x dp 2 x pp 1") && strstr(text, "etp 1 x ep 8 x edp 1"),
          "summary header: %s", text);
    CHECK(strstr(text, "rank 6: tp 0 cp 1 dp 1 pp 0 | etp 0 ep 6 edp 0 pp 0\n"), "summary: %s",
          text);
  } else {
    CHECK(len == 0, "only rank 0 prints the summary, rank %d printed %zu bytes", comm_world_rank(),
          len);
  }
  free(text);
  comm_grid_destroy(&grid);
}

int main(int argc, char **argv) {
  Error err = {0};
  if (comm_init(&argc, &argv, &err)) {
    fprintf(stderr, "mpi_groups: %s\n", err.msg);
    return 1;
  }
  const int w = comm_world_size();
  /* tp cp dp pp etp ep (dp, edp derived when 0) */
  static const int configs8[][6] = {
      {2, 2, 2, 1, 1, 8}, /* published folding example */
      {2, 1, 2, 2, 1, 2}, {1, 2, 1, 4, 2, 1}, {4, 1, 1, 2, 1, 4}, {1, 1, 8, 1, 2, 4},
      {8, 1, 1, 1, 8, 1}, {1, 8, 1, 1, 1, 1}, {1, 1, 1, 8, 1, 1}, {2, 2, 1, 2, 1, 4},
  };
  static const int configs4[][6] = {
      {2, 2, 1, 1, 1, 4},
      {1, 2, 1, 2, 2, 1},
      {2, 1, 2, 1, 1, 2},
      {1, 1, 4, 1, 4, 1},
  };
  static const int configs2[][6] = {{2, 1, 1, 1, 1, 2}, {1, 1, 1, 2, 1, 1}, {1, 2, 1, 1, 2, 1}};
  const int(*configs)[6] = w == 8 ? configs8 : w == 4 ? configs4 : configs2;
  int count = w == 8 ? 9 : w == 4 ? 4 : w == 2 ? 3 : 0;
  for (int i = 0; i < count; i++) {
    GridSizes s = {.tp = configs[i][0],
                   .cp = configs[i][1],
                   .dp = configs[i][2],
                   .pp = configs[i][3],
                   .etp = configs[i][4],
                   .ep = configs[i][5]};
    check_grid(&s);
  }
  GridSizes one = {.tp = 1, .cp = 1, .dp = 0, .pp = 1, .etp = 1, .ep = 1};
  check_grid(&one); /* everything data parallel, any world size */
  if (w == 8) check_summary();
  /* Sizes that do not fit fail on every rank, so no rank is left waiting. */
  GridSizes wrong_world = {.world = w + 1, .tp = 1, .cp = 1, .pp = 1, .etp = 1, .ep = 1};
  CommGrid grid;
  CHECK_FAILS(ERR_CONFIG, "start it with mpirun -np", comm_grid_create(&wrong_world, &grid, err));
  if (w >= 2) {
    GridSizes misfit = {.tp = w, .cp = 2, .pp = 1, .etp = 1, .ep = 1};
    CHECK_FAILS(ERR_CONFIG, "does not divide the world size",
                comm_grid_create(&misfit, &grid, err));
  }
  return mpi_test_finish("mpi_groups");
}
