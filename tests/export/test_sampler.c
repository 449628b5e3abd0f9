/* The sampler behind `fivefold sample`: greedy decoding is the argmax (lower
 * id on ties), temperature / top-k / top-p draw from exactly the filtered
 * and renormalised distribution (checked on 40,000 seeded draws), the mask
 * of allowed ids holds, a seed reproduces a sample and another seed changes
 * it, bad options are refused by name, and the generation loop equals a
 * hand-written one over model_logits (window truncation and the stop token
 * included); with the key/value cache it gives the same tokens as without,
 * greedy and sampled, for dense GQA, MoE and GPT-2 models, and past the
 * context it follows the documented keep-the-newest-half rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/sampler.h"

static Sampler make(int V, float temperature, int top_k, float top_p, uint64_t seed) {
  SamplerOptions o = {temperature, top_k, top_p, seed};
  Sampler s;
  Error err = {0};
  if (sampler_init(&s, V, &o, &err)) fail_msg("%s", err.msg);
  return s;
}

static void test_greedy(void **state) {
  (void)state;
  const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -3.0f};
  Sampler s = make(6, 0.0f, 0, 1.0f, 1);
  for (int i = 0; i < 5; i++) assert_int_equal(sampler_pick(&s, logits), 1); /* tie 1 vs 3: lower id */
  assert_int_equal(s.rng.counter, 0); /* greedy draws nothing */
  unsigned char allowed[6] = {1, 0, 1, 0, 1, 1};
  Error err = {0};
  assert_int_equal(sampler_set_allowed(&s, allowed, &err), 0);
  assert_int_equal(sampler_pick(&s, logits), 4);
  unsigned char none[6] = {0};
  assert_int_not_equal(sampler_set_allowed(&s, none, &err), 0);
  assert_non_null(strstr(err.msg, "every id"));
  sampler_free(&s);

  /* top-k 1 and a tiny top-p are greedy too, whatever the temperature. */
  Sampler k1 = make(6, 5.0f, 1, 1.0f, 2), p0 = make(6, 5.0f, 0, 1e-6f, 3);
  for (int i = 0; i < 50; i++) {
    assert_int_equal(sampler_pick(&k1, logits), 1);
    assert_int_equal(sampler_pick(&p0, logits), 1);
  }
  sampler_free(&k1);
  sampler_free(&p0);
}

enum { V5 = 5, DRAWS = 40000 };
static const double P5[V5] = {0.4, 0.3, 0.15, 0.1, 0.05};

/* Draws DRAWS tokens and checks each frequency against want[] (already
 * normalised) within 0.012, about four standard deviations at worst. */
static void check_frequencies(float temperature, int top_k, float top_p, const unsigned char *allowed,
                              const double *want) {
  float logits[V5];
  for (int i = 0; i < V5; i++) logits[i] = (float)log(P5[i]) + 3.0f; /* the offset must not matter */
  Sampler s = make(V5, temperature, top_k, top_p, 99);
  Error err = {0};
  if (allowed) assert_int_equal(sampler_set_allowed(&s, allowed, &err), 0);
  int count[V5] = {0};
  for (int i = 0; i < DRAWS; i++) {
    int32_t t = sampler_pick(&s, logits);
    assert_true(t >= 0 && t < V5);
    count[t]++;
  }
  for (int i = 0; i < V5; i++) {
    double f = (double)count[i] / DRAWS;
    if (want[i] == 0) assert_int_equal(count[i], 0);
    else if (fabs(f - want[i]) > 0.012)
      fail_msg("T %g top-k %d top-p %g: token %d drawn %.4f of the time, expected %.4f", (double)temperature, top_k,
               (double)top_p, i, f, want[i]);
  }
  sampler_free(&s);
}

