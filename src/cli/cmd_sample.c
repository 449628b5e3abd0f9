/* `fivefold sample --checkpoint DIR --prompt TEXT`: loads a checkpoint and
 * its tokenizer, encodes the prompt and streams generated text to stdout
 * token by token (infer/sampler.h does the picking and the loop). Tokens are
 * written as raw bytes, so a UTF-8 character split across two tokens
 * appears whole once its last byte is out. Statistics go to stderr, so
 * stdout holds only the text. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file_text.h"
#include "base/options.h"
#include "base/timer.h"
#include "cli/cmd_sample.h"
#include "tok/tokenizer.h"
#include "ckpt/checkpoint.h"
#include "train/net_transformer.h"
#include "infer/sampler.h"

static void sample_help(FILE *f) {
  fprintf(f,
          "usage: fivefold sample --checkpoint DIR --prompt TEXT [options]\n\n"
          "Generates text with a trained model, printing it as it is produced. The prompt is\n"
          "echoed first; statistics go to stderr.\n\n"
          "options:\n"
          "  --checkpoint DIR     a checkpoint directory (step-NNNNNNNN) or a run directory (its newest\n"
          "                       valid checkpoint)\n"
          "  --prompt TEXT        text to continue; empty starts a new document (<|endoftext|>, or a\n"
          "                       newline for byte-level models)\n"
          "  --max-tokens N       tokens to generate (default 200); stops early at <|endoftext|>\n"
          "  --temperature T      softmax temperature, T >= 0 (default 0.8; 0 = greedy, always the most\n"
          "                       likely token)\n"
          "  --top-k K            sample only among the K most likely tokens (default 0 = off)\n"
          "  --top-p P            nucleus: only the most likely tokens whose probabilities add up to P,\n"
          "                       0 < P <= 1 (default 0.95; 1 = off)\n"
          "  --seed S             random seed; the same seed and options give the same text (default 1337)\n"
          "  --context N          tokens of context the model sees (default: the training seq_len recorded\n"
          "                       in the checkpoint, else max_position_embeddings; at most the latter)\n"
          "  --tokenizer FILE     use this tokenizer.json (or 'byte-level') instead of the one the\n"
          "                       checkpoint names\n"
          "  --threads N          OpenMP / BLAS threads (default 1: one sequence is too little work to\n"
          "                       share well, and on a busy machine waiting threads cost more than\n"
          "                       they give; larger models gain from more)\n"
          "  --no-echo            do not print the prompt before the generated text\n"
          "  --no-kv-cache        re-run the model over the whole context for every token (the\n"
          "                       slow path, kept for comparison)\n"
          "  -h, --help           show this help\n\n"
          "A key/value cache makes each new token cost one position's forward. When the text outgrows\n"
          "--context, the newest half of the context is kept and run again from position 0 (every\n"
          "context/2 tokens); with --no-kv-cache the window slides by one token each time instead.\n");
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fivefold sample: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

typedef struct SampleArgs {
  const char *checkpoint, *prompt, *tokenizer;
  int max_tokens, context, threads, echo, no_kv_cache;
  SamplerOptions opts;
} SampleArgs;

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return fail(2, "%s must be an integer in %ld..%ld, got '%s'", flag, lo, hi, v);
  *out = x;
  return 0;
}

static int parse_float(const char *flag, const char *v, float *out) {
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end) return fail(2, "%s must be a number, got '%s'", flag, v);
  *out = (float)x;
  return 0;
}

/* 0 = parsed, 1 = --help shown, 2 = usage error (already printed). */
static int parse_args(int argc, char **argv, SampleArgs *a) {
  memset(a, 0, sizeof *a);
  a->max_tokens = 200;
  a->threads = 1;
  a->echo = 1;
  sampler_options_default(&a->opts);
  static const char *const KNOWN[] = {"--checkpoint", "--prompt",  "--tokenizer", "--max-tokens",  "--context",
                                      "--threads",    "--top-k",   "--seed",      "--temperature", "--top-p",
                                      "--no-echo",    "--no-kv-cache", "--help"};
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "sample", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      sample_help(stdout);
      return 1;
    }
    if (option_is(&op, "--no-echo")) {
      if (option_switch(&op, &perr)) return fail(2, "%s", perr.msg);
      a->echo = 0;
      continue;
    }
    if (option_is(&op, "--no-kv-cache")) {
      if (option_switch(&op, &perr)) return fail(2, "%s", perr.msg);
      a->no_kv_cache = 1;
      continue;
    }
    const char *name = op.name, *v = NULL;
    int known = 0;
    for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++) known |= option_is(&op, KNOWN[k]);
    if (!known) return fail(2, "%s", (option_unknown(&op, &perr), perr.msg));
    /* A value that itself starts with "--" is written --prompt=--text. */
    if (option_value(&op, &v, &perr)) return fail(2, "%s", perr.msg);
    long n = 0;
    int rc = 0;
    if (!strcmp(name, "--checkpoint")) a->checkpoint = v;
    else if (!strcmp(name, "--prompt")) a->prompt = v;
    else if (!strcmp(name, "--tokenizer")) a->tokenizer = v;
    else if (!strcmp(name, "--max-tokens")) {
      if (!(rc = parse_long(name, v, 0, 1L << 24, &n))) a->max_tokens = (int)n;
    } else if (!strcmp(name, "--context")) {
      if (!(rc = parse_long(name, v, 1, 1L << 20, &n))) a->context = (int)n;
    } else if (!strcmp(name, "--threads")) {
      if (!(rc = parse_long(name, v, 1, 4096, &n))) a->threads = (int)n;
    } else if (!strcmp(name, "--top-k")) {
      if (!(rc = parse_long(name, v, 0, 1L << 30, &n))) a->opts.top_k = (int)n;
    } else if (!strcmp(name, "--seed")) {
      char *end;
      errno = 0;
      unsigned long long s = strtoull(v, &end, 10);
      if (!*v || *end || errno || v[0] == '-') rc = fail(2, "--seed must be a non-negative integer, got '%s'", v);
      a->opts.seed = s;
    } else if (!strcmp(name, "--temperature")) rc = parse_float(name, v, &a->opts.temperature);
    else if (!strcmp(name, "--top-p")) rc = parse_float(name, v, &a->opts.top_p);
    if (rc) return 2;
  }
  if (!a->checkpoint) return fail(2, "no checkpoint given (--checkpoint DIR; see --help)");
  if (!a->prompt) return fail(2, "no prompt given (--prompt TEXT; use --prompt \"\" to start a new document)");
  Error err = {0};
  if (sampler_options_validate(&a->opts, &err)) return fail(2, "%s", err.msg);
  return 0;
}

