/* The network interface: what the training runtime needs from a model,
 * whatever its family. The trainer's reductions, optimizer, checkpoints,
 * tracer hooks and log line are meant to see a network only through this;
 * the transformer (model/) is one implementation (train/net_transformer.c),
 * the families of nets/ are the others.
 *
 * A network is
 *   * a parameter table over two flat buffers (parameters and gradients,
 *     same layout): per tensor its name, shape, place in the buffers, the
 *     group its gradient is reduced over, how many TP ranks hold it,
 *     whether it is a copy of another or a slice of a larger logical tensor
 *     (and where the slice sits), and the parameter group it belongs to;
 *     plus the logical tensors a checkpoint stores. AdamW, ZeRO-1 and the
 *     checkpoints read only this;
 *   * forward and backward of one micro-batch of one chunk (a pipeline
 *     stage's share of the layers; one chunk when there is no pipeline),
 *     and for a network split over stages the transfers between them;
 *   * the loss and its metrics as named scalars ("loss", "lm", "aux", "z"
 *     for the transformer, "loss", "accuracy" for the MLP), which the log
 *     line and metrics.jsonl print by name without knowing their meaning,
 *     the unit its throughput is counted in (tokens, samples, images) and,
 *     where the network counts them, its FLOPs per unit (the MFU);
 *   * the data it consumes, from a batch source the runtime advances and
 *     whose position a checkpoint records.
 *
 * Parameter groups. A network whose parts step separately (a GAN's
 * generator and critic) gives each tensor a param_group id and sets
 * num_param_groups. The program of one iteration then has one phase per
 * group (sched/program.h, SchedConfig.param_groups; docs/architecture.md),
 * each phase the forwards and backwards of the step's micro-batches, the
 * reduction of that group's gradient and the OPTIM that steps that group
 * alone; GRAD_REDUCE buckets never mix groups. The runtime tells the
 * network which phase runs (begin_phase) before the phase's first forward,
 * so that it can run what the phase needs (a GAN's generator forward
 * without gradient in a critic phase) and skip gradients of the other
 * groups. A network with one group (the transformer, the MLP by default)
 * uses 0 and runs one phase. */
#ifndef FIVEFOLD_NETS_NETWORK_H
#define FIVEFOLD_NETS_NETWORK_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define NET_MAX_DIMS 4
#define NET_MAX_METRICS 16
#define NET_MAX_PARAM_GROUPS 8

/* The ranks a gradient is summed over before the update. */
typedef enum NetReduceGroup {
  NET_REDUCE_DENSE = 0,    /* the data-parallel replicas: dp x cp */
  NET_REDUCE_EXPERT,       /* the expert-data-parallel replicas: edp (MoE folding) */
  NET_REDUCE_TP_REPLICATED /* dp x cp, and the copies held by every TP rank (norms, router) */
} NetReduceGroup;

typedef struct NetParam {
  const char *name; /* the logical tensor's name, as checkpoints store it */
  int ndim;
  int64_t shape[NET_MAX_DIMS]; /* this rank's part */
  size_t offset, numel;        /* floats, into the parameter and gradient buffers */
  NetReduceGroup reduce;
  int sharded;          /* a slice of a larger logical tensor (TP, EP, pipeline) */
  int tp_copies;        /* TP ranks holding this same data (a gradient norm counts it on the first of
                           each tp_copies consecutive ranks, a checkpoint writes it from that one);
                           0 or 1: split over TP, or no TP */
  const char *copy_of;  /* a copy of another tensor's data, by name (the tied LM head on a stage without
                           the embedding: "embed.weight"): its gradient is summed into that one's, it
                           counts in no norm and a checkpoint stores only the original; else NULL */
  /* Where a sharded tensor's data sits in its logical tensor, which
   * checkpoints store whole: seen as the row-major array
   * view_shape[0..view_ndim) (a reshape of the logical shape), the logical
   * tensor holds this tensor's data, row-major, as the sub-array at
   * view_start of extent view_count. view_ndim 0: the whole tensor.
   * logical_shape all 0: not stated (only checked when given). */
  int view_ndim;
  int64_t view_shape[NET_MAX_DIMS], view_start[NET_MAX_DIMS], view_count[NET_MAX_DIMS];
  int64_t logical_shape[NET_MAX_DIMS];
  int no_weight_decay;  /* AdamW leaves it undecayed (norms, biases) */
  int param_group;      /* which optimizer steps it: 0, or a GAN's critic 0 / generator 1 */
} NetParam;

/* A named scalar of the last micro-batch (or of the last step, see
 * NetworkOps.metrics_per_step). The log line prints the metrics after the
 * loss as "(name value ...)" with `decimals` decimals each; metrics with
 * decimals 0 go to metrics.jsonl only (all metrics go there, by name). */
typedef struct NetMetric {
  const char *name;
  double value;
  int decimals;
} NetMetric;

/* What a network's throughput (and its FLOP count) is counted in. */
typedef struct NetUnit {
  const char *one;  /* "token", "sample", "image": the banner's "FLOP per token" */
  const char *many; /* "tokens", "samples": metrics.jsonl's "<many>_per_s" and the summary's "<many>" */
  const char *rate; /* the log line's "tok/s", "samples/s", "img/s" */
} NetUnit;

