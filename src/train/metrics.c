/* Log-line formatting, MoE imbalance, number formatting and the terminal
 * progress line. */
#include "train/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/timer.h"

void interval_add_metrics(IntervalStats *s, const NetMetric *metrics, int n) {
  if (n > NET_MAX_METRICS) n = NET_MAX_METRICS;
  for (int i = 0; i < n; i++) {
    double sum = i < s->num_metrics ? s->metrics[i].value : 0;
    s->metrics[i] = metrics[i];
    s->metrics[i].value = sum + metrics[i].value;
  }
  s->num_metrics = n;
}

void interval_to_log_line(const IntervalStats *s, int step, int total_steps, double peak_gflops, int is_moe,
                          LogLine *out) {
  memset(out, 0, sizeof *out);
  double n = s->steps > 0 ? s->steps : 1;
  out->step = step;
  out->total_steps = total_steps;
  out->num_metrics = s->num_metrics;
  for (int i = 0; i < s->num_metrics; i++) {
    out->metrics[i] = s->metrics[i];
    out->metrics[i].value = s->metrics[i].value / n;
  }
  out->loss = s->num_metrics > 0 ? out->metrics[0].value : 0;
  out->lr = s->last_lr;
  out->grad_norm = s->grad_norm / n;
  out->ms_per_step = 1e3 * s->seconds / n;
  out->tokens_per_s = s->seconds > 0 ? s->tokens / s->seconds : 0;
  out->gflops = s->seconds > 0 ? s->flops / s->seconds / 1e9 : 0;
  out->peak_gflops = peak_gflops;
  out->mfu_pct = peak_gflops > 0 ? 100.0 * out->gflops / peak_gflops : 0;
  out->is_moe = is_moe;
  out->imbalance = s->imbalance / n;
}

/* Appends to buf at *n, keeping *n <= cap; 0 once it is full. */
static int append(char *buf, size_t cap, int *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char *buf, size_t cap, int *n, const char *fmt, ...) {
  if (*n < 0 || (size_t)*n >= cap) return 0;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + *n, cap - (size_t)*n, fmt, ap);
  va_end(ap);
  if (m < 0 || (size_t)(*n + m) >= cap) {
    *n = (int)cap;
    return 0;
  }
  *n += m;
  return 1;
}

void format_log_line(char *buf, size_t cap, const LogLine *l) {
  char tok[32], ms[32];
  fmt_thousands(tok, sizeof tok, l->tokens_per_s);
  if (l->ms_per_step < 10) snprintf(ms, sizeof ms, "%.1f", l->ms_per_step);
  else snprintf(ms, sizeof ms, "%.0f", l->ms_per_step);
  if (cap) buf[0] = '\0';
  int n = 0, shown = 0;
  append(buf, cap, &n, "step %d/%d | loss %.3f", l->step, l->total_steps, l->loss);
  for (int i = 1; i < l->num_metrics; i++) {
    const NetMetric *m = &l->metrics[i];
    if (m->decimals <= 0) continue;
    append(buf, cap, &n, "%s%s %.*f", shown++ ? " " : " (", m->name, m->decimals, m->value);
  }
  if (shown) append(buf, cap, &n, ")");
  append(buf, cap, &n, " | lr %.2e | gnorm %.2f | %s ms/it | %s %s", (double)l->lr, l->grad_norm, ms, tok,
         l->unit.rate ? l->unit.rate : "tok/s");
  if (l->has_flops)
    append(buf, cap, &n, " | %.1f GFLOP/s | MFU %.1f%% of %.0f GFLOP/s", l->gflops, l->mfu_pct, l->peak_gflops);
  if (l->is_moe) append(buf, cap, &n, " | moe imbalance %.2f (max/mean tokens per expert)", l->imbalance);
}

void format_log_json(char *buf, size_t cap, const LogLine *l) {
  if (cap) buf[0] = '\0';
  int n = 0;
  append(buf, cap, &n, "{\"type\":\"train\",\"step\":%d,\"steps\":%d", l->step, l->total_steps);
  if (l->num_metrics == 0) append(buf, cap, &n, ",\"loss\":%.6g", l->loss);
  for (int i = 0; i < l->num_metrics; i++)
    append(buf, cap, &n, ",\"%s\":%.6g", l->metrics[i].name, l->metrics[i].value);
  append(buf, cap, &n, ",\"lr\":%.6g,\"grad_norm\":%.6g,\"ms_per_step\":%.6g,\"%s_per_s\":%.6g", (double)l->lr,
         l->grad_norm, l->ms_per_step, l->unit.many ? l->unit.many : "tokens", l->tokens_per_s);
  if (l->has_flops)
    append(buf, cap, &n, ",\"gflops\":%.6g,\"mfu_pct\":%.6g,\"peak_gflops\":%.6g", l->gflops, l->mfu_pct,
           l->peak_gflops);
  if (l->is_moe) append(buf, cap, &n, ",\"moe_imbalance\":%.6g", l->imbalance);
  append(buf, cap, &n, "}");
}