static void test_distributions(void **state) {
  (void)state;
  check_frequencies(1.0f, 0, 1.0f, NULL, P5);
  const double k2[V5] = {0.4 / 0.7, 0.3 / 0.7, 0, 0, 0};
  check_frequencies(1.0f, 2, 1.0f, NULL, k2);
  /* top-p 0.8: 0.4 + 0.3 = 0.7 < 0.8, so the nucleus needs token 2 too. */
  const double p08[V5] = {0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0};
  check_frequencies(1.0f, 0, 0.8f, NULL, p08);
  /* top-k first, then top-p over the renormalised top 3: 0.4/0.85 = 0.47 <
   * 0.5, so two tokens stay. */
  const double k3p05[V5] = {0.4 / 0.7, 0.3 / 0.7, 0, 0, 0};
  check_frequencies(1.0f, 3, 0.5f, NULL, k3p05);
  /* Temperature 2 takes square roots of the probabilities. */
  double t2[V5], z = 0;
  for (int i = 0; i < V5; i++) z += t2[i] = sqrt(P5[i]);
  for (int i = 0; i < V5; i++) t2[i] /= z;
  check_frequencies(2.0f, 0, 1.0f, NULL, t2);
  /* A masked id is never drawn; the rest keep their ratios. */
  const unsigned char allowed[V5] = {0, 1, 1, 1, 1};
  const double masked[V5] = {0, 0.5, 0.25, 0.1 / 0.6, 0.05 / 0.6};
  check_frequencies(1.0f, 0, 1.0f, allowed, masked);
}

static void test_seeds(void **state) {
  (void)state;
  float logits[64];
  for (int i = 0; i < 64; i++) logits[i] = (float)sin(i * 0.7);
  Sampler a = make(64, 1.0f, 20, 0.9f, 7), b = make(64, 1.0f, 20, 0.9f, 7), c = make(64, 1.0f, 20, 0.9f, 8);
  int differ = 0;
  for (int i = 0; i < 100; i++) {
    int32_t x = sampler_pick(&a, logits), y = sampler_pick(&b, logits), w = sampler_pick(&c, logits);
    assert_int_equal(x, y);
    differ += x != w;
  }
  assert_true(differ > 10);
  sampler_free(&a);
  sampler_free(&b);
  sampler_free(&c);
}

static void test_bad_options(void **state) {
  (void)state;
  const SamplerOptions bad[] = {{-0.1f, 0, 1.0f, 1}, {NAN, 0, 1.0f, 1}, {1.0f, -1, 1.0f, 1},
                                {1.0f, 0, 0.0f, 1},  {1.0f, 0, 1.5f, 1}};
  const char *names[] = {"temperature", "temperature", "top_k", "top_p", "top_p"};
  for (int i = 0; i < 5; i++) {
    Error err = {0};
    Sampler s;
    assert_int_not_equal(sampler_init(&s, 10, &bad[i], &err), 0);
    assert_non_null(strstr(err.msg, names[i]));
  }
}

/* ---- the generation loop against a hand-written one ---- */

static void tiny_model(Model *m, int max_T) {
  ModelConfig c;
  model_config_defaults(&c);
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 48;
  c.max_position_embeddings = 64;
  c.init_std = 0.3f; /* confident enough that greedy choices are clear */
  c.num_experts = 4;
  c.top_k = 2;
  c.moe_intermediate_size = 16;
  model_config_set_moe_layer_freq(&c, 1);
  Error err = {0};
  if (model_create(m, &c, 1, max_T, &err)) fail_msg("%s", err.msg);
  model_init_weights(m, 42);
}

typedef struct Collect {
  int32_t got[64];
  int n, fail_at;
} Collect;

static int collect(void *user, int32_t tok, Error *err) {
  Collect *c = user;
  c->got[c->n++] = tok;
  if (c->n == c->fail_at) return error_set(err, ERR_IO, "callback refused token %d", (int)tok);
  return 0;
}