/* training.seq_len of the run config recorded in state.json, or 0. The
 * model saw no longer windows, so it is the natural context. */
static int recorded_seq_len(const char *ckpt_dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/state.json", ckpt_dir);
  char *text = NULL;
  if (file_read_text(path, "checkpoint state", (size_t)64 << 20, &text, NULL, NULL)) return 0;
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *seq = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "train_config"), "training"),
      "seq_len");
  int v = cJSON_IsNumber(seq) && seq->valuedouble >= 1 ? (int)seq->valuedouble : 0;
  cJSON_Delete(root);
  return v;
}

typedef struct Output {
  const Tokenizer *tok; /* NULL: byte-level */
  int32_t stop;
} Output;

static int write_token(void *user, int32_t id, Error *err) {
  const Output *o = user;
  if (id == o->stop) return 0;
  size_t len = 1;
  uint8_t byte = (uint8_t)id;
  const uint8_t *bytes = o->tok ? tok_token_bytes(o->tok, id, &len) : &byte;
  if (!bytes) return error_set(err, ERR_INTERNAL, "generated id %d names no token", (int)id);
  if (fwrite(bytes, 1, len, stdout) != len || fflush(stdout) != 0)
    return error_set(err, ERR_IO, "cannot write to stdout: %s", error_errno_text(errno));
  return 0;
}

typedef struct Session {
  ModelConfig cfg;
  Model model;
  int have_model;
  Tokenizer *tok;
  TokEncoder *enc;
  Sampler sampler;
  TokIds prompt;
  unsigned char *allowed;
} Session;

static void session_free(Session *s) {
  if (s->have_model) model_free(&s->model);
  tok_encoder_free(s->enc);
  tok_free(s->tok);
  sampler_free(&s->sampler);
  tok_ids_free(&s->prompt);
  free(s->allowed);
}

