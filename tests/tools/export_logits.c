/* export_logits: fivefold's own logits for a checkpoint, for the Hugging
 * Face export test (tests/torch_ref/export_test.py), which rebuilds the
 * exported model independently and compares.
 *
 * usage: export_logits --checkpoint DIR --tokens 1,2,3,... --out FILE
 * Writes FILE (safetensors): "tokens" I32 [T] and "logits" F32 [T, V] of
 * model_logits on the one sequence (B = 1, positions 0..T-1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "model/model.h"
#include "ckpt/checkpoint.h"
#include "train/net_transformer.h"

static int parse_tokens(const char *s, int **out, int *n, Error *err) {
  int cap = 16, k = 0;
  int *v = malloc((size_t)cap * sizeof *v);
  if (!v) return error_set(err, ERR_NOMEM, "out of memory");
  while (*s) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || errno || x < 0 || x > (1L << 30)) {
      free(v);
      return error_set(err, ERR_ARG, "--tokens: expected comma-separated non-negative integers at \"%s\"", s);
    }
    if (k == cap) {
      int *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
      if (!nv) {
        free(v);
        return error_set(err, ERR_NOMEM, "out of memory");
      }
      v = nv;
    }
    v[k++] = (int)x;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') {
      free(v);
      return error_set(err, ERR_ARG, "--tokens: unexpected '%c'", *end);
    }
  }
  if (!k) {
    free(v);
    return error_set(err, ERR_ARG, "--tokens: no tokens");
  }
  *out = v;
  *n = k;
  return 0;
}

int main(int argc, char **argv) {
  const char *ckpt = NULL, *tokens_arg = NULL, *out = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--checkpoint")) ckpt = argv[i + 1];
    else if (!strcmp(argv[i], "--tokens")) tokens_arg = argv[i + 1];
    else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
  }
  if (!ckpt || !tokens_arg || !out) {
    fprintf(stderr, "usage: export_logits --checkpoint DIR --tokens 1,2,3,... --out FILE\n");
    return 2;
  }
  Error err = {0};
  ModelConfig cfg;
  Model m;
  int have_model = 0, T = 0, *tokens = NULL;
  float *logits = NULL;
  SafetensorsWriter *w = NULL;
  char dir[4096], tok[4096];
  int rc = parse_tokens(tokens_arg, &tokens, &T, &err);
  if (!rc) rc = checkpoint_resolve(ckpt, dir, sizeof dir, &err);
  if (!rc) rc = checkpoint_read_model_config(dir, &cfg, tok, sizeof tok, NULL, &err);
  if (!rc && !(rc = model_create(&m, &cfg, 1, T, &err))) have_model = 1;
  if (!rc) rc = net_transformer_load_weights(dir, &m, &err);
  for (int t = 0; t < T && !rc; t++)
    if (tokens[t] >= cfg.vocab_size) rc = error_set(&err, ERR_ARG, "token %d is outside the vocabulary", tokens[t]);
  if (!rc && !(logits = malloc((size_t)T * cfg.vocab_size * sizeof *logits))) rc = error_set(&err, ERR_NOMEM, "oom");
  if (!rc) rc = model_logits(&m, tokens, 1, T, logits, &err);
  if (!rc && !(w = safetensors_writer_new())) rc = error_set(&err, ERR_NOMEM, "oom");
  int64_t tshape[1] = {T};
  int lshape[2] = {T, cfg.vocab_size};
  if (!rc) rc = safetensors_writer_add(w, "tokens", ST_I32, 1, tshape, tokens, &err);
  if (!rc) rc = safetensors_writer_add_f32(w, "logits", 2, lshape, logits, &err);
  if (!rc) rc = safetensors_writer_write(w, out, &err);
  safetensors_writer_free(w);
  if (have_model) model_free(&m);
  free(tokens);
  free(logits);
  if (rc) fprintf(stderr, "export_logits: %s\n", err.msg);
  return rc ? 1 : 0;
}
