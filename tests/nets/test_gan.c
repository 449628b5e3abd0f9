/* The deblurring GAN (nets/gan.h) on tiny sizes: its parameter table and
 * groups, the critic phase's gradient of d_loss and the generator phase's
 * gradient of the generator's loss (through the critic) against central
 * finite differences, each phase leaving the other group's gradient
 * untouched, the content loss terms (L1, edge) alone, the generator's
 * global skip, the full-resolution generator (no downsampling: any image
 * size, no transposed conv), the layouts of the generator's activations
 * (blocked, channels-last, NCHW) with the phase gradient in each, config
 * errors that name the field; under WGAN-GP the same
 * phase checks, and the gradient penalty's weight gradient (the closed-form
 * double backward) alone against finite differences of the penalty. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "base/rng.h"
#include "nets/gan.h"

#define SIDE 8
#define PAIRS 2
#define IMAGE (SIDE * SIDE)

static const char *TINY = "{\"family\":\"gan\",\"channels\":1,\"generator\":{\"filters\":2,\"blocks\":1,"
                          "\"downsamples\":1},\"critic\":{\"filters\":2,\"layers\":2},\"content_weight\":1}";
static const char *WGAN = "{\"family\":\"gan\",\"channels\":1,\"generator\":{\"filters\":2,\"blocks\":1,"
                          "\"downsamples\":1},\"critic\":{\"filters\":3,\"layers\":2},\"content_weight\":1,"
                          "\"loss\":\"wgan-gp\",\"gp_weight\":10}";

static int config(GanConfig *cfg, const char *json, Error *err) {
  cJSON *o = cJSON_Parse(json);
  assert_non_null(o);
  memset(err, 0, sizeof *err);
  int rc = gan_config_from_json(cfg, o, "cfg.json", err);
  cJSON_Delete(o);
  return rc;
}

static float blurred[PAIRS * IMAGE], sharp[PAIRS * IMAGE];

static void make_pairs(void) {
  for (int i = 0; i < PAIRS * IMAGE; i++) {
    sharp[i] = (float)rng_uniform(11, 0, (uint64_t)i);
    blurred[i] = sharp[i] + 0.2f * (float)rng_normal(11, 1, (uint64_t)i);
  }
}

static double metric_of(Network *net, const GanBatch *b, const char *name) {
  Error err = {0};
  if (net->ops->forward(net, 0, b, &err)) fail_msg("%s", err.msg);
  NetMetric m[8];
  int n = net->ops->metrics(net, m, 8);
  assert_true(n == 5 || (n == 6 && !strcmp(m[5].name, "gp")));
  return network_metric(m, n, name);
}

/* The phase's backward (scale 0.5) against finite differences of `metric`
 * over the group's parameters; the other group's gradient stays zero. */
static void check_phase(Network *net, int group, const char *metric) {
  GanBatch b = {.n = PAIRS, .blurred = blurred, .sharp = sharp};
  Error err = {0};
  net->ops->begin_phase(net, group);
  memset(net->grads, 0, net->num_values * sizeof(float));
  metric_of(net, &b, metric);
  if (net->ops->backward(net, 0, &b, 0.5f, &err)) fail_msg("%s", err.msg);
  /* The losses have kinks (ReLU, LeakyReLU, L1) that a finite difference
   * of a tiny network crosses now and then, so single entries may miss:
   * the check is on the whole gradient (relative error of the vector) and
   * on the share of entries that miss. */
  const double eps = 1e-4;
  int checked = 0, nonzero = 0, missed = 0;
  double diff2 = 0, norm2 = 0;
  for (int t = 0; t < net->num_tensors; t++) {
    const NetParam *p = &net->params[t];
    /* the other group's whole gradient must be zero; of the phase's group
     * up to 24 entries of every tensor, evenly spread, are checked (all
     * would take a minute under the sanitizers) */
    size_t stride = p->param_group == group && p->numel > 24 ? p->numel / 24 : 1;
    for (size_t i = p->offset; i < p->offset + p->numel; i += stride) {
      if (p->param_group != group) {
        if (net->grads[i] != 0) fail_msg("%s[%zu]: a gradient of the other group", p->name, i - p->offset);
        continue;
      }
      float keep = net->values[i];
      net->values[i] = keep + (float)eps;
      double up = metric_of(net, &b, metric);
      net->values[i] = keep - (float)eps;
      double down = metric_of(net, &b, metric);
      net->values[i] = keep;
      double fd = 0.5 * (up - down) / (2 * eps);
      missed += fabs(net->grads[i] - fd) > 2e-3 + 3e-2 * fabs(fd);
      diff2 += (net->grads[i] - fd) * (net->grads[i] - fd);
      norm2 += fd * fd;
      checked++;
      nonzero += fabs(fd) > 1e-4;
    }
  }
  double relative = sqrt(diff2 / norm2);
  print_message("%s phase, %s: %d of %d entries miss, relative error %.4f\n",
                group == GAN_GROUP_CRITIC ? "critic" : "generator", metric, missed, checked, relative);
  assert_true(relative < 0.05);
  assert_true(missed <= checked / 20);
  assert_true(checked > 0);
  assert_true(nonzero > checked / 4); /* the check is not vacuous */
}

