/* Next-token sampling (temperature, top-k, top-p) and the generation loop;
 * see sampler.h for the exact filtering order and tie rules. */
#include "infer/sampler.h"

#include "model/model_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct SamplerCandidate {
  float p; /* unnormalised probability exp((logit - max) / temperature) */
  int32_t id;
} SamplerCandidate;

void sampler_options_default(SamplerOptions *o) {
  o->temperature = 0.8f;
  o->top_k = 0;
  o->top_p = 0.95f;
  o->seed = 1337;
}

int sampler_options_validate(const SamplerOptions *o, Error *err) {
  if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
    return error_set(err, ERR_ARG, "temperature must be a finite number >= 0 (0 = greedy), got %g",
                     (double)o->temperature);
  if (o->top_k < 0) return error_set(err, ERR_ARG, "top_k must be >= 0 (0 = off), got %d", o->top_k);
  if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
    return error_set(err, ERR_ARG, "top_p must be in (0, 1] (1 = off), got %g", (double)o->top_p);
  return 0;
}

int sampler_init(Sampler *s, int vocab_size, const SamplerOptions *o, Error *err) {
  memset(s, 0, sizeof *s);
  if (vocab_size < 1) return error_set(err, ERR_ARG, "sampler: vocab size must be >= 1, got %d", vocab_size);
  int rc = sampler_options_validate(o, err);
  if (rc) return rc;
  s->opts = *o;
  s->vocab_size = vocab_size;
  s->rng = rng_make(o->seed, rng_stream_id("sample"));
  s->cand = malloc((size_t)vocab_size * sizeof *s->cand);
  if (!s->cand) return error_set(err, ERR_NOMEM, "sampler: out of memory for %d candidates", vocab_size);
  return 0;
}

void sampler_free(Sampler *s) {
  free(s->cand);
  free(s->allowed);
  memset(s, 0, sizeof *s);
}

int sampler_set_allowed(Sampler *s, const unsigned char *allowed, Error *err) {
  free(s->allowed);
  s->allowed = NULL;
  if (!allowed) return 0;
  int any = 0;
  for (int i = 0; i < s->vocab_size && !any; i++) any = allowed[i] != 0;
  if (!any) return error_set(err, ERR_ARG, "sampler: the allowed-token mask excludes every id");
  s->allowed = malloc((size_t)s->vocab_size);
  if (!s->allowed) return error_set(err, ERR_NOMEM, "sampler: out of memory");
  memcpy(s->allowed, allowed, (size_t)s->vocab_size);
  return 0;
}

