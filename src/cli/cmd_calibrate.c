/* `fivefold calibrate`: measures this machine and writes a cluster spec the
 * planner reads (src/plan/cluster.h), or refits one from a measured trace.
 *
 *   fivefold calibrate [--out FILE] [--quick] [--spec BASE] [--devices N]
 *   mpirun -np N fivefold calibrate ...      (also measures the collectives)
 *   fivefold calibrate --from-trace TRACE.json [--spec IN] --out OUT
 *
 * Every rank measures at once with its own OpenMP threads, each kernel in a
 * window all ranks share (calibrate_timing.h), and every figure is the fastest of
 * several repetitions (other processes only add time).
 * A device of the spec is one rank as the runs will place it: when the
 * ranks of a node ask for more threads than it has cores (the union of their
 * affinity masks), each rank gets a share of them, and the spec's peak and
 * memory bandwidth are the dedicated-core rates times that share, while the
 * efficiencies stay those of a dedicated core. Oversubscribed ranks measure
 * compute in turns, so that each measures a dedicated core; the kernels of
 * nets/ are then timed once more with every rank at once, as the mean over
 * a window, which keeps what time-slicing costs them beyond the share.
 * Measured: FMA peak (kern/peak.h), SGEMM over shapes of model layers
 * (forward NT, data gradient NN, weight gradient TN) fitted to the cost
 * model's efficiency curve, flash attention forward/backward at two lengths,
 * the context-parallel ring's block kernels as one rank of two runs them,
 * streaming bandwidth (triad) and the share of it a real bandwidth-bound
 * kernel (RMSNorm) reaches, the shortest GEMM (kernel floor), and under MPI
 * all-reduce, reduce-scatter, all-gather, all-to-all and send/recv over
 * message sizes, fitted to the cost model's alpha-beta (calibrate_fit.h);
 * with ranks on several nodes, among each node's ranks (intra_node) and
 * across nodes (inter_node) apart, and whether a node's devices share one
 * network port (topology.devices_per_nic); the spec is then tiered. The
 * network part lives in calibrate_network.c.
 * One rank without MPI keeps the links of BASE or of the stated default. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/options.h"
#include "base/timer.h"
#include "cli/calibrate_experts.h"
#include "cli/calibrate_runtime.h"
#include "cli/calibrate_nets.h"
#include "cli/calibrate_network.h"
#include "cli/calibrate_timing.h"
#include "cli/cmd_calibrate.h"
#include "comm/collectives.h"
#include "comm/host.h"
#include "comm/timeout.h"
#include "comm/waits.h"
#include "comm/world.h"
#include "kern/attention.h"
#include "kern/bf16.h"
#include "kern/conv2d.h"
#include "kern/gemm.h"
#include "kern/peak.h"
#include "kern/precision.h"
#include "kern/rmsnorm.h"
#include "model/attention_cp.h"
#include "plan/calibrate_fit.h"
#include "plan/config_paths.h"

#define MAX_SAMPLES 256
#define MAX_CONV 32

typedef struct CalibCli {
  const char *out, *spec, *trace, *name;
  int quick, devices;
} CalibCli;

typedef struct Machine {
  int world, rank, ranks_on_node, node_rank, nodes, threads, cores;
  double share; /* of the node's cores one rank gets */
} Machine;

static void calibrate_usage(FILE *f) {
  fprintf(f,
          "usage: fivefold calibrate [--out FILE] [--quick] [--spec BASE] [--devices N] [--name NAME]\n"
          "       mpirun -np N fivefold calibrate [options]\n"
          "       fivefold calibrate --from-trace TRACE.json [--spec IN] --out OUT\n\n"
          "Measures this machine and writes a cluster spec for `fivefold plan` / `simulate`:\n"
          "FMA peak, the GEMM efficiency curve over layer shapes, attention efficiency, memory\n"
          "bandwidth, and under mpirun the alpha-beta of all-reduce, reduce-scatter, all-gather,\n"
          "all-to-all and send/recv between the ranks. One device of the spec is one rank with\n"
          "its OMP_NUM_THREADS threads; calibrate with the layout the runs will use.\n\n"
          "options:\n"
          "  --out FILE          spec to write (default: calibrated.json)\n"
          "  --quick             a few seconds (fewer shapes, sizes and repetitions)\n"
          "  --spec FILE         start from this spec: what is not measured is kept from it\n"
          "                      (default: one node, shared-memory links 5 GB/s 2 us, 10 Gb/s Ethernet)\n"
          "  --devices N         devices per node in the spec (default: ranks on this node, at least\n"
          "                      cores / threads per rank)\n"
          "  --name NAME         spec name (default: local-<ranks>x<threads>t)\n"
          "  --from-trace FILE   refit GEMM efficiency and collectives from a fivefold Chrome trace\n"
          "  -h, --help          show this help\n");
}

/* ------------------------------------------------------------ measurement */

static double now_s(void) {
  return timer_now();
}

typedef struct GemmCtx {
  int ta, tb, m, n, k;
  const float *a, *b;
  float *c;
} GemmCtx;

static void run_gemm(void *p) {
  GemmCtx *g = p;
  gemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->ta ? g->m : g->k, g->b, g->tb ? g->k : g->n, 0.0f, g->c, g->n);
}

/* Shapes of transformer layers at small scale: tokens x {hidden, head
 * projections, FFN, vocabulary, router}; each in one of the three layouts a
 * layer runs (forward NT, data gradient NN, weight gradient TN). */
