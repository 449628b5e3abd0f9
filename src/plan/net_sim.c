/* The simulator of a feed-forward network of nets/ under data parallelism
 * (net_sim.h): per-layer pricing, the gradient buckets and the update. */
#include "plan/net_sim.h"

#include <math.h>
#include <string.h>

#include "plan/buckets.h"

/* fivefold's nets keep activations, gradients and the optimizer in fp32;
 * only the GEMM inputs follow the precision. */
#define ELT 4.0

typedef struct ReduceCtx {
  const ClusterSpec *cluster;
  const PlanOptions *opt;
  PlanGroupTopo dp;
  PlanCollective kind;
} ReduceCtx;

static double reduce_time(const void *ctx, int group, double elements) {
  const ReduceCtx *c = ctx;
  if (group != 0) return 0.0;
  return plan_bucket_reduce_time(c->cluster, c->opt, &c->dp, c->kind, elements * c->opt->grad_reduce_bytes);
}

/* A convolution pass of `batch` images at one of the spec's convolution
 * curves (curves[i] measured at cc->batch[i]): per image, the rate measured
 * at each calibrated batch (its curve read at that batch's FLOPs),
 * interpolated in log(batch) between the batches around this one and held
 * beyond them; never faster than its bytes (input, weights and output,
 * each once: a direct convolution builds no im2col matrix) or the kernel
 * floor. */
static double conv_pass(const ClusterSpec *cl, const PlanConvCurves *cc, const PlanCurve *curves, PlanDtype dtype,
                        double batch, const PlanNetLayer *l) {
  double flops = 2.0 * l->m * l->n * l->k, per_image = flops / batch, peak = plan_peak_flops(cl, dtype);
  double t_img[PLAN_MAX_CONV_BATCHES] = {0};
  for (int i = 0; i < cc->n; i++) t_img[i] = per_image / (peak * plan_curve_eval(&curves[i], per_image * cc->batch[i]));
  double t = t_img[0];
  if (batch >= cc->batch[cc->n - 1]) t = t_img[cc->n - 1];
  else
    for (int i = 0; i + 1 < cc->n; i++)
      if (batch >= cc->batch[i] && batch < cc->batch[i + 1]) {
        double a = log(batch / cc->batch[i]) / log((double)cc->batch[i + 1] / cc->batch[i]);
        t = t_img[i] + a * (t_img[i + 1] - t_img[i]);
      }
  double memory = (l->in + l->params + l->out) * ELT / (cl->memory_bandwidth * cl->memory_efficiency);
  return fmax(fmax(batch * t, memory), cl->kernel_floor);
}

/* The spec's seconds per input element of a layer kind for an input of
 * `elements`: at several measured sizes, interpolated in log(elements)
 * between the sizes around it and held beyond them (*sized 1: the
 * measurements span caches and memory, so no roofline applies on top); at
 * one unstated size, that rate (*sized 0). 0 when the kind is not measured. */
static int measured_rates(const ClusterSpec *cl, const char *kind, double elements, double *fwd, double *bwd,
                          int *sized) {
  for (int i = 0; i < cl->num_layer_seconds; i++) {
    if (strcmp(cl->layer_seconds[i].kind, kind)) continue;
    const int n = cl->layer_seconds[i].sizes;
    const double *x = cl->layer_seconds[i].elements, *f = cl->layer_seconds[i].fwd_at, *b = cl->layer_seconds[i].bwd_at;
    *sized = n > 0;
    *fwd = cl->layer_seconds[i].fwd, *bwd = cl->layer_seconds[i].bwd;
    if (n > 0 && elements >= x[n - 1]) *fwd = f[n - 1], *bwd = b[n - 1];
    for (int j = 0; j + 1 < n; j++)
      if (elements >= x[j] && elements < x[j + 1]) {
        double a = log(elements / x[j]) / log(x[j + 1] / x[j]);
        *fwd = f[j] + a * (f[j + 1] - f[j]);
        *bwd = b[j] + a * (b[j + 1] - b[j]);
      }
    return 1;
  }
  return 0;
}

static void price_layer(const ClusterSpec *cl, const PlanNetLayer *l, PlanDtype dtype, double batch, int first,
                        double *fwd, double *bwd) {
  const PlanConvCurves *cc = dtype == PLAN_DTYPE_BF16 ? &cl->conv_efficiency_bf16 : &cl->conv_efficiency;
  if (l->gemm && !strcmp(l->kind, "conv2d") && cc->n > 0) {
    /* The measured weight-gradient pass includes the bias gradient. */
    *fwd = conv_pass(cl, cc, cc->curve, dtype, batch, l);
    if (cc->per_pass)
      *bwd = (first ? 0.0 : conv_pass(cl, cc, cc->data, dtype, batch, l)) + conv_pass(cl, cc, cc->weights, dtype, batch, l);
    else
      *bwd = (first ? 1.0 : 2.0) * *fwd;
  } else if (l->gemm) {
    double g = plan_gemm_time(cl, dtype, l->m, l->n, l->k);
    /* The bias is added over the output (and its gradient sums dy). */
    double bias = l->bias > 0 ? plan_memory_time(cl, 2 * l->out * ELT) : 0.0;
    *fwd = g + bias;
    *bwd = (first ? 1.0 : 2.0) * g + (l->bias > 0 ? plan_memory_time(cl, l->out * ELT) : 0.0);
  } else {
    double mem_f = plan_memory_time(cl, (l->in + l->out) * ELT);
    double mem_b = plan_memory_time(cl, (2 * l->in + l->out) * ELT); /* x (or a mask), dy in; dx out */
    double f, b;
    int sized = 0;
    *fwd = mem_f, *bwd = mem_b;
    if (measured_rates(cl, l->kind, l->in, &f, &b, &sized)) {
      *fwd = sized ? fmax(f * l->in, cl->kernel_floor) : fmax(mem_f, f * l->in);
      *bwd = sized ? fmax(b * l->in, cl->kernel_floor) : fmax(mem_b, b * l->in);
    }
    if (first) *bwd = 0.0; /* the network's first layer computes no input gradient */
  }
}

