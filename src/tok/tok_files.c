/* Whole-file tokenization for `fivefold tokenize`: read the inputs, cut each
 * into a train head and a val tail, train a tokenizer on the heads, save it,
 * and encode both parts into id streams (the caller writes the shards). All
 * inputs are held in memory at once, which suits corpora of up to a few GB. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file_text.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/timer.h"
#include "tok/tok_internal.h"

/* Training text is read whole; the cap only refuses what cannot be meant. */
static int read_whole_file(const char *path, uint8_t **buf, size_t *len, Error *err) {
  char *text = NULL;
  *buf = NULL;
  *len = 0;
  int rc = file_read_text(path, "input", (size_t)1 << 36, &text, len, err);
  if (!rc) *buf = (uint8_t *)text;
  return rc;
}

/* End of the train head: just past the first '\n' at or after the nominal
 * cut, or the nominal cut itself when no newline follows it. */
static size_t cut_point(const uint8_t *text, size_t n, double val_fraction) {
  if (val_fraction <= 0) return n;
  size_t p = (size_t)((1.0 - val_fraction) * (double)n);
  if (p >= n) return n;
  const uint8_t *nl = memchr(text + p, '\n', n - p);
  return nl ? (size_t)(nl - text) + 1 : p;
}

typedef struct Inputs {
  int n;
  uint8_t **text;
  size_t *len, *cut;
} Inputs;

static void inputs_free(Inputs *in) {
  for (int i = 0; i < in->n; i++) free(in->text ? in->text[i] : NULL);
  free(in->text);
  free(in->len);
  free(in->cut);
  memset(in, 0, sizeof *in);
}

static int inputs_read(Inputs *in, const char *const *paths, int n, double val_fraction, Error *err) {
  memset(in, 0, sizeof *in);
  if (n <= 0) return error_set(err, ERR_ARG, "no input files given");
  if (!(val_fraction >= 0 && val_fraction < 1))
    return error_set(err, ERR_ARG, "val fraction must be in [0, 1), got %g", val_fraction);
  in->text = calloc((size_t)n, sizeof *in->text);
  in->len = calloc((size_t)n, sizeof *in->len);
  in->cut = calloc((size_t)n, sizeof *in->cut);
  if (!in->text || !in->len || !in->cut) {
    inputs_free(in);
    return error_set(err, ERR_NOMEM, "out of memory");
  }
  in->n = n;
  for (int i = 0; i < n; i++) {
    int rc = read_whole_file(paths[i], &in->text[i], &in->len[i], err);
    if (rc) {
      inputs_free(in);
      return rc;
    }
    in->cut[i] = cut_point(in->text[i], in->len[i], val_fraction);
  }
  return 0;
}

static int encode_part(TokEncoder *enc, int32_t eot, const uint8_t *text, size_t len, TokIds *out, Error *err) {
  if (!len) return 0;
  int rc = tok_ids_push(out, eot, err);
  return rc ? rc : tok_encode(enc, text, len, 0, out, err);
}

static int encode_inputs(const Tokenizer *tok, const Inputs *in, const char *const *paths, TokIds *train,
                         TokIds *val, Error *err) {
  int32_t eot = tok_eot_id(tok);
  if (eot < 0) return error_set(err, ERR_ARG, "the tokenizer has no %s token to mark document starts", TOK_EOT);
  TokEncoder *enc;
  int rc = tok_encoder_new(&enc, tok, err);
  if (rc) return rc;
  double t0 = timer_now();
  size_t bytes = 0;
  for (int i = 0; i < in->n && !rc; i++) {
    rc = encode_part(enc, eot, in->text[i], in->cut[i], train, err);
    if (!rc) rc = encode_part(enc, eot, in->text[i] + in->cut[i], in->len[i] - in->cut[i], val, err);
    if (rc) error_wrap(err, "encoding %s", paths[i]);
    bytes += in->len[i];
  }
  tok_encoder_free(enc);
  if (!rc)
    log_info("tokenize: %zu bytes -> %zu train + %zu val tokens in %.2f s", bytes, train->n, val->n,
             timer_now() - t0);
  return rc;
}

int tok_encode_files(const Tokenizer *tok, const char *const *inputs, int n_inputs, double val_fraction,
                     TokIds *train, TokIds *val, Error *err) {
  Inputs in;
  int rc = inputs_read(&in, inputs, n_inputs, val_fraction, err);
  if (rc) return rc;
  rc = encode_inputs(tok, &in, inputs, train, val, err);
  inputs_free(&in);
  return rc;
}


int tok_train_and_encode_files(const char *const *inputs, int n_inputs, int vocab_size, double val_fraction,
                               const char *out_dir, Tokenizer **tok_out, TokIds *train, TokIds *val,
                               Error *err) {
  if (tok_out) *tok_out = NULL;
  Inputs in;
  int rc = inputs_read(&in, inputs, n_inputs, val_fraction, err);
  if (rc) return rc;
  Tokenizer *tok = NULL;
  TokTrainOptions opts = {.vocab_size = vocab_size, .verbose = 1};
  double t0 = timer_now();
  rc = tok_train(&tok, (const uint8_t *const *)in.text, in.cut, in.n, &opts, err);
  if (!rc) log_info("tokenize: trained a %d-id tokenizer in %.2f s", tok_vocab_size(tok), timer_now() - t0);
  char *path = NULL;
  if (!rc) rc = fs_mkdir_p(out_dir, err);
  if (!rc) {
    size_t n = strlen(out_dir) + sizeof "/tokenizer.json";
    path = malloc(n);
    if (!path) rc = error_set(err, ERR_NOMEM, "out of memory");
    else snprintf(path, n, "%s/tokenizer.json", out_dir);
  }
  if (!rc) rc = tok_save_json(tok, path, err);
  if (!rc) rc = encode_inputs(tok, &in, inputs, train, val, err);
  free(path);
  inputs_free(&in);
  if (rc || !tok_out) tok_free(tok);
  else *tok_out = tok;
  return rc;
}
