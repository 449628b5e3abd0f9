/* `fivefold train --config FILE [--plan FILE] [overrides] [--resume [PATH]]`:
 * loads and checks the run config, applies the layout of a plan file
 * (`fivefold plan --out`) and then the command-line overrides, opens the data and
 * builds the model (so every input is validated before training starts),
 * restores a checkpoint when resuming, then runs the trainer, which saves
 * checkpoints as it goes. Ctrl-C, SIGTERM, SIGUSR1 or SIGHUP stops after
 * the current step with a checkpoint and a final evaluation (under mpirun,
 * see scripts/fivefold-mpirun for how a signal reaches every rank).
 *
 * Under `mpirun -np N` it trains on N ranks (comm_init) laid out as
 * tp x pp x dp = N (parallel section or --tp/--pp/--dp; dp derived when not
 * given; docs/parallelism.md); a plain start is one rank and does not start
 * MPI (FIVEFOLD_MPI=1 makes it a singleton MPI world instead). After MPI is up, a failure on any rank
 * ends the whole job with "fivefold: rank R failed: <message>"
 * (comm/world.h) rather than leaving the other ranks waiting. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/options.h"
#include "base/signal_stack.h"
#include "cli/cli.h"
#include "comm/host.h"
#include "comm/world.h"
#include "nets/vision.h"
#include "plan/plan_file.h"
#include "plan/runtime_caps.h"
#include "ckpt/checkpoint.h"
#include "train/train_config.h"
#include "train/trainer.h"

/* The signal that asked for a stop (0: none); see train/stop_request.h. */
static volatile sig_atomic_t g_stop = 0;

/* The first SIGINT, SIGTERM, SIGUSR1 or SIGHUP asks for a stop after the
 * current step. A second SIGINT (Ctrl-C pressed twice at a terminal) quits
 * at once; a repeated SIGTERM or SIGUSR1 changes nothing, because
 * schedulers send those to every process of a job, so that a rank under
 * mpirun may get one directly and the same one forwarded by mpirun. */
static void on_stop_signal(int sig) {
  if (g_stop && sig == SIGINT) _exit(130);
  if (!g_stop) g_stop = sig;
}

static const int STOP_SIGNALS[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP};

/* Left in place when training ends: a copy of the signal that mpirun
 * forwards late must not kill a rank that is shutting down cleanly. The
 * handler runs on the thread's alternate signal stack (SA_ONSTACK;
 * base/signal_stack.h says why), which signal_stacks_install gives the
 * main thread and the OpenMP threads. */
static void catch_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof STOP_SIGNALS / sizeof *STOP_SIGNALS; i++) sigaction(STOP_SIGNALS[i], &sa, NULL);
}

