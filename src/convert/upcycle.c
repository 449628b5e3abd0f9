/* Upcycling a dense checkpoint into an MoE one: the MoE config, the expert
 * scale, the weight mapping (slices, copies, virtual-group router rows) and
 * the run directory `fivefold train --resume` continues. See upcycle.h and
 * docs/upcycling.md. */
#include "convert/upcycle.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/rng.h"
#include "train/net_transformer.h"
#include "convert/run_dir.h"
#include "train/optimizer.h"
#include "train/train_config.h"

void upcycle_options_default(UpcycleOptions *o) {
  memset(o, 0, sizeof *o);
  o->num_experts = 8;
  o->top_k = 2;
  o->granularity = 1;
  o->router_score = ROUTER_SCORE_SOFTMAX;
  o->router_order = ROUTER_SOFTMAX_THEN_TOPK;
  o->norm_topk_prob = 0;
  o->aux_loss_coeff = 0.01f;
  o->z_loss_coeff = 0.0f;
  o->router_init_std = -1.0f; /* per layer: logits of std UPCYCLE_ROUTER_LOGIT_STD */
  o->moe_layer_freq = 1;
  o->seed = 1337;
}

int upcycle_model_config(const ModelConfig *dense, const UpcycleOptions *o, ModelConfig *moe, Error *err) {
#define FAIL(...) return error_set(err, ERR_CONFIG, __VA_ARGS__)
  if (dense->num_experts > 0 || model_config_num_moe_layers(dense) > 0)
    FAIL("the checkpoint's model is already an MoE model (%d experts); upcycling starts from a dense one",
         dense->num_experts);
  if (dense->gpt2)
    FAIL("the checkpoint's model is a GPT-2 (GeLU MLP with biases); upcycling starts from a dense SwiGLU model");
  *moe = *dense;
  if (o->dense_control) return 0;
  const int E = o->num_experts, K = o->top_k, G = o->granularity, F = dense->intermediate_size;
  if (G < 1) FAIL("--granularity must be at least 1 (got %d)", G);
  if (E < 1) FAIL("--experts must be at least 1 (got %d)", E);
  if (E % G != 0)
    FAIL(
        "--experts (%d) must be a multiple of --granularity (%d): each of the %d slices of the dense FFN gets "
        "the same number of copies",
        E, G, G);
  if (F % G != 0)
    FAIL("the dense FFN (intermediate_size %d) is not divisible by --granularity %d: it must split into %d equal "
         "slices",
         F, G, G);
  if (K < 1 || K > E) FAIL("--topk must be in 1..--experts (%d), got %d", E, K);
  if (K % G != 0)
    FAIL(
        "--topk (%d) must be a multiple of --granularity (%d): only then does every token get each slice of "
        "the dense FFN equally often, so that the MoE starts out computing the dense MLP",
        K, G);
  if (o->moe_layer_freq < 1 || o->moe_layer_freq > dense->num_layers)
    FAIL("--moe-layer-freq must be in 1..num_hidden_layers (%d), got %d", dense->num_layers, o->moe_layer_freq);
  if (!(o->aux_loss_coeff >= 0) || !(o->z_loss_coeff >= 0))
    FAIL("--aux-loss-coeff and --z-loss-coeff must be >= 0 (got %g, %g)", o->aux_loss_coeff, o->z_loss_coeff);
  if (!(o->router_init_std < 10)) FAIL("--router-init-std must be below 10 (got %g)", o->router_init_std);
  moe->num_experts = E;
  moe->top_k = K;
  moe->moe_intermediate_size = F / G;
  moe->shared_expert_intermediate_size = 0;
  moe->router_score = o->router_score;
  moe->router_order = o->router_order;
  moe->norm_topk_prob = o->norm_topk_prob;
  moe->topk_scaling_factor = 1.0f;
  moe->aux_loss_coeff = o->aux_loss_coeff;
  moe->z_loss_coeff = o->z_loss_coeff;
  moe->capacity_factor = 0; /* dropless: a dropped token would not see the dense MLP */
  moe->drop_policy = DROP_POLICY_PROBS;
  moe->pad_to_capacity = 0;
  model_config_set_moe_layer_freq(moe, o->moe_layer_freq);
  /* Read back under "llama" or "qwen2", MoE fields would get that family's
   * defaults and meanings; fivefold's own type keeps them as written. */
  snprintf(moe->model_type, sizeof moe->model_type, "fivefold");
  return model_config_validate(moe, "the upcycled model", err);
#undef FAIL
}