double moe_imbalance(const long *counts, const ModelConfig *cfg) {
  int E = cfg->num_experts;
  if (E <= 0) return 0;
  double sum = 0;
  int layers = 0;
  for (int l = 0; l < cfg->num_layers; l++) {
    if (!cfg->is_moe_layer[l]) continue;
    const long *c = counts + (size_t)l * E;
    long total = 0, max = 0;
    for (int e = 0; e < E; e++) {
      total += c[e];
      if (c[e] > max) max = c[e];
    }
    if (total == 0) continue;
    sum += (double)max / ((double)total / E);
    layers++;
  }
  return layers ? sum / layers : 0;
}

char *fmt_thousands(char *buf, size_t cap, double x) {
  char digits[32];
  int neg = x < 0;
  snprintf(digits, sizeof digits, "%.0f", fabs(x));
  size_t len = strlen(digits), o = 0;
  char tmp[48];
  if (neg) tmp[o++] = '-';
  for (size_t i = 0; i < len && o < sizeof tmp - 2; i++) {
    tmp[o++] = digits[i];
    size_t left = len - 1 - i;
    if (left && left % 3 == 0) tmp[o++] = ',';
  }
  tmp[o] = '\0';
  snprintf(buf, cap, "%s", tmp);
  return buf;
}

char *fmt_si(char *buf, size_t cap, double x) {
  static const char *units[] = {"", " K", " M", " G", " T"};
  int u = 0;
  while (fabs(x) >= 999.95 && u < 4) x /= 1000, u++;
  if (u == 0) snprintf(buf, cap, "%.0f", x);
  else snprintf(buf, cap, "%.*f%s", fabs(x) < 99.95 ? 1 : 0, x, units[u]);
  return buf;
}

char *fmt_duration(char *buf, size_t cap, double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) {
    snprintf(buf, cap, "?");
    return buf;
  }
  long s = (long)(seconds + 0.5);
  if (s < 60) snprintf(buf, cap, "%lds", s);
  else if (s < 3600) snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
  else snprintf(buf, cap, "%ldh%02ldm", s / 3600, s % 3600 / 60);
  return buf;
}

void progress_init(ProgressLine *p, FILE *f, int enabled) {
  p->f = f;
  p->enabled = enabled;
  p->shown = 0;
  p->last_draw = -1e9;
}

static int under_mpi_launcher(void) {
  static const char *const VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
    if (getenv(VARS[i])) return 1;
  return 0;
}

/* The parent's fd 1 names a terminal device (/dev/pts/N, /dev/ttyX); a
 * file, pipe, socket or /dev/null does not, and neither does a parent
 * whose /proc entry cannot be read. */
static int parent_stdout_is_terminal(void) {
  char link[64], target[256];
  snprintf(link, sizeof link, "/proc/%ld/fd/1", (long)getppid());
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return 0;
  target[n] = '\0';
  return !strncmp(target, "/dev/pts/", 9) || !strncmp(target, "/dev/tty", 8);
}

int progress_output_is_terminal(FILE *f) {
  if (!f || !isatty(fileno(f))) return 0;
  return !under_mpi_launcher() || parent_stdout_is_terminal();
}

/* Seconds between redraws: fast steps would otherwise flood the terminal. */
#define PROGRESS_MIN_INTERVAL 0.25

void progress_draw(ProgressLine *p, int step, int total_steps, double ms_per_step, double eta_seconds) {
  if (!p->enabled) return;
  double now = timer_now();
  if (now - p->last_draw < PROGRESS_MIN_INTERVAL) return;
  p->last_draw = now;
  enum { WIDTH = 24 };
  char bar[WIDTH + 1], eta[32];
  int filled = total_steps > 0 ? (int)((double)WIDTH * step / total_steps) : 0;
  for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  fmt_duration(eta, sizeof eta, eta_seconds);
  fprintf(p->f, "\r  step %d/%d [%s] %.1f%% | %.0f ms/it | ETA %s\033[K", step, total_steps, bar,
          total_steps > 0 ? 100.0 * step / total_steps : 0.0, ms_per_step, eta);
  fflush(p->f);
  p->shown = 1;
}

void progress_clear(ProgressLine *p) {
  if (!p->enabled || !p->shown) return;
  fputs("\r\033[K", p->f);
  fflush(p->f);
  p->shown = 0;
}
