/* The network part of `fivefold calibrate` (calibrate_network.c). */
#ifndef FIVEFOLD_CLI_CALIBRATE_NETWORK_H
#define FIVEFOLD_CLI_CALIBRATE_NETWORK_H

#include <stdio.h>

#include "base/error.h"
#include "plan/cluster.h"

/* Measures the links into spec (MPI initialised, every rank calls it, the
 * collective timeout armed and the waits decided as training's are; log
 * on rank 0 only, else NULL). One node: the world's collectives and
 * send/recv (intra_node). Several: among each node's ranks (intra_node)
 * and, across nodes, the groups of the ranks that have the same place on
 * their nodes, all groups at once (inter_node: each device's share of its
 * node's network when every device uses it), then the largest send/recv
 * alone, which sets topology.devices_per_nic (spec->tiers). The node split
 * is MPI's shared-memory one. */
int calib_measure_links(int nodes, int ranks_on_node, int quick, ClusterSpec *spec, FILE *log, Error *err);

#endif