static void train_help(FILE *f) {
  fprintf(f,
          "usage: fivefold train --config FILE [options]\n\n"
          "Trains the model of a run config on its token shards. Prints a startup banner, a\n"
          "log line every log_interval steps, the validation loss every eval_interval steps\n"
          "and at the end, and writes config.json and metrics.jsonl to the output directory.\n"
          "Checkpoints go to OUT/checkpoints/step-NNNNNNNN every checkpoint.interval steps,\n"
          "every checkpoint.interval_minutes (default 30) and at the end; the newest\n"
          "checkpoint.keep_last are kept. A non-finite loss or gradient skips the step\n"
          "(training.nonfinite skip, at most training.max_nonfinite_skips in a row) or\n"
          "stops the run (stop); a checkpoint is never written with non-finite weights.\n"
          "Ctrl-C, SIGTERM, SIGUSR1 or SIGHUP (to one rank, to every rank, or through\n"
          "scripts/fivefold-mpirun to the job) stops after the current step with a checkpoint\n"
          "and a final evaluation, and exits 0; Ctrl-C twice quits at once.\n\n"
          "options:\n"
          "  --config FILE          run configuration (JSON: model, training, data, checkpoint, parallel,\n"
          "                         trace, out)\n"
          "  --resume [PATH]        continue from the newest valid checkpoint in the run's output\n"
          "                         directory, or in PATH (a checkpoint step-NNNNNNNN, a run\n"
          "                         directory or its checkpoints/); the model config must match,\n"
          "                         and training goes on with the same lr schedule and data order\n"
          "  --plan FILE            take the layout from a plan of `fivefold plan --out`: tp, pp, vpp,\n"
          "                         dp, micro-batch and global batch size, schedule, distributed\n"
          "                         optimizer, layers per stage (flags given here override it); its device\n"
          "                         mapping renumbers the ranks (rank r runs on launch rank device_of_rank[r])\n"
          "  --no-progress          the same as --progress never\n"
          "  --distributed-optimizer  alone means --distributed-optimizer 1 (ZeRO-1 over the dp ranks)\n"
          "  -h, --help             show this help\n\n"
          "overrides (each replaces the config field in brackets; also --flag=value):\n");
  train_config_print_flags(f);
  fprintf(f,
          "\nPaths in the config file are relative to the file; paths given here are relative to\n"
          "the current directory. See README.md for every config field and the log line.\n\n"
          "Parallel runs: mpirun -np N fivefold train --config FILE [--tp T] [--pp P [--vpp V]]\n"
          "[--dp D] trains on N = T x P x D ranks: tensor parallelism with sequence parallelism\n"
          "over T ranks, a pipeline of P ranks (V model chunks each; schedule 1f1b, or\n"
          "interleaved when V > 1, or --schedule gpipe | zb-h1; blocks split evenly unless\n"
          "--layers-per-stage lists them per stage), and D data-parallel replicas, each reading\n"
          "its slice of every global batch (D x micro_batch x accumulation sequences).\n"
          "Gradients are averaged in buckets while backward runs; rank 0 alone prints; every\n"
          "rank writes its slices of each checkpoint (full tensors, loadable under any layout).\n"
          "See docs/parallelism.md.\n");
}

static int fail(int code, const char *msg) {
  fprintf(stderr, "fivefold train: %s\n", msg);
  return code;
}

/* The end of a run that got as far as comm_init. With several ranks a
 * failure ends the whole job (every rank reports, naming itself); a
 * success shuts MPI down on every rank. */
static int finish(int code, const char *msg, TrainConfig *cfg) {
  if (cfg) train_config_free(cfg);
  if (code && comm_initialized() && comm_world_size() > 1) comm_abort(code, "fivefold train: %s", msg);
  if (code) fail(code, msg);
  Error err = {0};
  if (comm_finalize(&err) && !code) return fail(1, err.msg);
  return code;
}

/* Environment variables that Open MPI, PMIx and MPICH/Hydra launchers set
 * in every rank; FIVEFOLD_MPI=1 forces MPI on (a singleton start). */
static int started_by_mpi_launcher(void) {
  static const char *const VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  const char *force = getenv("FIVEFOLD_MPI");
  if (force && !strcmp(force, "1")) return 1;
  for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
    if (getenv(VARS[i])) return 1;
  return 0;
}

/* A plan fits one model: its layout divides that model's layers, heads and
 * experts, and its prediction prices that model. The fingerprint covers
 * every field of the model config, so a plan for another model is refused
 * even when the layer counts agree. */
static int check_plan_model(const TrainConfig *cfg, const char *path, const PlanChoice *pc, Error *err) {
  const char *run_model = cfg->model_source[0] ? cfg->model_source : "the inline model";
  char fp[PLAN_FINGERPRINT_MAX], summary[160];
  plan_model_fingerprint(&cfg->model, fp);
  plan_model_summary(&cfg->model, summary, sizeof summary);
  if (!pc->has_identity)
    return error_set(err, ERR_CONFIG,
                     "--plan %s: the plan has no model_identity, so it cannot be checked against the run's model "
                     "(%s of %s: %s); re-plan with `fivefold plan --model ... --out`",
                     path, run_model, cfg->config_path, summary);
  if (strcmp(pc->model_fingerprint, fp))
    return error_set(err, ERR_CONFIG,
                     "--plan %s: the plan was made for model %s (%s, fingerprint %s), but %s trains %s (%s, "
                     "fingerprint %s); re-plan for this model",
                     path, pc->model[0] ? pc->model : "?", pc->model_summary[0] ? pc->model_summary : "?",
                     pc->model_fingerprint, cfg->config_path, run_model, summary, fp);
  return 0;
}

/* A vision network's plan (`fivefold simulate --net ... --out`): its
 * data-parallel layout, batch and bucket size, for the network it was made
 * for (the vision config's fingerprint). */
