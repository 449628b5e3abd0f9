/* `fivefold upcycle --checkpoint DENSE --experts E --topk K [--granularity G]
 * [options] --out DIR`: option parsing, the checks that need no checkpoint,
 * and the summary of what convert/upcycle.c wrote. */
#include "cli/cmd_upcycle.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "convert/export_hf.h"
#include "convert/upcycle.h"

static void upcycle_help(FILE *f) {
  fprintf(f,
          "usage: fivefold upcycle --checkpoint DENSE --experts E --topk K [--granularity G] [options] --out DIR\n\n"
          "Turns a trained dense model into an MoE model whose logits at the start equal the dense\n"
          "model's (docs/upcycling.md). Every MLP becomes E experts: the dense FFN is cut into G slices\n"
          "and each slice is copied E/G times; the router rows of the G experts that together make one\n"
          "copy of the MLP are equal, so top-K (K a multiple of G) picks whole copies; the up\n"
          "projections and w_down of every expert are scaled so that the routing weights add back up\n"
          "to the dense MLP. Attention, embeddings, norms and the LM head are copied.\n\n"
          "Writes DIR as a run directory: DIR/checkpoints/step-00000000 (step 0, AdamW moments at\n"
          "zero, the dense run's data position) and DIR/run.json (the dense run's config with the new\n"
          "model and \"out\": DIR). Continue with\n"
          "  fivefold train --config DIR/run.json --resume [--steps N ...]\n\n"
          "options:\n"
          "  --checkpoint PATH        the dense checkpoint: a step-NNNNNNNN directory, or a run directory\n"
          "                           (its newest valid checkpoint)\n"
          "  --out DIR                the new run directory (must not hold checkpoints yet)\n"
          "  --experts E              routed experts per MoE layer (a multiple of G)\n"
          "  --topk K                 experts per token (a multiple of G, at most E)\n"
          "  --granularity G          slices of the dense FFN (default 1; it must divide the FFN)\n"
          "  --router-order ORDER     softmax_then_topk (default) or topk_then_softmax\n"
          "  --router-score SCORE     softmax (default) or sigmoid\n"
          "  --norm-topk-prob         renormalise the kept top-k probabilities to sum 1 (default off).\n"
          "                           Needed to export the MoE (fivefold export --format hf writes\n"
          "                           Mixtral, which renormalises; --router-order topk_then_softmax\n"
          "                           is the same routing); without it export refuses the model\n"
          "  --aux-loss-coeff X       load-balancing loss coefficient (default 0.01)\n"
          "  --z-loss-coeff X         router z-loss coefficient (default 0)\n"
          "  --router-init-std X      std of the random router rows (default: per layer, so that the\n"
          "                           router logits start with a spread of about 0.01); 0 gives exactly\n"
          "                           uniform routing, which the unnormalised softmax_then_topk needs to\n"
          "                           start exactly at the dense logits, but leaves copies tied until\n"
          "                           training separates them\n"
          "  --moe-layer-freq N       layer i becomes MoE when i %% N == 0 (default 1: every layer)\n"
          "  --seed S                 seed of the router draws (default 1337)\n"
          "  --dense-control          keep the model dense and only restart it the same way (step 0,\n"
          "                           fresh AdamW): the continued-dense control of an upcycling\n"
          "                           experiment (no MoE option may be given)\n"
          "  -h, --help               show this help\n");
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fivefold upcycle: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return fail(2, "%s expects an integer in %ld..%ld, got '%s'", flag, lo, hi, v);
  *out = (int)x;
  return 0;
}

static int parse_float(const char *flag, const char *v, float *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < 0)
    return fail(2, "%s expects a non-negative number, got '%s'", flag, v);
  *out = (float)x;
  return 0;
}

static int parse_u64(const char *flag, const char *v, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-') return fail(2, "%s expects a non-negative integer, got '%s'", flag, v);
  *out = (uint64_t)x;
  return 0;
}

