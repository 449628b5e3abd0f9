/* Import of a Hugging Face model directory as a fivefold run directory:
 * the way in for a model trained elsewhere (Llama, Mistral, Qwen2, Mixtral,
 * Qwen2-MoE, GPT-2), to be fine-tuned, upcycled, sampled or exported again.
 * docs/export.md describes both directions.
 *
 * The directory holds config.json, the weights as model.safetensors or as
 * shards model-0000N-of-0000M.safetensors listed by
 * model.safetensors.index.json ("weight_map": tensor -> shard file), in
 * F32, F16 or BF16, and tokenizer.json when the model has one. Tensor names
 * and layouts are those of convert/hf_layout.h (the same table export
 * writes), so export -> import gives back every tensor bit for bit.
 *
 * What fivefold cannot represent is refused before anything is written,
 * with every reason in one message: config.json fields the model config
 * refuses (each named), an unsupported architecture or model_type, tensors
 * that have no place in the model (each named with its file), expected
 * tensors that are absent, shapes and dtypes that do not match, a non-zero
 * Qwen2-MoE shared-expert gate. Memory stays bounded: weights are read one
 * tensor at a time from the files into the model's single float32 buffer
 * (plus one tensor of scratch), never a second copy of the model. */
#ifndef FIVEFOLD_CONVERT_IMPORT_HF_H
#define FIVEFOLD_CONVERT_IMPORT_HF_H

#include <stddef.h>

#include "base/error.h"
#include "ckpt/checkpoint.h"
#include "model/config.h"

/* The run configuration written next to the checkpoint. */
#define IMPORT_RUN_CONFIG "run.json"

/* Reads DIR/config.json into a fivefold model config. *architecture gets
 * the HF class name it stands for. ERR_CONFIG lists every field (and an
 * unknown architecture) that cannot be represented. */
int import_hf_model_config(const char *model_dir, ModelConfig *cfg, const char **architecture, Error *err);

typedef struct ImportHfInfo {
  char checkpoint[CHECKPOINT_PATH_MAX]; /* out/checkpoints/step-00000000 */
  char run_config[CHECKPOINT_PATH_MAX]; /* out/run.json */
  char tokenizer[CHECKPOINT_PATH_MAX];  /* "byte-level" or the tokenizer.json imported */
  const char *architecture;
  ModelConfig model;
  int num_files;   /* safetensors files read */
  int num_tensors; /* HF tensors read */
  char dtypes[32]; /* the stored dtypes seen, "BF16" or "F32+BF16" */
  size_t num_params;
} ImportHfInfo;

/* The whole `fivefold import --format hf`: reads model_dir and writes
 * out_dir as a run directory (out_dir must not hold checkpoints yet):
 *   out_dir/checkpoints/step-00000000/  the weights, zero AdamW moments, step 0
 *   out_dir/run.json                    a run config with the imported model,
 *                                       the default training settings, the
 *                                       tokenizer and "out": out_dir (no data:
 *                                       give --train-data / --val-data)
 * `tokenizer` NULL: DIR/tokenizer.json when present (it must load as
 * fivefold's byte-level BPE), else byte-level; or a tokenizer.json path, or
 * "byte-level". info may be NULL. */
int import_hf_directory(const char *model_dir, const char *out_dir, const char *tokenizer, ImportHfInfo *info,
                        Error *err);

#endif