/* The data a network consumes: next() fills the batch of one micro-batch
 * (its layout is the network's business: token windows for the
 * transformer, feature rows for the MLP, images for nets/); position and
 * restore put the source's place into and back from a checkpoint. */
typedef struct NetBatchSource {
  void *self;
  int (*next)(void *self, void *batch, Error *err);
  uint64_t (*position)(const void *self);
  int (*restore)(void *self, uint64_t position, Error *err);
} NetBatchSource;

typedef struct Network Network;

typedef struct NetworkOps {
  const char *family; /* "transformer", "mlp", ... */
  /* One micro-batch through one chunk. What `batch` points at is the
   * network's business: an MlpBatch for the MLP; for the transformer the
   * program's action (sched/program.h), whose micro-batch its pipeline
   * holds. loss_scale multiplies the gradient (1 / (accumulation x
   * replicas); the transformer's pipeline carries its own); gradients add
   * into the buffer. */
  int (*forward)(Network *net, int chunk, const void *batch, Error *err);
  int (*backward)(Network *net, int chunk, const void *batch, float loss_scale, Error *err);
  /* Optional (NULL for a network on one stage): a network split over
   * pipeline stages moves its activations and their gradients in the
   * program's SEND and RECV actions (`action` as for forward; a receive
   * may only post its transfer), and prepare, before a FWD or BWD, waits
   * for the received tensor that pass consumes. */
  int (*send)(Network *net, const void *action, Error *err);
  int (*recv)(Network *net, const void *action, Error *err);
  int (*prepare)(Network *net, const void *action, Error *err);
  /* The metrics of the last forward; metrics[0] is the loss. Returns the
   * count. The runtime averages them over a step's micro-batches and
   * replicas, unless metrics_per_step is set: then they are already the
   * last step's global values (the transformer, whose pipeline reduces
   * its losses over stages and replicas itself). */
  int (*metrics)(const Network *net, NetMetric *metrics, int cap);
  int metrics_per_step;
  NetUnit unit; /* what one trained sample is counted as */
  /* Optional (NULL when there is nothing to do): called on every rank after
   * each optimizer update of param_group, with the updated values in place. */
  void (*after_update)(Network *net, int param_group);
  /* Optional: with num_param_groups > 1, called before the first forward
   * of each phase with the group it steps (the gradients are zero then);
   * the backwards of the phase need only that group's gradients. */
  void (*begin_phase)(Network *net, int param_group);
  void (*free)(Network *net);
} NetworkOps;

struct Network {
  const NetworkOps *ops;
  void *impl;
  NetParam *params; /* the table, num_tensors entries, in buffer order */
  int num_tensors;
  /* The whole logical tensors of the network (every rank's, whole shapes),
   * in the order a checkpoint stores them; NULL when every rank holds the
   * whole network: then the table itself. Owned by the implementation. */
  const NetParam *logical;
  int num_logical;
  float *values, *grads; /* num_values floats each */
  size_t num_values;
  int num_param_groups; /* 1 unless the network steps parts separately */
  /* Phases of each group per iteration, one after another (a GAN's k
   * critic steps); 0 or 1: one. */
  int phase_repeats[NET_MAX_PARAM_GROUPS];
  double flops_per_unit; /* FLOPs of forward + backward per unit (ops->unit); 0: not counted,
                            then the log line shows no GFLOP/s and no MFU */
  int num_chunks;       /* chunks this rank runs */
};

/* The tensor of the table with this name, or NULL. */
const NetParam *network_find_param(const Network *net, const char *name);
/* The logical tensors a checkpoint stores (net->logical, or the table). */
const NetParam *network_logical_params(const Network *net, int *n);
/* Whether any gradient of the table reduces over `group`. */
int network_has_reduce_group(const Network *net, NetReduceGroup group);
/* The [begin, end) float ranges of the tensors that reduce over `group`,
 * in buffer order, written to begin/end (cap entries each); returns how
 * many there are (possibly more than cap). */
int network_reduce_ranges(const Network *net, NetReduceGroup group, size_t *begin, size_t *end, int cap);
/* The [begin, end) float ranges of parameter group `group`'s tensors,
 * adjacent tensors merged, in buffer order (cap entries each); returns how
 * many there are (possibly more than cap). */
int network_group_ranges(const Network *net, int group, size_t *begin, size_t *end, int cap);
/* The bf16 weight cache (kern/bf16_weights.h) over the table: registers
 * every weight matrix (ndim >= 2, not a norm or bias), so the bf16 GEMMs
 * read them converted once per optimizer update; forget before the values
 * buffer is freed. */
void network_cache_bf16_weights(const Network *net);
void network_forget_bf16_weights(const Network *net);
/* After writing values (an optimizer update of parameter group `group`,
 * -1: all, or a load): the cached bf16 copies of those tensors are stale. */
void network_weights_changed(const Network *net, int group);
/* The value of the metric `name` among metrics[0, n), or NAN. */
double network_metric(const NetMetric *metrics, int n, const char *name);
void network_free(Network *net);

#endif
