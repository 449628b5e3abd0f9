/* The recomputation fields of the run configuration (training.recompute,
 * recompute_method, recompute_num_layers, recompute_modules, as
 * Megatron-Core names them): their check, and the model shard's setting
 * they give. Full recomputation reruns whole blocks (ModelShard.
 * recompute_method); selective recomputation rebuilds the parts
 * recompute_modules names (ModelShard.recompute_modules):
 *   layernorm  the two pre-norm outputs are rebuilt from the kept residual
 *              rows in backward;
 *   mlp        a dense block's first MLP product (SwiGLU's [gate; up],
 *              GPT-2's fc pre-activation) is rebuilt from the norm output;
 *   core_attn  accepted, drops nothing: the attention kernel is flash-style
 *              and keeps only its output and log-sum-exp, never the
 *              probabilities;
 *   moe_act    accepted, drops nothing: the experts (and every dense MLP)
 *              never keep their SwiGLU output, each backward recomputes it
 *              from the first product's output.
 * "moe" and "shared_experts" are refused rather than silently run as
 * something else. */
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "train/train_config.h"

/* The module bits of a comma list; -1 with err set on an unknown or
 * refused name. */
static int parse_modules(const char *list, const char *origin, unsigned *bits, Error *err) {
  *bits = 0;
  char buf[sizeof ((TrainConfig *)0)->recompute_modules];
  snprintf(buf, sizeof buf, "%s", list);
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++) {
    while (*tok == ' ') tok++;
    if (!strcmp(tok, "layernorm"))
      *bits |= MODEL_RECOMPUTE_LAYERNORM_BIT;
    else if (!strcmp(tok, "mlp"))
      *bits |= MODEL_RECOMPUTE_MLP_BIT;
    else if (!strcmp(tok, "core_attn") || !strcmp(tok, "moe_act"))
      continue; /* nothing kept to drop (see the top of this file) */
    else if (!strcmp(tok, "moe") || !strcmp(tok, "shared_experts"))
      return error_set(err, ERR_CONFIG,
                       "%s: training.recompute_modules \"%s\" is not run by fivefold train (it recomputes "
                       "layernorm and mlp, and accepts core_attn and moe_act, which keep nothing here)",
                       origin, tok);
    else
      return error_set(err, ERR_CONFIG,
                       "%s: training.recompute_modules: unknown module \"%s\" (expected core_attn, layernorm, mlp "
                       "or moe_act)",
                       origin, tok);
  }
  if (n == 0)
    return error_set(err, ERR_CONFIG,
                     "%s: training.recompute_modules is empty (expected a list of core_attn, layernorm, mlp, moe_act)",
                     origin);
  return 0;
}

int train_config_check_recompute(const TrainConfig *cfg, const char *origin, Error *err) {
  const char *r = cfg->recompute;
  if (strcmp(r, "none") && strcmp(r, "full") && strcmp(r, "selective"))
    return error_set(err, ERR_CONFIG, "%s: training.recompute must be \"none\", \"full\" or \"selective\", got \"%s\"",
                     origin, r);
  if (strcmp(cfg->recompute_method, "uniform") && strcmp(cfg->recompute_method, "block"))
    return error_set(err, ERR_CONFIG, "%s: training.recompute_method must be \"uniform\" or \"block\", got \"%s\"",
                     origin, cfg->recompute_method);
  unsigned bits;
  if (parse_modules(cfg->recompute_modules, origin, &bits, err)) return err->code;
  if (strcmp(r, "none") && cfg->family != TRAIN_FAMILY_TRANSFORMER)
    return error_set(err, ERR_CONFIG,
                     "%s: training.recompute \"%s\": recomputation is for the transformer's blocks; this run's "
                     "network (model.family) has none (expected \"none\")",
                     origin, r);
  if (!strcmp(r, "full") && !strcmp(cfg->recompute_method, "uniform") && cfg->recompute_num_layers > cfg->model.num_layers)
    return error_set(err, ERR_CONFIG,
                     "%s: training.recompute_num_layers %d is more than the model's %d blocks (expected 1..%d for "
                     "uniform groups)",
                     origin, cfg->recompute_num_layers, cfg->model.num_layers, cfg->model.num_layers);
  return 0;
}

void train_config_recompute_shard(const TrainConfig *cfg, int *method, int *num_layers, unsigned *modules) {
  *method = MODEL_RECOMPUTE_NONE;
  *num_layers = 0;
  *modules = 0;
  if (!strcmp(cfg->recompute, "selective")) {
    Error err = {0, ""};
    if (parse_modules(cfg->recompute_modules, "", modules, &err)) *modules = 0; /* checked at finalize */
    return;
  }
  if (strcmp(cfg->recompute, "full")) return;
  *method = strcmp(cfg->recompute_method, "block") ? MODEL_RECOMPUTE_UNIFORM : MODEL_RECOMPUTE_BLOCK;
  *num_layers = cfg->recompute_num_layers;
}
