/* `fivefold export --format hf --checkpoint DIR --out DIR`: writes a
 * Hugging Face model directory (train/export_hf.h; docs/export.md). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cmd_export.h"
#include "train/export_hf.h"

static void export_help(FILE *f) {
  fprintf(f,
          "usage: fivefold export --format hf --checkpoint DIR --out DIR [--tokenizer FILE]\n\n"
          "Writes a trained model as a Hugging Face model directory: config.json\n"
          "(LlamaForCausalLM for dense models, MixtralForCausalLM for MoE models), model.safetensors\n"
          "(float32, Hugging Face tensor names) and tokenizer.json. MoE features Mixtral lacks (a\n"
          "shared expert, dense layers between MoE layers, sigmoid routing, capacity factors, scaled\n"
          "or unnormalised routing weights) are refused with a list of what cannot be represented.\n"
          "See docs/export.md.\n\n"
          "options:\n"
          "  --format hf          the output format (only 'hf' so far)\n"
          "  --checkpoint DIR     a checkpoint directory (step-NNNNNNNN) or a run directory (its newest\n"
          "                       valid checkpoint)\n"
          "  --out DIR            output directory (created if missing; its config.json,\n"
          "                       model.safetensors and tokenizer.json are replaced)\n"
          "  --tokenizer FILE     use this tokenizer.json (or 'byte-level') instead of the copy the\n"
          "                       checkpoint stores (which is checked against its recorded CRC-32)\n"
          "  -h, --help           show this help\n");
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fivefold export: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

int cmd_export(int argc, char **argv) {
  const char *format = NULL, *checkpoint = NULL, *out = NULL, *tokenizer = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      export_help(stdout);
      return 0;
    }
    const char **slot = !strcmp(a, "--format") ? &format
                        : !strcmp(a, "--checkpoint") ? &checkpoint
                        : !strcmp(a, "--out") ? &out
                        : !strcmp(a, "--tokenizer") ? &tokenizer
                        : NULL;
    if (!slot) return fail(2, "unknown option '%s' (see 'fivefold export --help')", a);
    if (i + 1 >= argc) return fail(2, "%s needs a value (see 'fivefold export --help')", a);
    *slot = argv[++i];
  }
  if (!format) return fail(2, "no format given (--format hf)");
  if (strcmp(format, "hf") != 0) return fail(2, "unknown format '%s' (supported: hf)", format);
  if (!checkpoint) return fail(2, "no checkpoint given (--checkpoint DIR)");
  if (!out) return fail(2, "no output directory given (--out DIR)");
  Error err = {0};
  ExportHfInfo info;
  if (export_hf_checkpoint_with_tokenizer(checkpoint, tokenizer, out, &info, &err)) return fail(1, "%s", err.msg);
  printf("export: %s (step %d) -> %s/ as %s: config.json, model.safetensors (%d tensors, %zu parameters, "
         "float32), tokenizer.json\n",
         info.checkpoint, info.step, out, info.architecture, info.num_tensors, info.num_params);
  return 0;
}
