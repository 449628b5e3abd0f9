/* `fivefold simulate --net FILE`: the step time of a vision network of
 * nets/ (a run config with "family": "vision", e.g. the files of configs/vision)
 * trained data-parallel, priced by plan/net_sim.h on a cluster spec. This
 * file turns the built network's layers into the cost model's terms:
 * conv2d and linear layers as the implicit GEMM of their forward (samples
 * x output positions by output channels, multiplications per output as
 * the inner size), pooling, activations, normalisation and standardisation
 * as memory traffic. Tropical and transposed layers are refused: their
 * kernels are not GEMMs and the spec has no rate for them.
 * --search-buckets searches the gradient bucket size (plan/net_buckets.h)
 * and --out writes the plan file `fivefold train --plan` applies
 * (cli/net_plan_write.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file_text.h"
#include "base/options.h"
#include "cli/cmd_plan.h"
#include "cli/cli_util.h"
#include "cli/net_plan_write.h"
#include "nets/layer.h"
#include "nets/network.h"
#include "nets/vision.h"
#include "plan/config_paths.h"
#include "plan/net_buckets.h"
#include "plan/net_sim.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: fivefold simulate --net FILE --cluster C --gpus N --mbs B --global-batch G [options]\n\n"
          "Predicts the step time of a vision network (a run config whose model has \"family\": \"vision\")\n"
          "trained data-parallel over N ranks with B images per micro-batch and G images per step.\n\n"
          "  --dtype D                 fp32 or bf16: the precision of the GEMM inputs (default: the spec's runtime)\n"
          "  --distributed-optimizer   ZeRO-1: reduce-scatter, shard the update, all-gather the parameters\n"
          "  --bucket-params P         gradient bucket size in elements (default: a quarter of the gradient, as the\n"
          "                            nets runtime cuts it)\n"
          "  --search-buckets          search the bucket size with the simulator (every bucket count up to 64,\n"
          "                            then golden section; docs/planner.md) and price the winner\n"
          "  --dp-overlap F            share of each bucket's reduction that may run behind backward (default 0:\n"
          "                            the nets runtime reduces after the last backward; 1 prices a runtime that\n"
          "                            starts each bucket as backward completes it)\n"
          "  --out FILE                write the plan file (layout, prediction, chosen buckets) for\n"
          "                            `fivefold train --plan FILE`\n"
          "  --quiet                   only the summary line\n");
}

static const char *const KNOWN[] = {"--net",          "--cluster", "--gpus",  "--mbs",
                                    "--global-batch", "--dtype",   "--distributed-optimizer",
                                    "--bucket-params", "--quiet",  "--help",
                                    "--search-buckets", "--dp-overlap", "--out"};

/* Kinds priced as their forward's implicit GEMM; every other accepted kind
 * is memory traffic. */
static int is_gemm_kind(const char *k) { return !strcmp(k, "conv2d") || !strcmp(k, "linear"); }
static int is_memory_kind(const char *k) {
  static const char *const K[] = {"maxpool", "avgpool", "relu", "leaky_relu", "tanh", "instance_norm", "standardize"};
  for (size_t i = 0; i < sizeof K / sizeof K[0]; i++)
    if (!strcmp(k, K[i])) return 1;
  return 0;
}

static int describe_layers(const char *path, const Network *net, int mbs, PlanNetLayer *out, int *n, Error *err) {
  int count = 0;
  const Layer *layers = vision_layers(net, &count);
  if (count > PLAN_NET_MAX_LAYERS)
    return error_set(err, ERR_CONFIG, "%s: %d layers, the simulator prices at most %d", path, count,
                     PLAN_NET_MAX_LAYERS);
  for (int i = 0; i < count; i++) {
    const Layer *l = &layers[i];
    const char *kind = l->ops->kind;
    PlanNetLayer *p = &out[i];
    memset(p, 0, sizeof *p);
    snprintf(p->kind, sizeof p->kind, "%s", kind);
    snprintf(p->name, sizeof p->name, "%d %s %dx%dx%d", i, kind, l->out.c, l->out.h, l->out.w);
    double outs = (double)layer_shape_numel(l->out);
    p->in = mbs * (double)layer_shape_numel(l->in);
    p->out = mbs * outs;
    for (int j = 0; j < l->num_params; j++) {
      p->params += (double)l->params[j].numel;
      if (!strcmp(l->params[j].suffix, "bias")) p->bias += (double)l->params[j].numel;
    }
    if (is_gemm_kind(kind)) {
      p->gemm = 1;
      p->m = mbs * (double)l->out.h * l->out.w;
      p->n = l->out.c;
      p->k = l->mults_per_sample / outs;
    } else if (!is_memory_kind(kind)) {
      return error_set(err, ERR_UNSUPPORTED,
                       "%s: model.layers[%d].type: the simulator prices conv2d, linear, pooling, activations, "
                       "instance_norm and standardize layers, not %s",
                       path, i, kind);
    }
  }
  *n = count;
  return 0;
}

