/* `fivefold calibrate`: measure this machine (or refit from a trace) and
 * write a cluster spec for the planner. */
#ifndef FIVEFOLD_CLI_CMD_CALIBRATE_H
#define FIVEFOLD_CLI_CMD_CALIBRATE_H

#include <stdio.h>

#include "base/error.h"
#include "plan/cluster.h"

/* argv[0] is the command name; returns the process exit code (0 ok, 1 the
 * measurement or fit failed, 2 bad usage). */
int cmd_calibrate(int argc, char **argv);

/* Refits base's GEMM efficiency curve and collective alpha-beta from a
 * fivefold Chrome trace (calibrate_trace.c); out receives the updated spec
 * (free with cluster_spec_free). What could not be refitted is said on log. */
int calibrate_from_trace(const char *trace_path, const ClusterSpec *base, ClusterSpec *out, FILE *log, Error *err);

#endif