static void build(Network *net, const char *json) {
  GanConfig cfg;
  Error err;
  if (config(&cfg, json, &err)) fail_msg("%s", err.msg);
  if (gan_create(net, &cfg, SIDE, SIDE, PAIRS, &err)) fail_msg("%s", err.msg);
  gan_init_weights(net, 7);
  /* the generator's last conv starts at zero (the identity), which would
   * leave the layers before it without a gradient: give it values */
  int last = net->num_tensors - 1;
  assert_true(!strncmp(net->params[last].name, "generator.", 10));
  for (int t = last - 1; t <= last; t++) {
    for (size_t i = 0; i < net->params[t].numel; i++) assert_true(net->values[net->params[t].offset + i] == 0);
    for (size_t i = 0; i < net->params[t].numel; i++)
      net->values[net->params[t].offset + i] = 0.1f * (float)rng_normal(5, (uint64_t)t, i);
  }
}

static void test_table_and_groups(void **state) {
  (void)state;
  Network net;
  build(&net, TINY);
  assert_int_equal(net.num_param_groups, 2);
  assert_string_equal(net.params[0].name, "critic.layers.0.weight");
  assert_int_equal(net.params[0].param_group, GAN_GROUP_CRITIC);
  int seen_generator = 0;
  for (int t = 0; t < net.num_tensors; t++) {
    const NetParam *p = &net.params[t];
    int gen = !strncmp(p->name, "generator.", 10);
    assert_int_equal(p->param_group, gen ? GAN_GROUP_GENERATOR : GAN_GROUP_CRITIC);
    if (seen_generator) assert_true(gen); /* one contiguous range per group */
    seen_generator |= gen;
  }
  assert_true(seen_generator);
  assert_non_null(network_find_param(&net, "generator.layers.0.weight"));
  assert_true(net.flops_per_unit > 0);
  assert_string_equal(net.ops->unit.one, "image");
  network_free(&net);
}

static void test_critic_phase_gradient(void **state) {
  (void)state;
  Network net;
  build(&net, TINY);
  make_pairs();
  check_phase(&net, GAN_GROUP_CRITIC, "d_loss");
  network_free(&net);
}

static void test_generator_phase_gradient(void **state) {
  (void)state;
  Network net;
  build(&net, TINY);
  make_pairs();
  check_phase(&net, GAN_GROUP_GENERATOR, "loss");
  network_free(&net);
}

/* The generator without instance norm ("norm": "none": every conv with a
 * bias, the block's second conv ending it), both phases, and the
 * generator-only pass (gan_generator_pass) giving the generator phase's
 * gradient when there is no adversarial term. */