static int measure_gemms(int quick, CalibGemmSample *out, double *floor_s) {
  static const int Mf[] = {64, 256, 1024, 2048}, Mq[] = {128, 512};
  static const int NKf[][2] = {{8, 256}, {256, 256}, {768, 256}, {1024, 256}, {256, 1024}, {512, 512},
                               {1536, 512}, {2048, 512}, {512, 2048}, {4096, 512}, {64, 64}};
  static const int NKq[][2] = {{8, 256}, {256, 256}, {1024, 256}, {512, 512}, {2048, 512}};
  const int *Ms = quick ? Mq : Mf;
  int nm = quick ? 2 : 4, nnk = quick ? 5 : 11;
  const int (*NK)[2] = quick ? NKq : NKf;
  double max_flops = quick ? 1.2e9 : 5e9, budget = quick ? 0.004 : 0.03;
  size_t cap = (size_t)2048 * 4096;
  float *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b), *c = malloc(cap * sizeof *c);
  int count = 0;
  if (!a || !b || !c) goto done;
  calib_fill(a, cap, 1.0f);
  calib_fill(b, cap, 1.0f);
  GemmCtx tiny = {0, 1, 1, 1, 1, a, b, c};
  *floor_s = calib_fastest_time(run_gemm, &tiny, quick ? 0.001 : 0.005, 20);
  for (int i = 0; i < nm; i++)
    for (int j = 0; j < nnk; j++) {
      int m = Ms[i], n = NK[j][0], k = NK[j][1];
      if (2.0 * m * n * k > max_flops || count >= MAX_SAMPLES) continue;
      int layout = (i + j) % 3;
      GemmCtx g = {layout == 2, layout == 0, m, n, k, a, b, c};
      out[count].m = m, out[count].n = n, out[count].k = k;
      out[count].seconds = calib_fastest_time(run_gemm, &g, budget, 3);
      count++;
    }
done:
  free(a);
  free(b);
  free(c);
  return count;
}

typedef struct AttnCtx {
  int T, H, D, backward;
  float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} AttnCtx;

static void run_attention(void *p) {
  AttnCtx *a = p;
  if (a->backward)
    attention_backward(a->dq, a->dk, a->dv, a->dout, a->o, a->lse, a->q, a->k, a->v, 1, a->T, a->H, a->H, a->D);
  else
    attention_forward(a->o, a->lse, a->q, a->k, a->v, 1, a->T, a->H, a->H, a->D);
}

/* Efficiency of the causal attention kernels (the cost model's FLOPs: 2 H T^2 D
 * forward, 2.5x that backward) at tokens T. */
static int measure_attention(int T, int quick, double peak, double *fwd_eff, double *bwd_eff) {
  AttnCtx a = {T, 4, 64, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  size_t n = (size_t)T * a.H * a.D;
  float **bufs[] = {&a.q, &a.k, &a.v, &a.o, &a.dout, &a.dq, &a.dk, &a.dv};
  int ok = 1;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    *bufs[i] = malloc(n * sizeof(float));
    ok &= *bufs[i] != NULL;
    if (*bufs[i]) calib_fill(*bufs[i], n, 0.5f);
  }
  a.lse = malloc((size_t)T * a.H * sizeof(float));
  if (ok && a.lse) {
    double flops = 2.0 * a.H * (double)T * T * a.D;
    double budget = quick ? 0.01 : 0.05;
    a.backward = 0;
    *fwd_eff = flops / (peak * calib_fastest_time(run_attention, &a, budget, 3));
    a.backward = 1;
    *bwd_eff = 2.5 * flops / (peak * calib_fastest_time(run_attention, &a, budget, 3));
  }
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(*bufs[i]);
  free(a.lse);
  return ok && a.lse ? 0 : -1;
}

/* The context-parallel ring as one rank of two runs it (model/attention_cp.c):
 * its two chunks of T/4 queries against its own K/V block and the other
 * rank's, merged; backward the two block gradients. Efficiency is counted
 * against the cost model's FLOPs for that rank, half the causal work. */
typedef struct RingCtx {
  AttnCtx a;
  int *qpos, *kpos_other;
  float *ob, *lb;
} RingCtx;

static void run_ring(void *p) {
  RingCtx *r = p;
  AttnCtx *a = &r->a;
  int Tl = a->T / 2;
  if (a->backward) {
    attention_backward_block(a->dq, a->dk, a->dv, a->dout, a->o, a->lse, a->q, r->qpos, Tl, a->k, a->v, r->qpos, Tl, 1,
                             a->H, a->H, a->D);
    attention_backward_block(a->dq, a->dk, a->dv, a->dout, a->o, a->lse, a->q, r->qpos, Tl, a->k, a->v, r->kpos_other,
                             Tl, 1, a->H, a->H, a->D);
    return;
  }
  attention_forward_block(a->o, a->lse, a->q, r->qpos, Tl, a->k, a->v, r->qpos, Tl, 1, a->H, a->H, a->D);
  attention_forward_block(r->ob, r->lb, a->q, r->qpos, Tl, a->k, a->v, r->kpos_other, Tl, 1, a->H, a->H, a->D);
  attention_merge(a->o, a->lse, r->ob, r->lb, 1, Tl, a->H, a->D);
}

static int measure_ring_attention(int T, int quick, double peak, double *fwd_eff, double *bwd_eff) {
  RingCtx r;
  memset(&r, 0, sizeof r);
  AttnCtx *a = &r.a;
  a->T = T, a->H = 4, a->D = 64;
  size_t n = (size_t)(T / 2) * a->H * a->D;
  float **bufs[] = {&a->q, &a->k, &a->v, &a->o, &a->dout, &a->dq, &a->dk, &a->dv, &r.ob};
  int ok = 1;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    *bufs[i] = malloc(n * sizeof(float));
    ok &= *bufs[i] != NULL;
    if (*bufs[i]) calib_fill(*bufs[i], n, 0.5f);
  }
  a->lse = malloc((size_t)T * a->H * sizeof(float));
  r.lb = malloc((size_t)T * a->H * sizeof(float));
  r.qpos = malloc((size_t)T * sizeof(int));
  r.kpos_other = malloc((size_t)T * sizeof(int));
  ok &= a->lse && r.lb && r.qpos && r.kpos_other;
  if (ok) {
    cp_local_positions(r.qpos, T, 2, 0);
    cp_local_positions(r.kpos_other, T, 2, 1);
    double flops = 2.0 * a->H * (double)T * T * a->D / 2;
    double budget = quick ? 0.01 : 0.05;
    a->backward = 0;
    *fwd_eff = flops / (peak * calib_fastest_time(run_ring, &r, budget, 3));
    a->backward = 1;
    *bwd_eff = 2.5 * flops / (peak * calib_fastest_time(run_ring, &r, budget, 3));
  }
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(*bufs[i]);
  free(a->lse);
  free(r.lb);
  free(r.qpos);
  free(r.kpos_other);
  return ok ? 0 : -1;
}

