/* `fivefold plan` and `fivefold simulate`: command-line front ends to the
 * planner (src/plan/). simulate predicts one configuration (step time, MFU,
 * where the time goes, memory per stage, optionally a Chrome trace);
 * plan searches all configurations for a model on a cluster, prints the
 * best as a table and writes the plan JSON `fivefold train --plan` reads.
 * Option parsing is hand-rolled so both can be called repeatedly in one
 * process (tests). */
#include "cli/cmd_plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "plan/buckets.h"
#include "plan/config_paths.h"
#include "plan/mapping.h"
#include "plan/plan_file.h"
#include "plan/explore_space.h"
#include "cli/cmd_plan_accuracy.h"
#include "plan/order.h"
#include "plan/refine.h"
#include "plan/replicate.h"
#include "plan/search.h"
#include "plan/simulate.h"
#include "sched/partition.h"

#define MAX_EXPERT_LOAD 4096

typedef struct PlanCli {
  const char *cmd;
  const char *model, *cluster;
  int gpus, seq, global_batch;
  PlanDtype dtype;
  PlanOptions opt;
  unsigned given; /* PLAN_GIVEN_* bits: options the command line set (they win over the spec's runtime facts) */
  double expert_load[MAX_EXPERT_LOAD];
  /* simulate */
  PlanConfig cfg;
  const char *trace_path, *layers_list, *plan_path, *widths_list;
  PlanAccuracyOptions accuracy; /* simulate's layout, recomputation and FLOPs options */
  PlanChoice plan; /* --plan FILE: its model and cluster names live here */
  int explain, quiet;
  /* plan */
  int top;
  const char *out_path;
  PlanSearchSpace space;
  const char *mbs_list, *recompute_list;
  int no_folding, no_distopt, force_distopt;
  int map_devices; /* 1 / -1: --map-devices / --no-map-devices; 0: when the cluster is irregular */
  int no_refine_partition, no_search_order, replicate_stages, no_bucket_search, search_buckets;
  PlanBucketChoice buckets;
  int have_buckets;
  /* --explore: per-layer plans around the best layout (explore_space.h) */
  const char *explore, *explore_groups, *explore_recompute;
  int explore_budget, explore_seed, explore_shift;
} PlanCli;

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
          "  --expert-load LIST       measured tokens per expert, comma-separated (overrides the imbalance)\n"
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
          "  -h, --help               show this help\n");
}