static int apply_net_plan(TrainConfig *cfg, const char *path, const PlanChoice *pc, Error *err) {
  if (cfg->family != TRAIN_FAMILY_VISION || strcmp(pc->family, "vision"))
    return error_set(err, ERR_CONFIG,
                     "--plan %s: the plan is for a %s (field \"family\"), but %s trains %s; plans are made for "
                     "transformers by `fivefold plan --out` and for vision networks by `fivefold simulate --net ... "
                     "--out`", path, pc->family, cfg->config_path,
                     cfg->family == TRAIN_FAMILY_VISION ? "a vision network"
                     : cfg->family == TRAIN_FAMILY_TRANSFORMER ? "a transformer" : "another network family");
  char fp[PLAN_FINGERPRINT_MAX], summary[160];
  vision_config_fingerprint(&cfg->vision, fp, sizeof fp);
  vision_config_summary(&cfg->vision, summary, sizeof summary);
  if (!pc->has_identity || strcmp(pc->model_fingerprint, fp))
    return error_set(err, ERR_CONFIG,
                     "--plan %s: the plan was made for network %s (%s, fingerprint %s), but %s trains %s "
                     "(fingerprint %s); re-plan with `fivefold simulate --net %s ... --out`",
                     path, pc->model[0] ? pc->model : "?", pc->model_summary[0] ? pc->model_summary : "?",
                     pc->has_identity ? pc->model_fingerprint : "none", cfg->config_path, summary, fp,
                     cfg->config_path);
  char v[64];
  struct {
    const char *flag;
    int value;
  } ints[] = {{"--dp", pc->dp}, {"--micro-batch-size", pc->micro_batch_size},
              {"--global-batch-size", pc->global_batch_size},
              {"--distributed-optimizer", pc->distributed_optimizer != 0}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    snprintf(v, sizeof v, "%d", ints[i].value);
    if (train_config_override(cfg, ints[i].flag, v, err)) return error_wrap(err, "--plan %s", path);
  }
  if (pc->bucket_mb > 0) {
    snprintf(v, sizeof v, "%.9g", pc->bucket_mb);
    if (train_config_override(cfg, "--bucket-mb", v, err)) return error_wrap(err, "--plan %s", path);
  }
  return 0;
}

/* The plan's layout as overrides, applied before the command line's so
 * that explicit flags win: all five dimensions with the MoE grid's ep and
 * etp, full recomputation with its method and count, selective
 * recomputation with its modules. What the runtime cannot run (a module it
 * does not recompute) is refused rather than dropped: the plan's
 * prediction would not be what runs. */
