/* A small multi-layer perceptron classifier, defined only through the
 * network interface (nets/network.h): dense layers with tanh between them
 * and a softmax cross-entropy loss, on a synthetic task generated from the
 * seed. It is the second network the trainer drives, so that the runtime
 * is proven not to depend on the transformer.
 *
 * The task: sample i has features x_i ~ N(0, 1)^inputs, drawn from
 * (seed, i) alone, and the class argmax_c (T x_i)_c of a fixed random
 * "teacher" matrix T [classes, inputs] drawn from the seed; so any rank can
 * produce any sample, and a run is reproducible from its seed. Validation
 * samples are numbered from MLP_VAL_FIRST_SAMPLE on, apart from training's.
 *
 * Parameters, in buffer order: for each layer l (hidden layers, then the
 * output layer) "layers.<l>.weight" [out, in] and "layers.<l>.bias" [out];
 * biases are not decayed.
 *
 * Parameter groups ("param_groups": G, default 1): the layers are cut into
 * G consecutive blocks (layer l in group l * G / layers), each a parameter
 * group that steps in a phase of its own (nets/network.h): a
 * block-coordinate scheme in which every step updates the first block, then
 * the next with the first already updated. It is how the runtime's phased
 * programs are proven on a real network before a GAN uses them. */
#ifndef FIVEFOLD_NETS_MLP_H
#define FIVEFOLD_NETS_MLP_H

#include <stdint.h>

#include "base/error.h"
#include "nets/network.h"

#define MLP_MAX_HIDDEN 4
#define MLP_MAX_WIDTH 4096
#define MLP_VAL_FIRST_SAMPLE (UINT64_C(1) << 40)

struct cJSON;

typedef struct MlpConfig {
  int inputs;  /* features per sample */
  int classes; /* outputs */
  int num_hidden;
  int hidden[MLP_MAX_HIDDEN]; /* widths of the hidden layers */
  int param_groups;           /* 1..layers; 0 reads as 1 */
} MlpConfig;

/* One micro-batch: n samples, x [n, inputs] and their classes y [n]. */
typedef struct MlpBatch {
  int n;
  float *x;
  int *y;
} MlpBatch;

/* The "model" object of a run config with "family": "mlp": {"family":
 * "mlp", "inputs": 16, "hidden": [64, 64], "classes": 4} and optionally
 * "param_groups": 2. Errors name origin and the field. */
int mlp_config_from_json(MlpConfig *cfg, const struct cJSON *obj, const char *origin, Error *err);
struct cJSON *mlp_config_to_json(const MlpConfig *cfg);
/* Parameters of the network (weights and biases). */
size_t mlp_num_params(const MlpConfig *cfg);
/* 2 x multiply-adds of forward + backward per sample. */
double mlp_flops_per_sample(const MlpConfig *cfg);

/* net gets the MLP's table and buffers (zeroed; see mlp_init_weights);
 * micro-batches have at most max_batch samples. network_free frees it. */
int mlp_create(Network *net, const MlpConfig *cfg, int max_batch, Error *err);
/* Weights ~ N(0, 1/fan_in) from the seed, biases zero. */
void mlp_init_weights(Network *net, uint64_t seed);

/* Samples [first, first + n) of the task of `seed` into batch (x and y
 * must hold n samples). */
void mlp_synthetic_batch(const MlpConfig *cfg, uint64_t seed, uint64_t first, int n, MlpBatch *batch);

#endif