/* The routing weight one picked expert gets when all scores are equal. */
static double uniform_pick_weight(const ModelConfig *m) {
  const int E = m->num_experts, K = m->top_k;
  double w;
  if (m->router_score == ROUTER_SCORE_SIGMOID)
    w = K > 1 ? 1.0 / K : 0.5; /* sigma(0) */
  else if (m->router_order == ROUTER_TOPK_THEN_SOFTMAX || m->norm_topk_prob)
    w = 1.0 / K;
  else
    w = 1.0 / E;
  return w * m->topk_scaling_factor;
}

double upcycle_expert_scale(const ModelConfig *moe, int granularity) {
  if (moe->num_experts <= 0) return 1.0;
  return (double)granularity / (moe->top_k * uniform_pick_weight(moe));
}

int upcycle_exact_for_any_router(const ModelConfig *moe) {
  if (moe->num_experts <= 0) return 1;
  if (moe->router_score == ROUTER_SCORE_SIGMOID) return moe->top_k > 1;
  return moe->router_order == ROUTER_TOPK_THEN_SOFTMAX || moe->norm_topk_prob;
}

/* ---- weights ---- */

static const float *dense_tensor(const Model *dense, const char *name, const int *shape, int ndim, Error *err,
                                 int *rc) {
  const ParamTensor *t = model_find_tensor(dense, name);
  if (!t) {
    *rc = error_set(err, ERR_INTERNAL, "upcycle: the dense model has no tensor '%s'", name);
    return NULL;
  }
  int same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
  if (!same) {
    *rc = error_set(err, ERR_INTERNAL, "upcycle: tensor '%s' has another shape in the dense model", name);
    return NULL;
  }
  return dense->params + t->offset;
}

/* Expert e takes slice e mod G of the dense FFN, gate and up halves alike;
 * the up rows and w_down columns carry sqrt(scale) each (both are linear in
 * the output, unlike the gate, which goes through silu). */
static void fill_experts(float *gu, float *down, const float *dgu, const float *ddown, int E, int G, int C, int F,
                         double scale) {
  const int Fe = F / G;
  const double s = sqrt(scale);
  for (int e = 0; e < E; e++) {
    const int slice = e % G;
    float *egu = gu + (size_t)e * 2 * Fe * C, *edown = down + (size_t)e * C * Fe;
    for (int r = 0; r < Fe; r++) {
      const float *gate = dgu + (size_t)(slice * Fe + r) * C, *up = dgu + (size_t)(F + slice * Fe + r) * C;
      memcpy(egu + (size_t)r * C, gate, (size_t)C * sizeof(float));
      for (int j = 0; j < C; j++) egu[(size_t)(Fe + r) * C + j] = (float)(up[j] * s);
    }
    for (int c = 0; c < C; c++)
      for (int r = 0; r < Fe; r++) edown[(size_t)c * Fe + r] = (float)(ddown[(size_t)c * F + slice * Fe + r] * s);
  }
}

/* The default router std of a layer: logits x . row have a standard
 * deviation of about UPCYCLE_ROUTER_LOGIT_STD, x being the normalised MLP
 * input, whose squared norm is about sum_j gain_j^2 (unit-RMS rows times the
 * mlp_norm gains). */
static double default_router_std(const Model *dense, int layer, const ModelConfig *mc) {
  char name[96];
  snprintf(name, sizeof name, "layers.%d.mlp_norm.weight", layer);
  const ParamTensor *t = model_find_tensor(dense, name);
  double sumsq = 0;
  for (size_t j = 0; t && j < t->numel; j++) {
    const double g = dense->params[t->offset + j];
    sumsq += g * g;
  }
  if (!(sumsq > 0)) sumsq = mc->hidden_size;
  return UPCYCLE_ROUTER_LOGIT_STD / sqrt(sumsq);
}

/* Row e is base row e / G: the G experts of one copy of the MLP tie. */
static void fill_router(float *w, const char *name, int E, int G, int C, double std, uint64_t seed) {
  const uint64_t stream = rng_stream_id(name);
  for (int e = 0; e < E; e++) {
    const int base = e / G;
    for (int j = 0; j < C; j++)
      w[(size_t)e * C + j] = (float)(std * rng_normal(seed, stream, (uint64_t)base * C + (uint64_t)j));
  }
}