static int apply_plan(TrainConfig *cfg, const char *path, Error *err) {
  PlanChoice pc;
  if (plan_file_read(path, &pc, err)) return error_wrap(err, "--plan");
  if (cfg->family != TRAIN_FAMILY_TRANSFORMER || strcmp(pc.family, "transformer"))
    return apply_net_plan(cfg, path, &pc, err);
  if (check_plan_model(cfg, path, &pc, err)) return err->code;
  char v[TRAIN_MAX_STAGES * 8];
  /* The planner mirrors attention in a dense model's MoE grid (etp = tp);
   * the runtime has no MoE grid without experts. */
  if (cfg->model.num_experts <= 0) pc.ep = pc.etp = 1;
  struct {
    const char *flag;
    int value;
  } ints[] = {{"--tp", pc.tp}, {"--cp", pc.cp > 0 ? pc.cp : 1}, {"--pp", pc.pp}, {"--vpp", pc.vpp}, {"--dp", pc.dp},
              {"--ep", pc.ep > 0 ? pc.ep : 1}, {"--etp", pc.etp > 0 ? pc.etp : 1},
              {"--micro-batch-size", pc.micro_batch_size}, {"--global-batch-size", pc.global_batch_size},
              {"--distributed-optimizer", pc.distributed_optimizer != 0}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    snprintf(v, sizeof v, "%d", ints[i].value);
    if (train_config_override(cfg, ints[i].flag, v, err)) return error_wrap(err, "--plan %s", path);
  }
  if (train_config_override(cfg, "--schedule", pc.schedule_name, err)) return error_wrap(err, "--plan %s", path);
  if (pc.recompute == PLAN_RECOMPUTE_FULL) {
    snprintf(v, sizeof v, "%d", pc.recompute_num_layers);
    if (train_config_override(cfg, "--recompute", "full", err) ||
        train_config_override(cfg, "--recompute-method", pc.recompute_method == 1 ? "block" : "uniform", err) ||
        train_config_override(cfg, "--recompute-num-layers", v, err))
      return error_wrap(err, "--plan %s", path);
  } else if (pc.recompute == PLAN_RECOMPUTE_SELECTIVE) {
    /* The plan's modules (none written: the attention core, Megatron's
     * default). Only those the runtime runs as the plan priced them
     * (runtime_caps.h): core_attn would be accepted by the run config
     * but rerun nothing, so the plan's price would not be what runs. */
    const unsigned pm = pc.recompute_modules ? pc.recompute_modules : PLAN_RECOMPUTE_CORE_ATTN;
    char mods[96];
    plan_recompute_modules_describe(pm, mods, sizeof mods);
    if (pm & ~PLAN_RECOMPUTE_FIVEFOLD_MODULES)
      return error_set(err, ERR_CONFIG,
                       "--plan %s: field \"parallel.recompute_modules\": the plan recomputes %s selectively; fivefold "
                       "train recomputes layernorm, mlp and moe_act (core_attn: its attention keeps only the output "
                       "and log-sum-exp, so the priced rerun would not happen; moe, shared_experts: not run); re-plan "
                       "with --recompute-modules from those, or --recompute-list none,full",
                       path, mods);
    if (train_config_override(cfg, "--recompute", "selective", err) ||
        train_config_override(cfg, "--recompute-modules", mods, err))
      return error_wrap(err, "--plan %s (field \"parallel.recompute_modules\")", path);
  } else if (train_config_override(cfg, "--recompute", "none", err)) {
    return error_wrap(err, "--plan %s", path);
  }
  /* The bucket search's size (the runtime runs uniform buckets only). */
  if (pc.bucket_mb > 0) {
    snprintf(v, sizeof v, "%.9g", pc.bucket_mb);
    if (train_config_override(cfg, "--bucket-mb", v, err)) return error_wrap(err, "--plan %s", path);
  }
  /* The fused kernels the plan priced. */
  const struct {
    const char *flag;
    int value;
  } fuse[] = {{"--fuse-swiglu", pc.fuse_swiglu}, {"--fuse-bias-gelu", pc.fuse_bias_gelu},
                 {"--fuse-norm-residual", pc.fuse_norm_residual}};
  for (size_t i = 0; i < sizeof fuse / sizeof fuse[0]; i++) {
    if (fuse[i].value < 0) continue;
    snprintf(v, sizeof v, "%d", fuse[i].value);
    if (train_config_override(cfg, fuse[i].flag, v, err)) return error_wrap(err, "--plan %s", path);
  }
  if (pc.num_stages > 0) {
    size_t at = 0;
    for (int i = 0; i < pc.num_stages && at < sizeof v; i++)
      at += (size_t)snprintf(v + at, sizeof v - at, "%s%d", i ? "," : "", pc.layers_per_stage[i]);
    if (train_config_override(cfg, "--layers-per-stage", v, err)) return error_wrap(err, "--plan %s", path);
  }
  /* Stage replication: the widths (train_config_set_world checks them). */
  if (pc.num_stage_widths > 0) {
    size_t at = 0;
    for (int i = 0; i < pc.num_stage_widths && at < sizeof v; i++)
      at += (size_t)snprintf(v + at, sizeof v - at, "%s%d", i ? "," : "", pc.stage_width[i]);
    if (train_config_override(cfg, "--stage-widths", v, err)) return error_wrap(err, "--plan %s", path);
  }
  if (pc.num_warmup > 0) {
    size_t at = 0;
    for (int i = 0; i < pc.num_warmup && at < sizeof v; i++)
      at += (size_t)snprintf(v + at, sizeof v - at, "%s%d", i ? "," : "", pc.warmup[i]);
    if (train_config_override(cfg, "--warmup", v, err)) return error_wrap(err, "--plan %s", path);
  }
  /* The order costs the plan's program was priced with, to the last digit:
   * they place its sends, so the program built is the program priced. */
  const struct {
    const char *flag;
    double value;
  } order[] = {{"--order-fwd-cost", pc.order_fwd_cost}, {"--order-bwd-cost", pc.order_bwd_cost}};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    if (order[i].value <= 0) continue;
    snprintf(v, sizeof v, "%.17g", order[i].value);
    if (train_config_override(cfg, order[i].flag, v, err)) return error_wrap(err, "--plan %s", path);
  }
  return 0;
}

