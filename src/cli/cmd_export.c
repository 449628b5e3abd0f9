/* `fivefold export --format hf --checkpoint DIR --out DIR`: writes a
 * Hugging Face model directory (convert/export_hf.h; docs/export.md); and
 * the option parsing it shares with `fivefold import`. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/options.h"
#include "cli/cmd_export.h"
#include "convert/export_hf.h"

static void export_help(FILE *f) {
  fprintf(f,
          "usage: fivefold export --format hf --checkpoint DIR --out DIR [--tokenizer FILE]\n\n"
          "Writes a trained model as a Hugging Face model directory: config.json\n"
          "(LlamaForCausalLM for dense models, Qwen2ForCausalLM for dense models with q/k/v biases,\n"
          "MixtralForCausalLM for MoE models, Qwen2MoeForCausalLM for MoE models with q/k/v biases,\n"
          "GPT2LMHeadModel for GPT-2), model.safetensors (float32, Hugging Face tensor names and\n"
          "layouts) and tokenizer.json. MoE features neither Mixtral nor Qwen2-MoE has (sigmoid\n"
          "routing, capacity factors, scaled routing weights; a shared expert, dense layers between\n"
          "MoE layers or unnormalised routing weights without q/k/v biases) are refused with a list\n"
          "of what cannot be represented. `fivefold import` reads such a directory back.\n"
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

int cli_hf_options(int argc, char **argv, const char *command, const char *source_flag, const char *source_what,
                   void (*help)(FILE *), CliHfOptions *o) {
  memset(o, 0, sizeof *o);
  const char *known[] = {"--format", source_flag, "--out", "--tokenizer", "--help"};
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, command, argc, argv, known, (int)(sizeof known / sizeof known[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      help(stdout);
      return 0;
    }
    const char **slot = option_is(&op, "--format")      ? &o->format
                        : option_is(&op, source_flag)   ? &o->source
                        : option_is(&op, "--out")       ? &o->out
                        : option_is(&op, "--tokenizer") ? &o->tokenizer
                                                        : NULL;
    if (!slot) return cli_fail(command, 2, "%s", (option_unknown(&op, &err), err.msg));
    if (option_value(&op, slot, &err)) return cli_fail(command, 2, "%s", err.msg);
  }
  if (!o->format) return cli_fail(command, 2, "no format given (--format hf)");
  if (strcmp(o->format, "hf") != 0) return cli_fail(command, 2, "unknown format '%s' (supported: hf)", o->format);
  if (!o->source) return cli_fail(command, 2, "no %s given (%s DIR)", source_what, source_flag);
  if (!o->out) return cli_fail(command, 2, "no output directory given (--out DIR)");
  return -1;
}

int cmd_export(int argc, char **argv) {
  CliHfOptions o;
  int code = cli_hf_options(argc, argv, "export", "--checkpoint", "checkpoint", export_help, &o);
  if (code >= 0) return code;
  Error err = {0};
  ExportHfInfo info;
  if (export_hf_checkpoint_with_tokenizer(o.source, o.tokenizer, o.out, &info, &err))
    return cli_fail("export", 1, "%s", err.msg);
  printf("export: %s (step %d) -> %s/ as %s: config.json, model.safetensors (%d tensors, %zu parameters, "
         "float32), tokenizer.json\n",
         info.checkpoint, info.step, o.out, info.architecture, info.num_tensors, info.num_params);
  return 0;
}
