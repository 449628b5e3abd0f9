/* The deblurring GAN (nets/gan.h): the generator and the critic as chains
 * of registry layers with residual skips (nets/gan_chain.h), the LSGAN,
 * WGAN-GP and content losses and the interface's operations with their
 * two phases.
 *
 * WGAN-GP's gradient penalty is differentiated in closed form, which the
 * critic it accepts allows: conv2d, linear and leaky_relu layers without
 * normalisation, so grad_x D is a product of transposed weights and masks
 * fixed by the forward, and the masks' derivative is zero almost
 * everywhere (see critic_penalty). A layer kind without the second-order
 * passes of nets/layer.h (instance_norm, ...) is refused in a wgan-gp
 * critic. */
#include "nets/gan.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_util.h"
#include "base/rng.h"
#include "kern/conv2d.h"
#include "kern/image_metrics.h"
#include "kern/vecops.h"
#include "nets/gan_chain.h"
#include "nets/layer.h"
#include "nets/layer_spec.h"
#include "nets/layer_util.h"

#define GAN_PSNR_CAP 100.0
#define NAME_MAX_LEN 48
#define GAN_EPS_STREAM 0x7767616e2d6770ULL /* WGAN-GP's eps draws */

/* A conv that an instance norm follows has no bias: the norm subtracts it
 * again, and its gradient, zero but for rounding, would be AdamW-scaled
 * noise. */
static int add_conv(Chain *c, int out_channels, int kernel, int stride, int padding, int bias, Error *err) {
  char spec[192];
  snprintf(spec, sizeof spec, "{\"type\":\"conv2d\",\"out_channels\":%d,\"kernel\":%d,\"stride\":%d,\"padding\":%d,"
           "\"bias\":%s}", out_channels, kernel, stride, padding, bias ? "true" : "false");
  return gan_chain_add(c, spec, -1, err);
}

static int add_simple(Chain *c, const char *spec, Error *err) { return gan_chain_add(c, spec, -1, err); }

/* ---- the two networks ---- */

/* Without normalisation ("norm": "none") the convolutions keep their bias
 * and the layers in between are left out. */
static int build_generator(Chain *c, const GanConfig *cfg, Error *err) {
  static const char *const RELU = "{\"type\":\"relu\"}";
  const char *norm = cfg->gen_norm == GAN_NORM_INSTANCE ? "{\"type\":\"instance_norm\"}" : NULL;
  const int bias = !norm;
  int f = cfg->gen_filters, rc = add_conv(c, f, 7, 1, 3, bias, err);
  if (!rc && norm) rc = add_simple(c, norm, err);
  if (!rc) rc = add_simple(c, RELU, err);
  for (int d = 0; d < cfg->gen_downsamples && !rc; d++) {
    f *= 2;
    rc = add_conv(c, f, 3, 2, 1, bias, err);
    if (!rc && norm) rc = add_simple(c, norm, err);
    if (!rc) rc = add_simple(c, RELU, err);
  }
  for (int b = 0; b < cfg->gen_blocks && !rc; b++) {
    int block_input = c->num_layers - 1;
    rc = add_conv(c, f, 3, 1, 1, bias, err);
    if (!rc && norm) rc = add_simple(c, norm, err);
    if (!rc) rc = add_simple(c, RELU, err);
    if (!rc && norm) rc = add_conv(c, f, 3, 1, 1, 0, err);
    if (!rc) {
      char spec[192];
      if (norm) snprintf(spec, sizeof spec, "%s", norm);
      else snprintf(spec, sizeof spec, "{\"type\":\"conv2d\",\"out_channels\":%d,\"kernel\":3,\"stride\":1,"
                    "\"padding\":1,\"bias\":true}", f);
      rc = gan_chain_add(c, spec, block_input, err);
    }
  }
  for (int d = 0; d < cfg->gen_downsamples && !rc; d++) {
    f /= 2;
    char spec[160];
    snprintf(spec, sizeof spec, "{\"type\":\"conv_transpose2d\",\"out_channels\":%d,\"kernel\":3,\"stride\":2,"
             "\"padding\":1,\"output_padding\":1,\"bias\":%s}", f, bias ? "true" : "false");
    rc = add_simple(c, spec, err);
    if (!rc && norm) rc = add_simple(c, norm, err);
    if (!rc) rc = add_simple(c, RELU, err);
  }
  if (!rc) rc = add_conv(c, cfg->channels, 7, 1, 3, 1, err);
  if (!rc) rc = add_simple(c, "{\"type\":\"tanh\"}", err);
  return rc;
}

/* Without normalisation (critic.norm "none") the inner convs keep their bias. */
static int build_critic(Chain *c, const GanConfig *cfg, Error *err) {
  static const char *const NORM = "{\"type\":\"instance_norm\"}",
                           *const LEAKY = "{\"type\":\"leaky_relu\",\"slope\":0.2}";
  int f = cfg->critic_filters, mult = 1, norm = cfg->critic_norm == GAN_NORM_INSTANCE;
  int rc = add_conv(c, f, 4, 2, 2, 1, err);
  if (!rc) rc = add_simple(c, LEAKY, err);
  for (int n = 1; n <= cfg->critic_layers && !rc; n++) {
    mult = (1 << n) < 8 ? (1 << n) : 8;
    rc = add_conv(c, f * mult, 4, n < cfg->critic_layers ? 2 : 1, 2, !norm, err);
    if (!rc && norm) rc = add_simple(c, NORM, err);
    if (!rc) rc = add_simple(c, LEAKY, err);
  }
  if (!rc) rc = add_conv(c, 1, 4, 1, 2, 1, err);
  return rc;
}