/* What a plan priced but a run config owns (the sequence length, the
 * precision): said when the run, after the command line's overrides, is
 * not what the plan priced, so the prediction is known not to describe it. */
static void plan_notes(const TrainConfig *cfg, const char *path) {
  PlanChoice pc;
  Error err = {0, ""};
  if (comm_world_rank() != 0 || plan_file_read(path, &pc, &err)) return;
  if (pc.seq_len > 0 && pc.seq_len != cfg->seq_len)
    fprintf(stderr, "fivefold train: note: --plan %s was made for sequence length %d (field \"seq_length\"), the run "
            "uses training.seq_len %d\n", path, pc.seq_len, cfg->seq_len);
  const char *priced = plan_dtype_name(pc.dtype);
  if (strcmp(priced, cfg->precision))
    fprintf(stderr, "fivefold train: note: --plan %s was priced in %s (field \"dtype\"), the run computes in "
            "training.precision %s: its predicted step time and memory are not this run's (re-plan with --dtype %s, "
            "or set --precision)\n", path, priced, cfg->precision, cfg->precision);
}

/* The plan's device mapping, applied: the process launched as rank d (on
 * device d, numbering processes node by node as launchers do) becomes the
 * rank r with mapping.device_of_rank[r] = d before any grid is built, so
 * every group of rank r sits on the devices the plan priced. Rank 0 prints
 * where each rank runs. A launcher that did not number node by node is
 * said, since then launch rank d is not device d. */
static int place_ranks(const char *path, Error *err) {
  int *map = NULL, n = 0;
  if (plan_file_read_mapping(path, &map, &n, err)) return error_wrap(err, "--plan");
  if (!map || !comm_initialized() || comm_world_size() == 1) {
    free(map);
    return 0;
  }
  int node_major = 1, per_node = 1, rc = comm_launch_is_node_major(&node_major, &per_node, err);
  int identity = 1;
  for (int r = 0; r < n; r++) identity &= map[r] == r;
  if (!rc && !identity) rc = comm_world_place(map, n, err);
  free(map);
  if (rc) return error_wrap(err, "--plan %s: placing the ranks by its mapping", path);
  /* Who runs where: launch rank and host of every rank, printed by rank 0. */
  int size = comm_world_size(), me = comm_world_rank();
  int *launch = me == 0 ? calloc((size_t)size, sizeof *launch) : NULL;
  char(*host)[COMM_HOST_NAME_CHARS] = me == 0 ? calloc((size_t)size, sizeof *host) : NULL;
  if (me == 0 && (!launch || !host)) rc = error_set(err, ERR_NOMEM, "out of memory");
  if (!rc) rc = comm_gather_placement(launch, host, err);
  if (rc) {
    free(launch);
    free(host);
    return error_wrap(err, "--plan %s: gathering where the ranks run", path);
  }
  if (me == 0) {
    printf("placement (--plan %s): %s; rank -> device (host):", path,
           identity ? "the mapping is rank order" : "ranks renumbered by the plan's mapping");
    for (int r = 0; r < size; r++) printf(" %d->%d (%s)", r, launch[r], host[r]);
    printf("\n");
    if (!node_major)
      printf("placement: note: the launcher did not number the processes node by node with the same count per "
             "node, so launch rank d is not device d of the plan's cluster (slot d %% devices per node of node d / "
             "devices per node); launch with a by-slot mapping (mpirun --map-by slot)\n");
    fflush(stdout);
  }
  free(launch);
  free(host);
  return 0;
}

/* otherData.plan of the run's trace: the plan's path, cluster and world,
 * and the device mapping place_ranks placed the ranks by (only when the
 * plan has one and there was a world to place), so that `trace compare`
 * prices every rank on the device it ran on. NULL with err set on failure. */
