/* Generation speed with and without the key/value cache (model_decode.h)
 * on the demo model (the model section of configs/demo-moe.json, random
 * weights: speed does not depend on them). For a context of 128 and of
 * 1,024 tokens it prints the tokens/s of one new token at that context:
 * without the cache, model_logits over the whole window (what `fivefold
 * sample --no-kv-cache` does per token); with it, model_decode of one
 * position after the window was prefilled (the prefill is not timed; it is
 * one such forward). Each figure is also given per second of the process's
 * CPU time, which a machine shared with other jobs disturbs less than the
 * wall clock (the ratio of those is the steadier one there). Prints
 * figures, never passes or fails.
 * Usage: bench_sample [RUN_CONFIG (configs/demo-moe.json)] [seconds per figure (1)] */
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/file_text.h"
#include "base/timer.h"
#include "model/config.h"
#include "model/model.h"
#include "model/model_decode.h"

static void die(const char *what, const Error *err) {
  fprintf(stderr, "bench_sample: %s: %s\n", what, err->msg);
  exit(1);
}

static void load_model_section(ModelConfig *cfg, const char *path) {
  char *text = NULL;
  size_t len = 0;
  Error err = {0};
  if (file_read_text(path, "run config", 1 << 20, &text, &len, &err)) die(path, &err);
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  const cJSON *model = root ? cJSON_GetObjectItemCaseSensitive(root, "model") : NULL;
  if (!cJSON_IsObject(model)) {
    fprintf(stderr, "bench_sample: %s: expected a run config with an inline \"model\" object\n", path);
    exit(1);
  }
  if (model_config_from_json(cfg, model, path, &err)) die(path, &err);
  cJSON_Delete(root);
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "configs/demo-moe.json";
  const double seconds = argc > 2 ? atof(argv[2]) : 1.0;
  ModelConfig cfg;
  load_model_section(&cfg, path);
  const int contexts[] = {128, 1024};
  int max_T = 0;
  for (int i = 0; i < 2; i++)
    if (contexts[i] <= cfg.max_position_embeddings && contexts[i] > max_T) max_T = contexts[i];
  Model m;
  Error err = {0};
  if (model_create(&m, &cfg, 1, max_T, &err)) die("model_create", &err);
  model_init_weights(&m, 1);
  ModelKvCache kv;
  if (model_kv_cache_create(&kv, &m, &err)) die("kv cache", &err);
  const int V = cfg.vocab_size;
  float *logits = malloc((size_t)max_T * V * sizeof *logits);
  int *tokens = malloc((size_t)max_T * sizeof *tokens);
  for (int i = 0; i < max_T; i++) tokens[i] = (i * 7919) % V;
  printf("generation benchmark: %s (hidden %d, %d layers, %d experts, vocab %d), %d OpenMP thread(s), %.1f s per "
         "figure\n",
         path, cfg.hidden_size, cfg.num_layers, cfg.num_experts, V, omp_get_max_threads(), seconds);
  printf("%8s  %16s  %16s  %8s   %18s  %18s  %8s\n", "context", "no cache tok/s", "kv cache tok/s", "ratio",
         "no cache tok/cpu-s", "kv cache tok/cpu-s", "ratio");
  for (int i = 0; i < 2; i++) {
    const int T = contexts[i];
    if (T > max_T) continue;
    long n = 0;
    double t0 = timer_now(), c0 = cpu_seconds(), t = 0;
    do {
      if (model_logits(&m, tokens, 1, T, logits, &err)) die("model_logits", &err);
      n++;
      t = timer_now() - t0;
    } while (t < seconds);
    const double plain = n / t, plain_cpu = n / (cpu_seconds() - c0);
    /* The window's first T - 1 tokens are cached; each timed step decodes
     * position T - 1 (then is taken back out), a token at context T. */
    model_kv_cache_reset(&kv);
    if (model_decode(&m, &kv, tokens, T - 1, logits, &err)) die("model_decode", &err);
    n = 0;
    t0 = timer_now();
    c0 = cpu_seconds();
    do {
      if (model_decode(&m, &kv, tokens + T - 1, 1, logits, &err)) die("model_decode", &err);
      kv.len--;
      n++;
      t = timer_now() - t0;
    } while (t < seconds);
    const double cached = n / t, cached_cpu = n / (cpu_seconds() - c0);
    printf("%8d  %16.1f  %16.1f  %7.1fx   %18.1f  %18.1f  %7.1fx\n", T, plain, cached, cached / plain, plain_cpu,
           cached_cpu, cached_cpu / plain_cpu);
  }
  free(logits);
  free(tokens);
  model_kv_cache_free(&kv);
  model_free(&m);
  return 0;
}
