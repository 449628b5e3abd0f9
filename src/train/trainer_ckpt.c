/* Saving and resuming the trainer's checkpoints: what the runtime hands
 * ckpt/ (the network's table, the optimizer moments as lent buffers, the
 * data order, the run config and the network's config as records) and the
 * checks a resume makes against the run it continues. See trainer.h. */
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ckpt/checkpoint_dist.h"
#include "train/nonfinite.h"
#include "train/trainer_net.h"

static CheckpointShardInfo shard_info(const Trainer *tr) {
  CheckpointShardInfo sh = {.world = comm_world(), .dp_rank = tr->dp_rank, .tp_rank = tr->tp_rank,
                            .edp_rank = tr->edp_rank};
  /* Dense tensors are replicated over DP x CP: one writer among all of them. */
  if (tr->dp_group) sh.dp_rank = tr->dp_group->rank;
  return sh;
}

/* The optimizer's buffers as the checkpoint module sees them (lent, not copied). */
static CheckpointOptimizer checkpoint_optimizer_of(Optimizer *opt) {
  return (CheckpointOptimizer){.m = opt->m, .v = opt->v, .num_params = opt->num_params, .step = opt->step};
}

/* The network's config as a checkpoint records it: the transformer's model
 * config, or a network of nets/ its section of the run config (with
 * "family"). NULL when out of memory. */
static cJSON *model_record_of(const Trainer *tr) {
  if (tr->cfg->family == TRAIN_FAMILY_TRANSFORMER) return model_config_to_json(&tr->model.cfg);
  cJSON *run_config = train_config_to_json(tr->cfg);
  cJSON *record = cJSON_DetachItemFromObjectCaseSensitive(run_config, "model");
  cJSON_Delete(run_config);
  return record;
}

int trainer_save_checkpoint(Trainer *tr, CheckpointSaveInfo *info, Error *err) {
  /* Full logical tensors: the ZeRO-1 AdamW state is gathered first (each
   * bucket over its group), so every rank holds the moments of its whole
   * shard. */
  /* A checkpoint with non-finite weights would resume into the same NaNs. */
  int rc = nonfinite_guard_weights(tr, err);
  if (rc) return rc;
  Optimizer full = tr->opt;
  if (tr->zero) {
    if ((rc = optimizer_create(&full, tr->net.num_values, &tr->opt.cfg, err))) return rc;
    rc = dist_optimizer_gather(&tr->dist_opt, &full, err);
  }
  cJSON *run_config = train_config_to_json(tr->cfg);
  /* A network of nets/ records its own config; its synthetic data has no
   * windows, its position is the step (one "window" keeps the record valid). */
  int network = tr->cfg->family != TRAIN_FAMILY_TRANSFORMER;
  cJSON *model_record = model_record_of(tr);
  CheckpointSource src = {
      .step = tr->step,
      .net = &tr->net,
      .opt = checkpoint_optimizer_of(&full),
      .data_loader = tr->train.state,
      .data_windows = network ? trainer_net_data_windows(tr) : tr->train.windows.num_windows,
      .train_config = run_config,
      .model_record = model_record,
      .tokenizer = tr->cfg->tokenizer,
      .seed = tr->cfg->seed,
  };
  if (tr->world > 1) {
    /* Every rank writes its slices; the function agrees on the outcome. */
    CheckpointShardInfo sh = shard_info(tr);
    if (!rc) rc = checkpoint_save_sharded(tr->cfg->out_dir, &src, &sh, tr->cfg->keep_last, info, err);
    else comm_abort(rc, "gathering the optimizer state for a checkpoint: %s", err->msg);
  } else if (!rc) {
    rc = checkpoint_save(tr->cfg->out_dir, &src, tr->cfg->keep_last, info, err);
  }
  cJSON_Delete(model_record);
  cJSON_Delete(run_config);
  if (tr->zero) optimizer_free(&full);
  return rc;
}

/* A network of nets/ is resumed only into the same network: its config
 * (the run config's model section) must equal the checkpoint's. */
