/* `fivefold tokenize`: text files -> token shards DIR/train.bin and
 * DIR/val.bin, with one of three tokenizers:
 *   --byte-level      one token per byte (vocab 256); the validation split
 *                     is the last --val-fraction of the concatenated text,
 *                     moved back to the start of a line;
 *   --vocab-size N    trains a byte-level BPE tokenizer (src/tok) on the
 *                     train parts, saves DIR/tokenizer.json and encodes;
 *   --tokenizer FILE  encodes with an existing tokenizer.json.
 * The BPE modes split every file on its own (its tail after a newline is
 * validation) and mark each document start with <|endoftext|>, as
 * tok_encode_files defines. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/options.h"
#include "cli/cli.h"
#include "train/metrics.h"
#include "tok/tokenizer.h"
#include "data/token_shard.h"

typedef struct TextEncoder {
  const char *name;
  uint32_t vocab_size;
  /* Appends the tokens of text[0, n) to the shard. */
  int (*encode)(const struct TextEncoder *enc, const unsigned char *text, size_t n, TokenShardWriter *w, Error *err);
} TextEncoder;

static int encode_bytes(const TextEncoder *enc, const unsigned char *text, size_t n, TokenShardWriter *w,
                        Error *err) {
  (void)enc;
  uint32_t buf[16384];
  for (size_t done = 0; done < n;) {
    size_t k = n - done < 16384 ? n - done : 16384;
    for (size_t i = 0; i < k; i++) buf[i] = text[done + i];
    int rc = token_shard_writer_append(w, buf, k, err);
    if (rc) return rc;
    done += k;
  }
  return 0;
}

static void tokenize_help(FILE *f) {
  fprintf(f,
          "usage: fivefold tokenize (--byte-level | --vocab-size N | --tokenizer FILE)\n"
          "                         --input FILE... --out DIR [--val-fraction X]\n\n"
          "Turns text files into DIR/train.bin and DIR/val.bin token shards.\n\n"
          "tokenizers (choose one):\n"
          "  --byte-level             one token per byte (vocab 256). The inputs are concatenated and the\n"
          "                           last fraction (from a line start) is validation text\n"
          "  --vocab-size N           train a byte-level BPE tokenizer of N ids (256 bytes, merges and\n"
          "                           <|endoftext|>; N >= 257) on the training text, save it as\n"
          "                           DIR/tokenizer.json, and encode with it\n"
          "  --tokenizer FILE         encode with an existing tokenizer.json (byte-level BPE)\n"
          "                           With a BPE tokenizer each file is split on its own: its tail after\n"
          "                           the first newline past (1 - X) of its length is validation text,\n"
          "                           and every part starts with <|endoftext|>\n\n"
          "options:\n"
          "  --input FILE...          text files, read in the order given (one or more)\n"
          "  --out DIR                output directory (created if missing)\n"
          "  --val-fraction X         fraction of the text for validation, 0 <= X < 1 (default 0.05;\n"
          "                           0 writes no val.bin)\n"
          "  -h, --help               show this help\n");
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fivefold tokenize: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}


static int write_shard(const TextEncoder *enc, const char *path, const unsigned char *text, size_t n,
                       uint64_t *count, Error *err) {
  TokenShardWriter w;
  int rc = token_shard_writer_open(&w, path, enc->vocab_size, err);
  if (rc) return rc;
  if ((rc = enc->encode(enc, text, n, &w, err))) {
    token_shard_writer_abort(&w);
    return rc;
  }
  *count = w.count;
  if ((rc = token_shard_writer_commit(&w, err))) token_shard_writer_abort(&w);
  return rc;
}

/* Without validation text, a val.bin left by an earlier run would pair old
 * tokens with the new train.bin. */
static void remove_stale_val(const char *out) {
  char path[4200];
  snprintf(path, sizeof path, "%s/val.bin", out);
  if (unlink(path) == 0) printf("tokenize: removed the old %s (no validation text this time)\n", path);
}

static int write_ids(const char *out, const char *name, const TokIds *ids, uint32_t vocab, Error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", out, name);
  /* Ids are non-negative int32, which share uint32's representation. */
  return token_shard_write(path, (const uint32_t *)ids->ids, ids->n, vocab, err);
}