static void test_generate_matches_manual_loop(void **state) {
  (void)state;
  enum { CONTEXT = 8, NEW = 12, V = 40 };
  Model m;
  tiny_model(&m, CONTEXT);
  const int32_t prompt[5] = {3, 14, 15, 9, 26};
  /* Manual greedy loop over the last CONTEXT tokens. */
  int text[5 + NEW];
  for (int i = 0; i < 5; i++) text[i] = prompt[i];
  float logits[CONTEXT * V];
  Error err = {0};
  for (int g = 0; g < NEW; g++) {
    int len = 5 + g, T = len < CONTEXT ? len : CONTEXT;
    assert_int_equal(model_logits(&m, text + len - T, 1, T, logits, &err), 0);
    const float *row = logits + (T - 1) * V;
    int best = 0;
    for (int v = 1; v < V; v++)
      if (row[v] > row[best]) best = v;
    text[len] = best;
  }
  Sampler s = make(V, 0.0f, 0, 1.0f, 1);
  Collect c = {.n = 0, .fail_at = -1};
  /* The window slides by one token per step: the path without the cache. */
  SampleRequest req = {prompt, 5, NEW, CONTEXT, -1, collect, &c, 1};
  int n = 0;
  assert_int_equal(sampler_generate(&m, &s, &req, &n, &err), 0);
  assert_int_equal(n, NEW);
  int distinct = 0;
  for (int g = 0; g < NEW; g++) {
    assert_int_equal(c.got[g], text[5 + g]);
    distinct += g == 0 || c.got[g] != c.got[g - 1];
  }
  assert_true(distinct > 1); /* a constant output would prove little */

  /* The stop token ends generation right after it is emitted. */
  Collect c2 = {.n = 0, .fail_at = -1};
  req.user = &c2;
  req.stop_token = text[5 + 2];
  assert_int_equal(sampler_generate(&m, &s, &req, &n, &err), 0);
  int first_stop = 0;
  while (text[5 + first_stop] != req.stop_token) first_stop++;
  assert_int_equal(n, first_stop + 1);
  assert_int_equal(c2.n, first_stop + 1);

  /* A callback error stops generation and comes back. */
  Collect c3 = {.n = 0, .fail_at = 3};
  req.user = &c3;
  req.stop_token = -1;
  assert_int_equal(sampler_generate(&m, &s, &req, &n, &err), ERR_IO);
  assert_int_equal(n, 3);
  assert_non_null(strstr(err.msg, "callback refused"));

  /* Requests the model cannot serve are errors, not overruns. */
  req.context = CONTEXT + 1;
  assert_int_not_equal(sampler_generate(&m, &s, &req, &n, &err), 0);
  assert_non_null(strstr(err.msg, "context"));
  req.context = CONTEXT;
  const int32_t bad_prompt[1] = {V};
  req.prompt = bad_prompt;
  req.n_prompt = 1;
  assert_int_not_equal(sampler_generate(&m, &s, &req, &n, &err), 0);
  assert_non_null(strstr(err.msg, "outside the vocabulary"));
  sampler_free(&s);
  model_free(&m);
}

/* The small models of the cache tests: dense GQA (kind 0), MoE with a
 * shared expert (1), GPT-2 with nonzero biases (2). */
static void kv_model(Model *m, int kind, int max_T) {
  ModelConfig c;
  model_config_defaults(&c);
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 48;
  c.max_position_embeddings = 64;
  c.init_std = 0.3f;
  if (kind == 1) {
    c.num_experts = 4;
    c.top_k = 2;
    c.moe_intermediate_size = 16;
    c.shared_expert_intermediate_size = 8;
    model_config_set_moe_layer_freq(&c, 1);
  } else if (kind == 2) {
    c.gpt2 = 1;
    strcpy(c.model_type, "gpt2");
    c.num_kv_heads = 4;
    c.tie_word_embeddings = 1;
  }
  Error err = {0};
  if (model_create(m, &c, 1, max_T, &err)) fail_msg("%s", err.msg);
  model_init_weights(m, 42);
  for (int i = 0; i < m->num_tensors; i++)
    if (m->tensors[i].is_bias)
      for (size_t j = 0; j < m->tensors[i].numel; j++)
        m->params[m->tensors[i].offset + j] = 0.2f * (float)sin(1.0 + (double)(i * 131 + (int)j));
}