static void test_generator_without_norm(void **state) {
  (void)state;
  static const char *const PLAIN = "{\"family\":\"gan\",\"channels\":1,\"generator\":{\"filters\":2,\"blocks\":1,"
                                   "\"downsamples\":1,\"norm\":\"none\"},\"critic\":{\"filters\":2,\"layers\":2},"
                                   "\"content_weight\":1}";
  Network net;
  build(&net, PLAIN);
  make_pairs();
  for (int t = 0; t < net.num_tensors; t++)
    if (!strncmp(net.params[t].name, "generator.", 10)) assert_null(strstr(net.params[t].name, "norm"));
  assert_non_null(network_find_param(&net, "generator.layers.0.bias"));
  check_phase(&net, GAN_GROUP_GENERATOR, "loss");
  check_phase(&net, GAN_GROUP_CRITIC, "d_loss");
  network_free(&net);

  static const char *const CONTENT = "{\"family\":\"gan\",\"generator\":{\"filters\":2,\"blocks\":1,\"downsamples\":1,"
                                     "\"norm\":\"none\"},\"critic\":{\"filters\":2,\"layers\":2},\"adv_weight\":0}";
  build(&net, CONTENT);
  GanBatch b = {.n = PAIRS, .blurred = blurred, .sharp = sharp};
  Error err = {0};
  net.ops->begin_phase(&net, GAN_GROUP_GENERATOR);
  memset(net.grads, 0, net.num_values * sizeof(float));
  double loss = metric_of(&net, &b, "loss"), content = 0;
  if (net.ops->backward(&net, 0, &b, 1.0f, &err)) fail_msg("%s", err.msg);
  float *phase = malloc(net.num_values * sizeof(float));
  memcpy(phase, net.grads, net.num_values * sizeof(float));
  memset(net.grads, 0, net.num_values * sizeof(float));
  if (gan_generator_pass(&net, blurred, sharp, PAIRS, &content, &err)) fail_msg("%s", err.msg);
  assert_true(fabs(100 * content - loss) < 1e-9 * fabs(loss));
  size_t compared = 0;
  for (size_t i = 0; i < net.num_values; i++) {
    assert_true(fabsf(phase[i] - net.grads[i]) <= 1e-6f * (1 + fabsf(phase[i])));
    compared += phase[i] != 0;
  }
  assert_true(compared > net.num_values / 4);
  free(phase);
  network_free(&net);
}

/* Each content term alone (no adversarial term), and the adversarial term alone. */
static void test_loss_terms_alone(void **state) {
  (void)state;
  static const char *const TERMS[] = {
      "\"adv_weight\":0,\"content_weight\":1,\"l1_weight\":1,\"edge_weight\":0",
      "\"adv_weight\":0,\"content_weight\":1,\"l1_weight\":0,\"edge_weight\":1",
      "\"adv_weight\":1,\"content_weight\":0",
  };
  make_pairs();
  for (size_t k = 0; k < sizeof TERMS / sizeof TERMS[0]; k++) {
    char json[512];
    snprintf(json, sizeof json, "{\"family\":\"gan\",\"generator\":{\"filters\":2,\"blocks\":1,\"downsamples\":1},"
             "\"critic\":{\"filters\":2,\"layers\":2},%s}", TERMS[k]);
    Network net;
    build(&net, json);
    check_phase(&net, GAN_GROUP_GENERATOR, "loss");
    network_free(&net);
  }
}

/* With the generator's last convolution zero the output is the blurred input. */
static void test_global_skip(void **state) {
  (void)state;
  Network net;
  build(&net, TINY);
  make_pairs();
  for (int t = 0; t < net.num_tensors; t++)
    if (!strncmp(net.params[t].name, "generator.", 10))
      memset(net.values + net.params[t].offset, 0, net.params[t].numel * sizeof(float));
  float out[PAIRS * IMAGE];
  Error err;
  if (gan_generate(&net, blurred, PAIRS, out, &err)) fail_msg("%s", err.msg);
  for (int i = 0; i < PAIRS * IMAGE; i++) {
    float want = blurred[i] < 0 ? 0 : blurred[i] > 1 ? 1 : blurred[i];
    assert_true(out[i] == want);
  }
  network_free(&net);
}

/* "downsamples": 0 keeps the generator at full resolution: stride 1, so
 * odd sizes are accepted; the chain is the 7x7 conv, each block's two 3x3
 * convs and the last 7x7 conv, all keeping the size (no transposed conv:
 * every weight is [out, in, k, k]); its phase gradient holds, and the
 * global skip still gives the identity at the start. */
