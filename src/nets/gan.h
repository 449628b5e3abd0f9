/* A deblurring GAN (DeblurGAN's design, sized by config) defined only
 * through the network interface (nets/network.h), with two parameter
 * groups that step in phases of their own:
 *
 *   "model": {"family": "gan", "channels": 1,
 *             "generator": {"filters": 16, "blocks": 2, "downsamples": 2,
 *                           "norm": "instance"},
 *             "critic": {"filters": 16, "layers": 3},
 *             "loss": "lsgan", "adv_weight": 1, "content_weight": 100,
 *             "l1_weight": 1, "edge_weight": 1, "critic_steps": 1}
 *   or "loss": "wgan-gp" with "gp_weight": 10 (lambda) and the critic's
 *   "norm": "none" (its default under wgan-gp; "instance" is refused)
 *
 * Generator (group GAN_GROUP_GENERATOR = 1), fully convolutional, built
 * from the layer registry (nets/layer.h): conv 7x7 (filters) + instance
 * norm + ReLU; `downsamples` strided 3x3 convs doubling the width, each +
 * IN + ReLU; `blocks` residual blocks x + IN(conv3(ReLU(IN(conv3(x)))));
 * as many 3x3 stride-2 transposed convs halving the width, + IN + ReLU;
 * conv 7x7 to the channels and tanh. The output is the blurred input plus
 * that residual (the global skip): out = blurred + tanh(...); the last
 * conv starts at zero (gan_init_weights), so the network starts as the
 * identity. With "norm": "none" the instance norms are left out and the
 * convolutions keep their bias (the block is x + conv3(ReLU(conv3(x)))):
 * on the bench's faces it deblurs as well as with instance norm (within
 * 0.1 dB, docs/deblur.md) and costs less. Heights and widths must be multiples
 * of 2^downsamples (`fivefold deblur` pads an image to them).
 *
 * Critic (group GAN_GROUP_CRITIC = 0, first, so that a step runs the critic
 * phase before the generator phase, as DeblurGAN does): DeblurGAN's
 * PatchGAN with n = layers: conv 4x4 stride 2 padding 2 (filters) +
 * LeakyReLU(0.2); n - 1 more of them, the width doubling up to 8 filters,
 * each + IN + LeakyReLU; one at stride 1 (+ IN + LeakyReLU); a last 4x4
 * stride-1 conv to one channel: a map of patch scores. With critic.norm
 * "none" the instance norms are left out and those convs get a bias.
 *
 * Losses. Means over the micro-batch and the critic's patches; LSGAN:
 *   d_loss  = (mean (D(sharp) - 1)^2 + mean D(out)^2) / 2
 *   g_adv   = mean (D(out) - 1)^2
 * WGAN-GP (Gulrajani et al. 2017), the critic's score of an image being
 * the mean of its patch scores, D(x) = mean_p C(x)_p:
 *   d_loss  = mean D(out) - mean D(sharp) + gp
 *   gp      = gp_weight mean_s (||grad_x D(x_hat_s)||_2 - 1)^2,
 *             x_hat_s = eps_s sharp_s + (1 - eps_s) out_s, eps_s uniform in
 *             [0, 1) from the run's seed and the sample's draw number
 *             (GanBatch.draw), the norm over the whole image
 *   g_adv   = -mean D(out)
 * The penalty's gradient with respect to the critic's weights is a double
 * backward, computed in closed form for the piecewise-linear critic
 * (nets/layer.h's jvp and double_backward; see gan.c).
 *   content = l1_weight mean |out - sharp|
 *             + edge_weight (mean |dx out - dx sharp| + mean |dy out - dy sharp|) / 2
 *             (dx, dy: forward differences along a row and a column)
 *   loss    = adv_weight g_adv + content_weight content (the generator's)
 * No pretrained feature network (VGG) exists offline, so the edge term
 * stands in for the perceptual loss.
 *
 * Phases (begin_phase). Critic phase: the generator runs forward without
 * keeping anything, the critic forward and backward on the micro-batch's
 * sharp and generated images together (one batch of 2n: instance norm is
 * per sample), gradients of d_loss into the critic. Generator phase: the
 * generator forward, the critic forward on both halves, the backward of the
 * generator's loss through the critic into the generator; the critic's
 * parameter gradients of that pass go to a scratch buffer and are dropped.
 *
 * Critic steps. critic_steps = k > 1 asks the runtime for k critic phases
 * per iteration, each on a fresh batch, then the generator phase on the
 * last critic phase's batch (Network.phase_repeats); k = 1 is one of each.
 *
 * Metrics of each forward: "loss", "d_loss", "g_adv", "content" and
 * "psnr", and under WGAN-GP "gp" (mean over the micro-batch of the PSNR of the output, clamped to
 * 0..1, against the sharp image, capped at 100 dB). Both phases measure all
 * of them, so the runtime's mean over a step's phases is the mean of the
 * step's two measurements (g_adv and d_loss before and after the critic's
 * update). Unit: image.
 *
 * Convolutions that an instance norm follows have no bias (the norm
 * removes it); the others (the critic's first and last, the generator's
 * last) have one.
 *
 * Parameters: "critic.layers.<i>.<suffix>" then
 * "generator.layers.<i>.<suffix>", i the index in the network's own layer
 * list (residual blocks are five consecutive layers). */