/* The options that take a value. */
static const char *const VALUE_FLAGS[] = {
    "--checkpoint",     "--out",          "--experts",        "--topk",         "--granularity",
    "--router-order",   "--router-score", "--aux-loss-coeff", "--z-loss-coeff", "--router-init-std",
    "--moe-layer-freq", "--seed",
};
#define NUM_VALUE_FLAGS ((int)(sizeof VALUE_FLAGS / sizeof VALUE_FLAGS[0]))

static int apply(UpcycleOptions *o, const char **checkpoint, const char **out, int *moe_given, const char *flag,
                 const char *v) {
  if (!strcmp(flag, "--checkpoint"))
    *checkpoint = v;
  else if (!strcmp(flag, "--out"))
    *out = v;
  else if (!strcmp(flag, "--seed"))
    return parse_u64(flag, v, &o->seed);
  else {
    *moe_given = 1;
    if (!strcmp(flag, "--experts")) return parse_int(flag, v, 1, 1 << 16, &o->num_experts);
    if (!strcmp(flag, "--topk")) return parse_int(flag, v, 1, 1 << 16, &o->top_k);
    if (!strcmp(flag, "--granularity")) return parse_int(flag, v, 1, 1 << 16, &o->granularity);
    if (!strcmp(flag, "--moe-layer-freq")) return parse_int(flag, v, 1, INT_MAX, &o->moe_layer_freq);
    if (!strcmp(flag, "--aux-loss-coeff")) return parse_float(flag, v, &o->aux_loss_coeff);
    if (!strcmp(flag, "--z-loss-coeff")) return parse_float(flag, v, &o->z_loss_coeff);
    if (!strcmp(flag, "--router-init-std")) return parse_float(flag, v, &o->router_init_std);
    if (!strcmp(flag, "--router-order")) {
      if (!strcmp(v, "softmax_then_topk"))
        o->router_order = ROUTER_SOFTMAX_THEN_TOPK;
      else if (!strcmp(v, "topk_then_softmax"))
        o->router_order = ROUTER_TOPK_THEN_SOFTMAX;
      else
        return fail(2, "--router-order must be softmax_then_topk or topk_then_softmax, got '%s'", v);
      return 0;
    }
    if (!strcmp(flag, "--router-score")) {
      if (!strcmp(v, "softmax"))
        o->router_score = ROUTER_SCORE_SOFTMAX;
      else if (!strcmp(v, "sigmoid"))
        o->router_score = ROUTER_SCORE_SIGMOID;
      else
        return fail(2, "--router-score must be softmax or sigmoid, got '%s'", v);
    }
  }
  return 0;
}

static void print_summary(const UpcycleInfo *info, const UpcycleOptions *o) {
  const ModelConfig *m = &info->model;
  printf("upcycle: %s (step %d, dense, %zu parameters)\n", info->dense_checkpoint, info->dense_step,
         info->dense_params);
  if (o->dense_control) {
    printf("  model    unchanged (dense control), %zu parameters\n", info->params);
  } else {
    printf(
        "  model    %d of %d layers MoE: %d experts of ffn %d (granularity %d, %d copies of each slice), "
        "top-%d, %s %s%s, aux %g, z %g; %zu parameters\n",
        model_config_num_moe_layers(m), m->num_layers, m->num_experts, m->moe_intermediate_size, o->granularity,
        m->num_experts / o->granularity, m->top_k, m->router_score == ROUTER_SCORE_SIGMOID ? "sigmoid" : "softmax",
        m->router_order == ROUTER_TOPK_THEN_SOFTMAX ? "topk_then_softmax" : "softmax_then_topk",
        m->norm_topk_prob ? " (renormalised)" : "", (double)m->aux_loss_coeff, (double)m->z_loss_coeff, info->params);
    printf("  scaling  expert up rows and w_down x sqrt(%.6g) each: the MoE output equals the dense MLP %s\n",
           info->expert_scale,
           info->exact_for_any_router ? "exactly (the picked weights always sum to the same total)"
           : o->router_init_std == 0  ? "exactly (router rows 0: uniform scores)"
                                      : "only approximately (router rows are random: scores are not uniform; "
                                        "--router-init-std 0 makes it exact)");
  }
  Error err = {0};
  if (export_hf_check(m, &err) == 0)
    printf("  export   fivefold export --format hf takes it\n");
  else if (!m->norm_topk_prob && m->router_order == ROUTER_SOFTMAX_THEN_TOPK && m->router_score == ROUTER_SCORE_SOFTMAX)
    printf("  export   refused: the top-k routing weights are not renormalised (upcycle with --norm-topk-prob for "
           "a model fivefold export --format hf writes)\n");
  else
    printf("  export   refused: %s\n", err.msg);
  printf("  wrote    %s (step 0, AdamW moments zero, the dense run's data position)\n", info->checkpoint);
  printf("           %s\n", info->run_config);
  printf("continue:  fivefold train --config %s --resume\n", info->run_config);
}