typedef struct StreamCtx {
  float *x, *y, *z, *w, *rstd;
  size_t n;
  int norm;
} StreamCtx;

static void run_stream(void *p) {
  StreamCtx *s = p;
  if (s->norm) {
    rmsnorm_forward(s->x, s->rstd, s->y, s->w, (int)(s->n / 1024), 1024, 1e-5f);
    return;
  }
  float *x = s->x;
  const float *y = s->y, *z = s->z;
  long n = (long)s->n;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) x[i] = y[i] + 0.5f * z[i];
}

/* Triad bandwidth (bytes/s; write-allocate traffic not counted, as STREAM)
 * and the share of it RMSNorm forward reaches. */
static int measure_memory(int quick, double *bandwidth, double *efficiency) {
  StreamCtx s = {0};
  s.n = quick ? ((size_t)4 << 20) : ((size_t)16 << 20);
  s.x = malloc(s.n * sizeof(float));
  s.y = malloc(s.n * sizeof(float));
  s.z = malloc(s.n * sizeof(float));
  s.w = malloc(1024 * sizeof(float));
  s.rstd = malloc(s.n / 1024 * sizeof(float));
  int rc = -1;
  if (s.x && s.y && s.z && s.w && s.rstd) {
    calib_fill(s.y, s.n, 1.0f);
    calib_fill(s.z, s.n, 1.0f);
    calib_fill(s.w, 1024, 1.0f);
    double budget = quick ? 0.02 : 0.15;
    double t = calib_fastest_time(run_stream, &s, budget, 3);
    *bandwidth = 3.0 * s.n * sizeof(float) / t;
    s.norm = 1;
    double tn = calib_fastest_time(run_stream, &s, budget, 3);
    *efficiency = fmin(1.0, fmax(0.05, 2.0 * s.n * sizeof(float) / tn / *bandwidth));
    rc = 0;
  }
  free(s.x);
  free(s.y);
  free(s.z);
  free(s.w);
  free(s.rstd);
  return rc;
}

/* ------------------------------------------------------------ the command */

/* Cores this process may run on. */
static cpu_set_t my_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++) CPU_SET(i, &set);
  }
  return set;
}

static void describe_machine(Machine *mc, int mpi) {
  memset(mc, 0, sizeof *mc);
  mc->world = 1;
  mc->ranks_on_node = 1;
  mc->nodes = 1;
  mc->threads = omp_get_max_threads();
  cpu_set_t cores = my_cores();
  if (mpi) {
    /* The node's cores are the union of its ranks' affinity masks: a
     * launcher that binds each rank to one core has not oversubscribed. */
    mc->world = comm_world_size();
    mc->rank = comm_world_rank();
    Error err = {0};
    if (comm_node_info(&mc->ranks_on_node, &mc->node_rank, &mc->nodes, &cores, sizeof cores, &err))
      comm_abort(1, "calibrate: %s", err.msg);
  }
  mc->cores = CPU_COUNT(&cores) > 0 ? CPU_COUNT(&cores) : 1;
  double want = (double)mc->ranks_on_node * mc->threads;
  mc->share = want > mc->cores ? mc->cores / want : 1.0;
}

enum { NB = CALIB_NUM_CONV_BATCHES, NZ = CALIB_NUM_LAYER_SIZES };

/* The kernels of nets/ (calibrate_nets.h), for simulate --net: the
 * convolutions in fp32 and, where the CPU has them, bf16, at each batch of
 * CALIB_CONV_BATCHES, and the other layer kinds. */
static void measure_nets(int quick, int bf16, CalibTimer timer, CalibGemmSample convs[2][NB][MAX_CONV],
                         int nconv[2][NB], double layer_f[][NZ], double layer_b[][NZ], double layer_n[NZ]) {
  for (int d = 0; d < 2; d++)
    for (int b = 0; b < NB && (d == 0 || (bf16 && conv2d_bf16_supported(NULL, 0))); b++)
      nconv[d][b] = calib_measure_convs(quick, d, CALIB_CONV_BATCHES[b] / (quick ? 2 : 1), timer, convs[d][b], MAX_CONV);
  calib_measure_layers(quick, timer, layer_f, layer_b, layer_n);
}

/* Puts the sliced measurements (each rank's mean time at its share) in
 * place of the turns' ones (a dedicated core's), as a dedicated core's
 * time: times the share, which the spec's rates are divided by again.
 * Returns the geometric mean of the ratios, for kernels measured both ways. */
static double replace_sliced(double share, CalibGemmSample convs[2][NB][MAX_CONV], const int nconv[2][NB],
                             CalibGemmSample sliced[2][NB][MAX_CONV], const int nsliced[2][NB], double layer_f[][NZ],
                             double layer_b[][NZ], double sf[][NZ], double sb[][NZ]) {
  double log_sum = 0;
  int n = 0;
  for (int d = 0; d < 2; d++)
    for (int b = 0; b < NB; b++)
      for (int i = 0; i < nconv[d][b] && i < nsliced[d][b]; i++) {
        double t = sliced[d][b][i].seconds * share;
        if (convs[d][b][i].seconds > 0 && t > 0) log_sum += log(t / convs[d][b][i].seconds), n++, convs[d][b][i].seconds = t;
      }
  for (int k = 0; k < CALIB_NUM_LAYER_KINDS; k++)
    for (int z = 0; z < NZ; z++) {
      double f = sf[k][z] * share, b = sb[k][z] * share;
      if (layer_f[k][z] > 0 && f > 0) log_sum += log(f / layer_f[k][z]), n++, layer_f[k][z] = f;
      if (layer_b[k][z] > 0 && b > 0) log_sum += log(b / layer_b[k][z]), n++, layer_b[k][z] = b;
    }
  return n ? exp(log_sum / n) : 1.0;
}

