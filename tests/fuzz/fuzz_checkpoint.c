/* Fuzz harness of the checkpoint reader (src/ckpt/checkpoint.h): state.json
 * and everything that trusts it.
 *
 * At start-up a real checkpoint of a tiny MoE model is saved with
 * checkpoint_save into a scratch run directory (weights and optimizer state
 * set to fixed values, so the two safetensors files, and hence the sizes and
 * CRC-32s state.json must record, are the same on every run). Each input
 * then replaces that checkpoint's state.json and is read with
 * checkpoint_read_model_config; one it accepts goes on through every other
 * reading entry point: checkpoint_read_train_config, checkpoint_verify,
 * checkpoint_resolve (of the step directory and of the run directory), and,
 * when the model config it records is the fixture's, checkpoint_load_weights
 * and checkpoint_load_training into the fixture model. The safetensors files
 * themselves are fuzzed by fuzz_safetensors.
 *
 * FIVEFOLD_FUZZ_DUMP_STATE=FILE copies the fixture's own state.json to FILE
 * at start-up: how corpus/checkpoint/ got its valid seed (regenerate it after
 * a change of the checkpoint or safetensors format). */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include <cjson/cJSON.h>

#include "base/log.h"
#include "model/model.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_internal.h"
#include "train/net_transformer.h"
#include "train/optimizer.h"
#include "train/train_config.h"

#define FIXTURE_STEP 5

static const char MODEL_JSON[] =
    "{\"vocab_size\": 32, \"hidden_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 2,"
    " \"intermediate_size\": 16, \"num_experts\": 2, \"num_experts_per_tok\": 1, \"moe_intermediate_size\": 8,"
    " \"moe_layer_freq\": 2, \"max_position_embeddings\": 16}";

static Model model;
static Network net;          /* the model's table as the checkpoint takes it */
static cJSON *model_record; /* its config record */
static Optimizer opt;
static char run_dir[8192], ckpt_dir[8192], state_path[8192];

static void fixture_fail(const char *what, const Error *err) {
  fuzz_fail(what, err->msg);
}

/* Verification of what checkpoint_load_weights reads: state.json and the
 * model file (CKPT_FILES[0]), not the optimizer's. */
