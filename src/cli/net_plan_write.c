/* Writes a vision network's plan file (net_plan_write.h). */
#include "cli/net_plan_write.h"

#include <cjson/cJSON.h>

#include "base/json_util.h"

int net_plan_write(const NetPlanOut *p, const char *path, Error *err) {
  const PlanNetConfig *c = p->cfg;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", "fivefold.plan");
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "model", p->net_path);
  cJSON_AddStringToObject(root, "family", "vision");
  cJSON_AddStringToObject(root, "cluster", p->cluster);
  cJSON_AddNumberToObject(root, "gpus", c->dp);
  cJSON_AddStringToObject(root, "dtype", plan_dtype_name(c->dtype));
  char fp[32], summary[160];
  vision_config_fingerprint(p->vision, fp, sizeof fp);
  vision_config_summary(p->vision, summary, sizeof summary);
  cJSON *id = cJSON_AddObjectToObject(root, "model_identity");
  cJSON_AddStringToObject(id, "name", p->net_path);
  cJSON_AddStringToObject(id, "fingerprint", fp);
  cJSON_AddStringToObject(id, "summary", summary);
  /* A vision network trains data-parallel only: one stage of all its layers. */
  cJSON *par = cJSON_AddObjectToObject(root, "parallel");
  static const char *const ONES[] = {"tp", "cp", "pp", "vpp", "ep", "etp"};
  for (size_t i = 0; i < sizeof ONES / sizeof ONES[0]; i++) cJSON_AddNumberToObject(par, ONES[i], 1);
  cJSON_AddNumberToObject(par, "dp", c->dp);
  cJSON_AddNumberToObject(par, "edp", c->dp);
  cJSON_AddNumberToObject(par, "micro_batch_size", c->micro_batch_size);
  cJSON_AddNumberToObject(par, "global_batch_size", (double)c->micro_batch_size * c->microbatches * c->dp);
  cJSON_AddNumberToObject(par, "microbatches", c->microbatches);
  cJSON_AddStringToObject(par, "schedule", "none");
  cJSON_AddStringToObject(par, "recompute", "none");
  cJSON_AddBoolToObject(par, "distributed_optimizer", c->distributed_optimizer != 0);
  int lps[1] = {p->num_layers};
  cJSON_AddItemToObject(par, "layers_per_stage", cJSON_CreateIntArray(lps, 1));
  cJSON *pred = cJSON_AddObjectToObject(root, "prediction");
  cJSON_AddNumberToObject(pred, "step_time_s", p->result->step_time);
  cJSON_AddNumberToObject(pred, "reduce_exposed_s", p->result->reduce);
  cJSON_AddNumberToObject(pred, "images_per_s",
                          (double)c->micro_batch_size * c->microbatches * c->dp / p->result->step_time);
  if (p->buckets) {
    const PlanNetBucketChoice *b = p->buckets;
    cJSON *bk = cJSON_AddObjectToObject(root, "buckets");
    cJSON_AddNumberToObject(bk, "bucket_mb", b->bucket_mb);
    cJSON_AddNumberToObject(bk, "bucket_params", b->bucket_params);
    cJSON_AddNumberToObject(bk, "buckets", b->buckets);
    cJSON_AddNumberToObject(bk, "default_bucket_params", b->default_params);
    cJSON_AddNumberToObject(bk, "default_buckets", b->default_buckets);
    cJSON_AddNumberToObject(bk, "default_step_time_s", b->default_step_time);
    cJSON_AddNumberToObject(bk, "overlap", c->overlap);
    cJSON_AddNumberToObject(bk, "candidates", b->num_candidates);
    cJSON_AddNumberToObject(bk, "simulations", (double)b->simulations);
  }
  int rc = json_write_file(path, root, err);
  cJSON_Delete(root);
  return rc;
}
