/* The correspondence between fivefold's parameter tensors and the tensors of
 * a Hugging Face model directory, for the four families both directions
 * know: Llama (LlamaForCausalLM; Qwen2ForCausalLM when the model has q/k/v
 * biases only), Mixtral (MixtralForCausalLM), Qwen2-MoE
 * (Qwen2MoeForCausalLM) and GPT-2 (GPT2LMHeadModel). Export and import
 * walk the same table, so what one writes the other reads back bit for bit.
 *
 * A table entry ("piece") says: elements [hf_first, hf_first + count) of
 * the HF tensor, or for a transposed piece the column block [hf_col0,
 * hf_col0 + rows) of a 2-D HF tensor [cols, hf_width], correspond to
 * fivefold's tensor `ours` at element offset `ours_offset` (rows x cols,
 * [out, in]). Transposed pieces are GPT-2's Conv1D weights, which HF
 * stores [in, out]; its fused c_attn splits into wq, wk, wv by columns.
 * One HF tensor may be made of several pieces (gate_proj / up_proj share
 * w_gate_up; c_attn feeds three tensors); `scale` is the power of two a
 * value is multiplied by on the way to HF (Qwen2-MoE's gated shared
 * expert, see hf_layout.c), so both directions are exact. The pieces of
 * one HF tensor are consecutive in the table, and every element of an HF
 * tensor belongs to exactly one piece. */
#ifndef FIVEFOLD_CONVERT_HF_LAYOUT_H
#define FIVEFOLD_CONVERT_HF_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/safetensors.h"
#include "model/config.h"
#include "model/model.h"

typedef enum { HF_LLAMA = 0, HF_QWEN2, HF_MIXTRAL, HF_QWEN2_MOE, HF_GPT2 } HfFamily;

/* "LlamaForCausalLM", ... and the matching model_type ("llama", ...). */
const char *hf_family_architecture(HfFamily f);
const char *hf_family_model_type(HfFamily f);

/* The HF family a fivefold model is written as; ERR_CONFIG listing every
 * feature no family represents (export's refusal). */
int hf_family_for_model(const ModelConfig *cfg, HfFamily *family, Error *err);

typedef struct HfPiece {
  char hf[SAFETENSORS_MAX_NAME];
  int hf_ndim;
  int64_t hf_shape[2];
  char ours[96];
  size_t ours_offset; /* elements into fivefold's tensor */
  int rows, cols;     /* extent in fivefold's tensor ([rows, cols]; cols 0 for a vector) */
  uint64_t hf_first;  /* copied pieces: first element of the HF tensor */
  int transposed;     /* rows = HF columns [hf_col0, hf_col0 + rows) of an [cols, width] tensor */
  int hf_col0;
  float scale; /* HF value = ours * scale (1, or a power of two) */
} HfPiece;

typedef struct HfLayout {
  HfPiece *pieces;
  int n, cap;
  /* HF tensors that hold no fivefold value: they must be zero (Qwen2-MoE's
   * shared_expert_gate when fivefold's ungated shared expert is written). */
  HfPiece *zeros;
  int n_zeros, cap_zeros;
} HfLayout;

/* The table for cfg written as `family`. `prefix` is prepended to GPT-2
 * names ("transformer." as transformers saves them, or "" as the original
 * checkpoints store them); the other families always use "model.". */
int hf_layout_build(HfLayout *lay, const ModelConfig *cfg, HfFamily family, const char *gpt2_prefix, Error *err);
void hf_layout_free(HfLayout *lay);

/* Elements of a piece: rows * max(cols, 1). */
size_t hf_piece_numel(const HfPiece *p);

/* Moves one piece between an HF tensor's values (f32, its full layout) and
 * fivefold's tensor data (`ours` points at the tensor's first element). */
void hf_piece_to_hf(const HfPiece *p, const float *ours, float *hf);
void hf_piece_from_hf(const HfPiece *p, const float *hf, float *ours);

/* The model as export and import hold it: its config, the canonical tensor
 * table (model_global_tensors) and one float32 buffer, enough for
 * checkpoints to read or write. model_create would also allocate and touch
 * gradients and activations, a second full copy; calloc'd pages cost
 * nothing until tensors are read into them. */
int hf_table_model_create(Model *m, const ModelConfig *cfg, Error *err);
void hf_table_model_free(Model *m);

#endif