static int check_network_record(const Trainer *tr, const char *ckpt_dir, Error *err) {
  cJSON *saved = NULL;
  int rc = checkpoint_read_train_config(ckpt_dir, &saved, err);
  if (rc) return rc;
  cJSON *now = train_config_to_json(tr->cfg);
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved, "model"), *b = cJSON_GetObjectItemCaseSensitive(now, "model");
  if (!a || !cJSON_Compare(a, b, 1)) {
    char *sa = a ? cJSON_PrintUnformatted(a) : NULL, *sb = cJSON_PrintUnformatted(b);
    rc = error_set(err, ERR_CONFIG, "%s holds the model %.300s, the run config %s has %.300s (expected the same)",
                   ckpt_dir, sa ? sa : "(none)", tr->cfg->config_path, sb ? sb : "?");
    free(sa);
    free(sb);
  }
  cJSON_Delete(now);
  cJSON_Delete(saved);
  return rc;
}

/* Warns about each field of `section` whose value differs between the
 * checkpoint's run config and this run's. */
static void warn_config_changes(const cJSON *saved, const cJSON *now, const char *section) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved, section);
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, section);
  if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return;
  for (const cJSON *y = b->child; y; y = y->next) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, y->string);
    if (x && cJSON_Compare(x, y, 1)) continue;
    char *sx = x ? cJSON_PrintUnformatted(x) : NULL, *sy = cJSON_PrintUnformatted(y);
    log_warn("resuming with %s.%s = %.200s (the checkpoint's run had %.200s)", section, y->string, sy ? sy : "?",
             sx ? sx : "no such field");
    free(sx);
    free(sy);
  }
}

int trainer_resume(Trainer *tr, const char *ckpt_dir, Error *err) {
  CheckpointTrainState st;
  int network = tr->cfg->family != TRAIN_FAMILY_TRANSFORMER;
  if (network) {
    int rc = check_network_record(tr, ckpt_dir, err);
    if (rc) return rc;
  }
  /* Every rank reads its slices of the full tensors; a ZeRO-1 rank then
   * keeps its part of the moments. */
  Optimizer full = tr->opt;
  cJSON *record = model_record_of(tr);
  int rc = tr->zero ? optimizer_create(&full, tr->net.num_values, &tr->opt.cfg, err) : 0;
  CheckpointOptimizer moments = checkpoint_optimizer_of(&full);
  if (tr->world > 1) {
    CheckpointShardInfo sh = shard_info(tr);
    if (rc) comm_abort(rc, "%s", err->msg);
    rc = checkpoint_load_training_sharded(ckpt_dir, &tr->net, record, &moments, &st, &sh, err);
  } else if (!rc) {
    rc = checkpoint_load_training(ckpt_dir, &tr->net, record, &moments, &st, err);
  }
  cJSON_Delete(record);
  if (!rc) full.step = moments.step;
  if (tr->zero) {
    if (!rc) dist_optimizer_scatter(&tr->dist_opt, &full);
    optimizer_free(&full);
  } else {
    tr->opt = full;
  }
  if (rc) {
    if (rc == ERR_CONFIG) error_wrap(err, "cannot resume with the model of %s", tr->cfg->config_path);
    return rc;
  }
  cJSON *saved = NULL;
  if (tr->world_rank == 0 && checkpoint_read_train_config(ckpt_dir, &saved, err) == 0) {
    cJSON *now = train_config_to_json(tr->cfg);
    warn_config_changes(saved, now, "training");
    warn_config_changes(saved, now, "data");
    cJSON_Delete(now);
    cJSON_Delete(saved);
  }
  uint64_t windows = network ? trainer_net_data_windows(tr) : tr->train.windows.num_windows;
  tr->train.state = st.data_loader;
  if (st.data_windows != windows) {
    log_warn("the training data has %llu windows but the checkpoint was saved on %llu: the data changed, so the "
             "order from here on is not that of the original run",
             (unsigned long long)windows, (unsigned long long)st.data_windows);
    tr->train.state.position %= windows;
  }
  tr->step = tr->start_step = st.step;
  snprintf(tr->resumed_from, sizeof tr->resumed_from, "%s", ckpt_dir);
  return 0;
}
