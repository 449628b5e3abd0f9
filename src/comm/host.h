/* Where the ranks run: which ranks of a group share a host (MPI's
 * shared-memory split) and whether each host has a core to spare per rank.
 * The trainer uses it to decide whether non-blocking collectives can
 * progress in the background (they need a spare core on a shared-memory
 * transport) or blocking ones are faster. */
#ifndef FIVEFOLD_COMM_HOST_H
#define FIVEFOLD_COMM_HOST_H

#include "base/error.h"
#include "comm/world.h"

typedef struct CommHostLayout {
  int group_size;          /* ranks in the group */
  int group_hosts;         /* distinct hosts the group spans */
  int max_peers_per_host;  /* most ranks of the group on one host (1: no two share one) */
  /* The world's tightest host (least spare cores): its ranks, the sum of
   * their threads, its online cores, and cores - threads - ranks (>= 0:
   * every rank there has a core of its own for MPI progress). */
  int host_ranks, host_threads, host_cores, spare_cores;
} CommHostLayout;

/* Collective over the whole world (every rank must call it, with its own
 * thread count); the same result on every rank. A world of one rank is one
 * host. */
int comm_host_layout(const CommGroup *group, int threads_per_rank, CommHostLayout *out, Error *err);

/* The world split by host: *node holds the ranks of this host (MPI's
 * shared-memory split), *cross the ranks that have the same place on their
 * hosts as this one (one per host). Collective over the world; free both
 * with comm_host_groups_free. */
int comm_host_groups(CommGroup *node, CommGroup *cross, Error *err);
void comm_host_groups_free(CommGroup *node, CommGroup *cross);

#define COMM_HOST_NAME_CHARS 48
/* Where every rank runs: on world rank 0, launch_rank[r] (comm_launch_rank)
 * and host[r] (its host name) for every world rank r; the other ranks pass
 * NULL for both. Collective over the world. */
int comm_gather_placement(int *launch_rank, char (*host)[COMM_HOST_NAME_CHARS], Error *err);

#endif
