/* `fivefold import --format hf --model DIR --out RUN`: reads a Hugging Face
 * model directory into a fivefold run directory (convert/import_hf.h;
 * docs/export.md). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/options.h"
#include "cli/cmd_import.h"
#include "convert/import_hf.h"

static void import_help(FILE *f) {
  fprintf(f,
          "usage: fivefold import --format hf --model DIR --out RUN [--tokenizer FILE]\n\n"
          "Reads a Hugging Face model directory (config.json; model.safetensors, or shards\n"
          "model-0000N-of-0000M.safetensors with model.safetensors.index.json; F32, F16 or BF16;\n"
          "tokenizer.json when present) of a Llama, Mistral, Qwen2, Mixtral, Qwen2-MoE or GPT-2 model\n"
          "and writes RUN as a fivefold run directory: RUN/checkpoints/step-00000000 (the weights in\n"
          "float32, AdamW moments at zero) and RUN/run.json (the model, default training settings,\n"
          "the tokenizer, \"out\": RUN). Config fields and tensors fivefold cannot represent are\n"
          "refused, each one named. Weights are read one tensor at a time. Then, for example:\n"
          "  fivefold sample --checkpoint RUN --prompt \"...\"\n"
          "  fivefold upcycle --checkpoint RUN --experts 8 --topk 2 --out RUN-moe\n"
          "  fivefold train --config RUN/run.json --resume --train-data train.bin --steps N\n"
          "  fivefold export --format hf --checkpoint RUN --out DIR\n"
          "See docs/export.md.\n\n"
          "options:\n"
          "  --format hf          the input format (only 'hf' so far)\n"
          "  --model DIR          the Hugging Face model directory\n"
          "  --out RUN            the new run directory (must not hold checkpoints yet)\n"
          "  --tokenizer FILE     use this tokenizer.json (or 'byte-level') instead of DIR/tokenizer.json\n"
          "                       (default: DIR/tokenizer.json when present, else byte-level)\n"
          "  -h, --help           show this help\n");
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fivefold import: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

int cmd_import(int argc, char **argv) {
  const char *format = NULL, *model = NULL, *out = NULL, *tokenizer = NULL;
  static const char *const KNOWN[] = {"--format", "--model", "--out", "--tokenizer", "--help"};
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "import", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      import_help(stdout);
      return 0;
    }
    const char **slot = option_is(&op, "--format")      ? &format
                        : option_is(&op, "--model")     ? &model
                        : option_is(&op, "--out")       ? &out
                        : option_is(&op, "--tokenizer") ? &tokenizer
                                                        : NULL;
    if (!slot) return fail(2, "%s", (option_unknown(&op, &err), err.msg));
    if (option_value(&op, slot, &err)) return fail(2, "%s", err.msg);
  }
  if (!format) return fail(2, "no format given (--format hf)");
  if (strcmp(format, "hf") != 0) return fail(2, "unknown format '%s' (supported: hf)", format);
  if (!model) return fail(2, "no model directory given (--model DIR)");
  if (!out) return fail(2, "no output directory given (--out RUN)");
  ImportHfInfo info;
  if (import_hf_directory(model, out, tokenizer, &info, &err)) return fail(1, "%s", err.msg);
  printf("import: %s (%s, %d tensor%s in %d file%s, %s) -> %s: %zu parameters, float32\n", model, info.architecture,
         info.num_tensors, info.num_tensors == 1 ? "" : "s", info.num_files, info.num_files == 1 ? "" : "s",
         info.dtypes, info.checkpoint, info.num_params);
  printf("import: run config %s; tokenizer %s; peak resident memory %.1f MB\n", info.run_config, info.tokenizer,
         (double)alloc_peak_rss_bytes() / 1e6);
  printf("import: continue with: fivefold train --config %s --resume --train-data FILES [--val-data FILES]\n",
         info.run_config);
  return 0;
}
