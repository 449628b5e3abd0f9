/* The plan file of a vision network (`fivefold simulate --net ... --out`):
 * the data-parallel layout simulate priced and, after --search-buckets,
 * the chosen gradient bucket size, in the format plan/plan_file.h reads
 * ("family": "vision"), for `fivefold train --plan`. */
#ifndef FIVEFOLD_CLI_NET_PLAN_WRITE_H
#define FIVEFOLD_CLI_NET_PLAN_WRITE_H

#include "base/error.h"
#include "nets/vision.h"
#include "plan/net_buckets.h"

typedef struct NetPlanOut {
  const char *net_path, *cluster;
  const VisionConfig *vision;
  const PlanNetConfig *cfg;
  int num_layers;
  const PlanNetResult *result;        /* the prediction (with the chosen buckets when searched) */
  const PlanNetBucketChoice *buckets; /* NULL: no search, no "buckets" section */
} NetPlanOut;

int net_plan_write(const NetPlanOut *p, const char *path, Error *err);

#endif