static cJSON *plan_record(const char *path, Error *err) {
  PlanChoice pc;
  int *map = NULL, n = 0;
  if (plan_file_read(path, &pc, err) || plan_file_read_mapping(path, &map, &n, err)) {
    error_wrap(err, "--plan");
    return NULL;
  }
  cJSON *o = cJSON_CreateObject();
  int ok = o && cJSON_AddStringToObject(o, "file", path) && cJSON_AddStringToObject(o, "cluster", pc.cluster) &&
           cJSON_AddNumberToObject(o, "gpus", pc.gpus);
  if (ok && map && comm_initialized() && comm_world_size() > 1) {
    cJSON *m = cJSON_AddObjectToObject(o, "mapping");
    cJSON *perm = cJSON_CreateIntArray(map, n);
    ok = m && perm && cJSON_AddItemToObject(m, "device_of_rank", perm);
    if (!ok && !m) cJSON_Delete(perm);
  }
  free(map);
  if (!ok) {
    cJSON_Delete(o);
    error_set(err, ERR_NOMEM, "out of memory recording the plan");
    return NULL;
  }
  return o;
}

/* A config-field flag and its value, in command-line order. */
typedef struct Override {
  const char *value;
  char flag[64];
} Override;

typedef struct TrainArgs {
  const char *config, *resume_path, *plan;
  int no_progress, resume;
  Override *overrides; /* argc entries */
  int n_overrides;
} TrainArgs;

static int is_zero_or_one(const char *s) { return !strcmp(s, "0") || !strcmp(s, "1"); }

static int add_override(TrainArgs *a, const char *flag, const char *value) {
  snprintf(a->overrides[a->n_overrides].flag, sizeof a->overrides[0].flag, "%s", flag);
  a->overrides[a->n_overrides++].value = value;
  return 0;
}

/* 0: parsed; -1: --help shown; ERR_ARG: a usage error in err. */
static int parse_train_args(int argc, char **argv, TrainArgs *a, Error *err) {
  static const char *const OWN[] = {"--config", "--plan", "--resume", "--no-progress", "--help"};
  enum { NUM_OWN = (int)(sizeof OWN / sizeof OWN[0]) };
  int n_flags = train_config_flag_names(NULL, 0);
  const char **known = malloc((size_t)(n_flags + NUM_OWN) * sizeof *known);
  if (!known) return error_set(err, ERR_NOMEM, "out of memory");
  train_config_flag_names(known, n_flags);
  for (int k = 0; k < NUM_OWN; k++) known[n_flags + k] = OWN[k];
  OptionParser op;
  option_parser_init(&op, "train", argc, argv, known, n_flags + NUM_OWN);
  int rc = 0;
  while (!rc && option_next(&op)) {
    const char *value = NULL;
    if (option_is_help(&op)) {
      train_help(stdout);
      rc = -1;
    } else if (option_is(&op, "--no-progress")) {
      rc = option_switch(&op, err);
      a->no_progress = 1;
    } else if (option_is(&op, "--resume")) {
      /* An optional PATH: the next argument when it is not an option. */
      a->resume = 1;
      a->resume_path = option_optional_value(&op, NULL);
      if (a->resume_path && !a->resume_path[0])
        rc = error_set(err, ERR_ARG, "--resume= needs a path (or give --resume alone for the run's output directory)");
    } else if (option_is(&op, "--config")) {
      rc = option_value(&op, &a->config, err);
    } else if (option_is(&op, "--plan")) {
      rc = option_value(&op, &a->plan, err);
    } else if (option_is(&op, "--distributed-optimizer")) {
      /* A switch that may also take 0 or 1: alone (or before another option) it means 1. */
      value = option_optional_value(&op, is_zero_or_one);
      rc = add_override(a, op.name, value ? value : "1");
    } else if (train_config_is_flag(op.name)) {
      if (!(rc = option_value(&op, &value, err))) rc = add_override(a, op.name, value);
    } else {
      rc = option_unknown(&op, err);
    }
  }
  free(known);
  if (!rc && !a->config)
    rc = error_set(err, ERR_ARG, "no config given (usage: fivefold train --config FILE [options]; see --help)");
  return rc;
}

/* The run config: the file, then the plan's layout, then the command
 * line's overrides, then the world size; returns the exit code (2: the
 * inputs are wrong, 1: they do not fit together). */
