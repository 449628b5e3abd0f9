/* The simulator for the feed-forward networks of nets/ (vision CNNs, MLPs):
 * a layer list in, predicted step time of data-parallel training out.
 *
 * plan/ does not link nets/, so the caller describes each layer in the
 * cost model's terms (cli/cmd_simulate_net.c does it from a built
 * network): a GEMM-like layer (convolution, dense) as the implicit GEMM of
 * its forward for one micro-batch (m = samples x output positions, n =
 * output channels, k = multiplications per output), every other layer as
 * memory traffic (its activations in and out). Pricing, per micro-batch on
 * one rank, from the ClusterSpec like the transformer's cost model:
 *   forward   each GEMM layer plan_gemm_time(m, n, k) (+ its bias and
 *             output written once), each other layer its input read and
 *             output written; the input batch copied in; the softmax
 *             cross-entropy over the logits
 *   backward  GEMM layers two GEMMs of the forward's size (data and weight
 *             gradients; the first layer has no data gradient), the bias
 *             gradient a read of dy; other layers read x or y and dy and
 *             write dx
 * The program of one step with one pipeline stage is the micro-batches'
 * forwards and backwards, the gradient reduction and the update in
 * sequence (the runtime reduces after the last backward: one chunk, the
 * whole gradient ready at once, PlanNetConfig.overlap 0), so its makespan
 * is their sum:
 *   step = m x (fwd + bwd) + reduction (buckets.h, each bucket with its own
 *          latency, over DP: all-reduce, or reduce-scatter with ZeRO-1)
 *        + optimizer (Adam streamed through memory, the shard with ZeRO-1,
 *          plus its parameter all-gather) + the gradient's zeroing and norm. */
#ifndef FIVEFOLD_PLAN_NET_SIM_H
#define FIVEFOLD_PLAN_NET_SIM_H

#include <stdio.h>

#include "base/error.h"
#include "plan/cost.h"

#define PLAN_NET_MAX_LAYERS 64

typedef struct PlanNetLayer {
  char name[32];   /* for the explanation: "conv2d 6x28x28" */
  char kind[24];   /* the layer kind ("conv2d", "maxpool"): the spec's measured rates are looked up by it */
  int gemm;        /* 1: priced as the implicit GEMM below */
  double m, n, k;  /* forward GEMM of one micro-batch (gemm = 1) */
  double in, out;  /* activation elements of one micro-batch, input and output */
  double params;   /* parameters (gradient elements) */
  double bias;     /* bias elements (part of params) */
} PlanNetLayer;

typedef struct PlanNetConfig {
  int dp;                    /* data-parallel replicas (= ranks) */
  int micro_batch_size;      /* samples per micro-batch per replica */
  int microbatches;          /* per replica and step */
  int distributed_optimizer; /* ZeRO-1 */
  PlanDtype dtype;           /* GEMM precision; activations, gradients and the optimizer stay fp32 */
  int classes;               /* logits per sample */
  /* Share of each bucket's reduction that may run behind the last
   * backward (buckets.h). 0: fivefold's nets runtime, which reduces after
   * it; up to 1 prices a runtime that starts each bucket as backward
   * completes it, on a machine with asynchronous progress. */
  double overlap;
} PlanNetConfig;

typedef struct PlanNetResult {
  double step_time; /* s */
  double fwd, bwd;  /* s, one micro-batch */
  double reduce, optimizer;
  int buckets;
  double bucket_params;       /* the bucket size priced (elements, rounded up to whole blocks of dp as the runtime does) */
  double gemm_fwd, other_fwd; /* s, one micro-batch: GEMM layers and the rest */
  double layer_fwd[PLAN_NET_MAX_LAYERS], layer_bwd[PLAN_NET_MAX_LAYERS];
  double params;
} PlanNetResult;

int plan_net_simulate(const PlanNetLayer *layers, int num_layers, const ClusterSpec *cluster, const PlanOptions *opt,
                      const PlanNetConfig *cfg, PlanNetResult *out, Error *err);

/* Per layer forward and backward, and the step's parts. */
void plan_net_explain(const PlanNetLayer *layers, int num_layers, const PlanNetConfig *cfg, const PlanNetResult *r,
                      FILE *f);

#endif