/* ---- config ---- */

int gan_stride(const GanConfig *cfg) { return 1 << cfg->gen_downsamples; }

int gan_config_from_json(GanConfig *cfg, const cJSON *obj, const char *origin, Error *err) {
  static const char *const FIELDS[] = {"family", "channels", "generator", "critic", "loss", "adv_weight",
                                       "content_weight", "l1_weight", "edge_weight", "gp_weight", "critic_steps"};
  static const char *const GEN_FIELDS[] = {"filters", "blocks", "downsamples", "norm", NULL};
  static const char *const CRITIC_FIELDS[] = {"filters", "layers", "norm", NULL};
  static const char *const LOSSES[] = {"lsgan", "wgan-gp", NULL}, *const NORMS[] = {"instance", "none", NULL};
  memset(cfg, 0, sizeof *cfg);
  for (const cJSON *f = obj->child; f; f = f->next) {
    int known = 0;
    for (size_t k = 0; k < sizeof FIELDS / sizeof FIELDS[0]; k++) known |= !strcmp(f->string, FIELDS[k]);
    if (!known)
      return error_set(err, ERR_CONFIG, "%s: model.%s: unknown field of a gan network (expected family, channels, "
                       "generator, critic, loss, adv_weight, content_weight, l1_weight, edge_weight, gp_weight, "
                       "critic_steps)", origin, f->string);
  }
  char where[512];
  snprintf(where, sizeof where, "%s: model", origin);
  int rc = layer_spec_choice(obj, "loss", 0, GAN_LOSS_LSGAN, LOSSES, &cfg->loss, where, err);
  if (!rc) rc = layer_spec_double(obj, "gp_weight", 10.0, 0.0, 1e6, &cfg->gp_weight, where, err);
  if (!rc) rc = layer_spec_int(obj, "critic_steps", 0, 1, 1, GAN_MAX_CRITIC_STEPS, &cfg->critic_steps, where, err);
  if (!rc && cfg->loss != GAN_LOSS_WGAN_GP && cJSON_GetObjectItemCaseSensitive(obj, "gp_weight"))
    rc = error_set(err, ERR_CONFIG, "%s.gp_weight: the gradient penalty belongs to \"loss\": \"wgan-gp\", this "
                   "network's loss is \"lsgan\"", where);
  if (!rc) rc = layer_spec_int(obj, "channels", 0, 1, 1, 4, &cfg->channels, where, err);
  if (!rc) rc = layer_spec_double(obj, "adv_weight", 1.0, 0.0, 1e6, &cfg->adv_weight, where, err);
  if (!rc) rc = layer_spec_double(obj, "content_weight", 100.0, 0.0, 1e6, &cfg->content_weight, where, err);
  if (!rc) rc = layer_spec_double(obj, "l1_weight", 1.0, 0.0, 1e6, &cfg->l1_weight, where, err);
  if (!rc) rc = layer_spec_double(obj, "edge_weight", 1.0, 0.0, 1e6, &cfg->edge_weight, where, err);
  if (rc) return rc;
  static const cJSON EMPTY = {.type = cJSON_Object};
  const cJSON *gen = cJSON_GetObjectItemCaseSensitive(obj, "generator");
  const cJSON *critic = cJSON_GetObjectItemCaseSensitive(obj, "critic");
  if ((gen && !cJSON_IsObject(gen)) || (critic && !cJSON_IsObject(critic)))
    return error_set(err, ERR_CONFIG, "%s.%s: expected an object, got %s", where,
                     gen && !cJSON_IsObject(gen) ? "generator" : "critic",
                     json_type_name(gen && !cJSON_IsObject(gen) ? gen : critic));
  char gen_where[560], critic_where[560];
  snprintf(gen_where, sizeof gen_where, "%s.generator", where);
  snprintf(critic_where, sizeof critic_where, "%s.critic", where);
  if (!gen) gen = &EMPTY;
  if (!critic) critic = &EMPTY;
  rc = layer_spec_check_fields(gen, GEN_FIELDS, gen_where, err);
  if (!rc) rc = layer_spec_int(gen, "filters", 0, 16, 1, 512, &cfg->gen_filters, gen_where, err);
  if (!rc) rc = layer_spec_int(gen, "blocks", 0, 2, 0, 32, &cfg->gen_blocks, gen_where, err);
  if (!rc) rc = layer_spec_int(gen, "downsamples", 0, 2, 0, 4, &cfg->gen_downsamples, gen_where, err);
  if (!rc) rc = layer_spec_choice(gen, "norm", 0, GAN_NORM_INSTANCE, NORMS, &cfg->gen_norm, gen_where, err);
  if (!rc) rc = layer_spec_check_fields(critic, CRITIC_FIELDS, critic_where, err);
  if (!rc) rc = layer_spec_int(critic, "filters", 0, 16, 1, 512, &cfg->critic_filters, critic_where, err);
  if (!rc) rc = layer_spec_int(critic, "layers", 0, 3, 1, 6, &cfg->critic_layers, critic_where, err);
  /* WGAN-GP's critic has no normalisation by default: the penalty's weight
   * gradient needs the layers' jvp and double_backward passes, which
   * instance_norm does not have (its Jacobian depends on its input's
   * statistics), so "instance" is refused under wgan-gp. */
  int wgan = cfg->loss == GAN_LOSS_WGAN_GP;
  if (!rc) rc = layer_spec_choice(critic, "norm", 0, wgan ? GAN_NORM_NONE : GAN_NORM_INSTANCE, NORMS,
                                  &cfg->critic_norm, critic_where, err);
  if (!rc && wgan && cfg->critic_norm == GAN_NORM_INSTANCE)
    rc = error_set(err, ERR_CONFIG, "%s.norm: \"instance\" with \"loss\": \"wgan-gp\": the gradient penalty's "
                   "weight gradient is a double backward through the critic, implemented for conv2d, linear and "
                   "leaky_relu only (instance_norm has none); expected \"none\"", critic_where);
  return rc;
}

