/* metrics.jsonl read record by record into point series, then drawn as
 * three stacked panels sharing the step axis (metrics_plot.h). */
#include "base/metrics_plot.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/chart.h"
#include "base/image_io.h"

typedef struct Points {
  double *x, *y;
  int n, cap;
} Points;

static int points_add(Points *p, double x, double y, Error *err) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 256;
    double *nx = realloc(p->x, sizeof(double) * (size_t)cap);
    if (nx) p->x = nx;
    double *ny = nx ? realloc(p->y, sizeof(double) * (size_t)cap) : NULL;
    if (!ny) return error_set(err, ERR_NOMEM, "out of memory reading metrics");
    p->y = ny, p->cap = cap;
  }
  p->x[p->n] = x, p->y[p->n] = y, p->n++;
  return 0;
}

static void points_free(Points *p) {
  free(p->x), free(p->y);
  memset(p, 0, sizeof *p);
}

/* Every series the panels draw. */
typedef struct Series {
  Points train_loss, val_loss, test_loss, lr, throughput, checkpoints;
} Series;

/* A number field a record must have. */
static int need_number(const cJSON *rec, const char *field, const char *kind, const char *path, long line,
                       double *out, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, field);
  if (!cJSON_IsNumber(v))
    return error_set(err, ERR_FORMAT, "%s line %ld: a \"%s\" record needs a number \"%s\"", path, line, kind, field);
  *out = v->valuedouble;
  return 0;
}

/* The train record's throughput: its one field named <unit>_per_s. */
static int train_throughput(const cJSON *rec, const char *path, long line, double *value, char *unit, size_t cap,
                            Error *err) {
  for (const cJSON *f = rec->child; f; f = f->next) {
    size_t len = f->string ? strlen(f->string) : 0;
    if (len > 6 && !strcmp(f->string + len - 6, "_per_s") && cJSON_IsNumber(f)) {
      *value = f->valuedouble;
      snprintf(unit, cap, "%.*s", (int)(len - 6), f->string);
      return 0;
    }
  }
  return error_set(err, ERR_FORMAT, "%s line %ld: a \"train\" record needs a throughput number (\"<unit>_per_s\")",
                   path, line);
}

static int read_record(const cJSON *rec, const char *path, long line, Series *s, MetricsPlotInfo *info, Error *err) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(rec, "type");
  if (!cJSON_IsString(type))
    return error_set(err, ERR_FORMAT, "%s line %ld: the record has no string \"type\"", path, line);
  const char *kind = type->valuestring;
  double step = 0, v = 0, lr = 0, rate = 0;
  int rc = 0;
  if (!strcmp(kind, "train")) {
    if ((rc = need_number(rec, "step", kind, path, line, &step, err)) ||
        (rc = need_number(rec, "loss", kind, path, line, &v, err)) ||
        (rc = need_number(rec, "lr", kind, path, line, &lr, err)) ||
        (rc = train_throughput(rec, path, line, &rate, info->unit, sizeof info->unit, err)))
      return rc;
    if (!info->train) info->first_step = (int)step;
    info->last_step = (int)step;
    info->train++;
    if ((rc = points_add(&s->train_loss, step, v, err)) || (rc = points_add(&s->lr, step, lr, err))) return rc;
    return points_add(&s->throughput, step, rate, err);
  }
  /* Records of one point each: eval and test losses. */
  const int is_eval = !strcmp(kind, "eval");
  if (is_eval || !strcmp(kind, "test")) {
    if ((rc = need_number(rec, "step", kind, path, line, &step, err)) ||
        (rc = need_number(rec, is_eval ? "val_loss" : "test_loss", kind, path, line, &v, err)))
      return rc;
    (*(is_eval ? &info->eval : &info->test))++;
    return points_add(is_eval ? &s->val_loss : &s->test_loss, step, v, err);
  }
  if (!strcmp(kind, "checkpoint")) {
    if ((rc = need_number(rec, "step", kind, path, line, &step, err))) return rc;
    info->checkpoint++;
    return points_add(&s->checkpoints, step, 0, err);
  }
  if (!strcmp(kind, "summary")) {
    if ((rc = need_number(rec, "steps", kind, path, line, &step, err))) return rc;
    info->summary++;
    return 0;
  }
  info->unknown++;
  return 0;
}