static int verify_weight_files(const char *dir, Error *err) {
  CkptState st;
  int rc = ckpt_state_read(dir, &st, err);
  if (rc) return rc;
  rc = ckpt_verify_file(&st, 0, err);
  ckpt_state_free(&st);
  return rc;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  log_set_level(LOG_ERROR); /* invalid checkpoints are skipped with a warning */
  Error err;
  ModelConfig cfg;
  cJSON *mj = cJSON_Parse(MODEL_JSON);
  if (model_config_from_json(&cfg, mj, "fixture", &err)) fixture_fail("fixture model config", &err);
  cJSON_Delete(mj);
  if (model_create(&model, &cfg, 1, 4, &err)) fixture_fail("model_create", &err);
  for (size_t k = 0; k < model.num_params; k++) model.params[k] = (float)((int)(k % 13) - 6) * 0.125f;
  OptimizerConfig ocfg = {0};
  ocfg.beta1 = 0.9f, ocfg.beta2 = 0.95f, ocfg.eps = 1e-8f;
  if (optimizer_create(&opt, model.num_params, &ocfg, &err)) fixture_fail("optimizer_create", &err);
  if (net_transformer_checkpoint_view(&net, &model_record, &model, &err)) fixture_fail("the model's table", &err);
  for (size_t k = 0; k < opt.num_params; k++) opt.m[k] = (float)(k % 5) * 0.5f, opt.v[k] = (float)(k % 3);
  opt.step = FIXTURE_STEP;

  TrainConfig tc;
  train_config_defaults(&tc);
  tc.model = cfg;
  tc.has_model = 1;
  snprintf(run_dir, sizeof run_dir, "%s/run", fuzz_scratch_dir());
  snprintf(tc.out_dir, sizeof tc.out_dir, "%s", run_dir);
  CheckpointSource src = {0};
  src.step = FIXTURE_STEP;
  src.net = &net;
  src.model_record = model_record;
  src.opt = (CheckpointOptimizer){.m = opt.m, .v = opt.v, .num_params = opt.num_params, .step = opt.step};
  src.data_loader.seed = 1337;
  src.data_loader.epoch = 1;
  src.data_loader.position = 3;
  src.data_windows = 10;
  cJSON *tc_json = train_config_to_json(&tc);
  src.train_config = tc_json;
  src.tokenizer = tc.tokenizer;
  src.seed = tc.seed;
  if (mkdir(run_dir, 0755) != 0) fuzz_fail("cannot create the run directory", strerror(errno));
  if (checkpoint_save(run_dir, &src, 0, NULL, &err)) fixture_fail("checkpoint_save", &err);
  cJSON_Delete(tc_json);
  train_config_free(&tc);
  if (checkpoint_dir_name(run_dir, FIXTURE_STEP, ckpt_dir, sizeof ckpt_dir, &err))
    fixture_fail("checkpoint_dir_name", &err);
  /* checkpoint_save may put the step directory under run_dir/checkpoints. */
  char resolved[8192];
  if (checkpoint_resolve(run_dir, resolved, sizeof resolved, &err)) fixture_fail("checkpoint_resolve", &err);
  snprintf(ckpt_dir, sizeof ckpt_dir, "%s", resolved);
  snprintf(state_path, sizeof state_path, "%s/%s", ckpt_dir, CHECKPOINT_STATE_FILE);

  const char *dump = getenv("FIVEFOLD_FUZZ_DUMP_STATE");
  if (dump && dump[0]) {
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", state_path, dump);
    if (system(cmd) != 0) fuzz_fail("cannot copy state.json", dump);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(state_path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
    fuzz_fail("cannot write state.json", strerror(errno));

  Error err;
  ModelConfig cfg;
  char tokenizer[TRAIN_PATH_MAX];
  int step = -1;
  fuzz_error_reset(&err);
  int rc_cfg = checkpoint_read_model_config(ckpt_dir, &cfg, tokenizer, sizeof tokenizer, &step, &err);
  fuzz_check_result(rc_cfg, &err, "checkpoint_read_model_config");
  /* Every other entry point starts with the same state.json parse, so a
   * refused file is refused by all of them; skipping them keeps the rate up
   * (each parse allocates the 64 MiB limit, slow under ASan). */
  if (rc_cfg != 0) return 0;
  if (step != FIXTURE_STEP) fuzz_fail("checkpoint_read_model_config", "a step other than the directory's");
  if (!memchr(tokenizer, '\0', sizeof tokenizer) || !tokenizer[0])
    fuzz_fail("checkpoint_read_model_config", "an empty or unterminated tokenizer");
  fuzz_error_reset(&err);
  int rc = model_config_validate(&cfg, "state.json", &err);
  if (rc) fuzz_fail("checkpoint_read_model_config", "accepted a model config that does not validate");

  cJSON *tc = NULL;
  fuzz_error_reset(&err);
  rc = checkpoint_read_train_config(ckpt_dir, &tc, &err);
  fuzz_check_result(rc, &err, "checkpoint_read_train_config");
  if (rc != 0) fuzz_fail("checkpoint_read_train_config", "refuses what checkpoint_read_model_config accepts");
  cJSON_Delete(tc);

  fuzz_error_reset(&err);
  int rc_verify = checkpoint_verify(ckpt_dir, &err);
  fuzz_check_result(rc_verify, &err, "checkpoint_verify");

  char out[8192];
  const char *paths[2] = {ckpt_dir, run_dir};
  for (int i = 0; i < 2; i++) {
    fuzz_error_reset(&err);
    rc = checkpoint_resolve(paths[i], out, sizeof out, &err);
    fuzz_check_result(rc, &err, "checkpoint_resolve");
    if ((rc == 0) != (rc_verify == 0)) fuzz_fail("checkpoint_resolve", "disagrees with checkpoint_verify");
    if (rc == 0 && strcmp(out, ckpt_dir) != 0) fuzz_fail("checkpoint_resolve", "resolved another directory");
  }

  fuzz_error_reset(&err);
  int rc_verify_weights = verify_weight_files(ckpt_dir, &err);
  fuzz_check_result(rc_verify_weights, &err, "verification of state.json and model.safetensors");
  if (rc_verify == 0 && rc_verify_weights != 0)
    fuzz_fail("checkpoint_verify", "accepts a checkpoint whose model file does not verify");

  if (memcmp(&cfg, &model.cfg, sizeof cfg) == 0) {
    fuzz_error_reset(&err);
    rc = checkpoint_load_weights(ckpt_dir, &net, model_record, &err);
    fuzz_check_result(rc, &err, "checkpoint_load_weights");
    if ((rc == 0) != (rc_verify_weights == 0))
      fuzz_fail("checkpoint_load_weights", "disagrees with the verification of state.json and model.safetensors");
    CheckpointTrainState st;
    fuzz_error_reset(&err);
    CheckpointOptimizer moments = {.m = opt.m, .v = opt.v, .num_params = opt.num_params};
    rc = checkpoint_load_training(ckpt_dir, &net, model_record, &moments, &st, &err);
    opt.step = moments.step;
    fuzz_check_result(rc, &err, "checkpoint_load_training");
    if (rc == 0 && rc_verify != 0) fuzz_fail("checkpoint_load_training", "accepts a checkpoint checkpoint_verify refuses");
    if (rc == 0 && (st.step != FIXTURE_STEP || st.data_loader.position >= st.data_windows))
      fuzz_fail("checkpoint_load_training", "a training state out of range");
  }
  return 0;
}