/* The run config's "model" object (or the file itself when it is one). */
static int load_vision(const char *path, VisionConfig *vc, Error *err) {
  char *text = NULL;
  size_t len = 0;
  int rc = file_read_text(path, "network config", 16u << 20, &text, &len, err);
  if (rc) return rc;
  cJSON *root = cJSON_Parse(text);
  free(text);
  if (!root) return error_set(err, ERR_CONFIG, "%s: not valid JSON", path);
  cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(model)) model = root;
  const cJSON *family = cJSON_GetObjectItemCaseSensitive(model, "family");
  if (!cJSON_IsString(family) || strcmp(family->valuestring, "vision"))
    rc = error_set(err, ERR_CONFIG, "%s: model.family: expected \"vision\" (simulate --net prices vision networks), "
                   "got %s", path, cJSON_IsString(family) ? family->valuestring : "nothing");
  else
    rc = vision_config_from_json(vc, model, path, err);
  cJSON_Delete(root);
  return rc;
}

static int cmd_simulate_net(int argc, char **argv) {
  const char *net_path = NULL, *cluster_name = NULL, *dtype_name = NULL, *out_path = NULL;
  double gpus = 0, mbs = 0, global = 0, bucket = 0, overlap = 0;
  int zero = 0, quiet = 0, search = 0;
  Error err = {0, ""};
  OptionParser op;
  option_parser_init(&op, "simulate", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    const char *v = NULL;
    int rc = 0;
    if (option_is_help(&op)) {
      usage(stdout);
      return 0;
    } else if (option_is(&op, "--net")) rc = option_value(&op, &net_path, &err);
    else if (option_is(&op, "--cluster")) rc = option_value(&op, &cluster_name, &err);
    else if (option_is(&op, "--dtype")) rc = option_value(&op, &dtype_name, &err);
    else if (option_is(&op, "--gpus")) rc = option_value(&op, &v, &err) || cli_parse_number(&op, v, 1, 1 << 20, 1, &gpus, &err);
    else if (option_is(&op, "--mbs")) rc = option_value(&op, &v, &err) || cli_parse_number(&op, v, 1, 1 << 24, 1, &mbs, &err);
    else if (option_is(&op, "--global-batch"))
      rc = option_value(&op, &v, &err) || cli_parse_number(&op, v, 1, 1 << 30, 1, &global, &err);
    else if (option_is(&op, "--bucket-params"))
      rc = option_value(&op, &v, &err) || cli_parse_number(&op, v, 1, 1e15, 0, &bucket, &err);
    else if (option_is(&op, "--distributed-optimizer")) rc = option_switch(&op, &err), zero = 1;
    else if (option_is(&op, "--quiet")) rc = option_switch(&op, &err), quiet = 1;
    else if (option_is(&op, "--search-buckets")) rc = option_switch(&op, &err), search = 1;
    else if (option_is(&op, "--dp-overlap"))
      rc = option_value(&op, &v, &err) || cli_parse_number(&op, v, 0, 1, 0, &overlap, &err);
    else if (option_is(&op, "--out")) rc = option_value(&op, &out_path, &err);
    else rc = option_unknown(&op, &err);
    if (rc) return cli_fail("simulate", 2, "%s", err.msg);
  }
  if (!net_path || !cluster_name || gpus < 1 || mbs < 1 || global < 1)
    return cli_fail("simulate", 2, "--net, --cluster, --gpus, --mbs and --global-batch are required (see --help)");
  if (search && bucket > 0)
    return cli_fail("simulate", 2, "--search-buckets searches the size --bucket-params gives: give one of them");
  PlanNetConfig cfg = {(int)gpus, (int)mbs, 0, zero, PLAN_DTYPE_FP32, 0, overlap};
  long per_step = (long)cfg.dp * cfg.micro_batch_size;
  if ((long)global % per_step)
    return cli_fail("simulate", 2, "--global-batch %.0f is not a multiple of --gpus %d x --mbs %d", global, cfg.dp,
                    cfg.micro_batch_size);
  cfg.microbatches = (int)((long)global / per_step);

  char path[4096];
  ClusterSpec cluster;
  memset(&cluster, 0, sizeof cluster);
  if (plan_find_config("clusters", cluster_name, path, sizeof path, &err) || cluster_spec_load(&cluster, path, &err))
    return cli_fail("simulate", 1, "%s", err.msg);
  PlanOptions opt;
  plan_options_default(&opt);
  unsigned given = (dtype_name ? PLAN_GIVEN_DTYPE : 0) | (bucket > 0 ? PLAN_GIVEN_BUCKET : 0);
  if (bucket > 0) opt.bucket_params = bucket, opt.bucket_max_share = 0;
  plan_options_from_runtime(&cluster.runtime, given, &opt, &cfg.dtype);
  /* The nets runtime's default bucket is a quarter of the gradient,
   * whatever its size (train/trainer_net.c), not the transformer's 25 MB. */
  if (bucket <= 0) opt.bucket_params = 0, opt.bucket_max_share = 0.25;
  if (dtype_name && (plan_dtype_from_name(dtype_name, &cfg.dtype) ||
                     (cfg.dtype != PLAN_DTYPE_FP32 && cfg.dtype != PLAN_DTYPE_BF16))) {
    cluster_spec_free(&cluster);
    return cli_fail("simulate", 2, "--dtype must be fp32 or bf16 for a vision network, got '%s'", dtype_name);
  }

  VisionConfig vc;
  Network net;
  memset(&net, 0, sizeof net);
  PlanNetLayer layers[PLAN_NET_MAX_LAYERS];
  int n = 0, code = 1;
  PlanNetResult r;
  if (load_vision(net_path, &vc, &err) || vision_create(&net, &vc, cfg.micro_batch_size, &err) ||
      describe_layers(net_path, &net, cfg.micro_batch_size, layers, &n, &err)) {
    fprintf(stderr, "fivefold simulate: %s\n", err.msg);
    goto out;
  }
  cfg.classes = vc.classes;
  PlanNetBucketChoice choice;
  if (search) {
    if (plan_net_search_buckets(layers, n, &cluster, &opt, &cfg, &choice, &err)) {
      fprintf(stderr, "fivefold simulate: %s\n", err.msg);
      goto out;
    }
    opt.bucket_params = choice.bucket_params, opt.bucket_max_share = 0;
  }
  if (plan_net_simulate(layers, n, &cluster, &opt, &cfg, &r, &err)) {
    fprintf(stderr, "fivefold simulate: %s\n", err.msg);
    goto out;
  }
  if (!quiet) {
    printf("network %s on %d x %s, %d images per micro-batch, %d micro-batch(es), %s GEMMs\n\n", net_path, cfg.dp,
           cluster.name, cfg.micro_batch_size, cfg.microbatches, plan_dtype_name(cfg.dtype));
    plan_net_explain(layers, n, &cfg, &r, stdout);
    printf("\n");
  }
  if (search) plan_net_bucket_explain(&choice, &cfg, stdout);
  printf("predicted: step %.2f ms, %.0f images/s\n", r.step_time * 1e3, global / r.step_time);
  if (out_path) {
    NetPlanOut po = {net_path, cluster_name, &vc, &cfg, n, &r, search ? &choice : NULL};
    if (net_plan_write(&po, out_path, &err)) {
      fprintf(stderr, "fivefold simulate: %s\n", err.msg);
      goto out;
    }
    printf("plan written to %s (fivefold train --plan %s)\n", out_path, out_path);
  }
  code = 0;
out:
  network_free(&net);
  cluster_spec_free(&cluster);
  return code;
}

int cmd_simulate_any(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--net") || !strncmp(argv[i], "--net=", 6)) return cmd_simulate_net(argc, argv);
  return cmd_simulate(argc, argv);
}