/* Averages v over the ranks (every rank measured at the same time). */
static void average_over_ranks(const Machine *mc, double *v, int n, int mpi) {
  if (!mpi || mc->world == 1 || n <= 0) return;
  Error err = {0};
  if (comm_allreduce_f64(comm_world(), v, (size_t)n, COMM_SUM, NULL, &err)) comm_abort(1, "calibrate: %s", err.msg);
  for (int i = 0; i < n; i++) v[i] /= mc->world;
}

static int load_base(const CalibCli *c, ClusterSpec *spec, int devices, Error *err) {
  if (!c->spec) {
    calib_spec_local_default(spec, devices);
    return 0;
  }
  char path[4096];
  int rc = plan_find_config("clusters", c->spec, path, sizeof path, err);
  if (!rc) rc = cluster_spec_load(spec, path, err);
  return rc;
}


static int measure_and_write(const CalibCli *c, int mpi, Error *err) {
  Machine mc;
  describe_machine(&mc, mpi);
  FILE *out = mc.rank == 0 ? stdout : NULL;
  int devices = c->devices > 0 ? c->devices : mc.ranks_on_node;
  if (c->devices <= 0 && mc.threads > 0 && mc.cores / mc.threads > devices) devices = mc.cores / mc.threads;
  ClusterSpec spec;
  memset(&spec, 0, sizeof spec);
  int rc = load_base(c, &spec, devices, err);
  if (rc) return rc;
  spec.nodes = mc.nodes;
  spec.devices_per_node = devices;
  cluster_spec_free(&spec); /* a base's device matrix would not fit the new device count */
  snprintf(spec.name, sizeof spec.name, "%s", c->name ? c->name : "");
  if (!c->name) snprintf(spec.name, sizeof spec.name, "local-%dx%dt", mc.world, mc.threads);
  if (out)
    fprintf(out, "calibrating %d rank(s) on %d node(s), %d thread(s) per rank, %d core(s) per node%s\n", mc.world,
            mc.nodes, mc.threads, mc.cores,
            mc.share < 1 ? " (oversubscribed: each rank gets its share of the cores)" : "");
  double t_start = now_s();

  /* Compute: every rank with a core of its own at once, averaged over
   * ranks. Oversubscribed ranks take turns (as many at a time as the node
   * has cores for), the others sleeping: a repetition longer than a
   * scheduler time slice would otherwise include the time its core served
   * another rank, and the share below would count that a second time. */
  CalibGemmSample samples[MAX_SAMPLES], samples_bf16[MAX_SAMPLES], samples_vary[MAX_SAMPLES], experts[MAX_SAMPLES];
  double fl = 0, fl_bf16 = 0, v[4 * MAX_SAMPLES + 17 + 2 * NB * MAX_CONV + 2 * NZ * CALIB_NUM_LAYER_KINDS + 3];
  CalibGemmSample convs[2][NB][MAX_CONV]; /* [fp32, bf16][batch] */
  double layer_f[CALIB_NUM_LAYER_KINDS][NZ] = {{0}}, layer_b[CALIB_NUM_LAYER_KINDS][NZ] = {{0}}, layer_n[NZ] = {0};
  int nconv[2][NB] = {{0}};
  double fma = 0, sgemm = 0, peak = 0, peak_bf16 = 0, update = 0;
  int ns_bf16 = 0, ns_vary = 0, ns_experts = 0;
  const int bf16 = kern_bf16_supported(NULL, 0);
  int ns = 0, T1 = c->quick ? 128 : 512, T0 = T1 / 4, failed = 0;
  double af1 = 0, ab1 = 0, af0 = 0, ab0 = 0, bw = 0, beff = 0, rf = 0, rb = 0, hf = 0, hb = 0;
  int turns = mpi && mc.share < 1 && mc.ranks_on_node > 1 ? (int)ceil(1.0 / mc.share - 1e-9) : 1;
  if (turns > mc.ranks_on_node) turns = mc.ranks_on_node;
  /* Ranks with cores of their own measure together (calibrate_timing.h). */
  calib_set_together(mpi && turns == 1 && mc.world > 1);
  for (int turn = 0; turn < turns; turn++) {
    if (mc.node_rank % turns == turn) {
      fma = peak_fma_gflops(mc.threads, c->quick ? 0.05 : 0.3) * 1e9;
      sgemm = peak_sgemm_gflops(c->quick ? 256 : 768, c->quick ? 0.03 : 0.2) * 1e9;
      ns = measure_gemms(c->quick, samples, &fl);
      /* The experts' fp32 products as they run: cold weights, typical calls. */
      ns_experts = calib_measure_expert_gemms(c->quick, experts, MAX_SAMPLES);
      if (bf16) {
        /* The bf16 peak (vdpbf16ps loop, or AMX's tile product) and the same shapes in bf16, so that
         * plan/simulate --dtype bf16 price a bf16 run on this CPU. */
        peak_bf16 = peak_bf16_gflops(mc.threads, c->quick ? 0.05 : 0.3) * 1e9;
        kern_set_precision(KERN_PRECISION_BF16, NULL, 0);
        ns_bf16 = measure_gemms(c->quick, samples_bf16, &fl_bf16);
        /* The expert products as they run, in bf16: run-time-shape kernels
         * (their row count follows the routing, kern/gemm.h), weights of
         * their own, the mean call (calibrate_experts.c). */
        ns_vary = calib_measure_expert_gemms(c->quick, samples_vary, MAX_SAMPLES);
        /* Attention's tile products in bf16 (kern/attention_bf16.c), against the bf16 peak. */
        if (measure_attention(T1, c->quick, peak_bf16, &hf, &hb)) hf = hb = 0;
        kern_set_precision(KERN_PRECISION_FP32, NULL, 0);
      }
      peak = fma; /* efficiencies are of the dedicated core rate; the share scales the spec's peak below */
      failed = ns < 2 || measure_attention(T1, c->quick, peak, &af1, &ab1) ||
               measure_attention(T0, c->quick, peak, &af0, &ab0) || measure_ring_attention(T0, c->quick, peak, &rf, &rb) ||
               measure_memory(c->quick, &bw, &beff);
      measure_nets(c->quick, bf16, calib_fastest_time, convs, nconv, layer_f, layer_b, layer_n);
      update = calib_measure_update(c->quick); /* the trainer's per-step update (calibrate_runtime.h) */
    }
    if (turns > 1) calib_sleeping_barrier();
  }
  calib_set_together(0);
  /* Oversubscribed, the kernels of nets/ are timed again with every rank
   * computing at once, time-slicing the cores as the ranks of a
   * data-parallel CNN run do, and those times replace the ones of the
   * turns: on 4 ranks of 2 cores the CNN kernels lose a tenth to a fifth
   * beyond the share that way, where the transformer's GEMMs lose little
   * (docs/planner.md, "Shared cores"). `slicing` is what that costs
   * against the turns' rates at the share, for the log. */
  double slicing = 1;
  if (turns > 1) {
    CalibGemmSample sliced[2][NB][MAX_CONV];
    int nsliced[2][NB] = {{0}};
    double sf[CALIB_NUM_LAYER_KINDS][NZ] = {{0}}, sb[CALIB_NUM_LAYER_KINDS][NZ] = {{0}}, sn[NZ] = {0};
    measure_nets(c->quick, bf16, calib_shared_mean_time, sliced, nsliced, sf, sb, sn);
    slicing = replace_sliced(mc.share, convs, nconv, sliced, nsliced, layer_f, layer_b, sf, sb);
  }
  if (failed) return error_set(err, ERR_NOMEM, "calibrate: out of memory for the measurement buffers");
  int nv = 0;
  v[nv++] = peak, v[nv++] = sgemm, v[nv++] = fl, v[nv++] = af1, v[nv++] = ab1, v[nv++] = af0;
  v[nv++] = ab0, v[nv++] = bw, v[nv++] = beff, v[nv++] = rf, v[nv++] = rb, v[nv++] = peak_bf16;
  for (int i = 0; i < ns; i++) v[nv++] = samples[i].seconds;
  for (int i = 0; i < ns_bf16; i++) v[nv++] = samples_bf16[i].seconds;
  for (int i = 0; i < ns_vary; i++) v[nv++] = samples_vary[i].seconds;
  int at_nets = nv;
  for (int d = 0; d < 2; d++)
    for (int b = 0; b < NB; b++)
      for (int i = 0; i < nconv[d][b]; i++) v[nv++] = convs[d][b][i].seconds;
  for (int k = 0; k < CALIB_NUM_LAYER_KINDS; k++)
    for (int z = 0; z < NZ; z++) v[nv++] = layer_f[k][z], v[nv++] = layer_b[k][z];
  v[nv++] = update;
  v[nv++] = hf, v[nv++] = hb;
  v[nv++] = slicing;
  int at_experts = nv;
  for (int i = 0; i < ns_experts; i++) v[nv++] = experts[i].seconds;
  average_over_ranks(&mc, v, nv, mpi);
  for (int i = 0; i < ns_experts; i++) experts[i].seconds = v[at_experts + i];
  for (int d = 0; d < 2; d++)
    for (int b = 0; b < NB; b++)
      for (int i = 0; i < nconv[d][b]; i++) convs[d][b][i].seconds = v[at_nets++];
  for (int k = 0; k < CALIB_NUM_LAYER_KINDS; k++)
    for (int z = 0; z < NZ; z++) layer_f[k][z] = v[at_nets++], layer_b[k][z] = v[at_nets++];
  update = v[at_nets++];
  hf = v[at_nets++], hb = v[at_nets++];
  slicing = v[at_nets++];
  peak = v[0], sgemm = v[1], fl = v[2], af1 = v[3], ab1 = v[4], af0 = v[5], ab0 = v[6], bw = v[7], beff = v[8], rf = v[9], rb = v[10];
  peak_bf16 = v[11];
  for (int i = 0; i < ns; i++) samples[i].seconds = v[12 + i];
  for (int i = 0; i < ns_bf16; i++) samples_bf16[i].seconds = v[12 + ns + i];
  for (int i = 0; i < ns_vary; i++) samples_vary[i].seconds = v[12 + ns + ns_bf16 + i];

  for (int d = 0; d < PLAN_NUM_DTYPES; d++) spec.peak_flops[d] = 0;
  /* fp32 at the FMA peak; bf16 at the measured bf16 peak with its own
   * GEMM curve where the CPU has it, else (the field every spec needs) the
   * fp32 figure, so that either dtype is priced at a measured rate. */
  spec.peak_flops[PLAN_DTYPE_FP32] = spec.peak_flops[PLAN_DTYPE_BF16] = peak * mc.share;
  rc = calib_fit_gemm_curve(samples, ns, peak, 0.5, &spec.gemm_efficiency, err);
  if (rc) return rc;
  spec.gemm_efficiency_rows_vary.n = 0;
  if (ns_experts >= 2 &&
      (rc = calib_fit_gemm_curve(experts, ns_experts, peak, 0.5, &spec.gemm_efficiency_rows_vary, err)))
    return rc;
  spec.gemm_efficiency_bf16.n = spec.gemm_efficiency_bf16_rows_vary.n = 0;
  if (ns_bf16 >= 2 && peak_bf16 > 0) {
    spec.peak_flops[PLAN_DTYPE_BF16] = peak_bf16 * mc.share;
    rc = calib_fit_gemm_curve(samples_bf16, ns_bf16, peak_bf16, 0.5, &spec.gemm_efficiency_bf16, err);
    if (rc) return rc;
    spec.gemm_efficiency_bf16_rows_vary.n = 0;
    if (ns_vary >= 2 &&
        (rc = calib_fit_gemm_curve(samples_vary, ns_vary, peak_bf16, 0.5, &spec.gemm_efficiency_bf16_rows_vary, err)))
      return rc;
  }
  /* Convolutions against the peak of their dtype; the layers' seconds are
   * a dedicated core's, so a share of it takes 1 / share as long. */
  for (int d = 0; d < 2; d++) {
    PlanConvCurves *cc = d ? &spec.conv_efficiency_bf16 : &spec.conv_efficiency;
    cc->n = 0;
    cc->per_pass = 1;
    for (int b = 0; b < NB; b++) {
      if (nconv[d][b] < 6 || (d && !(peak_bf16 > 0))) continue;
      /* calib_measure_convs gives forward, data and weight gradients per
       * shape in turn: a curve for each pass. */
      CalibGemmSample pass[3][MAX_CONV];
      int np[3] = {0, 0, 0};
      for (int i = 0; i < nconv[d][b]; i++) pass[i % 3][np[i % 3]++] = convs[d][b][i];
      PlanCurve *curves[3] = {&cc->curve[cc->n], &cc->data[cc->n], &cc->weights[cc->n]};
      for (int p = 0; p < 3; p++)
        if ((rc = calib_fit_gemm_curve(pass[p], np[p], d ? peak_bf16 : peak, 0.5, curves[p], err))) return rc;
      cc->batch[cc->n++] = CALIB_CONV_BATCHES[b] / (c->quick ? 2 : 1);
    }
  }
  spec.num_layer_seconds = 0;
  for (int k = 0; k < CALIB_NUM_LAYER_KINDS && k < PLAN_MAX_LAYER_KINDS; k++) {
    if (!(layer_f[k][0] > 0) || !(layer_b[k][0] > 0)) continue;
    int i = spec.num_layer_seconds++;
    memset(&spec.layer_seconds[i], 0, sizeof spec.layer_seconds[i]);
    snprintf(spec.layer_seconds[i].kind, sizeof spec.layer_seconds[i].kind, "%s", CALIB_LAYER_KINDS[k]);
    for (int z = 0; z < NZ && z < PLAN_MAX_LAYER_SIZES && layer_f[k][z] > 0 && layer_b[k][z] > 0; z++) {
      int j = spec.layer_seconds[i].sizes++;
      spec.layer_seconds[i].elements[j] = layer_n[z];
      spec.layer_seconds[i].fwd_at[j] = layer_f[k][z] / mc.share;
      spec.layer_seconds[i].bwd_at[j] = layer_b[k][z] / mc.share;
    }
    spec.layer_seconds[i].fwd = spec.layer_seconds[i].fwd_at[0];
    spec.layer_seconds[i].bwd = spec.layer_seconds[i].bwd_at[0];
  }
  spec.attention_fwd_efficiency = fmin(1.0, af1);
  spec.attention_bwd_efficiency = fmin(1.0, ab1);
  spec.attention_bf16_fwd_efficiency = fmin(1.0, hf);
  spec.attention_bf16_bwd_efficiency = fmin(1.0, hb);
  spec.attention_ref_tokens = T1;
  /* Exponent of efficiency in tokens below the reference, from the two lengths. */
  double ex = af0 > 0 && af1 > 0 ? log(af1 / af0) / log((double)T1 / T0) : 0;
  spec.attention_length_exponent = fmin(4.0, fmax(0.0, ex));
  spec.attention_ring_fwd_efficiency = fmin(1.0, rf);
  spec.attention_ring_bwd_efficiency = fmin(1.0, rb);
  spec.attention_ring_query_tokens = T0 / 4;
  spec.kernel_floor = fl;
  spec.optimizer_per_param = update > 0 ? update / mc.share : 0; /* a dedicated core's, at the share */
  spec.memory_bandwidth = bw * mc.share;
  /* The share those rates are at, and the cores behind it: the simulator
   * speeds a computing rank up while others wait (processor sharing). */
  spec.cores_per_node = mc.cores;
  spec.threads_per_device = mc.threads;
  spec.core_share = mc.share;
  spec.memory_efficiency = beff;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    spec.memory_capacity = (double)pages * page / devices;
    spec.memory_reserved = fmin(0.5 * 1073741824.0, 0.25 * spec.memory_capacity);
  }
  if (out) {
    fprintf(out, "  peak            %8.1f GFLOP/s per rank (FMA loop x core share %.2f), SGEMM %.1f GFLOP/s\n",
            peak * mc.share / 1e9, mc.share, sgemm / 1e9);
    fprintf(out, "  GEMM efficiency ");
    for (int i = 0; i < spec.gemm_efficiency.n; i++)
      fprintf(out, "%s%.2g: %.2f", i ? ", " : "", spec.gemm_efficiency.x[i], spec.gemm_efficiency.y[i]);
    fprintf(out, "  (%d shapes, %s, oneDNN ISA %s)\n", ns, kern_gemm_backend_name(kern_gemm_backend()),
            kern_gemm_isa_name());
    fprintf(out, "  expert GEMM eff.");
    for (int i = 0; i < spec.gemm_efficiency_rows_vary.n; i++)
      fprintf(out, "%s%.2g: %.2f", i ? ", " : " ", spec.gemm_efficiency_rows_vary.x[i], spec.gemm_efficiency_rows_vary.y[i]);
    fprintf(out, "  (%d products, as the experts run: weights of their own, mean call without the interrupted ones)\n", ns_experts);
    if (spec.gemm_efficiency_bf16.n > 0) {
      fprintf(out, "  bf16 peak       %8.1f GFLOP/s per rank (%s loop x core share %.2f)\n",
              peak_bf16 * mc.share / 1e9, peak_bf16_source(), mc.share);
      fprintf(out, "  bf16 GEMM eff.  ");
      for (int i = 0; i < spec.gemm_efficiency_bf16.n; i++)
        fprintf(out, "%s%.2g: %.2f", i ? ", " : "", spec.gemm_efficiency_bf16.x[i], spec.gemm_efficiency_bf16.y[i]);
      fprintf(out, "  (%d shapes)\n", ns_bf16);
      fprintf(out, "  bf16 expert eff.");
      for (int i = 0; i < spec.gemm_efficiency_bf16_rows_vary.n; i++)
        fprintf(out, "%s%.2g: %.2f", i ? ", " : " ", spec.gemm_efficiency_bf16_rows_vary.x[i],
                spec.gemm_efficiency_bf16_rows_vary.y[i]);
      fprintf(out, "  (run-time shapes, as the experts run)\n");
    } else {
      fprintf(out, "  bf16            not measured (no avx512_bf16 here): priced at the fp32 figures\n");
    }
    fprintf(out, "  attention       %.2f forward, %.2f backward at %d tokens; length exponent %.2f\n", af1, ab1, T1,
            spec.attention_length_exponent);
    if (hf > 0 && hb > 0)
      fprintf(out, "  bf16 attention  %.2f forward, %.2f backward at %d tokens (of the bf16 peak)\n", hf, hb, T1);
    fprintf(out, "  ring attention  %.2f forward, %.2f backward (CP 2, chunks of %d queries)\n", rf, rb, T0 / 4);
    fprintf(out, "  memory          %8.2f GB/s triad per rank, RMSNorm reaches %.0f%%; kernel floor %.2f us\n",
            bw * mc.share / 1e9, 100 * beff, fl * 1e6);
    fprintf(out, "  update          %.2f ns per parameter (gradient zeroed, its norm, AdamW), %.0f MB/s of parameters\n",
            spec.optimizer_per_param * 1e9, spec.optimizer_per_param > 0 ? 4e-6 / spec.optimizer_per_param : 0.0);
    const PlanConvCurves *cv[2] = {&spec.conv_efficiency, &spec.conv_efficiency_bf16};
    static const char *const PASS[3] = {"fwd", "data", "weights"};
    for (int d = 0; d < 2; d++)
      for (int b = 0; b < cv[d]->n; b++)
        for (int p = 0; p < 3; p++) {
          const PlanCurve *k = p == 0 ? &cv[d]->curve[b] : p == 1 ? &cv[d]->data[b] : &cv[d]->weights[b];
          fprintf(out, "  conv%s %3d img %-7s ", d ? " bf16" : "     ", cv[d]->batch[b], PASS[p]);
          for (int i = 0; i < k->n; i++) fprintf(out, "%s%.2g: %.2f", i ? ", " : "", k->x[i], k->y[i]);
          fprintf(out, "  (%d shapes)\n", nconv[d][b] / 3);
        }
    if (turns > 1)
      fprintf(out, "  time-slicing    CNN kernels timed with all %d ranks at once: %.2f x their rates at the share\n",
              mc.ranks_on_node, slicing);
    for (int z = 0; spec.num_layer_seconds > 0 && z < spec.layer_seconds[0].sizes; z++) {
      fprintf(out, "  layers          ns per element forward/backward at %.2g elements:", spec.layer_seconds[0].elements[z]);
      for (int i = 0; i < spec.num_layer_seconds; i++)
        if (z < spec.layer_seconds[i].sizes)
          fprintf(out, " %s %.2f/%.2f", spec.layer_seconds[i].kind, spec.layer_seconds[i].fwd_at[z] * 1e9,
                  spec.layer_seconds[i].bwd_at[z] * 1e9);
      fprintf(out, "\n");
    }
  }
  double bucket_overhead = 0;
  PlanCurve grad_factor = {0};
  if (mpi && mc.world > 1) {
    /* Collectives are measured waiting as a training run on these ranks
     * waits (comm/waits.h): sleeping between tests where the ranks' threads
     * outnumber the cores. Spinning there, a rank's test loop takes the core
     * its peer needs to progress the collective, and a 4 KB all-reduce of
     * 4 ranks on 2 cores took 22 us in one calibration and 2 ms in the next. */
    rc = comm_waits_decide(mc.ranks_on_node * mc.threads, mc.cores, err);
    if (!rc && out) fprintf(out, "  waits           %s, as training waits on these ranks\n", comm_waits_reason());
    /* And under the collective timeout every training run arms: a small
     * collective then runs as its non-blocking form waited for in a test
     * loop, up to twice the blocking call's time on shared memory, a large
     * one blocking after an arrival check (comm/timeout.h). */
    double was = comm_collective_timeout();
    if (!rc) rc = comm_set_collective_timeout(600, err);
    if (!rc) rc = calib_measure_links(mc.nodes, mc.ranks_on_node, c->quick, &spec, out, err);
    if (!rc) rc = calib_measure_bucket_overhead(c->quick, mc.threads, &spec, &bucket_overhead, out, err);
    /* On one node only: across nodes the network, not the caches, sets a
     * bucket's pace, and the fit measured it. */
    if (!rc && mc.nodes <= 1)
      rc = calib_measure_grad_reduce(c->quick, mc.threads, &spec, bucket_overhead, &grad_factor, out, err);
    Error restore;
    comm_set_collective_timeout(was, &restore);
    if (rc) return rc;
  } else if (out) {
    fprintf(out, "  links           not measured (one rank): intra_node %.2f GB/s %.1f us, inter_node %.2f GB/s "
            "%.1f us kept from %s\n", spec.link[0].bandwidth / 1e9, spec.link[0].latency * 1e6,
            spec.link[1].bandwidth / 1e9, spec.link[1].latency * 1e6, c->spec ? c->spec : "the default");
  }
  /* Several nodes: a tiered spec (with no tiers beyond the two measured
   * levels), so that the planner places groups device by device and
   * searches the device mapping on it by default. */
  if (mc.nodes > 1) spec.tiers.given = 1;
  rc = cluster_spec_validate(&spec, err);
  if (rc || mc.rank != 0) return rc;
  char desc[1024];
  snprintf(desc, sizeof desc,
           "Calibrated by fivefold calibrate%s: %d rank(s) x %d thread(s) on %d node(s) of %d core(s); one device "
           "= one rank with core share %.2f (peak and bandwidth scaled by it). fp32 FMA peak %.1f GFLOP/s per core, "
           "SGEMM %.1f GFLOP/s (%s), bf16 peak %.1f GFLOP/s (0: not measured).%s",
           c->quick ? " --quick" : "", mc.world, mc.threads, mc.nodes, mc.cores, mc.share, peak / 1e9, sgemm / 1e9,
           kern_gemm_backend_name(kern_gemm_backend()), peak_bf16 / 1e9,
           mpi && mc.world > 1 ? (mc.nodes > 1 ? " Links: intra_node among each node's ranks, inter_node between "
                                  "ranks of different nodes with every device of a node using the network at once "
                                  "(a device's share of it)." : "")
                               : " Links not measured (one rank).");
  /* The machine measured runs fivefold's CPU runtime: the spec says what it
   * does, so the planner prices that by default. */
  char host[64] = "";
  if (gethostname(host, sizeof host - 1)) host[0] = '\0';
  calib_runtime_facts_cpu(&spec.runtime, host);
  spec.runtime.bucket_overhead = bucket_overhead;
  spec.runtime.grad_reduce_factor = grad_factor;
  if (out)
    fprintf(out, "  runtime         fivefold CPU runtime on %s: fp32, MoE replicated over TP, no asynchronous "
            "progress (dp overlap 0), no device sync (dropless sync 0 us), 25 MiB buckets\n", host[0] ? host : "?");
  rc = calib_spec_write(&spec, desc, c->out, err);
  if (!rc && out) fprintf(out, "spec written to %s (%.1f s)\n", c->out, now_s() - t_start);
  return rc;
}