/* --vocab-size N (train) or --tokenizer FILE (load), then encode and write. */
static int tokenize_bpe(const char **inputs, int n_inputs, size_t total_bytes, int vocab_size, const char *tok_path,
                        const char *out, double val_fraction) {
  Error err = {0};
  Tokenizer *tok = NULL;
  TokIds train = {0}, val = {0};
  int rc;
  if (tok_path) {
    rc = tok_load_json(&tok, tok_path, &err);
    if (!rc) rc = tok_encode_files(tok, inputs, n_inputs, val_fraction, &train, &val, &err);
  } else {
    rc = tok_train_and_encode_files(inputs, n_inputs, vocab_size, val_fraction, out, &tok, &train, &val, &err);
  }
  uint32_t vocab = tok ? (uint32_t)tok_vocab_size(tok) : 0;
  if (!rc) rc = write_ids(out, "train.bin", &train, vocab, &err);
  if (!rc && val.n) rc = write_ids(out, "val.bin", &val, vocab, &err);
  if (!rc && !val.n) remove_stale_val(out);
  if (!rc) {
    char a[32], b[32], c[32];
    printf("tokenize: %d file(s), %s bytes -> %s/train.bin %s tokens", n_inputs,
           fmt_thousands(a, sizeof a, (double)total_bytes), out, fmt_thousands(b, sizeof b, (double)train.n));
    if (val.n) printf(", %s/val.bin %s tokens", out, fmt_thousands(c, sizeof c, (double)val.n));
    if (tok_path) printf(" (BPE %s, vocab %u)\n", tok_path, vocab);
    else printf(" (BPE, vocab %u, %d merges; tokenizer %s/tokenizer.json)\n", vocab, tok_num_merges(tok), out);
    if (vocab_size > 0 && (int)vocab < vocab_size)
      printf("tokenize: the text ran out of pairs to merge: vocab %u instead of %d\n", vocab, vocab_size);
  }
  tok_ids_free(&train);
  tok_ids_free(&val);
  tok_free(tok);
  return rc ? fail(1, "%s", err.msg) : 0;
}

