/* Image classifiers built from a layer list (nets/layer.h), defined only
 * through the network interface (nets/network.h):
 *
 *   "model": {"family": "vision", "input": [1, 28, 28], "classes": 10,
 *             "layers": [{"type": "conv2d", "out_channels": 4, "kernel": 3}, ...]}
 *
 * The layers run in order on NCHW samples; the last one's output must hold
 * `classes` values (the logits), and the loss is softmax cross-entropy,
 * numerically stable (the largest logit subtracted), the mean over the
 * micro-batch. Metrics: "loss" and "accuracy" (the fraction of samples
 * whose largest logit is the label; the first of equal logits counts).
 *
 * Parameters, in layer order: "layers.<i>.<suffix>" for layer i's tensors
 * ("weight", then "bias"), each layer initialised by its own scheme from
 * (seed, stream i). Multiplications and additions per sample are the sums
 * of the layers' counts (the loss is not counted). After each optimizer
 * update the network calls every layer's after_update hook. */
#ifndef FIVEFOLD_NETS_VISION_H
#define FIVEFOLD_NETS_VISION_H

#include <stdint.h>

#include "base/error.h"
#include "nets/network.h"

#define VISION_MAX_LAYERS 32
#define VISION_SPEC_MAX 8192 /* the "layers" array as JSON text */

struct cJSON;

typedef struct VisionConfig {
  int in_c, in_h, in_w; /* one sample: channels x height x width */
  int classes;
  int num_layers;
  char layers_json[VISION_SPEC_MAX]; /* the config's "layers" array, unformatted, checked */
} VisionConfig;

/* One micro-batch: n images x [n, in_c, in_h, in_w] and their labels y [n]. */
typedef struct VisionBatch {
  int n;
  const float *x;
  const int *y;
} VisionBatch;

/* The "model" object of a run config with "family": "vision"; every layer
 * is built once on its input shape, so that a bad layer or a last layer
 * without `classes` outputs is reported here, naming origin and
 * model.layers[i].field. */
int vision_config_from_json(VisionConfig *cfg, const struct cJSON *obj, const char *origin, Error *err);
struct cJSON *vision_config_to_json(const VisionConfig *cfg);
/* "crc32:xxxxxxxx" of vision_config_to_json's unformatted text: what a plan
 * file's model_identity.fingerprint holds for a vision network, so that
 * `train --plan` refuses a plan made for another network. */
void vision_config_fingerprint(const VisionConfig *cfg, char *out, size_t n);
/* "input 1x28x28, 8 layers, 10 classes", for messages. */
void vision_config_summary(const VisionConfig *cfg, char *out, size_t n);

/* net gets the network's table and zeroed buffers; micro-batches hold at
 * most max_batch images. network_free frees it. */
int vision_create(Network *net, const VisionConfig *cfg, int max_batch, Error *err);
/* Every layer's own initialisation from the seed (stream = layer index). */
void vision_init_weights(Network *net, uint64_t seed);
/* 1: the forwards that follow are evaluation (layers keep nothing for
 * backward and use their eval form); 0 (the default): training. */
void vision_set_eval(Network *net, int eval);
/* The softmax of the last forward's logits, [n, classes] for its n images
 * (valid until the next forward). */
const float *vision_probabilities(const Network *net);
/* Per image, summed over the layers. */
double vision_mults_per_sample(const Network *net);
double vision_adds_per_sample(const Network *net);
/* The multiplications per image one forward of b really performs (train 1:
 * the training forward, 0: evaluation), counted by the layers' kernel calls
 * (kern/op_count.h) rather than by their formulas; the loss is not
 * counted. The network's state is as after any forward of b. */
int vision_count_mults(Network *net, const VisionBatch *b, int train, double *per_image, Error *err);
/* The built layers in order (shapes, parameters, counts), for the cost
 * model's description of the network (cli/cmd_simulate_net.c). */
const struct Layer *vision_layers(const Network *net, int *count);
/* A one-line description of the layers: "conv2d 4x3x3 -> relu -> ...". */
void vision_describe(const Network *net, char *buf, size_t cap);

#endif