cJSON *gan_config_to_json(const GanConfig *cfg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "family", "gan");
  cJSON_AddNumberToObject(o, "channels", cfg->channels);
  cJSON *gen = cJSON_AddObjectToObject(o, "generator");
  cJSON_AddNumberToObject(gen, "filters", cfg->gen_filters);
  cJSON_AddNumberToObject(gen, "blocks", cfg->gen_blocks);
  cJSON_AddNumberToObject(gen, "downsamples", cfg->gen_downsamples);
  cJSON_AddStringToObject(gen, "norm", cfg->gen_norm == GAN_NORM_INSTANCE ? "instance" : "none");
  cJSON *critic = cJSON_AddObjectToObject(o, "critic");
  cJSON_AddNumberToObject(critic, "filters", cfg->critic_filters);
  cJSON_AddNumberToObject(critic, "layers", cfg->critic_layers);
  int wgan = cfg->loss == GAN_LOSS_WGAN_GP;
  /* Fields added after the first version are written only where they
   * differ from their defaults, so that earlier checkpoints' records still
   * match. */
  if (cfg->critic_norm != (wgan ? GAN_NORM_NONE : GAN_NORM_INSTANCE))
    cJSON_AddStringToObject(critic, "norm", cfg->critic_norm == GAN_NORM_NONE ? "none" : "instance");
  cJSON_AddStringToObject(o, "loss", wgan ? "wgan-gp" : "lsgan");
  if (wgan) cJSON_AddNumberToObject(o, "gp_weight", cfg->gp_weight);
  if (cfg->critic_steps != 1) cJSON_AddNumberToObject(o, "critic_steps", cfg->critic_steps);
  cJSON_AddNumberToObject(o, "adv_weight", cfg->adv_weight);
  cJSON_AddNumberToObject(o, "content_weight", cfg->content_weight);
  cJSON_AddNumberToObject(o, "l1_weight", cfg->l1_weight);
  cJSON_AddNumberToObject(o, "edge_weight", cfg->edge_weight);
  return o;
}

/* ---- the network ---- */

typedef struct Gan {
  GanConfig cfg;
  int height, width, max_batch, phase;
  size_t image;  /* floats per image */
  size_t patches; /* critic scores per image */
  Chain gen, critic;
  float *critic_in;  /* [2 max_batch] images: the sharp ones, then the generated */
  float *dcritic_in; /* d loss / d critic_in */
  float *dpatch;     /* d loss / d critic scores */
  float *dout;       /* d loss / d generator output */
  float *scratch;    /* the critic's dropped gradients in the generator phase */
  size_t critic_values;
  int last_n, last_train_phase;
  double loss, d_loss, g_adv, content, psnr, gp;
  /* WGAN-GP: the interpolates, their input gradient, two tangents of the
   * critic's widest activation, the penalty's gradient of the last critic
   * forward (added by the backward), the eps stream's seed. */
  float *x_hat, *grad_x, *tangent[2], *gp_grads, *eps;
  uint64_t seed;
  char names[2][GAN_MAX_LAYERS * LAYER_MAX_PARAMS][NAME_MAX_LEN];
} Gan;

static int check_batch(const Gan *g, int chunk, const GanBatch *b, Error *err) {
  if (chunk != 0) return error_set(err, ERR_ARG, "gan: chunk %d requested, the network is one chunk", chunk);
  if (b->n < 1 || b->n > g->max_batch)
    return error_set(err, ERR_ARG, "gan: a micro-batch of %d pairs, expected 1..%d", b->n, g->max_batch);
  return 0;
}

static float sign_of(float v) { return (float)((v > 0) - (v < 0)); }

/* Content loss of out against sharp; with d != NULL its gradient times
 * `scale` is added into d. */