int upcycle_weights(const Model *dense, Model *moe, const UpcycleOptions *o, Error *err) {
  const ModelConfig *mc = &moe->cfg;
  const int G = o->dense_control ? 1 : o->granularity, C = mc->hidden_size, F = dense->cfg.intermediate_size;
  const double scale = upcycle_expert_scale(mc, G);
  int rc = 0;
  for (int i = 0; i < moe->num_tensors && !rc; i++) {
    const ParamTensor *t = &moe->tensors[i];
    float *dst = moe->params + t->offset;
    int layer = -1, n = 0;
    char rest[96] = "";
    if (sscanf(t->name, "layers.%d.%n", &layer, &n) == 1 && n > 0) snprintf(rest, sizeof rest, "%s", t->name + n);
    if (!strncmp(rest, "moe.", 4)) {
      char src[96];
      if (!strcmp(rest, "moe.router")) {
        double std = o->router_init_std >= 0 ? o->router_init_std : default_router_std(dense, layer, mc);
        fill_router(dst, t->name, mc->num_experts, G, C, std, o->seed);
        continue;
      }
      int dgu_shape[2] = {2 * F, C}, ddown_shape[2] = {C, F};
      snprintf(src, sizeof src, "layers.%d.mlp.w_gate_up", layer);
      const float *dgu = dense_tensor(dense, src, dgu_shape, 2, err, &rc);
      snprintf(src, sizeof src, "layers.%d.mlp.w_down", layer);
      const float *ddown = dgu ? dense_tensor(dense, src, ddown_shape, 2, err, &rc) : NULL;
      if (!ddown) break;
      if (!strcmp(rest, "moe.experts.w_gate_up")) {
        char dn[96];
        snprintf(dn, sizeof dn, "layers.%d.moe.experts.w_down", layer);
        const ParamTensor *td = model_find_tensor(moe, dn);
        if (!td) {
          rc = error_set(err, ERR_INTERNAL, "upcycle: the MoE model has no tensor '%s'", dn);
          break;
        }
        fill_experts(dst, moe->params + td->offset, dgu, ddown, mc->num_experts, G, C, F, scale);
      } else if (strcmp(rest, "moe.experts.w_down") != 0) {
        rc =
            error_set(err, ERR_INTERNAL, "upcycle: no rule for tensor '%s' (shared experts are not upcycled)", t->name);
      }
      continue;
    }
    const float *src = dense_tensor(dense, t->name, t->shape, t->ndim, err, &rc);
    if (src) memcpy(dst, src, t->numel * sizeof(float));
  }
  return rc;
}

/* ---- the run directory ---- */

/* The dense run's resolved config with the new model, description and
 * output directory, written to `path` and parsed back into *tc. */
static int write_run_config(const char *dense_ckpt, const ModelConfig *mc, const char *out_abs, const char *path,
                            const UpcycleOptions *o, TrainConfig *tc, Error *err) {
  cJSON *root = NULL;
  int rc = checkpoint_read_train_config(dense_ckpt, &root, err);
  if (rc) return rc;
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return error_set(err, ERR_FORMAT, "%s/%s: \"train_config\" is not an object", dense_ckpt, CHECKPOINT_STATE_FILE);
  }
  char desc[CHECKPOINT_PATH_MAX + 256];
  if (o->dense_control)
    snprintf(desc, sizeof desc,
             "written by fivefold upcycle --dense-control from %s: the dense model unchanged, fresh AdamW state, "
             "step 0 (the continued-dense control)",
             dense_ckpt);
  else
    snprintf(desc, sizeof desc, "written by fivefold upcycle from %s: %d experts, top-%d, granularity %d", dense_ckpt,
             o->num_experts, o->top_k, o->granularity);
  /* Same sections in the order a hand-written config has them. */
  cJSON_DeleteItemFromObjectCaseSensitive(root, "description");
  cJSON_DeleteItemFromObjectCaseSensitive(root, "model");
  cJSON_DeleteItemFromObjectCaseSensitive(root, "out");
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "description", desc);
  cJSON_AddItemToObject(doc, "model", model_config_to_json(mc));
  while (root->child) {
    cJSON *item = cJSON_DetachItemViaPointer(root, root->child);
    cJSON_AddItemToObject(doc, item->string, item);
  }
  cJSON_AddStringToObject(doc, "out", out_abs);
  cJSON_Delete(root);
  char *text = cJSON_Print(doc);
  cJSON_Delete(doc);
  if (!text) return error_set(err, ERR_NOMEM, "out of memory rendering %s", path);
  rc = fs_write_text_atomic(path, text, err);
  if (!rc) rc = train_config_parse(tc, text, path, err);
  free(text);
  return rc;
}

