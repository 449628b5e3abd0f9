/* `fivefold plot RUN [--out FILE] [--width W] [--height H]`: the run's
 * metrics.jsonl drawn by base/metrics_plot.h as one PNG, with no plotting
 * program to install. RUN is a run directory or a metrics.jsonl file. */
#include "cli/cmd_plot.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/metrics_plot.h"
#include "base/options.h"
#include "cli/cli_util.h"

static void plot_help(FILE *f) {
  fprintf(f,
          "usage: fivefold plot RUN [--out FILE] [--width W] [--height H]\n\n"
          "Draws a run's metrics.jsonl as one PNG of three panels against the training step: training\n"
          "loss with validation and test loss (and checkpoints as dotted rules), the learning rate,\n"
          "and the throughput (tokens/s, or the network's own unit). RUN is a run directory (the\n"
          "--out of `fivefold train`) or a metrics.jsonl file. A truncated or malformed file is\n"
          "refused naming the line.\n\n"
          "options:\n"
          "  --out FILE     the PNG to write (default RUN/loss.png, or loss.png beside the file)\n"
          "  --width W      image width in pixels, at least %d (default 900)\n"
          "  --height H     image height in pixels, at least %d (default 900)\n"
          "  -h, --help     show this help\n",
          METRICS_PLOT_MIN_WIDTH, METRICS_PLOT_MIN_HEIGHT);
}

int cmd_plot(int argc, char **argv) {
  static const char *const KNOWN[] = {"--out", "--width", "--height", "--help"};
  const char *run = NULL, *out = NULL;
  double width = 900, height = 900;
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "plot", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      plot_help(stdout);
      return 0;
    }
    const char *v;
    double *num = option_is(&op, "--width") ? &width : option_is(&op, "--height") ? &height : NULL;
    if (option_is_positional(&op) && !run) {
      run = op.arg;
      continue;
    }
    if (!num && !option_is(&op, "--out")) return cli_fail("plot", 2, "%s", (option_unknown(&op, &err), err.msg));
    if (option_value(&op, &v, &err)) return cli_fail("plot", 2, "%s", err.msg);
    if (!num) out = v;
    else if (cli_parse_number(&op, v, 1, 32768, 1, num, &err)) return cli_fail("plot", 2, "%s", err.msg);
  }
  if (!run) return cli_fail("plot", 2, "no run given (fivefold plot RUN: a run directory or a metrics.jsonl)");
  struct stat st;
  int is_dir = stat(run, &st) == 0 && S_ISDIR(st.st_mode);
  char metrics[4096], png[4096];
  const char *slash = strrchr(run, '/');
  int dir_len = slash ? (int)(slash - run) : 0;
  if (is_dir) snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run);
  else snprintf(metrics, sizeof metrics, "%s", run);
  if (out) snprintf(png, sizeof png, "%s", out);
  else if (is_dir) snprintf(png, sizeof png, "%s/loss.png", run);
  else if (slash) snprintf(png, sizeof png, "%.*s/loss.png", dir_len, run);
  else snprintf(png, sizeof png, "loss.png");
  MetricsPlotInfo info;
  int rc = metrics_plot(metrics, png, (int)width, (int)height, &info, &err);
  if (rc) return cli_fail("plot", rc == ERR_ARG ? 2 : 1, "%s", err.msg);
  char skipped[64] = "";
  if (info.unknown) snprintf(skipped, sizeof skipped, "; %d record(s) of unknown kinds skipped", info.unknown);
  printf("plot: %s -> %s (%d x %d): %d train, %d eval, %d test, %d checkpoint, %d summary record(s)%s; steps %d..%d\n",
         metrics, png, (int)width, (int)height, info.train, info.eval, info.test, info.checkpoint, info.summary,
         skipped, info.first_step, info.last_step);
  return 0;
}