static double content_loss(const Gan *g, const float *out, const float *sharp, int n, float *d, float scale) {
  int c = g->cfg.channels, h = g->height, w = g->width;
  size_t total = (size_t)n * g->image;
  double l1 = 0, ex = 0, ey = 0;
  const double nx = (double)n * c * h * (w - 1), ny = (double)n * c * (h - 1) * w;
  const float kl1 = (float)(g->cfg.l1_weight / (double)total) * scale;
  const float kx = nx > 0 ? (float)(0.5 * g->cfg.edge_weight / nx) * scale : 0;
  const float ky = ny > 0 ? (float)(0.5 * g->cfg.edge_weight / ny) * scale : 0;
  for (size_t k = 0; k < total; k++) {
    float e = out[k] - sharp[k];
    l1 += fabsf(e);
    if (d) d[k] += kl1 * sign_of(e);
  }
  for (int p = 0; p < n * c; p++) {
    const float *o = out + (size_t)p * h * w, *s = sharp + (size_t)p * h * w;
    float *dp = d ? d + (size_t)p * h * w : NULL;
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        size_t at = (size_t)y * w + x;
        if (x + 1 < w) {
          float e = (o[at + 1] - o[at]) - (s[at + 1] - s[at]);
          ex += fabsf(e);
          if (dp) dp[at + 1] += kx * sign_of(e), dp[at] -= kx * sign_of(e);
        }
        if (y + 1 < h) {
          float e = (o[at + w] - o[at]) - (s[at + w] - s[at]);
          ey += fabsf(e);
          if (dp) dp[at + w] += ky * sign_of(e), dp[at] -= ky * sign_of(e);
        }
      }
  }
  double edge = 0.5 * ((nx > 0 ? ex / nx : 0) + (ny > 0 ? ey / ny : 0));
  return g->cfg.l1_weight * l1 / (double)total + g->cfg.edge_weight * edge;
}

static double mean_psnr(const Gan *g, const float *out, const float *sharp, int n) {
  double sum = 0;
  float *clamped = g->dout; /* free between a forward and its backward */
  for (int s = 0; s < n; s++) {
    for (size_t k = 0; k < g->image; k++) {
      float v = out[(size_t)s * g->image + k];
      clamped[k] = v < 0 ? 0 : v > 1 ? 1 : v;
    }
    double psnr;
    Error err;
    if (image_psnr(clamped, sharp + (size_t)s * g->image, g->image, 1.0, &psnr, &err) || psnr > GAN_PSNR_CAP)
      psnr = GAN_PSNR_CAP;
    sum += psnr;
  }
  return sum / n;
}

/* The generator's output on blurred into the fake half of critic_in. */
static int generate(Gan *g, const float *blurred, int n, int train, Error *err) {
  int rc = gan_chain_forward(&g->gen, blurred, n, train, err);
  if (rc) return rc;
  const float *residual = g->gen.act[g->gen.num_layers - 1];
  float *out = g->critic_in + (size_t)n * g->image;
  for (size_t k = 0; k < (size_t)n * g->image; k++) out[k] = blurred[k] + residual[k];
  return 0;
}

/* Rebinds the critic's parameter gradients to `base` (the network's buffer
 * or the scratch one, same layout). */
static void bind_critic_grads(Network *net, Gan *g, float *base) {
  for (int i = 0; i < g->critic.num_layers; i++) {
    Layer *l = &g->critic.layers[i];
    for (int t = 0; t < l->num_params; t++) l->grad[t] = base + (l->param[t] - net->values);
  }
}

/* ---- WGAN-GP's gradient penalty ---- */

/* The penalty of the critic at x_hat[n] into g->gp and, with want_grad, its
 * gradient with respect to the critic's parameters into g->gp_grads.
 *
 * Closed form (the critic is conv2d, linear and leaky_relu layers, no skip,
 * no normalisation; gan_create checks it). With D_s the mean patch score
 * of sample s and u = 1/P on each patch, the backward of u through the
 * layers, v_L = u, v_{i-1} = B_i v_i (B_i: layer i's backward at x_hat,
 * transposed weights or a fixed mask), gives g_s = grad_x D_s = v_0. With
 * r = d gp / d g = gp_weight 2 (|g_s| - 1) g_s / (|g_s| n), the chain rule
 * with the masks held fixed gives
 *   d gp / d theta_i = d/d theta_i <t_{i-1}, B_i(theta_i) v_i>,
 *   t_{-1} = r, t_i = J_i t_{i-1}   (J_i = B_i^T, layer i's forward map),
 * one layer's double_backward with its own forward's tangent t_{i-1} and
 * the backward's v_i (nets/layer.h). The masks' own derivative is zero
 * almost everywhere, which is also what PyTorch's double backward of
 * leaky_relu returns, so this is the same gradient, not an approximation
 * of it. */
