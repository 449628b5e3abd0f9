/* What a training run reports: the per-interval statistics, the log line
 * built from them, the in-place progress line for terminals, the MoE load
 * imbalance, and number formatting with units ("9,950 tok/s", "12.3 M"). */
#ifndef FIVEFOLD_TRAIN_METRICS_H
#define FIVEFOLD_TRAIN_METRICS_H

#include <stddef.h>
#include <stdio.h>

#include "model/config.h"
#include "nets/network.h"

/* Statistics of the steps since the last log line. */
typedef struct IntervalStats {
  int steps;
  int num_metrics;                  /* the network's metrics, [0] the loss (nets/network.h) */
  NetMetric metrics[NET_MAX_METRICS]; /* names and decimals of the last step, values summed over steps */
  double grad_norm;        /* sum over steps */
  double imbalance;        /* sum over steps (MoE models) */
  double seconds;          /* training time (evaluation excluded) */
  double tokens, flops;
  float last_lr;
} IntervalStats;

/* One log line's numbers (means over the interval). */
typedef struct LogLine {
  int step, total_steps;
  double loss; /* metrics[0] */
  int num_metrics;
  NetMetric metrics[NET_MAX_METRICS];
  float lr;
  double grad_norm;
  NetUnit unit;   /* what tokens_per_s counts (the network's unit) */
  int has_flops;  /* the network counts its FLOPs: GFLOP/s and MFU are shown */
  double ms_per_step, tokens_per_s, gflops, mfu_pct, peak_gflops;
  int is_moe;
  double imbalance;
} LogLine;

/* Adds one step's metrics (metrics[0] the loss) to the interval. */
void interval_add_metrics(IntervalStats *s, const NetMetric *metrics, int n);
void interval_to_log_line(const IntervalStats *s, int step, int total_steps, double peak_gflops, int is_moe,
                          LogLine *out);
/* `step 120/2000 | loss 2.314 (lm ...) | lr ... | ... | moe imbalance 1.23 (...)`, no newline: the
 * metrics after the loss that have decimals, by name; throughput in l->unit.rate; GFLOP/s and MFU
 * when l->has_flops. */
void format_log_line(char *buf, size_t cap, const LogLine *l);
/* The same numbers as one JSON object (a metrics.jsonl record), no newline. */
void format_log_json(char *buf, size_t cap, const LogLine *l);

/* max_e count_e / mean_e count_e averaged over the MoE layers of counts
 * [num_layers * num_experts]; 0 when no MoE layer routed anything. */
double moe_imbalance(const long *counts, const ModelConfig *cfg);

/* 9950 -> "9,950". */
char *fmt_thousands(char *buf, size_t cap, double x);
/* 12345678 -> "12.3 M"; below 1000 plain. */
char *fmt_si(char *buf, size_t cap, double x);
/* 773 s -> "12m53s"; 4000 s -> "1h06m"; 42.1 s -> "42s". */
char *fmt_duration(char *buf, size_t cap, double seconds);

/* Progress line for terminals: redrawn in place with \r; cleared before a
 * regular line is printed over it. */
typedef struct ProgressLine {
  FILE *f;
  int enabled;
  int shown;
  double last_draw; /* redraws are throttled to a few per second */
} ProgressLine;

void progress_init(ProgressLine *p, FILE *f, int enabled);
/* Whether `f` really ends on a terminal, the rule of --progress auto: it
 * must be a terminal, and under an MPI launcher (Open MPI, PMIx or
 * MPICH/Hydra variables in the environment) the launcher's own standard
 * output (the parent process's, read through /proc) must be one too, since
 * the launcher hands each rank a pseudo-terminal even when its own output
 * goes to a file. */
int progress_output_is_terminal(FILE *f);
void progress_draw(ProgressLine *p, int step, int total_steps, double ms_per_step, double eta_seconds);
void progress_clear(ProgressLine *p);

#endif
