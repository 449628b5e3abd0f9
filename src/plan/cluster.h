/* Cluster and hardware specs for the planner: how many devices, how fast
 * they compute and move memory, how they are linked, and the calibrated
 * efficiencies the cost model (cost.h) prices work with.
 *
 * A spec is a JSON file (configs/clusters/, one JSON file each). Units are in the field
 * names; GB and Gb are 1e9 bytes and bits, GiB is 2^30 bytes:
 *   name, description                strings
 *   nodes, devices_per_node          integers >= 1
 *   peak_tflops {bf16, fp16, tf32, fp32, fp8}   dense peak per device; bf16 required
 *   memory {capacity_GiB | capacity_GB, reserved_GiB, bandwidth_GBps, efficiency}
 *   intra_node, inter_node {bandwidth_GBps | bandwidth_Gbps, latency_us, efficiency}
 *       bandwidth per device and direction; efficiency = the share of it a
 *       collective library achieves (so calibration can fit it)
 *   compute (optional) {gemm_efficiency: [[flops, fraction of peak], ...],
 *                       gemm_efficiency_bf16: the same for bf16 GEMMs against
 *                                             peak_tflops.bf16 (optional;
 *                                             absent: gemm_efficiency),
 *                       attention_efficiency: {forward, backward,
 *                                              reference_tokens, length_exponent,
 *                                              [forward_bf16, backward_bf16],
 *                                              [ring_forward, ring_backward, ring_query_tokens]},
 *                       kernel_floor_us,
 *                       optimizer_ns_per_param: the runtime's update per local parameter
 *                           (zeroing, norm, AdamW; optional: absent, its memory traffic),
 *                       conv_efficiency, conv_efficiency_bf16: [{batch, curve: [[flops,
 *                           fraction of peak], ...], data: [...], weights: [...]}, ...]
 *                           convolution passes measured at each batch: curve the forward
 *                           pass's, data and weights the two gradient passes' (optional;
 *                           without them curve prices all three passes; absent: the GEMM
 *                           curves),
 *                       layer_seconds: {kind: [forward, backward] | [[elements, forward,
 *                           backward], ...]} seconds per input element of the other layers
 *                           of nets/, at one unstated size or at each of 1 to
 *                           PLAN_MAX_LAYER_SIZES sizes (input elements, increasing)
 *                           (optional; absent: memory traffic)}
 *   collectives (optional, written by calibration) {all_reduce | reduce_scatter |
 *       all_gather | all_to_all | p2p: {intra_node | inter_node:
 *       {bandwidth_GBps, latency_us}}}: effective alpha-beta per collective,
 *       replacing link bandwidth x efficiency
 *   links (optional) {bandwidth_GBps: [[...]], latency_us: [[...]]}: a full
 *       device-by-device matrix for topologies that are not "nodes of equal
 *       devices on a switch"; pairs in one node still count as intra-node.
 *   topology (optional, topology.c) tiers without a matrix: nodes_per_switch
 *       and oversubscription or inter_switch between switches, PCIe islands
 *       in a node (devices_per_island, cross_island), slow_nodes with their
 *       own network link, devices_per_nic (devices sharing one network
 *       port, whose transfers the simulator prices together, link_share.h);
 *       expanded to the link between any two devices.
 *       `links` and `topology` exclude each other.
 *   runtime (optional, written by `fivefold calibrate`) {device, host, dtype,
 *       moe_tp_replicated, async_progress, device_sync, dropless_sync_us,
 *       bucket_MB, bucket_max_share, bucket_overhead_us,
 *       grad_reduce_factor: [[bucket MB, factor], ...]}: what the runtime measured on this
 *       machine does (PlanRuntimeFacts); the planner's options default from
 *       it (plan_options_from_runtime, parallel.h).
 *   cores (optional, written by `fivefold calibrate`) {per_node,
 *       threads_per_device (1), share, waiting_load (0)}: the cores a node's
 *       devices share.
 *       When its devices ask for more threads than it has cores, peak_tflops
 *       and memory.bandwidth are a device's rates at `share` of a core
 *       (default per_node / (devices_per_node x threads_per_device)), and the
 *       simulator prices processor sharing: a rank computes at
 *       min(1, cores / threads of the ranks computing) of a core, a rank
 *       that waits still taking waiting_load of its share
 *       (sched/evaluate_shared.h, docs/planner.md "Ranks sharing cores").
 * Unknown fields are errors naming the file and the field. */