static int critic_penalty(Network *net, Gan *g, int n, int want_grad, Error *err) {
  Chain *c = &g->critic;
  int rc = gan_chain_forward(c, g->x_hat, n, 1, err);
  if (rc) return rc;
  size_t m = (size_t)n * g->patches;
  for (size_t k = 0; k < m; k++) g->dpatch[k] = 1.0f / (float)g->patches;
  /* the first-order parameter gradients of this pass are not wanted */
  memset(g->scratch, 0, g->critic_values * sizeof(float));
  bind_critic_grads(net, g, g->scratch);
  rc = gan_chain_backward(c, g->x_hat, g->dpatch, g->grad_x, n, err);
  bind_critic_grads(net, g, net->grads);
  if (rc) return rc;
  double sum = 0;
  float *r = g->tangent[0];
  for (int s = 0; s < n; s++) {
    const float *gs = g->grad_x + (size_t)s * g->image;
    double sq = 0;
    for (size_t k = 0; k < g->image; k++) sq += (double)gs[k] * gs[k];
    double norm = sqrt(sq);
    sum += (norm - 1) * (norm - 1);
    float coef = norm > 0 ? (float)(2.0 * g->cfg.gp_weight * (norm - 1) / (norm * n)) : 0.0f;
    for (size_t k = 0; k < g->image; k++) r[(size_t)s * g->image + k] = coef * gs[k];
  }
  g->gp = g->cfg.gp_weight * sum / n;
  if (!want_grad) return 0;
  memset(g->gp_grads, 0, g->critic_values * sizeof(float));
  bind_critic_grads(net, g, g->gp_grads);
  int t = 0;
  for (int i = 0; i < c->num_layers && !rc; i++) {
    Layer *l = &c->layers[i];
    const float *x = gan_chain_output_of(c, i - 1, g->x_hat);
    rc = l->ops->double_backward(l, x, g->tangent[t], c->grad[i], n, err);
    if (!rc && i + 1 < c->num_layers) rc = l->ops->jvp(l, x, c->act[i], g->tangent[t], g->tangent[1 - t], n, err);
    t = 1 - t;
    if (rc) rc = error_wrap(err, "gan: critic layer %d (%s), the gradient penalty's double backward", i, l->ops->kind);
  }
  bind_critic_grads(net, g, net->grads);
  return rc;
}

/* x_hat = eps real + (1 - eps) fake, eps per sample. */
static void interpolate(Gan *g, const float *real, const float *fake, const float *eps, int n) {
  for (int s = 0; s < n; s++)
    for (size_t k = 0; k < g->image; k++) {
      size_t at = (size_t)s * g->image + k;
      g->x_hat[at] = eps[s] * real[at] + (1.0f - eps[s]) * fake[at];
    }
}

/* The critic on critic_in (real then fake, 2n): the losses of its scores. */
static int critic_scores(Gan *g, int n, double *real_mean, double *fake_mean, double *adv, Error *err) {
  int rc = gan_chain_forward(&g->critic, g->critic_in, 2 * n, 1, err);
  if (rc) return rc;
  const float *scores = g->critic.act[g->critic.num_layers - 1];
  size_t m = (size_t)n * g->patches;
  double real = 0, fake = 0, a = 0;
  for (size_t k = 0; k < m; k++) {
    double r = scores[k], f = scores[m + k];
    if (g->cfg.loss == GAN_LOSS_WGAN_GP) {
      real += r, fake += f;
    } else {
      real += (r - 1) * (r - 1);
      fake += f * f;
      a += (f - 1) * (f - 1);
    }
  }
  *real_mean = real / (double)m, *fake_mean = fake / (double)m, *adv = a / (double)m;
  return 0;
}

static int gan_forward(Network *net, int chunk, const void *batch, Error *err) {
  Gan *g = net->impl;
  const GanBatch *b = batch;
  int rc = check_batch(g, chunk, b, err);
  if (rc) return rc;
  int n = b->n;
  g->last_n = 0;
  if ((rc = generate(g, b->blurred, n, g->phase == GAN_GROUP_GENERATOR, err))) return rc;
  const float *out = g->critic_in + (size_t)n * g->image;
  int wgan = g->cfg.loss == GAN_LOSS_WGAN_GP;
  if (wgan) {
    /* first, so that the critic's state is the real and fake pass's for the backward */
    for (int s = 0; s < n; s++) g->eps[s] = (float)rng_uniform(g->seed, GAN_EPS_STREAM, b->draw + (uint64_t)s);
    interpolate(g, b->sharp, out, g->eps, n);
    if ((rc = critic_penalty(net, g, n, g->phase == GAN_GROUP_CRITIC, err))) return rc;
  }
  memcpy(g->critic_in, b->sharp, (size_t)n * g->image * sizeof(float));
  double real, fake, adv;
  if ((rc = critic_scores(g, n, &real, &fake, &adv, err))) return rc;
  g->d_loss = wgan ? fake - real + g->gp : 0.5 * (real + fake);
  g->g_adv = wgan ? -fake : adv;
  g->content = content_loss(g, out, b->sharp, n, NULL, 0);
  g->loss = g->cfg.adv_weight * g->g_adv + g->cfg.content_weight * g->content;
  g->psnr = mean_psnr(g, out, b->sharp, n);
  g->last_n = n;
  g->last_train_phase = g->phase;
  return 0;
}