#ifndef FIVEFOLD_NETS_GAN_H
#define FIVEFOLD_NETS_GAN_H

#include <stdint.h>

#include "base/error.h"
#include "nets/network.h"

#define GAN_GROUP_CRITIC 0
#define GAN_GROUP_GENERATOR 1
#define GAN_NORM_INSTANCE 0
#define GAN_NORM_NONE 1

struct cJSON;

#define GAN_LOSS_LSGAN 0
#define GAN_LOSS_WGAN_GP 1
#define GAN_MAX_CRITIC_STEPS 15 /* a phased program holds at most 16 phases (SCHED_MAX_PHASES) */

typedef struct GanConfig {
  int channels;
  int gen_filters, gen_blocks, gen_downsamples;
  int gen_norm; /* GAN_NORM_INSTANCE or GAN_NORM_NONE */
  int critic_filters, critic_layers, critic_norm; /* GAN_NORM_* */
  int loss;                                       /* GAN_LOSS_* */
  int critic_steps;
  double adv_weight, content_weight, l1_weight, edge_weight, gp_weight;
} GanConfig;

/* One micro-batch: n pairs, blurred and sharp, each [n, channels, h, w].
 * draw numbers the micro-batch's first sample among every sample the run
 * draws (WGAN-GP's eps of sample s comes from draw + s), so that replicas
 * and resumed runs draw what one uninterrupted rank does. */
typedef struct GanBatch {
  int n;
  const float *blurred;
  const float *sharp;
  uint64_t draw;
} GanBatch;

/* The "model" object of a run config with "family": "gan"; errors name
 * origin and model.<field> (model.generator.filters, ...). */
int gan_config_from_json(GanConfig *cfg, const struct cJSON *obj, const char *origin, Error *err);
struct cJSON *gan_config_to_json(const GanConfig *cfg);
/* The multiple of which the generator's image sides must be. */
int gan_stride(const GanConfig *cfg);

/* net gets both networks' table and zeroed buffers, for images of
 * height x width and micro-batches of at most max_batch pairs. */
int gan_create(Network *net, const GanConfig *cfg, int height, int width, int max_batch, Error *err);
/* Every layer's own initialisation from the seed, then the generator's
 * last convolution zeroed. */
void gan_init_weights(Network *net, uint64_t seed);
/* WGAN-GP's critic loss on given images and eps (n of each, n at most the
 * network's micro-batch): *penalty = gp, *wasserstein = mean D(fake) -
 * mean D(real), and the gradient of wasserstein_weight * wasserstein + gp
 * with respect to the critic's parameters ADDED into net->grads. For
 * tests (the runtime's path is forward and backward); refused unless the
 * network's loss is wgan-gp. */
int gan_wgan_gp_critic_loss(Network *net, const float *real, const float *fake, const float *eps, int n,
                            double wasserstein_weight, double *penalty, double *wasserstein, Error *err);
/* out[n, c, h, w] = the generator's output on blurred, clamped to 0..1
 * (an evaluation forward: keeps nothing for backward). */
int gan_generate(Network *net, const float *blurred, int n, float *out, Error *err);
/* The generator alone, as a content-only step without the critic: forward
 * on blurred (keeping state), the content loss against sharp, its backward
 * adding into the generator's parameter gradients. For timing the
 * generator by itself (bench/bench_gan_generator.c); training runs the
 * phases. *content gets the loss. */
int gan_generator_pass(Network *net, const float *blurred, const float *sharp, int n, double *content, Error *err);
/* "generator conv 16x28x28 -> ... | critic ..." */
void gan_describe(const Network *net, char *buf, size_t cap);

#endif
