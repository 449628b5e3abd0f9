/* Private to src/model: the sizes one rank holds (ShardDims), the
 * validation of a shard, and the builder of the parameter table
 * (model_table.c). */
#ifndef FIVEFOLD_MODEL_MODEL_TABLE_H
#define FIVEFOLD_MODEL_MODEL_TABLE_H

#include <stddef.h>

#include "model/model.h"
#include "model/model_internal.h"

typedef struct ShardDims {
  int t, r;          /* TP size and rank */
  int D;             /* head dim */
  int Hq, q_head0;   /* local query heads, first global one */
  int Hkv, kv_head0; /* local KV heads, first global one */
  int kv_ranks;      /* TP ranks holding the same KV heads (1: split) */
  int F;             /* local dense FFN */
  int V, vocab0;     /* local vocabulary rows, first global one */
  int embedding_here; /* some chunk of this rank holds the embedding */
  int cp, cp_rank;    /* context parallelism (sizes >= 1) */
  int ep, ep_rank, etp, etp_rank;
  int dispatcher;     /* MODEL_MOE_ALLTOALL / MODEL_MOE_ALLGATHER */
  int moe_folded;     /* MoE layers run a dispatcher of moe_dispatch_ep.h (ep*etp > 1 or cp > 1) */
  int El, Fl;         /* local experts, local expert FFN */
} ShardDims;

/* ERR_CONFIG naming what does not divide or does not fit. */
int model_shard_dims(const ModelConfig *cfg, const ModelShard *shard, ShardDims *dims, Error *err);

typedef struct TableBuilder {
  ParamTensor *t; /* NULL: only count */
  int n;
  size_t total;
  const ShardDims *dims;
} TableBuilder;

typedef struct TableChunk {
  size_t embed, final_norm, lm_head; /* NO_TENSOR when absent */
  size_t param_begin, param_end;
  size_t pos_embed, final_norm_bias; /* GPT-2 */
} TableChunk;

/* Lays out the shard's tensors chunk by chunk; with lt / chunks non-NULL
 * also records each block's offsets ([num_layers]) and each chunk's
 * ([num_chunks]). */
void model_build_table(const ModelConfig *cfg, const ModelShard *shard, TableBuilder *b, LayerTensors *lt,
                       TableChunk *chunks);

#endif