static int gan_backward(Network *net, int chunk, const void *batch, float loss_scale, Error *err) {
  Gan *g = net->impl;
  const GanBatch *b = batch;
  int rc = check_batch(g, chunk, b, err);
  if (rc) return rc;
  if (g->last_n != b->n || g->last_train_phase != g->phase)
    return error_set(err, ERR_ARG, "gan: backward without the forward of this micro-batch in this phase");
  int n = b->n;
  size_t m = (size_t)n * g->patches;
  const float *scores = g->critic.act[g->critic.num_layers - 1];
  int wgan = g->cfg.loss == GAN_LOSS_WGAN_GP;
  if (g->phase == GAN_GROUP_CRITIC) {
    float k = loss_scale / (float)m;
    if (wgan)
      for (size_t i = 0; i < m; i++) g->dpatch[i] = -k, g->dpatch[m + i] = k;
    else
      for (size_t i = 0; i < m; i++) g->dpatch[i] = (scores[i] - 1) * k, g->dpatch[m + i] = scores[m + i] * k;
    rc = gan_chain_backward(&g->critic, g->critic_in, g->dpatch, NULL, 2 * n, err);
    if (!rc && wgan) vec_axpy(net->grads, loss_scale, g->gp_grads, g->critic_values);
    return rc;
  }
  float k = (float)((wgan ? 1.0 : 2.0) * g->cfg.adv_weight / (double)m) * loss_scale;
  for (size_t i = 0; i < m; i++) g->dpatch[i] = 0, g->dpatch[m + i] = wgan ? -k : (scores[m + i] - 1) * k;
  memset(g->scratch, 0, g->critic_values * sizeof(float));
  bind_critic_grads(net, g, g->scratch);
  rc = gan_chain_backward(&g->critic, g->critic_in, g->dpatch, g->dcritic_in, 2 * n, err);
  bind_critic_grads(net, g, net->grads);
  if (rc) return rc;
  size_t len = (size_t)n * g->image;
  memcpy(g->dout, g->dcritic_in + len, len * sizeof(float));
  content_loss(g, g->critic_in + len, b->sharp, n, g->dout, (float)g->cfg.content_weight * loss_scale);
  /* out = blurred + residual: the residual's gradient is the output's */
  return gan_chain_backward(&g->gen, b->blurred, g->dout, NULL, n, err);
}

static int gan_metrics(const Network *net, NetMetric *metrics, int cap) {
  const Gan *g = net->impl;
  const NetMetric all[] = {{"loss", g->loss, 4},       {"d_loss", g->d_loss, 4}, {"g_adv", g->g_adv, 4},
                           {"content", g->content, 4}, {"psnr", g->psnr, 2},   {"gp", g->gp, 4}};
  int count = (int)(sizeof all / sizeof all[0]) - (g->cfg.loss != GAN_LOSS_WGAN_GP);
  for (int i = 0; i < count && i < cap; i++) metrics[i] = all[i];
  return count;
}

static void gan_begin_phase(Network *net, int param_group) { ((Gan *)net->impl)->phase = param_group; }

static void gan_free(Network *net) {
  Gan *g = net->impl;
  if (!g) return;
  gan_chain_free(&g->gen);
  gan_chain_free(&g->critic);
  free(g->critic_in);
  free(g->dcritic_in);
  free(g->dpatch);
  free(g->dout);
  free(g->scratch);
  free(g->x_hat), free(g->grad_x), free(g->tangent[0]), free(g->tangent[1]), free(g->gp_grads), free(g->eps);
  free(net->values);
  free(net->grads);
  free(g);
}

static const NetworkOps GAN_OPS = {.family = "gan",
                                   .forward = gan_forward,
                                   .backward = gan_backward,
                                   .metrics = gan_metrics,
                                   .unit = {"image", "images", "img/s"},
                                   .begin_phase = gan_begin_phase,
                                   .free = gan_free};

/* The table: the critic's tensors (group 0), then the generator's (group 1). */
static int lay_out_params(Network *net, Gan *g) {
  int tensors = 0;
  g->critic_values = layer_param_floats(g->critic.layers, g->critic.num_layers, &tensors);
  size_t values = g->critic_values + layer_param_floats(g->gen.layers, g->gen.num_layers, &tensors);
  net->num_tensors = tensors;
  net->num_values = values;
  net->params = calloc((size_t)tensors, sizeof *net->params);
  net->values = calloc(values, sizeof(float));
  net->grads = calloc(values, sizeof(float));
  g->scratch = calloc(g->critic_values ? g->critic_values : 1, sizeof(float));
  if (!net->params || !net->values || !net->grads || !g->scratch) return ERR_NOMEM;
  size_t offset = 0;
  int k = 0;
  for (int which = 0; which < 2; which++) {
    Chain *c = which == GAN_GROUP_CRITIC ? &g->critic : &g->gen;
    for (int i = 0, own = 0; i < c->num_layers; i++) {
      Layer *l = &c->layers[i];
      for (int t = 0; t < l->num_params; t++, k++, own++) {
        snprintf(g->names[which][own], NAME_MAX_LEN, "%s.layers.%d.%s",
                 which == GAN_GROUP_CRITIC ? "critic" : "generator", i, l->params[t].suffix);
        layer_bind_param(l, t, &net->params[k], g->names[which][own], net->values, net->grads, offset);
        net->params[k].param_group = which;
        offset += l->params[t].numel;
      }
    }
  }
  return 0;
}

/* The closed form of critic_penalty holds for a chain of layers with both
 * second-order passes and no skip. */