static int parse_args(int argc, char **argv, CalibCli *c) {
  static const char *const KNOWN[] = {"--quick", "--out", "--spec", "--from-trace", "--name", "--devices", "--help"};
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "calibrate", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) return 1;
    if (option_is(&op, "--quick")) {
      if (option_switch(&op, &perr)) {
        fprintf(stderr, "fivefold calibrate: %s\n", perr.msg);
        return -1;
      }
      c->quick = 1;
      continue;
    }
    const char **target = option_is(&op, "--out") ? &c->out : option_is(&op, "--spec") ? &c->spec
                        : option_is(&op, "--from-trace") ? &c->trace : option_is(&op, "--name") ? &c->name : NULL;
    int is_devices = option_is(&op, "--devices");
    if (!target && !is_devices) {
      option_unknown(&op, &perr);
      fprintf(stderr, "fivefold calibrate: %s\n", perr.msg);
      return -1;
    }
    const char *value = NULL;
    if (option_value(&op, &value, &perr)) {
      fprintf(stderr, "fivefold calibrate: %s\n", perr.msg);
      return -1;
    }
    if (target) {
      *target = value;
      continue;
    }
    char *end;
    errno = 0;
    long d = strtol(value, &end, 10);
    if (end == value || *end || errno || d < 1 || d > 1000000) {
      fprintf(stderr, "fivefold calibrate: --devices expects an integer >= 1, got '%s'\n", value);
      return -1;
    }
    c->devices = (int)d;
  }
  return 0;
}