static void simulate_usage(FILE *f) {
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
          "  --warmup LIST            1f1b / zb-h1: forwards each pipeline rank runs before its first backward\n"
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

static void plan_usage(FILE *f) {
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
          "  --max-tp N, --max-cp N, --max-pp N, --max-vpp N, --max-ep N, --max-etp N\n"
          "                           upper limits (defaults: TP and ETP within a node, VPP 8)\n"
          "  --min-pp N               only pipelines of at least N stages (default 1)\n"
          "  --no-folding             keep the MoE grid coupled to attention (ETP = TP, EP inside DP)\n"
          "  --map-devices, --no-map-devices  search which device each rank of the best configuration runs\n"
          "                           on (default: on clusters with tiers or a link matrix)\n"
          "  --no-refine-partition    keep the compute min-max partition (default: refine the best\n"
          "                           configuration's partition by simulating one-layer moves)\n"
          "  --no-search-order        keep the schedule (default: simulate gpipe, 1f1b and zb-h1, then per-rank\n"
          "                           warm-up depths of the best, memory-checked; train --plan runs the choice)\n"
          "  --no-bucket-search       keep --bucket-params (default: search the best configuration's uniform\n"
          "                           gradient bucket size by simulation; train --plan applies it)\n"
          "  --replicate-stages       also plan pipeline x per-stage data parallelism (DAPPLE stage\n"
          "                           replication); planned and simulated only: train --plan refuses it\n"
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
          "  --runtime R              fivefold (default): only what `fivefold train` runs (no recomputation);\n"
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
    "--no-moe-tp-replicated", "--attention-unfused", "--help"};
static const char *const kSimulateOptions[] = {"--plan", "--tp", "--cp", "--pp", "--vpp", "--ep", "--etp", "--mbs",
                                               "--recompute", "--schedule", "--dispatcher", "--layers-per-stage",
                                               "--trace", "--quiet", "--search-buckets", "--stage-widths", "--warmup"};
static const char *const kPlanOptions[] = {"--top", "--out", "--mbs-list", "--recompute-list", "--max-tp",
                                           "--max-cp", "--max-pp", "--max-vpp", "--max-ep", "--max-etp",
                                           "--min-pp", "--no-distributed-optimizer", "--no-folding", "--runtime",
                                           "--map-devices", "--no-map-devices", "--no-refine-partition",
                                           "--replicate-stages", "--no-bucket-search", "--no-search-order", "--explore",
                                           "--explore-budget", "--explore-seed", "--explore-shift",
                                           "--explore-groups", "--explore-recompute"};
#define COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Returns 0, 1 for --help, or -1 on a usage error (reported). */
static int parse_args(int argc, char **argv, PlanCli *c, int simulate) {
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
      else if (!strcmp(name, "--trace")) c->trace_path = value;
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

/* Loads the model and cluster named on the command line. */
static int load_inputs(const PlanCli *c, ModelConfig *model, ClusterSpec *cluster) {
  char path[4096];
  Error err = {0, ""};
  if (plan_find_config("models", c->model, path, sizeof path, &err) || plan_load_model(path, model, NULL, &err)) {
    fprintf(stderr, "fivefold %s: %s\n", c->cmd, err.msg);
    return -1;
  }
  if (plan_find_config("clusters", c->cluster, path, sizeof path, &err) || cluster_spec_load(cluster, path, &err)) {
    fprintf(stderr, "fivefold %s: %s\n", c->cmd, err.msg);
    return -1;
  }
  if (c->opt.num_expert_load && c->opt.num_expert_load != model->num_experts) {
    fprintf(stderr, "fivefold %s: --expert-load has %d entries but the model has %d experts\n", c->cmd,
            c->opt.num_expert_load, model->num_experts);
    return -1;
  }
  return 0;
}

/* The bucket search on the best configuration (buckets.h), when it reduces
 * gradients at all: the chosen size replaces the options' for what follows
 * (explain, the simulate line, the plan file) and the best is simulated
 * again with it, keeping its device mapping. */
static int plan_search_buckets_cli(PlanCli *c, PlanResult *best, const ModelConfig *model, const ClusterSpec *cluster,
                                   Error *err) {
  const PlanParallel *p = &best->cfg.par;
  if (p->dp * p->cp <= 1 && p->edp <= 1) return 0;
  ClusterSpec view = plan_result_cluster_view(cluster, best);
  PlanOptions chosen;
  int rc = plan_buckets_search_uniform(model, &view, &c->opt, &best->cfg, &c->buckets, &chosen, err);
  if (rc) return rc;
  c->opt = chosen;
  c->have_buckets = 1;
  PlanSimOptions sim = {1, NULL};
  PlanResult r;
  PlanConfig cfg = best->cfg;
  rc = plan_simulate(model, &view, &c->opt, &cfg, &sim, NULL, &r, err);
  if (rc) return rc;
  plan_result_replace_keep_mapping(best, &r);
  best->bucket_choice = &c->buckets;
  printf("\n");
  plan_bucket_explain(&c->buckets, stdout);
  return 0;
}

/* A calibrated spec says what its machine's runtime does; what the command
 * line did not set follows it. */
static void apply_runtime_facts(PlanCli *c, const ClusterSpec *cluster, FILE *f) {
  plan_options_from_runtime(&cluster->runtime, c->given, &c->opt, &c->dtype);
  char facts[320];
  if (f && cluster->runtime.given)
    fprintf(f, "runtime (from %s, flags override): %s\n", cluster->name,
            plan_runtime_facts_describe(&cluster->runtime, facts, sizeof facts));
}

/* The `fivefold simulate` command that prices the best configuration
 * alone, so a user can vary it by hand. */
static void print_simulate_line(const PlanCli *c, const PlanConfig *best) {
  const PlanParallel *p = &best->par;
  printf("\nsimulate the best: fivefold simulate --model %s --cluster %s --gpus %d --seq %d --global-batch %d "
         "--dtype %s --tp %d --cp %d --pp %d --vpp %d --ep %d --etp %d --mbs %d --schedule %s",
         c->model, c->cluster, c->gpus, c->seq, c->global_batch, plan_dtype_name(c->dtype), p->tp, p->cp, p->pp,
         p->vpp, p->ep, p->etp, best->micro_batch_size, sched_schedule_name(best->schedule));
  if (best->recompute != PLAN_RECOMPUTE_NONE) printf(" --recompute %s", plan_recompute_name(best->recompute));
  if (best->distributed_optimizer) printf(" --distributed-optimizer");
  plan_order_print_flags(best, stdout);
  /* The partition the plan chose (refined by simulation), not a rebalanced one. */
  for (int s = 0; s < best->num_given_layers && best->num_given_layers > 1; s++)
    printf("%s%d", s ? "," : " --layers-per-stage ", best->layers_per_stage[s]);
  for (int s = 0; s < best->num_stage_widths; s++)
    printf("%s%d", s ? "," : " --stage-widths ", best->stage_width[s]);
  if (c->have_buckets) printf(" --bucket-params %.0f", c->buckets.bucket_params);
  printf("\n");
}

static void init_cli(PlanCli *c, const char *cmd) {
  memset(c, 0, sizeof *c);
  c->cmd = cmd;
  c->dtype = PLAN_DTYPE_BF16;
  plan_options_default(&c->opt);
  plan_config_init(&c->cfg, 0, 0, 1);
  c->cfg.par.dp = 0;
  c->top = 10;
  c->explore_shift = -1;
}

static void print_summary(const PlanResult *r, FILE *f) {
  fprintf(f, "predicted: step %.1f ms, %.1f%% MFU, %.0f tokens/s, peak memory %.1f GiB per GPU (%s), bottleneck: %s\n",
          1e3 * r->step_time, 100.0 * r->mfu, r->tokens_per_s, r->peak_memory / 1073741824.0,
          r->fits ? "fits" : "DOES NOT FIT", r->bottleneck);
}

/* --plan FILE (either form) sets what the plan chose before parse_args
 * reads the command line, so that options given as well override it. */
static int apply_plan_option(int argc, char **argv, PlanCli *c) {
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--plan") && i + 1 < argc) path = argv[i + 1];
    else if (!strncmp(argv[i], "--plan=", 7)) path = argv[i] + 7;
  }
  if (!path) return 0;
  Error err = {0, ""};
  PlanChoice *pc = &c->plan;
  if (plan_file_read(path, pc, &err)) {
    fprintf(stderr, "fivefold simulate: --plan: %s\n", err.msg);
    return -1;
  }
  if (!pc->model[0]) {
    fprintf(stderr, "fivefold simulate: --plan %s: the plan names no model (field \"model\"); give --model\n", path);
    return -1;
  }
  c->model = pc->model;
  c->cluster = pc->cluster;
  c->gpus = pc->gpus;
  c->seq = pc->seq_len;
  c->global_batch = pc->global_batch_size;
  c->dtype = pc->dtype;
  PlanParallel *p = &c->cfg.par;
  p->tp = pc->tp, p->cp = pc->cp, p->pp = pc->pp, p->vpp = pc->vpp, p->ep = pc->ep, p->etp = pc->etp;
  c->cfg.micro_batch_size = pc->micro_batch_size;
  c->cfg.recompute = pc->recompute;
  c->cfg.distributed_optimizer = pc->distributed_optimizer;
  c->cfg.schedule = pc->schedule;
  c->cfg.schedule_given = 1;
  c->cfg.warmup_set = pc->num_warmup;
  memcpy(c->cfg.warmup, pc->warmup, sizeof c->cfg.warmup);
  c->cfg.num_given_layers = pc->num_stages < PLAN_MAX_STAGES ? pc->num_stages : PLAN_MAX_STAGES;
  memcpy(c->cfg.layers_per_stage, pc->layers_per_stage, (size_t)c->cfg.num_given_layers * sizeof(int));
  c->cfg.num_stage_widths = pc->num_stage_widths;
  memcpy(c->cfg.stage_width, pc->stage_width, (size_t)pc->num_stage_widths * sizeof(int));
  return 0;
}

int cmd_simulate(int argc, char **argv) {
  PlanCli *c = calloc(1, sizeof *c);
  if (!c) return 1;
  init_cli(c, "simulate");
  if (apply_plan_option(argc, argv, c)) {
    free(c);
    return 1;
  }
  int rc = parse_args(argc, argv, c, 1);
  if (rc) {
    if (rc > 0) simulate_usage(stdout);
    free(c);
    return rc > 0 ? 0 : 2;
  }
  ModelConfig model;
  ClusterSpec cluster;
  memset(&cluster, 0, sizeof cluster);
  int exit_code = 1, *mapping = NULL, mapped = 0;
  Error err = {0, ""};
  if (load_inputs(c, &model, &cluster)) goto out;
  apply_runtime_facts(c, &cluster, c->quiet ? NULL : stdout);
  c->cfg.seq_len = c->seq;
  c->cfg.global_batch_size = c->global_batch;
  c->cfg.dtype = c->dtype;
  if (plan_accuracy_apply_split(&c->accuracy, &model, &c->cfg)) {
    exit_code = 2;
    goto out;
  }
  if (c->layers_list) {
    int *vals = NULL, n = 0;
    if (sched_partition_parse_list(c->layers_list, &vals, &n, &err)) {
      fprintf(stderr, "fivefold simulate: --layers-per-stage: %s\n", err.msg);
      exit_code = 2;
      goto out;
    }
    if (n > PLAN_MAX_STAGES) n = PLAN_MAX_STAGES;
    memcpy(c->cfg.layers_per_stage, vals, (size_t)n * sizeof *vals);
    c->cfg.num_given_layers = n;
    free(vals);
  }
  if (c->widths_list) {
    int *vals = NULL, n = 0;
    if (sched_partition_parse_list(c->widths_list, &vals, &n, &err) || n > PLAN_MAX_STAGES) {
      fprintf(stderr, "fivefold simulate: --stage-widths: %s\n", n > PLAN_MAX_STAGES ? "too many stages" : err.msg);
      free(vals);
      exit_code = 2;
      goto out;
    }
    memcpy(c->cfg.stage_width, vals, (size_t)n * sizeof *vals);
    c->cfg.num_stage_widths = n;
    free(vals);
  }
  /* Stage replication: the grids are planned for the stages, the devices
   * are the widths' sum (plan/replicate.h). */
  int grid_gpus = c->gpus;
  if (c->cfg.num_stage_widths) {
    int sum = 0;
    for (int s = 0; s < c->cfg.num_stage_widths; s++) sum += c->cfg.stage_width[s];
    if (sum != c->gpus) {
      fprintf(stderr, "fivefold simulate: --stage-widths sum to %d devices but --gpus is %d\n", sum, c->gpus);
      exit_code = 2;
      goto out;
    }
    if (c->cfg.par.pp <= 1) c->cfg.par.pp = c->cfg.num_stage_widths;
    grid_gpus = (c->cfg.par.tp > 0 ? c->cfg.par.tp : 1) * (c->cfg.par.cp > 0 ? c->cfg.par.cp : 1) * c->cfg.par.pp;
  }
  if (plan_config_finish(&c->cfg, &model, &cluster, grid_gpus, &err)) {
    fprintf(stderr, "fivefold simulate: %s\n", err.msg);
    exit_code = 2;
    goto out;
  }
  /* A plan's device mapping: every group and transfer priced on the
   * devices its ranks run on, as `train --plan` places them. */
  if (c->plan_path) {
    if (plan_file_read_mapping(c->plan_path, &mapping, &mapped, &err)) {
      fprintf(stderr, "fivefold simulate: --plan: %s\n", err.msg);
      goto out;
    }
    if (mapping && !plan_mapping_is_identity(mapping, mapped)) {
      if (mapped > cluster_spec_total_devices(&cluster)) {
        fprintf(stderr, "fivefold simulate: --plan %s: its mapping places %d ranks, the cluster has %d devices\n",
                c->plan_path, mapped, cluster_spec_total_devices(&cluster));
        goto out;
      }
      cluster.device_of_rank = mapping;
      cluster.num_mapped = mapped;
      if (!c->quiet) {
        printf("device mapping of %s: device of rank 0..%d:", c->plan_path, mapped - 1);
        for (int i = 0; i < mapped && i < 64; i++) printf(" %d", mapping[i]);
        printf("\n");
      }
    }
  }
  if (plan_accuracy_apply_block(&model, &cluster, &c->opt, &c->cfg)) goto out;
  PlanSimOptions sim = {1, c->trace_path};
  PlanResult r;
  if (plan_simulate(&model, &cluster, &c->opt, &c->cfg, &sim, NULL, &r, &err)) {
    fprintf(stderr, "fivefold simulate: %s\n", err.msg);
    goto out;
  }
  if (c->quiet) {
    print_summary(&r, stdout);
  } else {
    printf("model %s on %d x %s, sequence %d, global batch %d, %s\n\n", c->model, c->gpus, cluster.name, c->seq,
           c->global_batch, plan_dtype_name(c->dtype));
    plan_result_explain(&r, &model, stdout);
    printf("\n");
    print_summary(&r, stdout);
  }
  plan_accuracy_print_mfu(&c->accuracy, &r, &model, &cluster, c->gpus);
  if (c->trace_path) printf("trace written to %s\n", c->trace_path);
  plan_result_free(&r);
  if (c->search_buckets) {
    PlanOptions chosen;
    if (plan_buckets_search_uniform(&model, &cluster, &c->opt, &c->cfg, &c->buckets, &chosen, &err)) {
      fprintf(stderr, "fivefold simulate: %s\n", err.msg);
      goto out;
    }
    plan_bucket_explain(&c->buckets, stdout);
  }
  exit_code = 0;
out:
  cluster.device_of_rank = NULL;
  free(mapping);
  cluster_spec_free(&cluster);
  free(c);
  return exit_code;
}

static int parse_search_lists(PlanCli *c) {
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

/* --explore: per-layer plans around the best layout with vpp 1. */
static int explore_cli(const PlanCli *c, const PlanSearchResult *res, const ModelConfig *model,
                       const ClusterSpec *cluster, Error *err) {
  PlanExploreSpec spec;
  plan_explore_spec_default(&spec);
  if (c->explore_budget) spec.budget = c->explore_budget;
  spec.seed = (uint64_t)(c->explore_seed ? c->explore_seed : 1);
  if (c->explore_shift >= 0) spec.max_shift = c->explore_shift;
  if (c->explore_groups && !strcmp(c->explore_groups, "kind")) spec.groups = PLAN_EXPLORE_GROUP_KIND;
  else if (c->explore_groups && strcmp(c->explore_groups, "layer")) {
    char *end;
    long n = strtol(c->explore_groups, &end, 10);
    if (*end || n < 1)
      return error_set(err, ERR_ARG, "--explore-groups: \"%s\": expected layer, kind or a layer count", c->explore_groups);
    spec.group_size = (int)n;
  }
  if (c->explore_recompute) {
    for (int r = 0; r < PLAN_NUM_RECOMPUTE; r++) spec.allow_recompute[r] = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", c->explore_recompute);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
      PlanRecompute r;
      if (plan_recompute_from_name(tok, &r))
        return error_set(err, ERR_ARG, "--explore-recompute: \"%s\": expected none, selective or full", tok);
      spec.allow_recompute[r] = 1;
    }
  }
  const PlanResult *layout = NULL;
  for (int k = 0; k < res->num_top && !layout; k++)
    if (res->top[k].cfg.par.vpp == 1 && res->top[k].cfg.num_stage_widths == 0) layout = &res->top[k];
  if (!layout) return error_set(err, ERR_CONFIG, "--explore: no listed layout has vpp 1 (try --max-vpp 1)");
  char desc[256];
  printf("\nexploring per-layer plans around %s\n", plan_config_describe(&layout->cfg, desc, sizeof desc));
  ClusterSpec view = plan_result_cluster_view(cluster, layout);
  return plan_explore_run(model, &view, &c->opt, &layout->cfg, c->explore, &spec, c->explain, stdout, err);
}

int cmd_plan(int argc, char **argv) {
  PlanCli *c = calloc(1, sizeof *c);
  if (!c) return 1;
  init_cli(c, "plan");
  PlanSearchSpace limits;
  memset(&limits, 0, sizeof limits);
  c->space = limits;
  c->space.max_vpp = -1;
  c->space.runtime = PLAN_RUNTIME_FIVEFOLD;
  int rc = parse_args(argc, argv, c, 0);
  if (rc) {
    if (rc > 0) plan_usage(stdout);
    free(c);
    return rc > 0 ? 0 : 2;
  }
  PlanSearchSpace given = c->space;
  plan_search_space_default(&c->space, c->gpus, c->seq, c->global_batch);
  c->space.dtype = c->dtype;
  c->space.max_tp = given.max_tp;
  c->space.max_cp = given.max_cp;
  c->space.max_pp = given.max_pp;
  c->space.min_pp = given.min_pp;
  if (given.max_vpp > 0) c->space.max_vpp = given.max_vpp;
  c->space.max_ep = given.max_ep;
  c->space.max_etp = given.max_etp;
  c->space.runtime = given.runtime;
  if (parse_search_lists(c)) {
    free(c);
    return 2;
  }
  ModelConfig model;
  ClusterSpec cluster;
  memset(&cluster, 0, sizeof cluster);
  int exit_code = 1;
  Error err = {0, ""};
  PlanSearchResult res;
  memset(&res, 0, sizeof res);
  if (load_inputs(c, &model, &cluster)) goto out;
  apply_runtime_facts(c, &cluster, stdout);
  c->space.dtype = c->dtype;
  printf("planning %s on %d x %s, sequence %d, global batch %d, %s, for the %s runtime\n\n", c->model, c->gpus,
         cluster.name, c->seq, c->global_batch, plan_dtype_name(c->dtype), plan_runtime_name(c->space.runtime));
  if (plan_search(&model, &cluster, &c->opt, &c->space, c->top, &res, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  plan_search_print_table(&res, &cluster, stdout);
  if (c->map_devices > 0 || (c->map_devices == 0 && cluster_spec_is_irregular(&cluster))) {
    if (plan_result_map_devices(&res.top[0], &model, &cluster, &c->opt, NULL, &err)) {
      fprintf(stderr, "fivefold plan: %s\n", err.msg);
      goto out;
    }
    printf("\n");
    plan_mapping_explain(&res.top[0], stdout);
  }
  if (!c->no_refine_partition) {
    ClusterSpec view = plan_result_cluster_view(&cluster, &res.top[0]);
    PlanRefineStats refine;
    if (plan_partition_refine(&res.top[0], &model, &view, &c->opt, &refine, &err)) {
      fprintf(stderr, "fivefold plan: %s\n", err.msg);
      goto out;
    }
    if (refine.simulated) printf("\n");
    plan_refine_explain(&refine, &res.top[0], stdout);
  }
  if (!c->no_search_order && plan_order_search_explained(&res.top[0], &model, &cluster, &c->opt, stdout, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (!c->no_bucket_search && plan_search_buckets_cli(c, &res.top[0], &model, &cluster, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  double unreplicated = res.num_top > 0 ? res.top[0].step_time : 0;
  if (c->replicate_stages && plan_replicate_stages_cli(&res.top[0], &model, &cluster, &c->opt, c->gpus, stdout, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (c->explore && explore_cli(c, &res, &model, &cluster, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (res.num_top > 0) print_simulate_line(c, &res.top[0].cfg);
  if (c->explain) {
    /* Simulate the winner again with the exposed-transfer measurement. */
    PlanSimOptions sim = {1, NULL};
    PlanResult r;
    PlanConfig cfg = res.top[0].cfg;
    ClusterSpec view = plan_result_cluster_view(&cluster, &res.top[0]);
    if (plan_simulate(&model, &view, &c->opt, &cfg, &sim, NULL, &r, &err)) {
      fprintf(stderr, "fivefold plan: %s\n", err.msg);
      goto out;
    }
    printf("\nbest configuration, explained:\n");
    plan_result_explain(&r, &model, stdout);
    if (c->replicate_stages) {
      const PlanConfig *b = &res.top[0].cfg;
      if (b->num_stage_widths > 0) {
        printf("  stage replication bought %.1f%% (%.4f -> %.4f s/step) with widths", 100 * (unreplicated / r.step_time - 1),
               unreplicated, r.step_time);
        for (int s = 0; s < b->num_stage_widths; s++) printf("%s%d", s ? "," : " ", b->stage_width[s]);
        printf(" over the best layout with one data-parallel width\n");
      } else {
        printf("  stage replication bought nothing: no plan with uneven stage widths beat the best layout\n");
      }
    }
    if (c->have_buckets) plan_bucket_explain(&c->buckets, stdout);
    plan_result_free(&r);
  }
  if (c->out_path) {
    if (plan_write_json_for_model(&res.top[0], &res.stats, c->model, &model, cluster.name, c->out_path, &err)) {
      fprintf(stderr, "fivefold plan: %s\n", err.msg);
      goto out;
    }
    printf("\nplan written to %s (use: fivefold train --plan %s; price it: fivefold simulate --plan %s)\n",
           c->out_path, c->out_path, c->out_path);
  }
  exit_code = 0;
out:
  plan_search_result_free(&res);
  cluster_spec_free(&cluster);
  free(c);
  return exit_code;
}