static void generate(Model *m, float temperature, int top_k, float top_p, uint64_t seed, int no_kv_cache, int context,
                     int n_new, Collect *out) {
  static const int32_t prompt[3] = {7, 21, 2};
  Sampler s = make(m->cfg.vocab_size, temperature, top_k, top_p, seed);
  memset(out, 0, sizeof *out);
  out->fail_at = -1;
  SampleRequest req = {prompt, 3, n_new, context, -1, collect, out, no_kv_cache};
  Error err = {0};
  int n = 0;
  if (sampler_generate(m, &s, &req, &n, &err)) fail_msg("%s", err.msg);
  assert_int_equal(n, n_new);
  sampler_free(&s);
}

static void test_kv_cache_same_tokens(void **state) {
  (void)state;
  enum { CONTEXT = 40, NEW = CONTEXT - 3 };
  const struct {
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
  } modes[] = {{0.0f, 0, 1.0f, 1}, {1.0f, 0, 1.0f, 7}, {0.8f, 10, 0.9f, 99}};
  for (int kind = 0; kind < 3; kind++) {
    Model m;
    kv_model(&m, kind, CONTEXT);
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
      Collect with, without;
      generate(&m, modes[k].temperature, modes[k].top_k, modes[k].top_p, modes[k].seed, 0, CONTEXT, NEW, &with);
      generate(&m, modes[k].temperature, modes[k].top_k, modes[k].top_p, modes[k].seed, 1, CONTEXT, NEW, &without);
      int distinct = 0;
      for (int g = 0; g < NEW; g++) {
        if (with.got[g] != without.got[g])
          fail_msg("model %d, mode %zu: token %d is %d with the cache, %d without", kind, k, g, with.got[g],
                   without.got[g]);
        distinct += g == 0 || with.got[g] != with.got[g - 1];
      }
      assert_true(distinct > 2);
    }
    model_free(&m);
  }
}

/* Past the context the cache keeps the newest (context + 1) / 2 tokens and
 * runs them again from position 0: a manual greedy loop doing that over
 * model_logits gives the same tokens. */
static void test_kv_cache_slide_rule(void **state) {
  (void)state;
  enum { CONTEXT = 7, NEW = 20, V = 40 }; /* odd: (context + 1) / 2 is not context / 2 */
  Model m;
  kv_model(&m, 0, CONTEXT);
  int text[3 + NEW] = {7, 21, 2};
  float logits[CONTEXT * V];
  Error err = {0};
  int start = 0; /* first token of the cached window */
  for (int g = 0; g < NEW; g++) {
    const int len = 3 + g;
    if (len - start > CONTEXT) start = len - (CONTEXT + 1) / 2;
    const int T = len - start;
    assert_int_equal(model_logits(&m, text + start, 1, T, logits, &err), 0);
    const float *row = logits + (T - 1) * V;
    int best = 0;
    for (int v = 1; v < V; v++)
      if (row[v] > row[best]) best = v;
    text[len] = best;
  }
  Collect got;
  generate(&m, 0.0f, 0, 1.0f, 1, 0, CONTEXT, NEW, &got);
  for (int g = 0; g < NEW; g++) assert_int_equal(got.got[g], text[3 + g]);
  /* And it is not the sliding window of the path without the cache. */
  Collect slid;
  generate(&m, 0.0f, 0, 1.0f, 1, 1, CONTEXT, NEW, &slid);
  int differ = 0;
  for (int g = 0; g < NEW; g++) differ += got.got[g] != slid.got[g];
  assert_true(differ > 0);
  model_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy),
      cmocka_unit_test(test_distributions),
      cmocka_unit_test(test_seeds),
      cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_generate_matches_manual_loop),
      cmocka_unit_test(test_kv_cache_same_tokens),
      cmocka_unit_test(test_kv_cache_slide_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
