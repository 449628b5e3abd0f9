/* The command line of `fivefold plan` and `fivefold simulate`: their help,
 * the option tables (every option of both commands is listed here, in one
 * place) and the hand-rolled parser, which can run repeatedly in one
 * process (tests). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "cli/cmd_plan_cli.h"
#include "plan/order.h"
#include "sched/partition.h"

static void common_help(FILE *f) {
  fprintf(f,
          "  --model M                model: a name in configs/models/ (e.g. mixtral-8x22b), a model config\n"
          "                           file, or a run config (its model section, as fivefold train reads it)\n"
          "  --cluster C              cluster spec: a path, or a name in configs/clusters/ (e.g. dgx-h100)\n"
          "  --gpus N                 GPUs to use\n"
          "  --seq S                  sequence length in tokens\n"
          "  --global-batch B         sequences per iteration\n"
          "  --dtype D                bf16 (mixed precision), fp16 or fp32 (default: the spec's runtime\n"
          "                           precision, fp32 on a spec from calibrate; else bf16)\n"
          "  --moe-imbalance X        busiest expert's load / mean load, dropless routing (default 1.1)\n"
          "  --expert-load LIST       measured tokens per expert, comma-separated: E values, or E per MoE layer\n"
          "                           (a run's metrics.jsonl \"expert_tokens\"); overrides the imbalance\n"
          "  --tp-overlap F           share of TP communication hidden behind GEMMs, 0..1 (default 0)\n"
          "  --cp-overlap F           share of the CP ring hidden behind attention (default 1; 0 on a\n"
          "                           spec without asynchronous progress)\n"
          "  --ep-overlap F           share of the MoE all-to-all hidden behind compute (default 0)\n"
          "  --dp-overlap F           share of gradient reduction hidden behind backward (default 1; 0 on\n"
          "                           a spec from calibrate: MPI without asynchronous progress)\n"
          "  --param-gather-overlap F distributed optimizer: share of the parameter all-gather hidden\n"
          "                           behind the next forward (default 1; 0 on a spec from calibrate)\n"
          "  --algo A                 collective algorithm: auto, ring, tree, hierarchical (default auto)\n"
          "  --bucket-params N        gradient bucket size in parameters (default 40000000; on a spec from\n"
          "                           calibrate the runtime's 25 MiB, at most a quarter of a rank's gradient)\n"
          "  --dropless-sync-us X     host synchronisation per dropless MoE layer forward, us (default 50;\n"
          "                           0 on a spec from calibrate: a CPU runtime has no device to wait for)\n"
          "  --moe-tp-replicated, --no-moe-tp-replicated\n"
          "                           TP without an MoE grid runs the MoE on the gathered sequence on every\n"
          "                           TP rank (fivefold's runtime), or each rank routes its own rows\n"
          "                           (Megatron-Core); default: the spec's runtime facts, else the latter\n"
          "  --attention-unfused      attention as two GEMMs over the full score matrix with softmax and\n"
          "                           dropout between (Megatron-LM before flash attention)\n"
          "  --fuse-swiglu 0|1, --fuse-bias-gelu 0|1, --fuse-norm-residual 0|1\n"
          "                           price the fused (1, default) or unfused (0) SwiGLU / GPT-2 bias + GeLU /\n"
          "                           residual add + norm kernels (the unfused by their extra memory traffic);\n"
          "                           plan searches both unless given\n"
          "  -h, --help               show this help\n");
}

void plan_cli_simulate_usage(FILE *f) {
  fprintf(f,
          "usage: fivefold simulate --model M --cluster C --gpus N --seq S --global-batch B\n"
          "                         [--tp T --cp C --pp P --vpp V --ep E --etp X --mbs K] [options]\n"
          "       fivefold simulate --plan FILE [options]\n"
          "       fivefold simulate --net FILE --cluster C --gpus N --mbs B --global-batch G (a vision network)\n\n"
          "Predicts one parallel configuration: builds the per-rank program, prices every action with\n"
          "the cost model and evaluates it; prints step time, MFU, where the time goes and memory per stage.\n\n"
          "options:\n");
  common_help(f);
  fprintf(f,
          "  --plan FILE              a plan `fivefold plan --out` wrote: its model, cluster, GPUs, sequence,\n"
          "                           global batch, dtype and parallel configuration; options given as well\n"
          "                           override them\n"
          "  --tp T, --cp C, --pp P   tensor, context and pipeline parallel sizes (default 1; dp is derived)\n"
          "  --vpp V                  model chunks per pipeline rank (default 1; > 1 selects interleaved 1F1B)\n"
          "  --ep E, --etp X          expert parallel and expert tensor parallel sizes (default 1; edp derived)\n"
          "  --mbs K                  micro-batch size in sequences (default 1)\n"
          "  --recompute R            none (default), selective (attention core) or full\n"

          "  --distributed-optimizer  shard optimizer state over the data-parallel group (ZeRO-1)\n"
          "  --schedule S             none, gpipe, 1f1b, zb-h1 or interleaved; refused when it does not fit pp, vpp\n"
          "                           (default: none for pp 1, interleaved for vpp > 1, else 1f1b)\n"
          "  --warmup LIST            1f1b / zb-h1 / interleaved: forwards each pipeline rank runs before its first backward\n"
          "  --order-fwd-cost X, --order-bwd-cost Y\n"
          "                           the relative forward and backward durations the pipeline program places\n"
          "                           its sends by, as `train --order-fwd-cost/--order-bwd-cost` (default: a\n"
          "                           plan's, else 1 and 2 as `fivefold train` builds)\n"
          "  --program FILE           write the priced pipeline program as JSON (fivefold schedule --json's form)\n"
          "  --layers-per-stage LIST  blocks per virtual stage, e.g. 7,7,7,7,7,7,7,7 (default: balanced by cost)\n"
          "  --stage-widths LIST      stage replication: data-parallel replicas per pipeline stage, e.g. 2,1 (their\n"
          "                           sum is --gpus; tp, cp, ep 1, vpp 1)\n"
          "  --dispatcher D           MoE token dispatcher under EP/ETP: alltoall (default), deepep (one\n"
          "                           network copy per remote node, NVLink inside) or allgather\n"
          "  --trace FILE             write the predicted timeline as a Chrome trace (open in Perfetto)\n"
          "  --search-buckets         also search this configuration's uniform gradient bucket size by\n"
          "                           simulation and print the choice (what plan does for its best)\n"
          "  --quiet                  print only the one-line summary\n");
  plan_accuracy_help(f);
}

void plan_cli_plan_usage(FILE *f) {
  fprintf(f,
          "usage: fivefold plan --model M --cluster C --gpus N --seq S --global-batch B [options]\n\n"
          "Searches TP, CP, DP, PP, VPP, EP, ETP (with MoE parallel folding), micro-batch size,\n"
          "recomputation and the distributed optimizer; keeps what fits in memory, ranks it by simulated\n"
          "step time and writes the best as a plan for `fivefold train --plan`.\n\n"
          "options:\n");
  common_help(f);
  fprintf(f,
          "  --top K                  configurations to list (default 10)\n"
          "  --out FILE               write the best configuration as a plan JSON\n"
          "  --explain                break the best configuration's step down (compute, communication, bubbles)\n"
          "  --mbs-list LIST          micro-batch sizes to try (default 1,2,4,8)\n"
          "  --recompute-list LIST    recomputation options to try (default none,selective,full)\n"
          "  --recompute-modules L    what selective recomputes (Megatron's names; default core_attn)\n"
          "  --max-tp N, --max-cp N, --max-pp N, --max-vpp N, --max-ep N, --max-etp N\n"
          "                           upper limits (defaults: TP and ETP within a node, VPP 8)\n"
          "  --min-pp N               only pipelines of at least N stages (default 1)\n"
          "  --no-folding             keep the MoE grid coupled to attention (ETP = TP, EP inside DP)\n"
          "  --map-devices, --no-map-devices  search which device each rank of the best configuration runs\n"
          "                           on (default: on clusters with tiers or a link matrix)\n"
          "  --no-refine-partition    keep the compute min-max partition (default: refine the best\n"
          "                           configuration's partition by simulating one-layer moves)\n"
          "  --no-search-order        keep the schedule (default: simulate gpipe, 1f1b and zb-h1, then per-rank\n"
          "                           warm-up depths of the best, memory-checked; interleaved: its warm-up\n"
          "                           depths from Megatron-Core's; train --plan runs the choice)\n"
          "  --no-bucket-search       keep --bucket-params (default: search the best configuration's uniform\n"
          "                           gradient bucket size by simulation; train --plan applies it)\n"
          "  --replicate-stages       also plan pipeline x per-stage data parallelism (DAPPLE stage\n"
          "                           replication, gpipe or 1f1b); train --plan runs its widths under mpirun\n"
          "  --explore M              then explore per-layer plans around the best layout (vpp 1):\n"
          "                           recomputation per layer group and uneven stages; M is sa (simulated\n"
          "                           annealing), dqn (deep Q-network) or exact (enumeration)\n"
          "  --explore-budget N       simulations the explorer may spend (default 1000)\n"
          "  --explore-seed S         seed of sa and dqn (default 1)\n"
          "  --explore-shift K        layers a stage boundary may move (default 2)\n"
          "  --explore-groups G       layer (default), kind (dense vs MoE layers) or N consecutive layers\n"
          "  --explore-recompute L    recomputation choices per group (default none,full)\n"
          "  --no-distributed-optimizer  never shard optimizer state\n"
          "  --distributed-optimizer  always shard optimizer state\n"
          "  --runtime R              fivefold (default): only what `fivefold train` runs (no selective recomputation);\n"
          "                           any: every layout the rules allow, for another runtime\n");
}

static int parse_int(const PlanCli *c, const char *opt, const char *s, int lo, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > 100000000L) {
    fprintf(stderr, "fivefold %s: %s expects an integer >= %d, got '%s'\n", c->cmd, opt, lo, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parse_fraction(const PlanCli *c, const char *opt, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v >= lo && v <= hi)) {
    fprintf(stderr, "fivefold %s: %s expects a number in [%g, %g], got '%s'\n", c->cmd, opt, lo, hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_number_list(const PlanCli *c, const char *opt, const char *s, double *out, int max, int *count) {
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !(v >= 0) || n >= max) {
      fprintf(stderr, "fivefold %s: %s expects comma-separated numbers >= 0 (at most %d), got '%s'\n", c->cmd, opt,
              max, s);
      return -1;
    }
    out[n++] = v;
    p = end;
    if (*p == ',') p++;
    else if (*p) {
      fprintf(stderr, "fivefold %s: %s: unexpected '%c' in '%s'\n", c->cmd, opt, *p, s);
      return -1;
    }
  }
  *count = n;
  return n ? 0 : -1;
}

static const char *const kFlags[] = {"--distributed-optimizer", "--no-distributed-optimizer", "--explain",
                                     "--no-folding", "--quiet", "--moe-tp-replicated", "--no-moe-tp-replicated",
                                     "--search-buckets", "--map-devices", "--no-map-devices",
                                     "--no-refine-partition", "--replicate-stages", "--no-bucket-search",
                                     "--attention-unfused", "--no-search-order"};

/* Returns 0, 1 for --help, or -1 on a usage error (reported). */
static const char *const kCommonOptions[] = {
    "--model", "--cluster", "--gpus", "--seq", "--global-batch", "--dtype", "--moe-imbalance", "--expert-load",
    "--tp-overlap", "--cp-overlap", "--ep-overlap", "--dp-overlap", "--param-gather-overlap", "--bucket-params",
    "--dropless-sync-us", "--algo", "--distributed-optimizer", "--explain", "--moe-tp-replicated",
    "--no-moe-tp-replicated", "--attention-unfused", "--fuse-swiglu", "--fuse-bias-gelu",
    "--fuse-norm-residual", "--help"};