/* MPI starts only under a launcher (as for train): a plain start measures
 * one rank without MPI. */
static int under_mpi_launcher(void) {
  static const char *const VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
    if (getenv(VARS[i])) return 1;
  return 0;
}

int cmd_calibrate(int argc, char **argv) {
  CalibCli c;
  memset(&c, 0, sizeof c);
  c.out = "calibrated.json";
  int prc = parse_args(argc, argv, &c);
  if (prc) {
    if (prc > 0) calibrate_usage(stdout);
    return prc > 0 ? 0 : 2;
  }
  Error err = {0, ""};
  if (c.trace) {
    ClusterSpec base, out;
    memset(&base, 0, sizeof base);
    int rc = 0;
    if (c.spec) {
      char path[4096];
      rc = plan_find_config("clusters", c.spec, path, sizeof path, &err);
      if (!rc) rc = cluster_spec_load(&base, path, &err);
    } else {
      calib_spec_local_default(&base, 1);
      double peak = peak_fma_gflops(0, 0.1) * 1e9;
      base.peak_flops[PLAN_DTYPE_FP32] = base.peak_flops[PLAN_DTYPE_BF16] = peak;
      printf("no --spec: starting from the default local spec with the measured peak %.1f GFLOP/s\n", peak / 1e9);
    }
    if (!rc) rc = calibrate_from_trace(c.trace, &base, &out, stdout, &err);
    if (!rc) {
      char desc[512];
      snprintf(desc, sizeof desc, "Refitted by fivefold calibrate --from-trace %s from %s.", c.trace,
               c.spec ? c.spec : "the default local spec");
      rc = calib_spec_write(&out, desc, c.out, &err);
      if (!rc) printf("spec written to %s\n", c.out);
      cluster_spec_free(&out);
    }
    cluster_spec_free(&base);
    if (rc) fprintf(stderr, "fivefold calibrate: %s\n", err.msg);
    return rc ? 1 : 0;
  }
  int mpi = 0;
  if (!comm_mpi_finalized() && under_mpi_launcher()) {
    if (comm_init(&argc, &argv, &err)) {
      fprintf(stderr, "fivefold calibrate: %s\n", err.msg);
      return 1;
    }
    mpi = 1;
  }
  int rc = measure_and_write(&c, mpi, &err);
  if (rc) {
    if (mpi && comm_world_size() > 1) comm_abort(1, "fivefold calibrate: %s", err.msg);
    fprintf(stderr, "fivefold calibrate: %s\n", err.msg);
  }
  if (mpi) {
    Error ferr = {0, ""};
    if (comm_finalize(&ferr) && !rc) {
      fprintf(stderr, "fivefold calibrate: %s\n", ferr.msg);
      rc = 1;
    }
  }
  return rc ? 1 : 0;
}
