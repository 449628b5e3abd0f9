/* Export of a checkpoint as a Hugging Face model directory (config.json,
 * model.safetensors, tokenizer.json) that the transformers Llama / Qwen2
 * (dense), Mixtral / Qwen2-MoE (MoE) or GPT-2 classes load without
 * conversion code. The tensor names and layouts are the table of
 * convert/hf_layout.h, which import reads back; docs/export.md is the
 * user-facing description: names, layouts, what cannot be represented.
 * RoPE needs no permutation of wq / wk: fivefold rotates in HF's
 * rotate_half convention already. Every tensor is written as F32. */
#ifndef FIVEFOLD_CONVERT_EXPORT_HF_H
#define FIVEFOLD_CONVERT_EXPORT_HF_H

#include "base/error.h"
#include "model/config.h"
#include "model/model.h"
#include "tok/tokenizer.h"

typedef struct cJSON cJSON;

/* 0 when the model maps onto one of the Hugging Face classes
 * (hf_family_for_model); otherwise ERR_CONFIG with a message that lists
 * every feature that has no HF equivalent. */
int export_hf_check(const ModelConfig *cfg, Error *err);

/* The HF config.json object for cfg (call export_hf_check first).
 * bos_id / eos_id < 0 are written as null. */
cJSON *export_hf_config_json(const ModelConfig *cfg, int bos_id, int eos_id);

/* A tokenizer with the 256 byte tokens (byte b = id b), no merges and no
 * special tokens: the exact tokenizer of a byte-level model. */
int export_hf_byte_level_tokenizer(Tokenizer **out, Error *err);

/* Writes out_dir/config.json, model.safetensors and tokenizer.json for a
 * model holding trained weights. `tokenizer` is "byte-level" or the path of
 * the tokenizer.json the model was trained with (copied verbatim after it
 * loads). out_dir is created when missing; existing files are replaced
 * atomically. */
int export_hf_write(const Model *m, const char *tokenizer, const char *out_dir, Error *err);

typedef struct ExportHfInfo {
  char checkpoint[4096]; /* the resolved checkpoint directory */
  int step;
  const char *architecture; /* "LlamaForCausalLM", "MixtralForCausalLM", "GPT2LMHeadModel", ... */
  size_t num_params;
  int num_tensors; /* in model.safetensors */
} ExportHfInfo;

/* The whole `fivefold export --format hf`: resolves the checkpoint (a step
 * directory or a run directory), reads its config, refuses unrepresentable
 * models before reading weights, loads them and writes out_dir. */
int export_hf_checkpoint(const char *checkpoint, const char *out_dir, ExportHfInfo *info, Error *err);
/* The same with the tokenizer given ("byte-level" or a tokenizer.json path)
 * instead of the checkpoint's stored one (NULL: the checkpoint's, checked
 * against its recorded CRC-32). */
int export_hf_checkpoint_with_tokenizer(const char *checkpoint, const char *tokenizer, const char *out_dir,
                                        ExportHfInfo *info, Error *err);

#endif