static int by_prob_desc(const void *a, const void *b) {
  const SamplerCandidate *x = a, *y = b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

int32_t sampler_pick(Sampler *s, const float *logits) {
  const int V = s->vocab_size;
  const unsigned char *ok = s->allowed;
  int32_t best = -1;
  for (int i = 0; i < V; i++)
    if ((!ok || ok[i]) && (best < 0 || logits[i] > logits[best])) best = i;
  if (s->opts.temperature == 0.0f || best < 0) return best < 0 ? 0 : best;

  /* Unnormalised probabilities relative to the best logit, so the largest
   * is exactly 1 and nothing overflows. */
  const double inv_t = 1.0 / (double)s->opts.temperature;
  const double top = logits[best];
  SamplerCandidate *c = s->cand;
  int n = 0;
  for (int i = 0; i < V; i++) {
    if (ok && !ok[i]) continue;
    float p = (float)exp(((double)logits[i] - top) * inv_t);
    if (p > 0.0f) c[n++] = (SamplerCandidate){p, i};
  }
  if (n == 0) return best; /* only with NaN logits: nothing to draw from */
  int keep = n;
  int top_k = s->opts.top_k;
  if ((top_k > 0 && top_k < n) || s->opts.top_p < 1.0f) {
    qsort(c, (size_t)n, sizeof *c, by_prob_desc);
    if (top_k > 0 && top_k < keep) keep = top_k;
    if (s->opts.top_p < 1.0f) {
      double total = 0;
      for (int i = 0; i < keep; i++) total += c[i].p;
      const double want = (double)s->opts.top_p * total;
      double cum = 0;
      int m = 0;
      while (m < keep) {
        cum += c[m++].p;
        if (cum >= want) break;
      }
      keep = m;
    }
  }
  double total = 0;
  for (int i = 0; i < keep; i++) total += c[i].p;
  const double u = rng_next_uniform(&s->rng) * total;
  double cum = 0;
  for (int i = 0; i < keep; i++) {
    cum += c[i].p;
    if (u < cum) return c[i].id;
  }
  return c[keep - 1].id; /* u within rounding of the total */
}

int sampler_generate(Model *m, Sampler *s, const SampleRequest *req, int *n_generated, Error *err) {
  if (n_generated) *n_generated = 0;
  const int V = m->cfg.vocab_size;
  if (s->vocab_size != V)
    return error_set(err, ERR_ARG, "sampler: vocab size %d does not match the model's %d", s->vocab_size, V);
  if (req->n_prompt < 1 || !req->prompt)
    return error_set(err, ERR_ARG, "sampler: the prompt must hold at least one token");
  if (req->context < 1 || req->context > m->max_T)
    return error_set(err, ERR_ARG, "sampler: context %d must be in 1..%d (the model's sequence buffers)", req->context,
                     m->max_T);
  if (req->max_new_tokens < 0)
    return error_set(err, ERR_ARG, "sampler: max_new_tokens must be >= 0, got %d", req->max_new_tokens);
  for (int i = 0; i < req->n_prompt; i++)
    if (req->prompt[i] < 0 || req->prompt[i] >= V)
      return error_set(err, ERR_ARG, "sampler: prompt token %d is id %d, outside the vocabulary 0..%d", i,
                       (int)req->prompt[i], V - 1);

  size_t total = (size_t)req->n_prompt + (size_t)req->max_new_tokens;
  int *text = malloc(total * sizeof *text);
  float *logits = malloc((size_t)req->context * (size_t)V * sizeof *logits);
  int rc = 0;
  if (!text || !logits) rc = error_set(err, ERR_NOMEM, "sampler: out of memory for %zu tokens", total);
  for (int i = 0; i < req->n_prompt && !rc; i++) text[i] = req->prompt[i];
  size_t len = (size_t)req->n_prompt;
  ModelKvCache kv = {0};
  int cached = !rc && !req->no_kv_cache && model_kv_cache_supported(m, NULL) == 0 && req->max_new_tokens > 0;
  if (cached && (rc = model_kv_cache_create(&kv, m, err))) cached = 0;
  const int context = cached && kv.capacity < req->context ? kv.capacity : req->context;
  for (int g = 0; g < req->max_new_tokens && !rc; g++) {
    int T = len < (size_t)context ? (int)len : context;
    const float *next;
    if (cached) {
      int run = kv.len == 0 ? T : 1; /* the window once, then the new token */
      if (kv.len == context) {
        /* Full: keep the newest half and recompute from position 0. */
        model_kv_cache_reset(&kv);
        run = (context + 1) / 2;
      }
      rc = model_decode(m, &kv, text + (len - (size_t)run), run, logits, err);
      next = logits;
    } else {
      rc = model_logits(m, text + (len - (size_t)T), 1, T, logits, err);
      next = logits + (size_t)(T - 1) * V;
    }
    if (rc) break;
    int32_t tok = sampler_pick(s, next);
    text[len++] = tok;
    if (n_generated) (*n_generated)++;
    if (req->on_token && (rc = req->on_token(req->user, tok, err))) break;
    if (tok == req->stop_token) break;
  }
  model_kv_cache_free(&kv);
  free(text);
  free(logits);
  return rc;
}
