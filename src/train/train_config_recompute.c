/* The recomputation fields of the run configuration (training.recompute,
 * recompute_method, recompute_num_layers, as Megatron-Core names them):
 * their check, and the model shard's setting they give. The runtime runs
 * full recomputation (model.h, ModelShard.recompute_method); selective
 * recomputation of parts of a block is refused rather than silently run
 * as something else. */
#include <string.h>

#include "model/model.h"
#include "train/train_config.h"

int train_config_check_recompute(const TrainConfig *cfg, const char *origin, Error *err) {
  const char *r = cfg->recompute;
  if (!strcmp(r, "selective"))
    return error_set(err, ERR_CONFIG,
                     "%s: training.recompute \"selective\" is not run by fivefold train (only full recomputation "
                     "of whole blocks is); give \"full\" or \"none\"",
                     origin);
  if (strcmp(r, "none") && strcmp(r, "full"))
    return error_set(err, ERR_CONFIG, "%s: training.recompute must be \"none\" or \"full\", got \"%s\"", origin, r);
  if (strcmp(cfg->recompute_method, "uniform") && strcmp(cfg->recompute_method, "block"))
    return error_set(err, ERR_CONFIG, "%s: training.recompute_method must be \"uniform\" or \"block\", got \"%s\"",
                     origin, cfg->recompute_method);
  if (!strcmp(r, "full") && cfg->family != TRAIN_FAMILY_TRANSFORMER)
    return error_set(err, ERR_CONFIG,
                     "%s: training.recompute \"full\": recomputation is for the transformer's blocks; this run's "
                     "network (model.family) has none (expected \"none\")",
                     origin);
  if (!strcmp(r, "full") && !strcmp(cfg->recompute_method, "uniform") && cfg->recompute_num_layers > cfg->model.num_layers)
    return error_set(err, ERR_CONFIG,
                     "%s: training.recompute_num_layers %d is more than the model's %d blocks (expected 1..%d for "
                     "uniform groups)",
                     origin, cfg->recompute_num_layers, cfg->model.num_layers, cfg->model.num_layers);
  return 0;
}

void train_config_recompute_shard(const TrainConfig *cfg, int *method, int *num_layers) {
  *method = MODEL_RECOMPUTE_NONE;
  *num_layers = 0;
  if (strcmp(cfg->recompute, "full")) return;
  *method = strcmp(cfg->recompute_method, "block") ? MODEL_RECOMPUTE_UNIFORM : MODEL_RECOMPUTE_BLOCK;
  *num_layers = cfg->recompute_num_layers;
}