int cmd_tokenize(int argc, char **argv) {
  int byte_level = 0, vocab_size = 0;
  const char *out = NULL, *tokenizer = NULL;
  double val_fraction = 0.05;
  const char **inputs = calloc((size_t)argc, sizeof *inputs);
  int n_inputs = 0, code = 0;
  unsigned char *text = NULL;
  if (!inputs) return fail(1, "out of memory");
  static const char *const KNOWN[] = {"--byte-level", "--input", "--out", "--val-fraction",
                                      "--vocab-size", "--tokenizer", "--help"};
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "tokenize", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (!code && option_next(&op)) {
    const char *v = NULL;
    if (option_is_help(&op)) {
      tokenize_help(stdout);
      free(inputs);
      return 0;
    } else if (option_is(&op, "--byte-level")) {
      if (option_switch(&op, &perr)) code = fail(2, "%s", perr.msg);
      byte_level = 1;
    } else if (option_is(&op, "--input")) {
      /* A list: --input=A counts A as the first file, then the arguments up to the next option. */
      if (op.inline_value && op.inline_value[0]) inputs[n_inputs++] = op.inline_value;
      const char **more;
      int n_more = 0;
      option_values_until_option(&op, &more, &n_more);
      for (int k = 0; k < n_more; k++) inputs[n_inputs++] = more[k];
      if (n_inputs == 0) code = fail(2, "--input needs one or more files");
    } else if (option_is(&op, "--out")) {
      if (option_value(&op, &out, &perr)) code = fail(2, "%s", perr.msg);
    } else if (option_is(&op, "--val-fraction")) {
      char *end;
      if (option_value(&op, &v, &perr)) v = "";
      val_fraction = strtod(v, &end);
      if (!*v || *end || !(val_fraction >= 0 && val_fraction < 1))
        code = fail(2, "--val-fraction must be a number with 0 <= X < 1, got '%s'", v);
    } else if (option_is(&op, "--vocab-size")) {
      char *end;
      if (option_value(&op, &v, &perr)) v = "";
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 257 || n > TOK_MAX_ID)
        code = fail(2, "--vocab-size must be an integer in 257..%d (256 bytes + merges + <|endoftext|>), got '%s'",
                    TOK_MAX_ID, v);
      vocab_size = (int)n;
    } else if (option_is(&op, "--tokenizer")) {
      if (option_value(&op, &tokenizer, &perr)) code = fail(2, "%s", perr.msg);
    } else {
      option_unknown(&op, &perr);
      code = fail(2, "%s", perr.msg);
    }
  }
  if (!code && byte_level + (vocab_size > 0) + (tokenizer != NULL) != 1)
    code = fail(2, "choose exactly one tokenizer: --byte-level, --vocab-size N (train BPE) or --tokenizer FILE "
                   "(see --help)");
  if (!code && !n_inputs) code = fail(2, "no input files (--input FILE...)");
  if (!code && !out) code = fail(2, "no output directory (--out DIR)");

  /* Check every input before reading any, so a typo in the last of many
   * files fails at once. */
  size_t total = 0;
  for (int i = 0; i < n_inputs && !code; i++) {
    struct stat st;
    if (stat(inputs[i], &st) != 0) code = fail(1, "cannot read input %s: %s", inputs[i], error_errno_text(errno));
    else if (!S_ISREG(st.st_mode)) code = fail(1, "input %s is not a regular file", inputs[i]);
    else total += (size_t)st.st_size;
  }
  if (!code && total == 0) code = fail(1, "the input files are empty (expected text)");
  if (!code) {
    Error err = {0};
    if (fs_mkdir_p(out, &err)) code = fail(1, "%s", err.msg);
  }
  if (!code && !byte_level) {
    code = tokenize_bpe(inputs, n_inputs, total, vocab_size, tokenizer, out, val_fraction);
    free(inputs);
    return code;
  }
  if (!code && !(text = malloc(total))) code = fail(1, "out of memory for %zu bytes of text", total);
  size_t len = 0;
  for (int i = 0; i < n_inputs && !code; i++) {
    FILE *f = fopen(inputs[i], "rb");
    if (!f) {
      code = fail(1, "cannot open %s: %s", inputs[i], error_errno_text(errno));
      break;
    }
    size_t got;
    while (len < total && (got = fread(text + len, 1, total - len, f)) > 0) len += got;
    if (ferror(f)) code = fail(1, "cannot read %s: %s", inputs[i], error_errno_text(errno));
    fclose(f);
  }

  if (!code) {
    TextEncoder enc = {"byte-level", 256, encode_bytes};
    size_t split = len - (size_t)((double)len * val_fraction);
    /* Validation starts at a line start when there is one nearby. */
    if (split < len) {
      size_t s = split;
      while (s > 0 && text[s - 1] != '\n' && split - s < 4096) s--;
      if (s > 0 && text[s - 1] == '\n') split = s;
    }
    char path[4200];
    uint64_t n_train = 0, n_val = 0;
    Error err = {0};
    snprintf(path, sizeof path, "%s/train.bin", out);
    int rc = write_shard(&enc, path, text, split, &n_train, &err);
    if (!rc && val_fraction > 0) {
      snprintf(path, sizeof path, "%s/val.bin", out);
      rc = write_shard(&enc, path, text + split, len - split, &n_val, &err);
    } else if (!rc) {
      remove_stale_val(out);
    }
    if (rc) {
      code = fail(1, "%s", err.msg);
    } else {
      char a[32], b[32], c[32];
      printf("tokenize: %d file(s), %s bytes -> %s/train.bin %s tokens", n_inputs,
             fmt_thousands(a, sizeof a, (double)len), out, fmt_thousands(b, sizeof b, (double)n_train));
      if (val_fraction > 0) printf(", %s/val.bin %s tokens", out, fmt_thousands(c, sizeof c, (double)n_val));
      printf(" (%s, vocab %u)\n", enc.name, enc.vocab_size);
    }
  }
  free(text);
  free(inputs);
  return code;
}