static int check_penalty_critic(const Chain *c, Error *err) {
  for (int i = 0; i < c->num_layers; i++) {
    const Layer *l = &c->layers[i];
    if (!l->ops->jvp || !l->ops->double_backward || c->skip_from[i] >= 0)
      return error_set(err, ERR_CONFIG, "gan: critic layer %d (%s) under \"loss\": \"wgan-gp\": the gradient "
                       "penalty's double backward is implemented for conv2d, linear and leaky_relu chains only", i,
                       l->ops->kind);
  }
  return 0;
}

int gan_create(Network *net, const GanConfig *cfg, int height, int width, int max_batch, Error *err) {
  memset(net, 0, sizeof *net);
  int stride = gan_stride(cfg);
  if (max_batch < 1) return error_set(err, ERR_ARG, "gan: micro-batch size %d, expected >= 1", max_batch);
  if (height < stride || width < stride || height % stride || width % stride)
    return error_set(err, ERR_CONFIG, "gan: images of %d x %d, expected sides that are multiples of %d (2 to the "
                     "generator's %d downsamples)", height, width, stride, cfg->gen_downsamples);
  Gan *g = calloc(1, sizeof *g);
  if (!g) return error_set(err, ERR_NOMEM, "out of memory for the gan network");
  g->cfg = *cfg;
  g->height = height, g->width = width, g->max_batch = max_batch;
  g->phase = GAN_GROUP_CRITIC;
  g->image = (size_t)cfg->channels * height * width;
  g->gen.in = g->critic.in = (LayerShape){cfg->channels, height, width};
  g->gen.max_batch = max_batch;
  g->critic.max_batch = 2 * max_batch;
  net->ops = &GAN_OPS;
  net->impl = g;
  net->num_param_groups = 2;
  net->phase_repeats[GAN_GROUP_CRITIC] = cfg->critic_steps;
  net->phase_repeats[GAN_GROUP_GENERATOR] = 1;
  net->num_chunks = 1;
  int rc = build_generator(&g->gen, cfg, err);
  if (!rc) rc = build_critic(&g->critic, cfg, err);
  if (rc) {
    network_free(net);
    return error_wrap(err, "gan: building the networks for %d x %d images", height, width);
  }
  if (!rc && cfg->loss == GAN_LOSS_WGAN_GP) rc = check_penalty_critic(&g->critic, err);
  /* The generator's activations blocked or channels-last between its
   * layers where they allow it (every layer a convolution or elementwise:
   * "norm": "none"): its convolutions then run without reorders
   * (gan_chain.h). The critic stays NCHW. */
  int layout;
  if (!rc) rc = gan_chain_inner_layout(&g->gen, &layout, err);
  if (rc) {
    network_free(net);
    return rc;
  }
  g->patches = layer_shape_numel(gan_chain_out_shape(&g->critic));
  size_t pair_floats = 2 * (size_t)max_batch * g->image;
  int ok = !lay_out_params(net, g) && !gan_chain_alloc(&g->gen) && !gan_chain_alloc(&g->critic) &&
           (g->critic_in = malloc(pair_floats * sizeof(float))) &&
           (g->dcritic_in = malloc(pair_floats * sizeof(float))) &&
           (g->dpatch = malloc(2 * (size_t)max_batch * g->patches * sizeof(float))) &&
           (g->dout = malloc((size_t)max_batch * g->image * sizeof(float)));
  if (ok && cfg->loss == GAN_LOSS_WGAN_GP) {
    size_t widest = g->image;
    for (int i = 0; i < g->critic.num_layers; i++) {
      size_t out = layer_shape_numel(g->critic.layers[i].out);
      widest = out > widest ? out : widest;
    }
    ok = (g->x_hat = malloc((size_t)max_batch * g->image * sizeof(float))) &&
         (g->grad_x = malloc((size_t)max_batch * g->image * sizeof(float))) &&
         (g->tangent[0] = malloc((size_t)max_batch * widest * sizeof(float))) &&
         (g->tangent[1] = malloc((size_t)max_batch * widest * sizeof(float))) &&
         (g->gp_grads = calloc(g->critic_values ? g->critic_values : 1, sizeof(float))) &&
         (g->eps = malloc((size_t)max_batch * sizeof(float)));
  }
  if (!ok) {
    network_free(net);
    return error_set(err, ERR_NOMEM, "out of memory for the gan network's buffers");
  }
  /* Counted per image and step: each critic phase runs the generator
   * forward (2 Mg) and the critic forward and backward on two images (2 x 6
   * Md), the generator phase both forward and backward (6 Mg + 2 x 6 Md).
   * WGAN-GP adds the penalty on one image: forward, backward of the input,
   * jvp and weight gradients in a critic phase (8 Md), forward and backward
   * of the input for the metric in the generator phase (4 Md). */
  double gen = gan_chain_mults(&g->gen), critic = gan_chain_mults(&g->critic), k = cfg->critic_steps;
  int wgan = cfg->loss == GAN_LOSS_WGAN_GP;
  net->flops_per_unit = k * (2.0 * gen + (12.0 + 8.0 * wgan) * critic) + 6.0 * gen + (12.0 + 4.0 * wgan) * critic;
  return 0;
}

