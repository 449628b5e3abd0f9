/* `fivefold import --format hf --model DIR --out RUN`: reads a Hugging Face
 * model directory into a fivefold run directory (convert/import_hf.h;
 * docs/export.md). */
#include <stdio.h>

#include "base/alloc.h"
#include "cli/cmd_export.h"
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

int cmd_import(int argc, char **argv) {
  CliHfOptions o;
  int code = cli_hf_options(argc, argv, "import", "--model", "model directory", import_help, &o);
  if (code >= 0) return code;
  Error err = {0};
  ImportHfInfo info;
  if (import_hf_directory(o.source, o.out, o.tokenizer, &info, &err)) return cli_fail("import", 1, "%s", err.msg);
  printf("import: %s (%s, %d tensor%s in %d file%s, %s) -> %s: %zu parameters, float32\n", o.source,
         info.architecture, info.num_tensors, info.num_tensors == 1 ? "" : "s", info.num_files,
         info.num_files == 1 ? "" : "s", info.dtypes, info.checkpoint, info.num_params);
  printf("import: run config %s; tokenizer %s; peak resident memory %.1f MB\n", info.run_config, info.tokenizer,
         (double)alloc_peak_rss_bytes() / 1e6);
  printf("import: continue with: fivefold train --config %s --resume --train-data FILES [--val-data FILES]\n",
         info.run_config);
  return 0;
}