static int read_metrics(const char *path, Series *s, MetricsPlotInfo *info, Error *err) {
  FILE *f = fopen(path, "r");
  if (!f) return error_set(err, ERR_IO, "cannot read %s: %s", path, error_errno_text(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  long number = 0;
  int rc = 0;
  while (!rc && (n = getline(&line, &cap, f)) > 0) {
    number++;
    if (line[n - 1] != '\n') {
      rc = error_set(err, ERR_FORMAT, "%s line %ld is cut short (no newline at its end: a truncated file?)", path,
                     number);
      break;
    }
    if (strspn(line, " \t\r\n") == (size_t)n) continue; /* a blank line */
    cJSON *rec = cJSON_Parse(line);
    if (!cJSON_IsObject(rec))
      rc = error_set(err, ERR_FORMAT, "%s line %ld is not a JSON object (a truncated or damaged file?)", path, number);
    else
      rc = read_record(rec, path, number, s, info, err);
    cJSON_Delete(rec);
  }
  if (!rc && ferror(f)) rc = error_set(err, ERR_IO, "cannot read %s: %s", path, error_errno_text(errno));
  free(line);
  fclose(f);
  if (!rc && info->train == 0)
    rc = error_set(err, ERR_FORMAT, "%s has no \"train\" records to plot (%ld line(s))", path, number);
  return rc;
}

static void step_range(const Series *s, double *lo, double *hi) {
  const Points *all[] = {&s->train_loss, &s->val_loss, &s->test_loss, &s->checkpoints};
  *lo = INFINITY, *hi = -INFINITY;
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
    for (int i = 0; i < all[k]->n; i++) *lo = fmin(*lo, all[k]->x[i]), *hi = fmax(*hi, all[k]->x[i]);
}

static ChartSeries series_of(const Points *p, const char *label, float r, float g, float b, ChartStyle style) {
  return (ChartSeries){label, p->x, p->y, p->n, {r, g, b}, style};
}

static int draw(const Series *s, const MetricsPlotInfo *info, Image *im, Error *err) {
  double lo, hi;
  step_range(s, &lo, &hi);
  ChartSeries loss[4];
  int nloss = 0;
  loss[nloss++] = series_of(&s->train_loss, "train loss", 0.12f, 0.40f, 0.75f, CHART_LINE);
  if (s->val_loss.n)
    loss[nloss++] = series_of(&s->val_loss, "val loss", 0.90f, 0.45f, 0.05f, CHART_LINE_AND_MARKERS);
  if (s->test_loss.n) loss[nloss++] = series_of(&s->test_loss, "test loss", 0.15f, 0.60f, 0.20f, CHART_MARKERS);
  if (s->checkpoints.n)
    loss[nloss++] = series_of(&s->checkpoints, "checkpoint", 0.55f, 0.55f, 0.55f, CHART_VERTICAL_RULES);
  ChartSeries lr = series_of(&s->lr, "learning rate", 0.55f, 0.20f, 0.65f, CHART_LINE);
  char rate_label[48];
  snprintf(rate_label, sizeof rate_label, "%s/s", info->unit);
  ChartSeries rate = series_of(&s->throughput, rate_label, 0.10f, 0.55f, 0.55f, CHART_LINE);
  const ChartPanel panels[3] = {
      {"loss (nats)", "step", loss, nloss, lo, hi},
      {"learning rate", "step", &lr, 1, lo, hi},
      {"throughput", "step", &rate, 1, lo, hi},
  };
  chart_clear(im);
  int y = 0;
  for (int k = 0; k < 3; k++) {
    /* The loss panel gets the larger share: it is what one looks at. */
    int h = k == 0 ? im->height * 2 / 5 : k == 1 ? (im->height - im->height * 2 / 5) / 2 : im->height - y;
    int rc = chart_draw_panel(im, (ChartRect){0, y, im->width, h}, &panels[k], err);
    if (rc) return rc;
    y += h;
  }
  return 0;
}

int metrics_plot(const char *metrics_path, const char *png_path, int width, int height, MetricsPlotInfo *info,
                 Error *err) {
  if (width < METRICS_PLOT_MIN_WIDTH || height < METRICS_PLOT_MIN_HEIGHT || width > IMAGE_MAX_SIDE ||
      height > IMAGE_MAX_SIDE)
    return error_set(err, ERR_ARG, "a plot of %dx%d pixels: expected at least %dx%d and at most %d a side", width,
                     height, METRICS_PLOT_MIN_WIDTH, METRICS_PLOT_MIN_HEIGHT, IMAGE_MAX_SIDE);
  MetricsPlotInfo local;
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  Series s = {0};
  Image im = {0};
  int rc = read_metrics(metrics_path, &s, info, err);
  if (!rc) rc = image_alloc(&im, 3, height, width, err);
  if (!rc) rc = draw(&s, info, &im, err);
  if (!rc) rc = image_write(png_path, &im, err);
  image_free(&im);
  Points *all[] = {&s.train_loss, &s.val_loss, &s.test_loss, &s.lr, &s.throughput, &s.checkpoints};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) points_free(all[k]);
  return rc;
}
