/* The multiplications per image of vision networks, counted in a forward
 * pass by the layers' kernel calls (kern/op_count.h, vision_count_mults)
 * next to the layers' analytic sum, for the tables of docs/tropical.md
 * (bench/tropical/experiments.py reports the counted figure).
 *
 *   tropical_count CONFIG.json...
 *
 * One line per config: "count config=PATH counted=N analytic=N params=N";
 * exit 1 when a config cannot be read or built. Figures only. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/rng.h"
#include "nets/vision.h"

#define BATCH 4

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = size >= 0 ? malloc((size_t)size + 1) : NULL;
  if (text && fread(text, 1, (size_t)size, f) == (size_t)size) text[size] = '\0';
  else {
    free(text);
    text = NULL;
  }
  fclose(f);
  return text;
}

static int count_one(const char *path) {
  char *text = read_text(path);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  free(text);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!model) {
    fprintf(stderr, "tropical_count: %s: expected a JSON run config with a \"model\" object\n", path);
    cJSON_Delete(root);
    return 1;
  }
  VisionConfig cfg;
  Network net;
  Error err = {0};
  int rc = vision_config_from_json(&cfg, model, path, &err);
  cJSON_Delete(root);
  if (!rc) rc = vision_create(&net, &cfg, BATCH, &err);
  if (rc) {
    fprintf(stderr, "tropical_count: %s\n", err.msg);
    return 1;
  }
  vision_init_weights(&net, 1);
  size_t numel = (size_t)cfg.in_c * cfg.in_h * cfg.in_w;
  float *x = malloc(BATCH * numel * sizeof *x);
  int y[BATCH] = {0};
  double counted = 0;
  if (!x) {
    network_free(&net);
    return 1;
  }
  for (size_t i = 0; i < BATCH * numel; i++) x[i] = (float)rng_normal(3, 0, i);
  VisionBatch b = {.n = BATCH, .x = x, .y = y};
  rc = vision_count_mults(&net, &b, 0, &counted, &err);
  if (rc) fprintf(stderr, "tropical_count: %s: %s\n", path, err.msg);
  else
    printf("count config=%s counted=%.0f analytic=%.0f params=%zu\n", path, counted, vision_mults_per_sample(&net),
           net.num_values);
  free(x);
  network_free(&net);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tropical_count CONFIG.json...\n");
    return 2;
  }
  int bad = 0;
  for (int i = 1; i < argc; i++) bad |= count_one(argv[i]);
  return bad;
}