int plan_net_simulate(const PlanNetLayer *layers, int n, const ClusterSpec *cl, const PlanOptions *opt,
                      const PlanNetConfig *cfg, PlanNetResult *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (n < 1 || n > PLAN_NET_MAX_LAYERS)
    return error_set(err, ERR_ARG, "simulate: %d layers, expected 1..%d", n, PLAN_NET_MAX_LAYERS);
  if (cfg->dp < 1 || cfg->micro_batch_size < 1 || cfg->microbatches < 1)
    return error_set(err, ERR_ARG, "simulate: dp %d, micro-batch %d, micro-batches %d (expected each >= 1)", cfg->dp,
                     cfg->micro_batch_size, cfg->microbatches);
  double b = cfg->micro_batch_size;
  /* The input batch copied into the network, the loss over the logits
   * (softmax read and written, the gradient written). */
  out->fwd = plan_memory_time(cl, 2 * layers[0].in * ELT) + plan_memory_time(cl, 3 * b * cfg->classes * ELT);
  out->other_fwd = out->fwd;
  PlanGradLayer grads[PLAN_NET_MAX_LAYERS];
  for (int i = 0; i < n; i++) {
    double f, g;
    price_layer(cl, &layers[i], cfg->dtype, b, i == 0, &f, &g);
    out->layer_fwd[i] = f;
    out->layer_bwd[i] = g;
    out->fwd += f;
    out->bwd += g;
    if (layers[i].gemm) out->gemm_fwd += f;
    else out->other_fwd += f;
    out->params += layers[i].params;
    /* Backward finishes the layers from the output back. */
    PlanGradLayer *gl = &grads[n - 1 - i];
    memset(gl, 0, sizeof *gl);
    gl->elements[0] = layers[i].params;
    gl->bwd_seconds = g;
  }
  double m = cfg->microbatches;
  out->step_time = m * (out->fwd + out->bwd);

  ReduceCtx rc = {cl, opt, {0}, cfg->distributed_optimizer ? PLAN_COLL_REDUCE_SCATTER : PLAN_COLL_ALL_REDUCE};
  PlanConfig pc;
  plan_config_init(&pc, 1, cfg->micro_batch_size * cfg->microbatches * cfg->dp, cfg->micro_batch_size);
  pc.par.dp = cfg->dp;
  int rcode = plan_group_topology(cl, &pc, PLAN_GROUP_DP, &rc.dp);
  if (rcode) return rcode;
  if (cfg->dp > 1) {
    PlanBucketModel bm = {grads, n, cfg->overlap, reduce_time, &rc};
    PlanBucketPrice price;
    double total = plan_buckets_total_elements(&bm);
    double size = opt->bucket_params > 0 ? opt->bucket_params : total;
    if (opt->bucket_max_share > 0 && size > opt->bucket_max_share * total) size = opt->bucket_max_share * total;
    /* The runtime takes whole floats and rounds up to whole blocks of the
     * group (dp_grads_create). */
    size = ceil(floor(size) / cfg->dp) * cfg->dp;
    if (size < cfg->dp) size = cfg->dp;
    if ((rcode = plan_buckets_price_uniform(&bm, size, &price, err))) return rcode;
    out->reduce = price.exposed;
    out->buckets = price.buckets;
    out->bucket_params = size;
  }
  /* Adam streams per local parameter: gradient read, master, m and v read
   * and written; zeroing the gradient and its norm read it once more. */
  double local = cfg->distributed_optimizer ? out->params / cfg->dp : out->params;
  out->optimizer = cl->optimizer_per_param > 0
                       ? plan_optimizer_time(cl, local, 0) /* measured: the zeroing and the norm included */
                       : plan_memory_time(cl, local * (4 + 3 * 8)) + plan_memory_time(cl, out->params * ELT) +
                             plan_memory_time(cl, out->params * ELT);
  if (cfg->distributed_optimizer && cfg->dp > 1)
    out->optimizer += plan_collective_time(cl, &rc.dp, PLAN_COLL_ALL_GATHER, out->params * ELT, opt->algo, NULL);
  out->step_time += out->reduce + out->optimizer;
  return ERR_OK;
}

void plan_net_explain(const PlanNetLayer *layers, int n, const PlanNetConfig *cfg, const PlanNetResult *r, FILE *f) {
  fprintf(f, "%-28s %12s %12s\n", "layer (one micro-batch)", "forward", "backward");
  for (int i = 0; i < n; i++)
    fprintf(f, "%-28s %9.3f ms %9.3f ms\n", layers[i].name, r->layer_fwd[i] * 1e3, r->layer_bwd[i] * 1e3);
  fprintf(f, "micro-batch: forward %.3f ms (GEMM layers %.3f ms), backward %.3f ms; %d micro-batch(es) per step\n",
          r->fwd * 1e3, r->gemm_fwd * 1e3, r->bwd * 1e3, cfg->microbatches);
  fprintf(f, "gradient reduction %.3f ms exposed (%d bucket(s) over dp %d), optimizer %.3f ms, %.0f parameters\n",
          r->reduce * 1e3, r->buckets, cfg->dp, r->optimizer * 1e3, r->params);
}