#ifndef FIVEFOLD_PLAN_CLUSTER_H
#define FIVEFOLD_PLAN_CLUSTER_H

#include <stddef.h>

#include "base/error.h"

typedef struct cJSON cJSON;

typedef enum PlanDtype {
  PLAN_DTYPE_BF16 = 0,
  PLAN_DTYPE_FP16,
  PLAN_DTYPE_TF32,
  PLAN_DTYPE_FP32,
  PLAN_DTYPE_FP8,
  PLAN_NUM_DTYPES
} PlanDtype;

const char *plan_dtype_name(PlanDtype dtype); /* "bf16", ... */
int plan_dtype_from_name(const char *name, PlanDtype *dtype); /* 0 or -1 */

#define PLAN_MAX_CURVE_POINTS 32
#define PLAN_MAX_LAYER_KINDS 12
#define PLAN_MAX_CONV_BATCHES 4
#define PLAN_MAX_LAYER_SIZES 4

/* A piecewise curve interpolated linearly in log(x), clamped at the ends. */
typedef struct PlanCurve {
  int n;
  double x[PLAN_MAX_CURVE_POINTS], y[PLAN_MAX_CURVE_POINTS];
} PlanCurve;

double plan_curve_eval(const PlanCurve *curve, double x);

/* Efficiency curves of one kernel measured at several batch sizes
 * (increasing): a direct convolution's rate depends on the batch at equal
 * FLOPs (its activations leave the caches), so a pass is priced from the
 * curves of the batches around its own (plan/net_sim.c). */
typedef struct PlanConvCurves {
  int n;
  int batch[PLAN_MAX_CONV_BATCHES];
  PlanCurve curve[PLAN_MAX_CONV_BATCHES];
  /* The gradient passes' own curves (per_pass 1; curve is then the
   * forward's): at equal FLOPs oneDNN's data- and weight-gradient kernels
   * of a shape run at rates of their own, often well below its forward. */
  int per_pass;
  PlanCurve data[PLAN_MAX_CONV_BATCHES], weights[PLAN_MAX_CONV_BATCHES];
} PlanConvCurves;

/* Alpha-beta parameters of one link or collective: time = latency + bytes / bandwidth. */
typedef struct PlanLink {
  double bandwidth; /* bytes/s */
  double latency;   /* s */
} PlanLink;

typedef enum PlanCollective {
  PLAN_COLL_ALL_REDUCE = 0,
  PLAN_COLL_REDUCE_SCATTER,
  PLAN_COLL_ALL_GATHER,
  PLAN_COLL_ALL_TO_ALL,
  PLAN_COLL_P2P,
  PLAN_NUM_COLLECTIVES
} PlanCollective;

const char *plan_collective_name(PlanCollective kind); /* "all_reduce", ... */

enum { PLAN_LEVEL_INTRA = 0, PLAN_LEVEL_INTER = 1, PLAN_NUM_LEVELS = 2 };

#define PLAN_MAX_SLOW_NODES 64

/* Tiers of a cluster beyond "nodes on one switch" (topology.c). Nominal
 * links, per device and direction. */
typedef struct PlanTiers {
  int given;
  int nodes_per_switch;   /* 0: every node on one switch */
  PlanLink inter_switch;  /* between devices on nodes of different switches */
  int devices_per_island; /* 0: a node is one island */
  PlanLink cross_island;  /* between islands of one node (PCIe, host bridge) */
  int num_slow_nodes;
  int slow_node[PLAN_MAX_SLOW_NODES];
  PlanLink slow_link[PLAN_MAX_SLOW_NODES]; /* that node's network link, capping every off-node pair */
  /* How many devices of a node share one network port (NIC, uplink): 0 or
   * absent, one each (no contention model); k > 0, devices_per_node / k
   * NICs per node, device d on NIC (d mod devices_per_node) / k, whose
   * rate is k times the per-device inter_node link (calibrate measures
   * that link with every device of a node using the network at once, so
   * it is a device's share). The simulator then prices the transfers that
   * cross a NIC together (plan/link_share.h). */
  int devices_per_nic;
} PlanTiers;

/* The runtime a calibrated machine runs: facts the simulator's options
 * (PlanOptions) and the training precision default from, so that `plan`,
 * `simulate` and `trace compare` price what really runs there without the
 * user repeating it in flags. The shipped GPU specs have none and keep
 * Megatron-Core's defaults. */