/* Encodes the prompt and fills the mask of ids the tokenizer can decode. */
static int prepare_tokens(Session *s, const char *prompt, Error *err) {
  const int V = s->cfg.vocab_size;
  if (!(s->allowed = calloc((size_t)V, 1))) return error_set(err, ERR_NOMEM, "out of memory");
  size_t plen = strlen(prompt);
  if (!s->tok) {
    if (V < 256)
      return error_set(err, ERR_CONFIG, "a byte-level tokenizer needs vocab_size >= 256, the model has %d", V);
    memset(s->allowed, 1, 256);
    if (!plen) return tok_ids_push(&s->prompt, '\n', err);
    for (size_t i = 0; i < plen; i++)
      if (tok_ids_push(&s->prompt, (uint8_t)prompt[i], err)) return err->code;
    return 0;
  }
  if (tok_vocab_size(s->tok) > V)
    return error_set(err, ERR_CONFIG, "the tokenizer has ids up to %d but the model's vocab_size is %d",
                     tok_vocab_size(s->tok) - 1, V);
  for (int32_t id = 0; id < tok_vocab_size(s->tok); id++) {
    size_t n;
    s->allowed[id] = tok_token_bytes(s->tok, id, &n) != NULL;
  }
  if (!plen) {
    int32_t eot = tok_eot_id(s->tok);
    if (eot < 0) return error_set(err, ERR_ARG, "the prompt is empty and the tokenizer has no %s token", TOK_EOT);
    return tok_ids_push(&s->prompt, eot, err);
  }
  int rc = tok_encoder_new(&s->enc, s->tok, err);
  return rc ? rc : tok_encode(s->enc, (const uint8_t *)prompt, plen, 0, &s->prompt, err);
}

int cmd_sample(int argc, char **argv) {
  SampleArgs a;
  int pr = parse_args(argc, argv, &a);
  if (pr) return pr == 1 ? 0 : 2;
  omp_set_num_threads(a.threads);
  openblas_set_num_threads(a.threads);
  Error err = {0};
  Session s;
  memset(&s, 0, sizeof s);
  char dir[4096], tokenizer[4096];
  int step = 0, rc = checkpoint_resolve(a.checkpoint, dir, sizeof dir, &err);
  /* With --tokenizer the checkpoint's own copy is neither needed nor checked. */
  if (!rc)
    rc = checkpoint_read_model_config(dir, &s.cfg, a.tokenizer ? NULL : tokenizer, sizeof tokenizer, &step, &err);
  if (rc) return fail(1, "%s", err.msg);
  if (a.tokenizer) snprintf(tokenizer, sizeof tokenizer, "%s", a.tokenizer);
  if (strcmp(tokenizer, CHECKPOINT_BYTE_LEVEL) != 0 && (rc = tok_load_json(&s.tok, tokenizer, &err)))
    error_wrap(&err, "loading the tokenizer (--tokenizer FILE overrides the checkpoint's)");

  const int max_ctx = s.cfg.max_position_embeddings;
  int context = a.context;
  if (!rc && context > max_ctx)
    rc = error_set(&err, ERR_ARG, "--context %d exceeds the model's max_position_embeddings %d", context, max_ctx);
  if (!context) context = recorded_seq_len(dir);
  if (!context || context > max_ctx) context = max_ctx;
  if (!rc && !(rc = model_create(&s.model, &s.cfg, 1, context, &err))) s.have_model = 1;
  if (!rc) rc = net_transformer_load_weights(dir, &s.model, &err);
  if (!rc) rc = prepare_tokens(&s, a.prompt, &err);
  if (!rc) rc = sampler_init(&s.sampler, s.cfg.vocab_size, &a.opts, &err);
  if (!rc) rc = sampler_set_allowed(&s.sampler, s.allowed, &err);
  if (rc) {
    session_free(&s);
    return fail(1, "%s", err.msg);
  }

  Output out = {s.tok, s.tok ? tok_eot_id(s.tok) : -1};
  if (a.echo && fputs(a.prompt, stdout) == EOF) rc = error_set(&err, ERR_IO, "cannot write to stdout");
  fflush(stdout);
  SampleRequest req = {s.prompt.ids, (int)s.prompt.n, a.max_tokens, context, out.stop, write_token, &out,
                       a.no_kv_cache};
  int generated = 0;
  double t0 = timer_now();
  if (!rc) rc = sampler_generate(&s.model, &s.sampler, &req, &generated, &err);
  double secs = timer_now() - t0;
  fputc('\n', stdout);
  fflush(stdout);
  if (!rc)
    fprintf(stderr,
            "sample: %d tokens in %.1f s (%.1f tokens/s) | checkpoint %s (step %d) | prompt %zu tokens, "
            "context %d%s | temperature %g, top-k %d, top-p %g, seed %llu\n",
            generated, secs, secs > 0 ? generated / secs : 0.0, dir, step, s.prompt.n, context,
            a.no_kv_cache ? " (no kv cache)" : "",
            (double)a.opts.temperature, a.opts.top_k, (double)a.opts.top_p, (unsigned long long)a.opts.seed);
  session_free(&s);
  return rc ? fail(1, "%s", err.msg) : 0;
}