void gan_init_weights(Network *net, uint64_t seed) {
  Gan *g = net->impl;
  g->seed = seed;
  for (int i = 0; i < g->critic.num_layers; i++) g->critic.layers[i].ops->init(&g->critic.layers[i], seed, (uint64_t)i);
  for (int i = 0; i < g->gen.num_layers; i++)
    g->gen.layers[i].ops->init(&g->gen.layers[i], seed, (uint64_t)(GAN_MAX_LAYERS + i));
  /* The last convolution (before the tanh) starts at zero: the generator
   * starts as the identity, out = blurred, and learns the residual. */
  Layer *last = &g->gen.layers[g->gen.num_layers - 2];
  for (int t = 0; t < last->num_params; t++) memset(last->param[t], 0, last->params[t].numel * sizeof(float));
}

int gan_generate(Network *net, const float *blurred, int n, float *out, Error *err) {
  Gan *g = net->impl;
  if (n < 1 || n > g->max_batch)
    return error_set(err, ERR_ARG, "gan: %d images to generate, expected 1..%d", n, g->max_batch);
  int rc = generate(g, blurred, n, 0, err);
  if (rc) return rc;
  const float *made = g->critic_in + (size_t)n * g->image;
  for (size_t k = 0; k < (size_t)n * g->image; k++) out[k] = made[k] < 0 ? 0 : made[k] > 1 ? 1 : made[k];
  g->last_n = 0; /* the critic's saved state no longer matches */
  return 0;
}

int gan_wgan_gp_critic_loss(Network *net, const float *real, const float *fake, const float *eps, int n,
                            double wasserstein_weight, double *penalty, double *wasserstein, Error *err) {
  Gan *g = net->impl;
  if (g->cfg.loss != GAN_LOSS_WGAN_GP) return error_set(err, ERR_ARG, "gan: the network's loss is not wgan-gp");
  if (n < 1 || n > g->max_batch)
    return error_set(err, ERR_ARG, "gan: %d image pairs, expected 1..%d", n, g->max_batch);
  g->last_n = 0;
  interpolate(g, real, fake, eps, n);
  int rc = critic_penalty(net, g, n, 1, err);
  memcpy(g->critic_in, real, (size_t)n * g->image * sizeof(float));
  memcpy(g->critic_in + (size_t)n * g->image, fake, (size_t)n * g->image * sizeof(float));
  double real_mean, fake_mean, unused;
  if (!rc) rc = critic_scores(g, n, &real_mean, &fake_mean, &unused, err);
  if (rc) return rc;
  size_t m = (size_t)n * g->patches;
  float k = (float)(wasserstein_weight / (double)m);
  for (size_t i = 0; i < m; i++) g->dpatch[i] = -k, g->dpatch[m + i] = k;
  if (wasserstein_weight != 0 && (rc = gan_chain_backward(&g->critic, g->critic_in, g->dpatch, NULL, 2 * n, err)))
    return rc;
  vec_axpy(net->grads, 1.0f, g->gp_grads, g->critic_values);
  *penalty = g->gp;
  *wasserstein = fake_mean - real_mean;
  return 0;
}

int gan_generator_pass(Network *net, const float *blurred, const float *sharp, int n, double *content, Error *err) {
  Gan *g = net->impl;
  if (n < 1 || n > g->max_batch)
    return error_set(err, ERR_ARG, "gan: a generator pass of %d images, expected 1..%d", n, g->max_batch);
  int rc = generate(g, blurred, n, 1, err);
  if (rc) return rc;
  const float *out = g->critic_in + (size_t)n * g->image;
  memset(g->dout, 0, (size_t)n * g->image * sizeof(float));
  *content = content_loss(g, out, sharp, n, g->dout, (float)g->cfg.content_weight);
  g->last_n = 0; /* the critic's saved state no longer matches */
  return gan_chain_backward(&g->gen, blurred, g->dout, NULL, n, err);
}

static size_t describe_chain(const Chain *c, const char *title, char *buf, size_t at, size_t cap) {
  int wrote = snprintf(buf + at, cap - at, "%s%s", at ? " | " : "", title);
  at += wrote > 0 ? (size_t)wrote : 0;
  for (int i = 0; i < c->num_layers && at < cap; i++) {
    const Layer *l = &c->layers[i];
    if (strcmp(l->ops->kind, "conv2d") && strcmp(l->ops->kind, "conv_transpose2d")) continue;
    wrote = snprintf(buf + at, cap - at, " %s %dx%dx%d", l->ops->kind, l->out.c, l->out.h, l->out.w);
    at += wrote > 0 ? (size_t)wrote : 0;
  }
  if (c->inner_layout != CONV2D_NCHW && at < cap) {
    wrote = snprintf(buf + at, cap - at, " (activations %s)",
                     c->inner_layout == CONV2D_NCHW16C ? "blocked by 16 channels, Winograd 3x3" : "channels-last");
    at += wrote > 0 ? (size_t)wrote : 0;
  }
  return at < cap ? at : cap - 1;
}

void gan_describe(const Network *net, char *buf, size_t cap) {
  const Gan *g = net->impl;
  if (!cap) return;
  buf[0] = '\0';
  size_t at = describe_chain(&g->gen, "generator", buf, 0, cap);
  describe_chain(&g->critic, "critic", buf, at, cap);
}
