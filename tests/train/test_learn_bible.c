/* End-to-end learning on real text (label "slow"): a small MoE trained for a
 * few hundred steps on ~400 KB of the King James Bible (from the `bible`
 * command of Debian's bible-kjv) must reach a validation loss well below the
 * unigram entropy of the text's bytes — the best loss a model that ignores
 * context can reach — so it has learned to use the context. The entropy is
 * computed here from the same text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "train/trainer.h"
#include "train_test_util.h"

#define TRAIN_BYTES 400000
#define VAL_BYTES 40000
/* Required gap below the unigram entropy, in nats per byte. */
#define MARGIN_NATS 1.0

static unsigned char *read_bible(size_t want, size_t *got) {
  FILE *p = popen("COLUMNS=80 bible Gen1:1-Rev22:21 </dev/null 2>/dev/null", "r");
  if (!p) return NULL;
  unsigned char *buf = malloc(want);
  size_t n = 0, k;
  while (n < want && (k = fread(buf + n, 1, want - n, p)) > 0) n += k;
  /* Drain the rest so `bible` does not die of SIGPIPE noise. */
  char sink[65536];
  while (fread(sink, 1, sizeof sink, p) > 0) {
  }
  pclose(p);
  *got = n;
  return buf;
}

static double unigram_entropy_nats(const unsigned char *text, size_t n) {
  double counts[256] = {0}, h = 0;
  for (size_t i = 0; i < n; i++) counts[text[i]]++;
  for (int b = 0; b < 256; b++)
    if (counts[b] > 0) h -= counts[b] / n * log(counts[b] / n);
  return h;
}

static void write_bytes_shard(const char *path, const unsigned char *text, size_t n) {
  uint32_t *tok = malloc(n * sizeof *tok);
  for (size_t i = 0; i < n; i++) tok[i] = text[i];
  Error err = {0};
  if (token_shard_write(path, tok, n, 256, &err)) fail_msg("%s", err.msg);
  free(tok);
}

static void test_loss_falls_below_unigram_entropy(void **state) {
  (void)state;
  size_t n = 0;
  unsigned char *text = read_bible(TRAIN_BYTES + VAL_BYTES, &n);
  if (!text || n < TRAIN_BYTES + VAL_BYTES)
    fail_msg("could not read %d bytes from the `bible` command (install Debian's bible-kjv: "
             "scripts/install-deps.sh); got %zu",
             TRAIN_BYTES + VAL_BYTES, n);
  double h_train = unigram_entropy_nats(text, TRAIN_BYTES);
  double h_val = unigram_entropy_nats(text + TRAIN_BYTES, VAL_BYTES);
  write_bytes_shard(scratch_path("train.bin"), text, TRAIN_BYTES);
  write_bytes_shard(scratch_path("val.bin"), text + TRAIN_BYTES, VAL_BYTES);
  free(text);

  /* One thread: under `ctest -j` the cores are shared with other tests, and
   * OpenMP barriers stall when their threads are descheduled. */
  const char *json =
      "{\"model\": {\"model_type\": \"fivefold\", \"vocab_size\": 256, \"hidden_size\": 64,"
      "  \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 128,"
      "  \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 96,"
      "  \"moe_aux_loss_coeff\": 0.01, \"moe_z_loss_coeff\": 0.001},"
      " \"training\": {\"micro_batch_size\": 16, \"seq_len\": 64, \"steps\": 300, \"lr\": 0.004,"
      "  \"min_lr\": 0.0004, \"warmup_steps\": 20, \"weight_decay\": 0.1, \"grad_clip\": 1.0, \"seed\": 1,"
      "  \"log_interval\": 50, \"eval_interval\": 100, \"eval_batches\": 16, \"threads\": 1, \"peak_gflops\": 100},"
      " \"data\": {\"train\": \"train.bin\", \"val\": \"val.bin\"}}";
  TrainConfig cfg;
  Error err = {0};
  if (train_config_parse(&cfg, json, scratch_path("learn.json"), &err) || train_config_finalize(&cfg, &err))
    fail_msg("%s", err.msg);
  Trainer tr;
  if (trainer_create(&tr, &cfg, &err)) fail_msg("%s", err.msg);
  TrainerOptions opts;
  trainer_options_default(&opts);
  opts.write_run_files = 0;
  opts.progress = 0;
  TrainSummary sum;
  if (trainer_run(&tr, &opts, &sum, &err)) fail_msg("%s", err.msg);
  printf("unigram entropy of the bytes: train %.3f nats, val %.3f nats; val loss %.3f -> %.3f (required < %.3f)\n",
         h_train, h_val, sum.first_val_loss, sum.final_val_loss, h_val - MARGIN_NATS);
  assert_true(sum.first_val_loss > h_val); /* starts near log(256), above the unigram entropy */
  if (!(sum.final_val_loss < h_val - MARGIN_NATS))
    fail_msg("val loss %.3f is not %.1f nats below the unigram entropy %.3f", sum.final_val_loss, MARGIN_NATS, h_val);
  assert_true(sum.final_loss < h_train - MARGIN_NATS);
  trainer_free(&tr);
  train_config_free(&cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_loss_falls_below_unigram_entropy)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