static void test_full_resolution_generator(void **state) {
  (void)state;
  static const char *const FULL = "{\"family\":\"gan\",\"channels\":1,\"generator\":{\"filters\":3,\"blocks\":2,"
                                  "\"downsamples\":0,\"norm\":\"none\"},\"critic\":{\"filters\":2,\"layers\":2},"
                                  "\"content_weight\":1}";
  GanConfig cfg;
  Error err;
  if (config(&cfg, FULL, &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.gen_downsamples, 0);
  assert_int_equal(gan_stride(&cfg), 1);
  Network odd;
  if (gan_create(&odd, &cfg, 9, 7, 1, &err)) fail_msg("9 x 7 at stride 1: %s", err.msg);
  network_free(&odd);

  Network net;
  build(&net, FULL);
  int weights = 0;
  for (int t = 0; t < net.num_tensors; t++) {
    const NetParam *p = &net.params[t];
    if (strncmp(p->name, "generator.", 10) || !strstr(p->name, ".weight")) continue;
    int k = weights == 0 || weights == 5 ? 7 : 3, in = weights == 0 ? 1 : 3, out = weights == 5 ? 1 : 3;
    assert_int_equal(p->numel, (size_t)(out * in * k * k));
    weights++;
  }
  assert_int_equal(weights, 1 + 2 * 2 + 1);
  make_pairs();
  check_phase(&net, GAN_GROUP_GENERATOR, "loss");
  network_free(&net);

  build(&net, FULL);
  gan_init_weights(&net, 7); /* the last conv back at zero: the output is the input */
  float out[PAIRS * IMAGE];
  if (gan_generate(&net, blurred, PAIRS, out, &err)) fail_msg("%s", err.msg);
  for (int i = 0; i < PAIRS * IMAGE; i++) {
    float want = blurred[i] < 0 ? 0 : blurred[i] > 1 ? 1 : blurred[i];
    assert_true(out[i] == want);
  }
  network_free(&net);
}

/* The generator's inner activations (nets/gan_chain.h): blocked by 16
 * channels (Winograd 3x3) with 16 filters, channels-last with 3, NCHW
 * under instance norm; the phase gradient holds in each (finite
 * differences), and at the start the output is still the input. */
static void test_generator_layouts(void **state) {
  (void)state;
  static const struct {
    const char *generator, *expect; /* expect NULL: NCHW, no layout named */
  } CASES[] = {
      {"\"filters\":16,\"blocks\":1,\"downsamples\":0,\"norm\":\"none\"", "blocked by 16 channels"},
      {"\"filters\":16,\"blocks\":1,\"downsamples\":1,\"norm\":\"none\"", "blocked by 16 channels"},
      {"\"filters\":3,\"blocks\":1,\"downsamples\":1,\"norm\":\"none\"", "channels-last"},
      {"\"filters\":3,\"blocks\":1,\"downsamples\":1,\"norm\":\"instance\"", NULL},
  };
  make_pairs();
  for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
    char json[512], text[1024];
    snprintf(json, sizeof json, "{\"family\":\"gan\",\"channels\":1,\"generator\":{%s},\"critic\":{\"filters\":2,"
             "\"layers\":2},\"content_weight\":1}", CASES[k].generator);
    Network net;
    build(&net, json);
    gan_describe(&net, text, sizeof text);
    print_message("%s\n", text);
    const char *generator_part = strstr(text, "generator"), *critic_part = strstr(text, "| critic");
    assert_non_null(generator_part);
    assert_non_null(critic_part);
    const char *named = strstr(text, "(activations ");
    if (CASES[k].expect) {
      assert_non_null(named);
      assert_true(named < critic_part); /* the generator's, not the critic's */
      assert_non_null(strstr(named, CASES[k].expect));
    } else {
      assert_null(named);
    }
    check_phase(&net, GAN_GROUP_GENERATOR, "loss");
    gan_init_weights(&net, 7);
    float out[PAIRS * IMAGE];
    Error err;
    if (gan_generate(&net, blurred, PAIRS, out, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < PAIRS * IMAGE; i++) assert_true(out[i] == (blurred[i] < 0 ? 0 : blurred[i] > 1 ? 1 : blurred[i]));
    network_free(&net);
  }
}

static void refused(const char *json, const char *field) {
  GanConfig cfg;
  Error err;
  assert_int_equal(config(&cfg, json, &err), ERR_CONFIG);
  if (!strstr(err.msg, field) || !strstr(err.msg, "cfg.json"))
    fail_msg("error \"%s\" does not name %s", err.msg, field);
}

/* WGAN-GP: both phases' gradients, with the penalty inside d_loss. */
static void test_wgan_gp_phases(void **state) {
  (void)state;
  Network net;
  build(&net, WGAN);
  make_pairs();
  GanBatch b = {.n = PAIRS, .blurred = blurred, .sharp = sharp};
  net.ops->begin_phase(&net, GAN_GROUP_CRITIC);
  double gp = metric_of(&net, &b, "gp"), d_loss = metric_of(&net, &b, "d_loss");
  print_message("wgan-gp: gp %.4f, d_loss %.4f\n", gp, d_loss);
  assert_true(gp > 0.01); /* the penalty is there and in d_loss */
  check_phase(&net, GAN_GROUP_CRITIC, "d_loss");
  check_phase(&net, GAN_GROUP_GENERATOR, "loss");
  network_free(&net);
}

/* The penalty of gan_wgan_gp_critic_loss on fixed images and eps. */
static double penalty_of(Network *net, const float *real, const float *fake, const float *eps) {
  Error err = {0};
  double gp, w;
  if (gan_wgan_gp_critic_loss(net, real, fake, eps, PAIRS, 0.0, &gp, &w, &err)) fail_msg("%s", err.msg);
  return gp;
}

/* The penalty's gradient with respect to every critic parameter (the
 * double backward alone: Wasserstein weight 0) against central finite
 * differences in the same float arithmetic; biases get none. */
static void test_gradient_penalty_weight_gradient(void **state) {
  (void)state;
  Network net;
  build(&net, WGAN);
  make_pairs();
  const float eps[PAIRS] = {0.3f, 0.8f};
  memset(net.grads, 0, net.num_values * sizeof(float));
  penalty_of(&net, sharp, blurred, eps);
  float *grad = malloc(net.num_values * sizeof(float));
  assert_non_null(grad);
  memcpy(grad, net.grads, net.num_values * sizeof(float));
  /* The penalty is smooth between the kinks of the leaky ReLUs; a small
   * step rarely crosses one, and the penalty (a double sum of float
   * gradients near 1e-3) is exact enough for it. */
  const double h = 1e-4;
  int checked = 0, missed = 0, nonzero = 0;
  double diff2 = 0, norm2 = 0;
  for (int t = 0; t < net.num_tensors; t++) {
    const NetParam *p = &net.params[t];
    int bias = strstr(p->name, ".bias") != NULL, checks = p->param_group == GAN_GROUP_CRITIC && !bias;
    /* every entry of the biases and the generator must be zero; of each
     * critic weight up to 20 entries, evenly spread, are checked */
    size_t stride = checks && p->numel > 20 ? p->numel / 20 : 1;
    for (size_t i = p->offset; i < p->offset + p->numel; i += stride) {
      if (!checks) {
        if (grad[i] != 0) fail_msg("%s[%zu]: a penalty gradient %g where none belongs", p->name, i - p->offset, grad[i]);
        continue;
      }
      float keep = net.values[i];
      net.values[i] = keep + (float)h;
      double up = penalty_of(&net, sharp, blurred, eps);
      net.values[i] = keep - (float)h;
      double down = penalty_of(&net, sharp, blurred, eps);
      net.values[i] = keep;
      double fd = (up - down) / (2 * h);
      missed += fabs(grad[i] - fd) > 1e-4 + 2e-2 * fabs(fd);
      diff2 += (grad[i] - fd) * (grad[i] - fd);
      norm2 += fd * fd;
      nonzero += fabs(fd) > 1e-3;
      checked++;
    }
  }
  double relative = sqrt(diff2 / norm2);
  print_message("gradient penalty: %d of %d weights miss, relative error %.5f\n", missed, checked, relative);
  assert_true(relative < 0.02);
  assert_true(missed <= checked / 20);
  assert_true(nonzero > checked / 2);
  free(grad);
  network_free(&net);
}

/* A critic holding a layer without jvp / double_backward (instance norm) is
 * refused under wgan-gp even when the config check is bypassed. */
static void test_wgan_gp_refuses_instance_norm(void **state) {
  (void)state;
  GanConfig cfg;
  Error err;
  if (config(&cfg, WGAN, &err)) fail_msg("%s", err.msg);
  cfg.critic_norm = GAN_NORM_INSTANCE;
  Network net;
  assert_int_equal(gan_create(&net, &cfg, SIDE, SIDE, PAIRS, &err), ERR_CONFIG);
  if (!strstr(err.msg, "instance_norm") || !strstr(err.msg, "double backward")) fail_msg("%s", err.msg);
}

static void test_config_errors(void **state) {
  (void)state;
  refused("{\"family\":\"gan\",\"generator\":{\"filters\":0}}", "model.generator.filters");
  refused("{\"family\":\"gan\",\"generator\":{\"filtres\":4}}", "model.generator");
  refused("{\"family\":\"gan\",\"critic\":{\"layers\":9}}", "model.critic.layers");
  refused("{\"family\":\"gan\",\"generator\":{\"downsamples\":-1}}", "model.generator.downsamples");
  refused("{\"family\":\"gan\",\"generator\":{\"downsamples\":5}}", "model.generator.downsamples");
  refused("{\"family\":\"gan\",\"generator\":{\"downsamples\":0.5}}", "model.generator.downsamples");
  refused("{\"family\":\"gan\",\"loss\":\"wgan-gp\",\"critic\":{\"norm\":\"instance\"}}", "model.critic.norm");
  refused("{\"family\":\"gan\",\"gp_weight\":5}", "model.gp_weight");
  refused("{\"family\":\"gan\",\"critic_steps\":0}", "model.critic_steps");
  refused("{\"family\":\"gan\",\"loss\":\"hinge\"}", "model.loss");
  refused("{\"family\":\"gan\",\"content_weight\":-1}", "model.content_weight");
  refused("{\"family\":\"gan\",\"colour\":1}", "model.colour");
  GanConfig cfg;
  Error err;
  if (config(&cfg, TINY, &err)) fail_msg("%s", err.msg);
  Network net;
  assert_int_equal(gan_create(&net, &cfg, 9, 8, 1, &err), ERR_CONFIG); /* 9 is no multiple of 2 */
  /* the config round-trips */
  cJSON *o = gan_config_to_json(&cfg);
  GanConfig again;
  assert_int_equal(gan_config_from_json(&again, o, "round", &err), 0);
  cJSON_Delete(o);
  assert_memory_equal(&cfg, &again, sizeof cfg);
  const char *wgan_k = "{\"family\":\"gan\",\"loss\":\"wgan-gp\",\"gp_weight\":5,\"critic_steps\":3}";
  if (config(&cfg, wgan_k, &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.critic_norm, GAN_NORM_NONE);
  assert_int_equal(cfg.critic_steps, 3);
  o = gan_config_to_json(&cfg);
  assert_int_equal(gan_config_from_json(&again, o, "round", &err), 0);
  cJSON_Delete(o);
  assert_memory_equal(&cfg, &again, sizeof cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_and_groups),      cmocka_unit_test(test_critic_phase_gradient),
      cmocka_unit_test(test_generator_phase_gradient), cmocka_unit_test(test_loss_terms_alone),
      cmocka_unit_test(test_global_skip),           cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_wgan_gp_phases),        cmocka_unit_test(test_gradient_penalty_weight_gradient),
      cmocka_unit_test(test_wgan_gp_refuses_instance_norm), cmocka_unit_test(test_generator_without_norm),
      cmocka_unit_test(test_generator_layouts),
      cmocka_unit_test(test_full_resolution_generator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
