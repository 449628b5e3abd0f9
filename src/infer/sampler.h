/* Text generation from a trained model: picking the next token from logits
 * (temperature, top-k, top-p / nucleus filtering, drawn with the
 * counter-based RNG so a seed reproduces a sample exactly) and the
 * token-by-token generation loop behind `fivefold sample`.
 *
 * Filtering follows the usual order: logits / temperature -> softmax ->
 * keep the top_k most probable -> keep the smallest most-probable prefix
 * whose probability reaches top_p -> renormalise -> draw one token.
 * Ties in probability are ordered by the lower id, so the filtered set and
 * the draw never depend on sort stability. Temperature 0 means greedy
 * decoding (the argmax, lowest id on ties), which draws no random number.
 *
 * The generation loop keeps a key/value cache (model/model_decode.h): the
 * prompt's last `context` tokens are run once, then each new token costs one
 * position's forward. When the cache holds `context` positions and another
 * token comes, the newest (context + 1) / 2 tokens are kept, run again from
 * position 0 into an emptied cache, and generation goes on: a recomputation
 * every context / 2 tokens instead of every token. Until the text outgrows
 * the context both paths see the same tokens at the same positions, so they
 * pick the same tokens (up to float rounding in near ties).
 * SampleRequest.no_kv_cache (`fivefold sample --no-kv-cache`), and models
 * the cache cannot serve (an expert capacity factor), re-run the model over
 * the whole window for every token instead; that window is the last
 * `context` tokens, so positions restart at 0 once the text outgrows it. */
#ifndef FIVEFOLD_INFER_SAMPLER_H
#define FIVEFOLD_INFER_SAMPLER_H

#include <stdint.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/model.h"

typedef struct SamplerOptions {
  float temperature; /* >= 0; 0: greedy */
  int top_k;         /* >= 0; 0: no top-k filter */
  float top_p;       /* in (0, 1]; 1: no nucleus filter */
  uint64_t seed;
} SamplerOptions;

typedef struct Sampler {
  SamplerOptions opts;
  int vocab_size;
  Rng rng;                /* one uniform per non-greedy pick */
  unsigned char *allowed; /* [V] 1 = may be picked; NULL = every id */
  struct SamplerCandidate *cand; /* scratch [V] */
} Sampler;

/* temperature 0.8, top_k 0, top_p 0.95, seed 1337 (what `fivefold sample`
 * uses without flags). */
void sampler_options_default(SamplerOptions *o);
/* Names the offending option ("temperature", "top_k", "top_p"). */
int sampler_options_validate(const SamplerOptions *o, Error *err);

int sampler_init(Sampler *s, int vocab_size, const SamplerOptions *o, Error *err);
void sampler_free(Sampler *s);

/* Restricts picks to ids with allowed[id] != 0 (copied; NULL lifts the
 * restriction). Used to keep the model from emitting ids its tokenizer
 * cannot decode (a model vocabulary padded past the tokenizer's). At least
 * one id must stay allowed. */
int sampler_set_allowed(Sampler *s, const unsigned char *allowed, Error *err);

/* Next token for logits [vocab_size] (not modified). */
int32_t sampler_pick(Sampler *s, const float *logits);

/* Called with each generated token. A non-zero return is an error code (the
 * callback fills err) that ends generation; sampler_generate returns it. */
typedef int (*SamplerTokenFn)(void *user, int32_t token, Error *err);

typedef struct SampleRequest {
  const int32_t *prompt; /* at least one token */
  int n_prompt;
  int max_new_tokens;
  int context;       /* window length, 1..m->max_T */
  int32_t stop_token; /* generation ends after emitting it; -1: none */
  SamplerTokenFn on_token;
  void *user;
  int no_kv_cache; /* 1: no key/value cache (the whole window per token) */
} SampleRequest;

/* Generates up to max_new_tokens tokens after the prompt with a B = 1 model
 * (m->max_T >= context). *n_generated (may be NULL) receives how many were
 * produced, the stop token included. */
int sampler_generate(Model *m, Sampler *s, const SampleRequest *req, int *n_generated, Error *err);

#endif