int upcycle_checkpoint(const char *dense_path, const char *out_dir, const UpcycleOptions *o, UpcycleInfo *info,
                       Error *err) {
  UpcycleInfo local;
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  int rc = checkpoint_resolve(dense_path, info->dense_checkpoint, sizeof info->dense_checkpoint, err);
  if (rc) return error_wrap(err, "--checkpoint %s", dense_path);
  char *abs = realpath(info->dense_checkpoint, NULL); /* the run config names its source */
  if (abs && strlen(abs) < sizeof info->dense_checkpoint)
    snprintf(info->dense_checkpoint, sizeof info->dense_checkpoint, "%s", abs);
  free(abs);
  ModelConfig dcfg, mcfg;
  rc = checkpoint_read_model_config(info->dense_checkpoint, &dcfg, NULL, 0, &info->dense_step, err);
  if (rc) return rc;
  if ((rc = upcycle_model_config(&dcfg, o, &mcfg, err))) return error_wrap(err, "%s", info->dense_checkpoint);
  info->model = mcfg;
  info->expert_scale = o->dense_control ? 1.0 : upcycle_expert_scale(&mcfg, o->granularity);
  info->exact_for_any_router = upcycle_exact_for_any_router(&mcfg);

  char *out_abs = NULL;
  if ((rc = convert_new_run_dir(out_dir, "upcycle", &out_abs, err))) return rc;

  Model dense, moe;
  Optimizer dopt, mopt;
  TrainConfig tc;
  CheckpointTrainState st;
  cJSON *run_config = NULL, *moe_record = NULL;
  Network moe_net = {0};
  memset(&dense, 0, sizeof dense);
  memset(&moe, 0, sizeof moe);
  memset(&dopt, 0, sizeof dopt);
  memset(&mopt, 0, sizeof mopt);
  train_config_defaults(&tc);
  OptimizerConfig oc;
  memset(&oc, 0, sizeof oc);
  /* The dense AdamW state is read only to validate the checkpoint whole and
   * to get its data-loader position; the MoE's starts at zero. */
  if ((rc = model_create(&dense, &dcfg, 1, 1, err))) goto done;
  if ((rc = optimizer_create(&dopt, dense.num_params, &oc, err))) goto done;
  CheckpointOptimizer dense_moments = {.m = dopt.m, .v = dopt.v, .num_params = dopt.num_params};
  if ((rc = net_transformer_load_training(info->dense_checkpoint, &dense, &dense_moments, &st, err))) goto done;
  if ((rc = model_create(&moe, &mcfg, 1, 1, err))) goto done;
  if ((rc = upcycle_weights(&dense, &moe, o, err))) goto done;
  if ((rc = optimizer_create(&mopt, moe.num_params, &oc, err))) goto done;
  mopt.step = 0;
  snprintf(info->run_config, sizeof info->run_config, "%s/%s", out_abs, UPCYCLE_RUN_CONFIG);
  if ((rc = write_run_config(info->dense_checkpoint, &mcfg, out_abs, info->run_config, o, &tc, err))) goto done;
  run_config = train_config_to_json(&tc);
  if ((rc = net_transformer_checkpoint_view(&moe_net, &moe_record, &moe, err))) goto done;
  CheckpointSource src = {
      .step = 0,
      .net = &moe_net,
      .model_record = moe_record,
      .opt = {.m = mopt.m, .v = mopt.v, .num_params = mopt.num_params, .step = mopt.step},
      .data_loader = st.data_loader,
      .data_windows = st.data_windows,
      .train_config = run_config,
      .tokenizer = tc.tokenizer,
      .seed = tc.seed,
  };
  CheckpointSaveInfo saved;
  if ((rc = checkpoint_save(out_abs, &src, 0, &saved, err))) goto done;
  snprintf(info->checkpoint, sizeof info->checkpoint, "%s", saved.dir);
  info->dense_params = dense.num_params;
  info->params = moe.num_params;
done:
  cJSON_Delete(moe_record);
  network_free(&moe_net);
  cJSON_Delete(run_config);
  train_config_free(&tc);
  optimizer_free(&mopt);
  optimizer_free(&dopt);
  model_free(&moe);
  model_free(&dense);
  free(out_abs);
  return rc;
}
