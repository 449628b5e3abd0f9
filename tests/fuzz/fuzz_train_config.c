/* Fuzz harness of the run config reader (src/train/train_config.h).
 *
 * Each input is a would-be run config, written as run.json into a scratch
 * directory that also holds a valid model config (model.json), two valid
 * token shards (train.bin, val.bin) and a small tokenizer (tokenizer.json),
 * so that relative paths in the input can
 * name real files and the whole chain runs: train_config_load, then for an
 * accepted file train_config_finalize (cross-field checks, data files),
 * train_config_tokens_per_step and train_config_to_json. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include <cjson/cJSON.h>

#include "train/train_config.h"

static const char MODEL_JSON[] =
    "{\"model_type\": \"mixtral\", \"vocab_size\": 300, \"hidden_size\": 32, \"num_hidden_layers\": 2,\n"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 64,\n"
    " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"max_position_embeddings\": 128}\n";

static const char TOKENIZER_JSON[] =
    "{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3}, \"merges\": [\"a b\"]},\n"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\": 4, \"content\": \"<|endoftext|>\"}]}\n";

/* A version-1 token shard of `count` uint16 tokens below 300. */
static void write_shard(const char *name, unsigned count) {
  unsigned char buf[64 + 2 * 64] = {0};
  memcpy(buf, "FFTOKEN1", 8);
  buf[8] = 1;                    /* version */
  buf[12] = 1;                   /* dtype uint16 */
  buf[16] = (unsigned char)count; /* token count */
  buf[24] = 300 & 0xff, buf[25] = 300 >> 8; /* vocab size */
  for (unsigned i = 0; i < count; i++) buf[64 + 2 * i] = (unsigned char)(i * 7);
  fuzz_write_scratch(name, buf, 64 + 2 * (size_t)count);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_write_scratch("model.json", MODEL_JSON, sizeof MODEL_JSON - 1);
  write_shard("train.bin", 64);
  write_shard("val.bin", 20);
  fuzz_write_scratch("tokenizer.json", TOKENIZER_JSON, sizeof TOKENIZER_JSON - 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_scratch("run.json", data, size);
  TrainConfig cfg;
  Error err;
  fuzz_error_reset(&err);
  int rc = train_config_load(&cfg, path, &err);
  fuzz_check_result(rc, &err, "train_config_load");
  if (rc) return 0; /* a failed load frees what it allocated */
  if (!cfg.has_model) fuzz_fail("train_config_load", "accepted a config without a model");
  if (model_config_validate(&cfg.model, "fuzz", &err) != 0)
    fuzz_fail("train_config_load", "accepted a model config that does not validate");

  fuzz_error_reset(&err);
  rc = train_config_finalize(&cfg, &err);
  fuzz_check_result(rc, &err, "train_config_finalize");
  if (rc == 0) {
    if (cfg.grad_accum_steps < 1 || cfg.global_batch_size < 1 || !cfg.out_dir[0] || cfg.num_train < 1)
      fuzz_fail("train_config_finalize", "left a derived field unset");
    if (train_config_tokens_per_step(&cfg) < 1) fuzz_fail("train_config_tokens_per_step", "not positive");
    cJSON *j = train_config_to_json(&cfg);
    if (!j) fuzz_fail("train_config_to_json", "returned NULL");
    char *text = cJSON_PrintUnformatted(j);
    if (!text) fuzz_fail("cJSON_PrintUnformatted", "returned NULL");
    free(text);
    cJSON_Delete(j);
  }
  train_config_free(&cfg);
  return 0;
}