typedef struct PlanRuntimeFacts {
  int given;
  char device[16];         /* "cpu": fivefold's CPU runtime */
  char host[64];           /* host calibrated ("" when unknown) */
  PlanDtype dtype;         /* precision the runtime trains in by default */
  int moe_tp_replicated;   /* TP without an MoE grid: the MoE runs on every TP rank (PlanOptions) */
  int async_progress;      /* 1: non-blocking reductions progress behind compute (overlap 1); 0: they wait */
  int device_sync;         /* 1: a dropless MoE layer waits for its token counts on the host */
  double dropless_sync;    /* s: that wait per dropless MoE layer forward (0 without a device) */
  double bucket_bytes;     /* the runtime's default gradient bucket (0: the simulator's default) */
  double bucket_max_share; /* the default bucket is at most this share of a rank's gradient (0: no cap) */
  /* s: what one more gradient bucket costs the runtime beyond its
   * collective's fitted price (calibrate_buckets.h; 0: nothing). */
  double bucket_overhead;
  /* The runtime's reduction of a gradient bucket against the collective's
   * fitted price, by bucket bytes (n 0: 1): its gradient streams from
   * memory and larger buckets leave the caches, which the fit's small hot
   * buffers do not (calibrate_runtime.h). */
  PlanCurve grad_reduce_factor;
} PlanRuntimeFacts;

typedef struct ClusterSpec {
  char name[64];
  char origin[256]; /* file it came from, for messages */
  int nodes, devices_per_node;
  double peak_flops[PLAN_NUM_DTYPES]; /* FLOP/s; 0 = not available */
  double memory_capacity;            /* bytes per device */
  double memory_reserved;            /* bytes per device taken by context, libraries, fragmentation */
  double memory_bandwidth;           /* bytes/s */
  double memory_efficiency;          /* share of bandwidth reached by bandwidth-bound kernels */
  PlanLink link[PLAN_NUM_LEVELS];     /* nominal, per device and direction */
  double link_efficiency[PLAN_NUM_LEVELS];
  /* Calibrated collectives; has_collective[k][level] says whether given. */
  PlanLink collective[PLAN_NUM_COLLECTIVES][PLAN_NUM_LEVELS];
  int has_collective[PLAN_NUM_COLLECTIVES][PLAN_NUM_LEVELS];
  PlanCurve gemm_efficiency; /* GEMM FLOPs -> fraction of peak */
  PlanCurve gemm_efficiency_bf16; /* bf16 GEMMs where measured apart (calibrate on a CPU); n 0: gemm_efficiency */
  /* bf16 GEMMs whose row count changes every step (experts): the
   * runtime gives them run-time-shape kernels, slower than the fixed-shape
   * ones gemm_efficiency_bf16 measures where the CPU has AMX; n 0: that curve */
  PlanCurve gemm_efficiency_bf16_rows_vary;
  /* fp32 expert products as the experts run them: each expert's weights
   * read afresh after the other experts' products, the typical call of a
   * run rather than the fastest of one product repeated (calibrate);
   * n 0: gemm_efficiency */
  PlanCurve gemm_efficiency_rows_vary;
  double attention_fwd_efficiency, attention_bwd_efficiency;
  /* Optional (0: absent): the attention kernel's in a bf16 run (its tile
   * products on bf16 inputs), against the bf16 peak at the same reference
   * length; absent, bf16 attention is priced at the efficiencies above. */
  double attention_bf16_fwd_efficiency, attention_bf16_bwd_efficiency;
  /* Attention kernels over fewer query tokens than attention_ref_tokens run
   * at efficiency x (tokens / ref)^attention_length_exponent. */
  double attention_ref_tokens, attention_length_exponent;
  /* Optional (0: absent): the context-parallel ring's masked block kernels,
   * measured as a CP rank runs them (its queries against each rank's K/V
   * block) and counted against the causal FLOPs per rank; ring_query_tokens
   * is the chunk length they were measured at (shorter or longer chunks scale
   * by the length exponent). Absent, CP attention is priced as the causal
   * kernel over the chunks. */
  double attention_ring_fwd_efficiency, attention_ring_bwd_efficiency, attention_ring_query_tokens;
  double kernel_floor; /* s: shortest time any kernel takes */
  /* s per local parameter of the runtime's per-step update (the gradient
   * zeroed, its norm, AdamW), measured by calibrate on the runtime's own
   * kernels; 0: priced as the memory traffic of the update. */
  double optimizer_per_param;
  /* Optional (n 0: absent), measured by calibrate on the kernels of nets/:
   * convolution passes (forward, data and weight gradients with the bias)
   * by FLOPs against the peak of their dtype, and the other layer kinds'
   * forward and backward seconds per input element (pooling, activations),
   * which plan/net_sim.h prices CNNs with. */
  PlanConvCurves conv_efficiency, conv_efficiency_bf16;
  int num_layer_seconds;
  struct {
    char kind[24];
    double fwd, bwd; /* sizes 0: at an unstated size */
    /* sizes > 0: the rates at each of `sizes` input sizes (elements,
     * increasing), which net_sim interpolates between: small tensors stay
     * in the caches, large ones stream from memory. */
    int sizes;
    double elements[PLAN_MAX_LAYER_SIZES], fwd_at[PLAN_MAX_LAYER_SIZES], bwd_at[PLAN_MAX_LAYER_SIZES];
  } layer_seconds[PLAN_MAX_LAYER_KINDS];
  /* Optional device-by-device matrix (link_devices x link_devices), nominal. */
  int link_devices;
  double *link_bandwidth; /* bytes/s */
  double *link_latency;   /* s */
  PlanTiers tiers;
  PlanRuntimeFacts runtime;
  /* The "cores" object; cores_per_node 0: not given (a device per core). */
  int cores_per_node;
  int threads_per_device;
  double core_share; /* the share of a core peak_flops and memory_bandwidth are rates at */
  double core_waiting_load; /* [0, 1]: the share of its core a waiting device still takes */
  /* Optional rank -> device mapping (not owned; plan/mapping.h): every
   * lookup below that takes a rank prices the device it is mapped to.
   * NULL: rank r runs on device r. */
  const int *device_of_rank;
  int num_mapped;
} ClusterSpec;