int cmd_upcycle(int argc, char **argv) {
  UpcycleOptions o;
  upcycle_options_default(&o);
  const char *checkpoint = NULL, *out = NULL;
  int experts_given = 0, topk_given = 0, moe_given = 0;
  const char *known_names[NUM_VALUE_FLAGS + 3];
  for (int k = 0; k < NUM_VALUE_FLAGS; k++) known_names[k] = VALUE_FLAGS[k];
  known_names[NUM_VALUE_FLAGS] = "--norm-topk-prob";
  known_names[NUM_VALUE_FLAGS + 1] = "--dense-control";
  known_names[NUM_VALUE_FLAGS + 2] = "--help";
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "upcycle", argc, argv, known_names, NUM_VALUE_FLAGS + 3);
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      upcycle_help(stdout);
      return 0;
    }
    if (option_is(&op, "--norm-topk-prob") || option_is(&op, "--dense-control")) {
      if (option_switch(&op, &perr)) return fail(2, "%s", perr.msg);
      if (option_is(&op, "--norm-topk-prob")) o.norm_topk_prob = moe_given = 1;
      else o.dense_control = 1;
      continue;
    }
    const char *flag = op.name, *value = NULL;
    int known = 0;
    for (int k = 0; k < NUM_VALUE_FLAGS && !known; k++) known = option_is(&op, VALUE_FLAGS[k]);
    if (!known) return fail(2, "%s", (option_unknown(&op, &perr), perr.msg));
    if (option_value(&op, &value, &perr)) return fail(2, "%s", perr.msg);
    experts_given |= !strcmp(flag, "--experts");
    topk_given |= !strcmp(flag, "--topk");
    if (apply(&o, &checkpoint, &out, &moe_given, flag, value)) return 2;
  }
  if (!checkpoint) return fail(2, "no dense checkpoint given (--checkpoint PATH)");
  if (!out) return fail(2, "no output directory given (--out DIR)");
  if (o.dense_control) {
    if (moe_given) return fail(2, "--dense-control keeps the model dense: drop the MoE options");
  } else {
    if (!experts_given || !topk_given) return fail(2, "--experts and --topk are required (or --dense-control)");
    /* The checks that need no checkpoint; the FFN and the model come later. */
    if (o.num_experts % o.granularity)
      return fail(2, "--experts (%d) must be a multiple of --granularity (%d)", o.num_experts, o.granularity);
    if (o.top_k > o.num_experts) return fail(2, "--topk (%d) must not exceed --experts (%d)", o.top_k, o.num_experts);
    if (o.top_k % o.granularity)
      return fail(2,
                  "--topk (%d) must be a multiple of --granularity (%d): otherwise the slices of the dense FFN are "
                  "not all picked equally often and the MoE cannot start at the dense model",
                  o.top_k, o.granularity);
  }
  Error err = {0};
  UpcycleInfo info;
  if (upcycle_checkpoint(checkpoint, out, &o, &info, &err)) return fail(1, "%s", err.msg);
  print_summary(&info, &o);
  return 0;
}