static const char *const kSimulateOptions[] = {"--plan", "--tp", "--cp", "--pp", "--vpp", "--ep", "--etp", "--mbs",
                                               "--recompute", "--schedule", "--dispatcher", "--layers-per-stage",
                                               "--trace", "--quiet", "--search-buckets", "--stage-widths", "--warmup",
                                               "--order-fwd-cost", "--order-bwd-cost", "--program"};
static const char *const kPlanOptions[] = {"--top", "--out", "--mbs-list", "--recompute-list", "--max-tp",
                                           "--max-cp", "--max-pp", "--max-vpp", "--max-ep", "--max-etp",
                                           "--min-pp", "--no-distributed-optimizer", "--no-folding", "--runtime",
                                           "--map-devices", "--no-map-devices", "--no-refine-partition",
                                           "--replicate-stages", "--no-bucket-search", "--no-search-order", "--explore",
                                           "--explore-budget", "--explore-seed", "--explore-shift",
                                           "--explore-groups", "--explore-recompute", "--recompute-modules"};
#define COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Returns 0, 1 for --help, or -1 on a usage error (reported). */
int plan_cli_parse_args(int argc, char **argv, PlanCli *c, int simulate) {
  const char *known_names[COUNT_OF(kCommonOptions) + COUNT_OF(kSimulateOptions) + COUNT_OF(kPlanOptions) + 8];
  int n_known = 0;
  for (int k = 0; k < COUNT_OF(kCommonOptions); k++) known_names[n_known++] = kCommonOptions[k];
  for (int k = 0; simulate && k < kNumPlanAccuracyOptions && k < 8; k++) known_names[n_known++] = kPlanAccuracyOptions[k];
  for (int k = 0; k < (simulate ? COUNT_OF(kSimulateOptions) : COUNT_OF(kPlanOptions)); k++)
    known_names[n_known++] = simulate ? kSimulateOptions[k] : kPlanOptions[k];
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, c->cmd, argc, argv, known_names, n_known);
  while (option_next(&op)) {
    if (option_is_help(&op)) return 1;
    const char *name = op.name, *value = op.inline_value;
    int is_flag = 0;
    for (size_t k = 0; k < sizeof kFlags / sizeof kFlags[0]; k++) is_flag |= !strcmp(name, kFlags[k]);
    if (is_flag) {
      if (option_switch(&op, &perr)) {
        fprintf(stderr, "fivefold %s: %s\n", c->cmd, perr.msg);
        return -1;
      }
      if (!strcmp(name, "--distributed-optimizer")) c->cfg.distributed_optimizer = c->force_distopt = 1;
      else if (!strcmp(name, "--no-distributed-optimizer") && !simulate) c->no_distopt = 1;
      else if (!strcmp(name, "--explain")) c->explain = 1;
      else if (!strcmp(name, "--no-folding") && !simulate) c->no_folding = 1;
      else if (!strcmp(name, "--quiet") && simulate) c->quiet = 1;
      else if (!strcmp(name, "--moe-tp-replicated") || !strcmp(name, "--no-moe-tp-replicated")) {
        c->opt.moe_tp_replicated = !strcmp(name, "--moe-tp-replicated");
        c->given |= PLAN_GIVEN_MOE_TP;
      }
      else if (!strcmp(name, "--map-devices") && !simulate) c->map_devices = 1;
      else if (!strcmp(name, "--no-map-devices") && !simulate) c->map_devices = -1;
      else if (!strcmp(name, "--no-refine-partition") && !simulate) c->no_refine_partition = 1;
      else if (!strcmp(name, "--no-search-order") && !simulate) c->no_search_order = 1;
      else if (!strcmp(name, "--replicate-stages") && !simulate) c->replicate_stages = 1;
      else if (!strcmp(name, "--no-bucket-search") && !simulate) c->no_bucket_search = 1;
      else if (!strcmp(name, "--search-buckets") && simulate) c->search_buckets = 1;
      else if (!strcmp(name, "--attention-unfused")) c->opt.attention_unfused = 1;
      else {
        fprintf(stderr, "fivefold %s: option %s does not apply here (see --help)\n", c->cmd, name);
        return -1;
      }
      continue;
    }
    int rc = 0, known = 1;
    for (int k = 0; k < n_known && known; k++) known = !option_is(&op, known_names[k]);
    if (known) {
      option_unknown(&op, &perr);
      fprintf(stderr, "fivefold %s: %s\n", c->cmd, perr.msg);
      return -1;
    }
    known = 1;
    if (option_value(&op, &value, &perr)) {
      fprintf(stderr, "fivefold %s: %s\n", c->cmd, perr.msg);
      return -1;
    }
    PlanParallel *p = &c->cfg.par;
    if (!strcmp(name, "--model")) c->model = value;
    else if (!strcmp(name, "--cluster")) c->cluster = value;
    else if (!strcmp(name, "--gpus")) rc = parse_int(c, name, value, 1, &c->gpus);
    else if (!strcmp(name, "--seq")) rc = parse_int(c, name, value, 1, &c->seq);
    else if (!strcmp(name, "--global-batch")) rc = parse_int(c, name, value, 1, &c->global_batch);
    else if (!strcmp(name, "--dtype")) {
      c->given |= PLAN_GIVEN_DTYPE;
      if (plan_dtype_from_name(value, &c->dtype)) {
        fprintf(stderr, "fivefold %s: --dtype must be bf16, fp16 or fp32, got '%s'\n", c->cmd, value);
        rc = -1;
      }
    } else if (!strcmp(name, "--moe-imbalance")) rc = parse_fraction(c, name, value, 1.0, 1e3, &c->opt.moe_imbalance);
    else if (!strcmp(name, "--expert-load")) {
      rc = parse_number_list(c, name, value, c->expert_load, MAX_EXPERT_LOAD, &c->opt.num_expert_load);
      c->opt.expert_load = c->expert_load;
    } else if (!strcmp(name, "--tp-overlap")) rc = parse_fraction(c, name, value, 0, 1, &c->opt.tp_overlap);
    else if (!strcmp(name, "--cp-overlap")) {
      rc = parse_fraction(c, name, value, 0, 1, &c->opt.cp_overlap);
      c->given |= PLAN_GIVEN_CP_OVERLAP;
    }
    else if (!strcmp(name, "--ep-overlap")) rc = parse_fraction(c, name, value, 0, 1, &c->opt.ep_overlap);
    else if (!strcmp(name, "--dp-overlap")) {
      rc = parse_fraction(c, name, value, 0, 1, &c->opt.dp_overlap);
      c->given |= PLAN_GIVEN_DP_OVERLAP;
    } else if (!strcmp(name, "--param-gather-overlap")) {
      rc = parse_fraction(c, name, value, 0, 1, &c->opt.param_gather_overlap);
      c->given |= PLAN_GIVEN_PARAM_GATHER;
    } else if (!strcmp(name, "--fuse-swiglu") || !strcmp(name, "--fuse-bias-gelu") ||
               !strcmp(name, "--fuse-norm-residual")) {
      int v = 0;
      rc = parse_int(c, name, value, 0, &v);
      if (!rc && v > 1) {
        fprintf(stderr, "fivefold %s: %s: expected 0 (unfused) or 1 (fused), got %s\n", c->cmd, name, value);
        rc = -1;
      }
      if (!strcmp(name, "--fuse-swiglu")) c->opt.fuse_swiglu = v;
      else if (!strcmp(name, "--fuse-bias-gelu")) c->opt.fuse_bias_gelu = v;
      else c->opt.fuse_norm_residual = v;
      c->fusion_given = 1;
    } else if (!strcmp(name, "--bucket-params")) {
      c->given |= PLAN_GIVEN_BUCKET;
      c->opt.bucket_max_share = 0;
      rc = parse_fraction(c, name, value, 1, 1e13, &c->opt.bucket_params);
    } else if (!strcmp(name, "--dropless-sync-us")) {
      c->given |= PLAN_GIVEN_DROPLESS_SYNC;
      rc = parse_fraction(c, name, value, 0, 1e6, &c->opt.dropless_sync);
      c->opt.dropless_sync *= 1e-6;
    } else if (!strcmp(name, "--algo")) {
      int found = -1;
      for (int a = 0; a < PLAN_NUM_ALGOS; a++)
        if (!strcmp(value, plan_algo_name((PlanCollAlgo)a))) found = a;
      if (found < 0) {
        fprintf(stderr, "fivefold %s: --algo must be auto, ring, tree or hierarchical, got '%s'\n", c->cmd, value);
        rc = -1;
      } else {
        c->opt.algo = (PlanCollAlgo)found;
      }
    } else known = 0;
    if (!known && !simulate) {
      known = 1;
      if (!strcmp(name, "--explore")) {
        c->explore = value;
        if (strcmp(value, "sa") && strcmp(value, "dqn") && strcmp(value, "exact")) {
          fprintf(stderr, "fivefold %s: --explore must be sa, dqn or exact, got '%s'\n", c->cmd, value);
          rc = -1;
        }
      }
      else if (!strcmp(name, "--explore-budget")) rc = parse_int(c, name, value, 1, &c->explore_budget);
      else if (!strcmp(name, "--explore-seed")) rc = parse_int(c, name, value, 0, &c->explore_seed);
      else if (!strcmp(name, "--explore-shift")) rc = parse_int(c, name, value, 0, &c->explore_shift);
      else if (!strcmp(name, "--explore-groups")) c->explore_groups = value;
      else if (!strcmp(name, "--explore-recompute")) c->explore_recompute = value;
      else if (!strcmp(name, "--recompute-modules")) {
        Error merr = {0, ""};
        if (plan_recompute_modules_parse(value, &c->cfg.recompute_modules, &merr))
          rc = -1, fprintf(stderr, "fivefold %s: --recompute-modules: %s\n", c->cmd, merr.msg);
      }
      else known = 0;
    }
    if (!known && simulate) {
      known = 1;
      if (!strcmp(name, "--tp")) rc = parse_int(c, name, value, 1, &p->tp);
      else if (!strcmp(name, "--cp")) rc = parse_int(c, name, value, 1, &p->cp);
      else if (!strcmp(name, "--pp")) rc = parse_int(c, name, value, 1, &p->pp);
      else if (!strcmp(name, "--vpp")) rc = parse_int(c, name, value, 1, &p->vpp);
      else if (!strcmp(name, "--ep")) rc = parse_int(c, name, value, 1, &p->ep);
      else if (!strcmp(name, "--etp")) rc = parse_int(c, name, value, 1, &p->etp);
      else if (!strcmp(name, "--mbs")) rc = parse_int(c, name, value, 1, &c->cfg.micro_batch_size);
      else if (!strcmp(name, "--recompute")) {
        if (plan_recompute_from_name(value, &c->cfg.recompute)) {
          fprintf(stderr, "fivefold %s: --recompute must be none, selective or full, got '%s'\n", c->cmd, value);
          rc = -1;
        }
      } else if (!strcmp(name, "--schedule")) {
        SchedScheduleKind kind;
        if (sched_schedule_from_name(value, &kind) || kind == SCHED_SCHEDULE_CUSTOM) {
          fprintf(stderr, "fivefold %s: --schedule must be none, gpipe, 1f1b, zb-h1 or interleaved, got '%s'\n", c->cmd, value);
          rc = -1;
        } else {
          c->cfg.schedule = kind;
          c->cfg.schedule_given = 1;
        }
      } else if (!strcmp(name, "--dispatcher")) {
        c->opt.moe_node_dedup = !strcmp(value, "deepep");
        if (!strcmp(value, "allgather")) c->opt.moe_allgather = 1;
        else if (!strcmp(value, "alltoall") || !strcmp(value, "deepep")) c->opt.moe_allgather = 0;
        else {
          fprintf(stderr, "fivefold %s: --dispatcher must be alltoall, deepep or allgather, got '%s'\n", c->cmd, value);
          rc = -1;
        }
      } else if (!strcmp(name, "--warmup")) {
        Error werr = {0, ""};
        if ((rc = plan_order_parse_warmup(value, &c->cfg, &werr))) fprintf(stderr, "fivefold %s: %s\n", c->cmd, werr.msg);
      } else if (!strcmp(name, "--layers-per-stage")) c->layers_list = value;
      else if (!strcmp(name, "--stage-widths")) c->widths_list = value;
      else if (plan_accuracy_option(&c->accuracy, &c->cfg, c->cmd, name, value, &rc)) {
      }
      else if (!strcmp(name, "--order-fwd-cost") || !strcmp(name, "--order-bwd-cost")) {
        rc = parse_fraction(c, name, value, 1e-9, 1e9,
                            !strcmp(name, "--order-fwd-cost") ? &c->cfg.order_fwd_cost : &c->cfg.order_bwd_cost);
        c->cfg.order_given = 1;
      } else if (!strcmp(name, "--trace")) c->trace_path = value;
      else if (!strcmp(name, "--program")) c->program_path = value;
      else if (!strcmp(name, "--plan")) c->plan_path = value; /* applied before the other options */
      else known = 0;
    } else if (!known) {
      known = 1;
      PlanSearchSpace *sp = &c->space;
      if (!strcmp(name, "--top")) rc = parse_int(c, name, value, 1, &c->top);
      else if (!strcmp(name, "--out")) c->out_path = value;
      else if (!strcmp(name, "--mbs-list")) c->mbs_list = value;
      else if (!strcmp(name, "--recompute-list")) c->recompute_list = value;
      else if (!strcmp(name, "--runtime")) {
        if (plan_runtime_from_name(value, &sp->runtime)) {
          fprintf(stderr, "fivefold %s: --runtime must be fivefold or any, got '%s'\n", c->cmd, value);
          rc = -1;
        }
      }
      else if (!strcmp(name, "--max-tp")) rc = parse_int(c, name, value, 1, &sp->max_tp);
      else if (!strcmp(name, "--max-cp")) rc = parse_int(c, name, value, 1, &sp->max_cp);
      else if (!strcmp(name, "--max-pp")) rc = parse_int(c, name, value, 1, &sp->max_pp);
      else if (!strcmp(name, "--min-pp")) rc = parse_int(c, name, value, 1, &sp->min_pp);
      else if (!strcmp(name, "--max-vpp")) rc = parse_int(c, name, value, 1, &sp->max_vpp);
      else if (!strcmp(name, "--max-ep")) rc = parse_int(c, name, value, 1, &sp->max_ep);
      else if (!strcmp(name, "--max-etp")) rc = parse_int(c, name, value, 1, &sp->max_etp);
      else known = 0;
    }
    if (!known) {
      option_unknown(&op, &perr);
      fprintf(stderr, "fivefold %s: %s\n", c->cmd, perr.msg);
      return -1;
    }
    if (rc) return -1;
  }
  if (!c->model || !c->cluster || !c->gpus || !c->seq || !c->global_batch) {
    fprintf(stderr, "fivefold %s: --model, --cluster, --gpus, --seq and --global-batch are required (see --help)\n",
            c->cmd);
    return -1;
  }
  return 0;
}

