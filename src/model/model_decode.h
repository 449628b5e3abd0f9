/* Generation with a key/value cache: the keys and values of every layer for
 * the positions seen so far, so that each new token costs one position's
 * forward (its q/k/v, attention over the cached keys, its MLP) instead of
 * a forward over the whole context.
 *
 *   ModelKvCache kv;
 *   model_kv_cache_create(&kv, &model, err);      // capacity: model.max_T positions
 *   model_decode(&model, &kv, prompt, n, logits, err);   // prefill, logits of the last
 *   model_decode(&model, &kv, &next, 1, logits, err);    // one more position
 *   model_kv_cache_reset(&kv);                    // start again at position 0
 *
 * Capacity: max_T positions (GPT-2: at most n_positions).
 * Positions are 0, 1, ... in cache order (RoPE angles or GPT-2's learned
 * position rows), so the logits equal model_logits over the cached tokens
 * (to float rounding: GEMMs over fewer rows sum in another order). GQA
 * caches only the KV heads. The cache needs a whole-model shard (tp, cp,
 * ep and etp 1, as model_logits) and dropless routing: a capacity factor
 * makes a token's expert depend on the other tokens of the forward, which
 * a one-position forward cannot reproduce (model_kv_cache_supported says
 * why not). What to do when the cache is full is the caller's rule
 * (the sampler keeps the newest half and recomputes, src/train/sampler.h). */
#ifndef FIVEFOLD_MODEL_MODEL_DECODE_H
#define FIVEFOLD_MODEL_MODEL_DECODE_H

#include "base/error.h"
#include "model/model.h"

typedef struct ModelKvCache {
  int capacity; /* positions (the model's max_T) */
  int len;      /* positions cached */
  int L, KVD;   /* layers, floats of one position's keys (Hkv * D) */
  float *k, *v; /* [L, capacity, KVD] */
  int *pos;     /* [capacity] scratch: the positions of a forward's rows */
} ModelKvCache;

/* 0 when m can decode with a cache; else ERR_ARG saying why not. */
int model_kv_cache_supported(const Model *m, Error *err);

int model_kv_cache_create(ModelKvCache *c, const Model *m, Error *err);
void model_kv_cache_free(ModelKvCache *c);
void model_kv_cache_reset(ModelKvCache *c);

/* Runs tokens[0..n) at positions len..len+n-1, appends their keys and
 * values, and writes the logits [V] of the last one. ERR_ARG when the
 * cache would overflow (len + n > capacity) or a token is outside the
 * vocabulary. Uses the model's activation buffers (chunk 0, slot 0): not
 * concurrently with a training forward. */
int model_decode(Model *m, ModelKvCache *c, const int *tokens, int n, float *logits, Error *err);

#endif
