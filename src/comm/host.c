/* The host layout of a group (comm/host.h): MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED over the group and over the world, then reductions
 * so that every rank sees the same answer; the world split by host, and
 * where every rank runs. */
#include "comm/host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/collectives.h"

/* This rank's shared-memory (same host) part of `comm`, its size and
 * whether this rank is the part's first; the caller frees *part. */
static int host_part(MPI_Comm comm, const CommGroup *group, MPI_Comm *part, int *size, int *first, Error *err) {
  int rc = comm_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, part), "MPI_Comm_split_type",
                      group, err);
  if (rc) return rc;
  int r = 0;
  MPI_Comm_size(*part, size);
  MPI_Comm_rank(*part, &r);
  *first = r == 0;
  return 0;
}

int comm_host_layout(const CommGroup *group, int threads_per_rank, CommHostLayout *out, Error *err) {
  if (!group || !out || threads_per_rank < 1)
    return error_set(err, ERR_ARG, "comm_host_layout: needs a group, an output and threads_per_rank >= 1");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  *out = (CommHostLayout){.group_size = group->size, .group_hosts = 1, .max_peers_per_host = group->size,
                          .host_ranks = 1, .host_threads = threads_per_rank, .host_cores = (int)cores};
  out->spare_cores = out->host_cores - out->host_threads - out->host_ranks;
  if (!comm_initialized() || comm_world_size() <= 1 || group->comm == MPI_COMM_NULL) return 0;
  const CommGroup *world = comm_world();
  MPI_Comm group_part, host;
  int peers, group_first, host_ranks, host_first, rc;
  if ((rc = host_part(group->comm, group, &group_part, &peers, &group_first, err))) return rc;
  MPI_Comm_free(&group_part);
  if ((rc = host_part(world->comm, world, &host, &host_ranks, &host_first, err))) return rc;
  /* Threads of every rank on this host. */
  int host_threads = 0;
  rc = comm_check(MPI_Allreduce(&threads_per_rank, &host_threads, 1, MPI_INT, MPI_SUM, host), "MPI_Allreduce", world,
                  err);
  MPI_Comm_free(&host);
  if (rc) return rc;
  int hosts = 0, max_peers = 0;
  if ((rc = comm_check(MPI_Allreduce(&group_first, &hosts, 1, MPI_INT, MPI_SUM, group->comm), "MPI_Allreduce", group,
                       err)) ||
      (rc = comm_check(MPI_Allreduce(&peers, &max_peers, 1, MPI_INT, MPI_MAX, world->comm), "MPI_Allreduce", world,
                       err)))
    return rc;
  /* The tightest host of the world, as (spare, ranks, threads, cores) of
   * the rank with the least spare (MPI_MINLOC on the spare count). */
  struct {
    int spare, rank;
  } mine = {(int)cores - host_threads - host_ranks, world->rank}, tight;
  if ((rc = comm_check(MPI_Allreduce(&mine, &tight, 1, MPI_2INT, MPI_MINLOC, world->comm), "MPI_Allreduce", world,
                       err)))
    return rc;
  int facts[3] = {host_ranks, host_threads, (int)cores};
  if ((rc = comm_check(MPI_Bcast(facts, 3, MPI_INT, tight.rank, world->comm), "MPI_Bcast", world, err))) return rc;
  /* Group sizes and host counts are the same on every rank of one group,
   * but a world holds many groups: report the largest, so every rank
   * decides alike. */
  int group_max[2] = {hosts, group->size}, reduced[2];
  if ((rc = comm_check(MPI_Allreduce(group_max, reduced, 2, MPI_INT, MPI_MAX, world->comm), "MPI_Allreduce", world,
                       err)))
    return rc;
  out->group_hosts = reduced[0];
  out->group_size = reduced[1];
  out->max_peers_per_host = max_peers;
  out->host_ranks = facts[0], out->host_threads = facts[1], out->host_cores = facts[2];
  out->spare_cores = tight.spare;
  return 0;
}

int comm_host_groups(CommGroup *node, CommGroup *cross, Error *err) {
  CommGroup empty = {.comm = MPI_COMM_NULL, .size = 1, .rank = 0};
  *node = *cross = empty;
  snprintf(node->name, sizeof node->name, "node");
  snprintf(cross->name, sizeof cross->name, "cross-node");
  const CommGroup *world = comm_world();
  comm_set_operation("comm_host_groups (MPI_Comm_split)");
  int rc = MPI_Comm_split_type(world->comm, MPI_COMM_TYPE_SHARED, world->rank, MPI_INFO_NULL, &node->comm);
  if (rc != MPI_SUCCESS) return comm_check(rc, "comm_host_groups (split by host)", world, err);
  MPI_Comm_size(node->comm, &node->size);
  MPI_Comm_rank(node->comm, &node->rank);
  rc = MPI_Comm_split(world->comm, node->rank, world->rank, &cross->comm);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&node->comm);
    return comm_check(rc, "comm_host_groups (split across hosts)", world, err);
  }
  MPI_Comm_size(cross->comm, &cross->size);
  MPI_Comm_rank(cross->comm, &cross->rank);
  return ERR_OK;
}

void comm_host_groups_free(CommGroup *node, CommGroup *cross) {
  if (node->comm != MPI_COMM_NULL) MPI_Comm_free(&node->comm);
  if (cross->comm != MPI_COMM_NULL) MPI_Comm_free(&cross->comm);
}

int comm_gather_placement(int *launch_rank, char (*host)[COMM_HOST_NAME_CHARS], Error *err) {
  const CommGroup *world = comm_world();
  struct {
    int launch;
    char host[COMM_HOST_NAME_CHARS];
  } mine, *all = NULL;
  memset(&mine, 0, sizeof mine);
  mine.launch = comm_launch_rank();
  if (gethostname(mine.host, sizeof mine.host - 1)) snprintf(mine.host, sizeof mine.host, "?");
  if (world->rank == 0 && !(all = calloc((size_t)world->size, sizeof *all)))
    return error_set(err, ERR_NOMEM, "comm_gather_placement: out of memory");
  comm_set_operation("comm_gather_placement (MPI_Gather)");
  int rc = MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0, world->comm);
  if (rc == MPI_SUCCESS && all)
    for (int r = 0; r < world->size; r++) {
      if (launch_rank) launch_rank[r] = all[r].launch;
      if (host) memcpy(host[r], all[r].host, COMM_HOST_NAME_CHARS);
    }
  free(all);
  return rc == MPI_SUCCESS ? ERR_OK : comm_check(rc, "comm_gather_placement", world, err);
}
