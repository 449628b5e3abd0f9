/* A run's metrics.jsonl (written by train/trainer.c) drawn as one PNG of
 * three panels over the training steps: training loss with validation
 * (eval) and test loss, the learning rate, and the throughput (tokens/s,
 * or the network's own unit: images/s, ...); checkpoints show as dotted
 * rules in the loss panel.
 *
 * Every record kind the trainer writes is read and checked: "train"
 * (step, loss, lr, <unit>_per_s), "eval" (step, val_loss), "test" (step,
 * test_loss), "checkpoint" (step) and "summary" (steps). Records of a kind
 * this reader does not know are counted and skipped, so that a newer
 * trainer's files still plot. A line that is not a JSON object, lacks its
 * "type" or a field its kind needs, or is cut short (no newline at the
 * end: a truncated file) is refused as ERR_FORMAT naming the file and the
 * line number. */
#ifndef FIVEFOLD_BASE_METRICS_PLOT_H
#define FIVEFOLD_BASE_METRICS_PLOT_H

#include "base/error.h"

/* What was read, for the command's report. */
typedef struct MetricsPlotInfo {
  int train, eval, test, checkpoint, summary, unknown; /* records of each kind */
  int first_step, last_step;                           /* of the train records */
  char unit[32];                                       /* "tokens", "images", ... */
} MetricsPlotInfo;

/* The smallest image the three panels fit in. */
#define METRICS_PLOT_MIN_WIDTH 320
#define METRICS_PLOT_MIN_HEIGHT 360

/* Reads metrics_path and writes a width x height PNG to png_path. ERR_ARG
 * for a size below the minimum; ERR_IO when a file cannot be read or
 * written; ERR_FORMAT for a malformed line (see above) or a file without
 * any train record. */
int metrics_plot(const char *metrics_path, const char *png_path, int width, int height, MetricsPlotInfo *info,
                 Error *err);

#endif