void plan_cli_init(PlanCli *c, const char *cmd) {
  memset(c, 0, sizeof *c);
  c->cmd = cmd;
  c->dtype = PLAN_DTYPE_BF16;
  plan_options_default(&c->opt);
  plan_config_init(&c->cfg, 0, 0, 1);
  c->cfg.par.dp = 0;
  /* simulate prices the program `fivefold train` builds for the same
   * flags (the scheduler's order costs); a search prices its own. */
  c->cfg.order_given = !strcmp(cmd, "simulate");
  c->top = 10;
  c->explore_shift = -1;
}

int plan_cli_parse_search_lists(PlanCli *c) {
  PlanSearchSpace *sp = &c->space;
  if (c->mbs_list) {
    int *vals = NULL, n = 0;
    Error err = {0, ""};
    if (sched_partition_parse_list(c->mbs_list, &vals, &n, &err) || n > 8) {
      fprintf(stderr, "fivefold plan: --mbs-list expects up to 8 comma-separated sizes, got '%s'\n", c->mbs_list);
      free(vals);
      return -1;
    }
    for (int i = 0; i < n; i++) {
      if (vals[i] < 1) {
        fprintf(stderr, "fivefold plan: --mbs-list: sizes must be >= 1\n");
        free(vals);
        return -1;
      }
      sp->micro_batch_sizes[i] = vals[i];
    }
    sp->num_micro_batch_sizes = n;
    free(vals);
  }
  sp->recompute_modules = c->cfg.recompute_modules; /* --recompute-modules */
  if (c->recompute_list) {
    for (int r = 0; r < PLAN_NUM_RECOMPUTE; r++) sp->allow_recompute[r] = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", c->recompute_list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
      PlanRecompute r;
      if (plan_recompute_from_name(tok, &r)) {
        fprintf(stderr, "fivefold plan: --recompute-list: unknown option '%s' (none, selective, full)\n", tok);
        return -1;
      }
      sp->allow_recompute[r] = 1;
    }
  }
  if (c->no_distopt && c->force_distopt) {
    fprintf(stderr, "fivefold plan: --distributed-optimizer and --no-distributed-optimizer contradict each other\n");
    return -1;
  }
  sp->allow_distributed_optimizer = !c->no_distopt;
  sp->require_distributed_optimizer = c->force_distopt;
  sp->allow_folding = !c->no_folding;
  return 0;
}