static int build_config(const TrainArgs *a, TrainConfig *cfg, Error *err) {
  if (train_config_load(cfg, a->config, err)) return 1;
  if (a->plan && apply_plan(cfg, a->plan, err)) return 2;
  for (int i = 0; i < a->n_overrides; i++)
    if (train_config_override(cfg, a->overrides[i].flag, a->overrides[i].value, err)) return 2;
  if (a->plan) plan_notes(cfg, a->plan);
  if (train_config_set_world(cfg, comm_initialized() ? comm_world_size() : 1, err)) return 2;
  if (train_config_finalize(cfg, err)) return 1;
  return 0;
}

/* --resume: restores the checkpoint; *nothing_to_do when it is at the end already. */
static int resume_run(Trainer *tr, const TrainConfig *cfg, const TrainArgs *a, int *nothing_to_do, Error *err) {
  char dir[CHECKPOINT_PATH_MAX];
  const char *where = a->resume_path ? a->resume_path : cfg->out_dir;
  if (checkpoint_resolve(where, dir, sizeof dir, err) || trainer_resume(tr, dir, err))
    return error_wrap(err, "--resume");
  if (tr->step >= cfg->steps) {
    if (comm_world_rank() == 0)
      printf("fivefold train: %s is at step %d, training.steps is %d: nothing to train (raise --steps to go on)\n",
             dir, tr->step, cfg->steps);
    *nothing_to_do = 1;
  }
  return 0;
}

/* The training itself; a stop signal caught since start-up ends it after
 * the current step with a checkpoint. */
static int run_training(Trainer *tr, const TrainArgs *a, Error *err) {
  TrainerOptions opts;
  trainer_options_default(&opts);
  if (a->no_progress) opts.progress = 0;
  opts.stop = &g_stop;
  opts.save_checkpoints = 1;
  cJSON *plan = NULL;
  if (a->plan && tr->cfg->trace_path[0] && !(plan = plan_record(a->plan, err))) return err->code;
  opts.trace_plan = plan;
  TrainSummary summary;
  int rc = trainer_run(tr, &opts, &summary, err);
  cJSON_Delete(plan);
  return rc;
}

int cmd_train(int argc, char **argv) {
  TrainArgs args = {.overrides = calloc((size_t)argc, sizeof(Override))};
  Error err = {0};
  if (!args.overrides) return fail(1, "out of memory");
  int rc = parse_train_args(argc, argv, &args, &err);
  if (rc) {
    free(args.overrides);
    return rc < 0 ? 0 : fail(2, err.msg);
  }
  /* MPI starts only under a launcher: a plain start is one rank without
   * MPI (no start-up cost, nothing of MPI's own left for leak checkers),
   * and MPI starts once per process, so a second run inside one process
   * (tests call cmd_train directly) after it was shut down trains as one
   * rank too. */
  if (!comm_mpi_finalized() && started_by_mpi_launcher() && comm_init(&argc, &argv, &err)) {
    free(args.overrides);
    return fail(1, err.msg);
  }
  /* Caught from here on: a preemption during set-up stops after the first
   * step instead of killing the rank (the default action of SIGTERM and
   * SIGUSR1), which under mpirun would take the whole job down. */
  g_stop = 0;
  catch_stop_signals();
  TrainConfig cfg;
  train_config_defaults(&cfg);
  int code = signal_stacks_install(1, &err) ? 1 : 0; /* this thread; the run's team once it is known */
  if (!code) code = build_config(&args, &cfg, &err);
  if (!code && args.plan && place_ranks(args.plan, &err)) code = 2;
  Trainer tr;
  int have_trainer = 0, nothing_to_do = 0;
  if (!code && trainer_create(&tr, &cfg, &err)) code = 1;
  have_trainer = !code;
  if (!code && signal_stacks_install(tr.threads, &err)) code = 1;
  if (!code && args.resume && resume_run(&tr, &cfg, &args, &nothing_to_do, &err)) code = 1;
  if (!code && !nothing_to_do && run_training(&tr, &args, &err)) code = 1;
  if (have_trainer) trainer_free(&tr);
  free(args.overrides);
  return finish(code, err.msg, &cfg);
}