/* The defaults used when a spec leaves compute/ out (documented in
 * docs/planner.md): the GEMM efficiency curve, flash-attention efficiencies
 * and the kernel floor. */
void cluster_spec_default_compute(ClusterSpec *spec);

/* Parses a spec; origin names the file in messages. The result owns the
 * link matrix: free with cluster_spec_free. */
int cluster_spec_from_json(ClusterSpec *spec, const cJSON *json, const char *origin, Error *err);
int cluster_spec_load(ClusterSpec *spec, const char *path, Error *err);
void cluster_spec_free(ClusterSpec *spec);
int cluster_spec_validate(const ClusterSpec *spec, Error *err);

int cluster_spec_total_devices(const ClusterSpec *spec);

/* Effective alpha-beta of a collective at one level: the calibrated value
 * when the spec has one, else the link's bandwidth x efficiency and latency. */
PlanLink cluster_spec_collective_link(const ClusterSpec *spec, PlanCollective kind, int level);

/* Nominal link between the devices ranks a and b run on (the matrix when
 * given, else the tiers, else intra/inter by node). */
PlanLink cluster_spec_device_link(const ClusterSpec *spec, int a, int b);

/* Nominal link between two physical devices by the tiers (topology.c). */
PlanLink cluster_tiers_link(const ClusterSpec *spec, int device_a, int device_b);
/* Parses the "topology" object into spec->tiers (nodes, devices_per_node
 * already read); messages name origin and the field. */
int cluster_tiers_from_json(ClusterSpec *spec, const cJSON *topology, Error *err);

/* 1 when links differ between devices of the same position in their nodes
 * (a matrix, tiers or a mapping): groups must then be placed one by one. */
static inline int cluster_spec_is_irregular(const ClusterSpec *spec) {
  return spec->link_devices > 0 || spec->tiers.given || spec->device_of_rank != NULL;
}

static inline int cluster_spec_device_of(const ClusterSpec *spec, int rank) {
  return spec->device_of_rank && rank >= 0 && rank < spec->num_mapped ? spec->device_of_rank[rank] : rank;
}

/* How many devices a node's cores run at full speed at once (cores /
 * threads per device); 0 when the spec does not say (a device per core). */
static inline double cluster_spec_node_capacity(const ClusterSpec *spec) {
  int threads = spec->threads_per_device > 0 ? spec->threads_per_device : 1;
  return spec->cores_per_node > 0 ? (double)spec->cores_per_node / threads : 0.0;
}

/* Node of the device rank `rank` runs on. */
static inline int cluster_spec_node_of(const ClusterSpec *spec, int rank) {
  return cluster_spec_device_of(spec, rank) / spec->devices_per_node;
}

#endif
