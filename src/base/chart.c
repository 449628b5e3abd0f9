/* Line charts in an RGB Image: pixels, lines, the 5x7 bitmap font, tick
 * values, and panels with frame, ticks, series and legend (chart.h). */
#include "base/chart.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GLYPH_W 5
#define GLYPH_H 7

/* Each glyph as seven rows of five, '#' for ink. */
typedef struct Glyph {
  char ch;
  const char *rows[GLYPH_H];
} Glyph;

static const Glyph FONT[] = {
    {'A', {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'B', {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}},
    {'C', {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}},
    {'D', {"###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."}},
    {'E', {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}},
    {'F', {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}},
    {'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}},
    {'H', {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'I', {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'J', {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
    {'K', {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}},
    {'L', {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}},
    {'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
    {'N', {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}},
    {'O', {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'P', {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}},
    {'Q', {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}},
    {'R', {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}},
    {'S', {".####", "#....", "#....", ".###.", "....#", "....#", "####."}},
    {'T', {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
    {'U', {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'V', {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'W', {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}},
    {'X', {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}},
    {'Y', {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}},
    {'Z', {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}},
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
    {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
    {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
    {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
    {'/', {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
    {'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
    {',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}},
    {'_', {".....", ".....", ".....", ".....", ".....", ".....", "#####"}},
    {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
};

static const Glyph *glyph_of(char c) {
  char up = (char)toupper((unsigned char)c);
  for (size_t i = 0; i < sizeof FONT / sizeof FONT[0]; i++)
    if (FONT[i].ch == up) return &FONT[i];
  return NULL;
}

static void put_pixel(Image *im, int x, int y, const float rgb[3]) {
  if (x < 0 || y < 0 || x >= im->width || y >= im->height) return;
  size_t plane = (size_t)im->height * (size_t)im->width, at = (size_t)y * (size_t)im->width + (size_t)x;
  for (int c = 0; c < 3; c++) im->data[c * plane + at] = rgb[c];
}

static void fill_rect(Image *im, int x0, int y0, int w, int h, const float rgb[3]) {
  for (int y = y0; y < y0 + h; y++)
    for (int x = x0; x < x0 + w; x++) put_pixel(im, x, y, rgb);
}

/* Bresenham, two pixels thick so that lines survive downscaling. */
static void draw_line(Image *im, int x0, int y0, int x1, int y1, const float rgb[3], int thick) {
  int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, e = dx + dy;
  for (;;) {
    fill_rect(im, x0, y0, thick, thick, rgb);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * e;
    if (e2 >= dy) e += dy, x0 += sx;
    if (e2 <= dx) e += dx, y0 += sy;
  }
}

int chart_text_scale(int width, int height) { return (width < height ? width : height) >= 700 ? 2 : 1; }

void chart_clear(Image *im) {
  for (size_t i = 0; i < image_numel(im); i++) im->data[i] = 1.0f;
}

int chart_text_width(const char *text, int scale) {
  int n = (int)strlen(text);
  return n ? (n * (GLYPH_W + 1) - 1) * scale : 0;
}

void chart_text(Image *im, int x, int y, const char *text, int scale, const float rgb[3]) {
  for (; *text; text++, x += (GLYPH_W + 1) * scale) {
    const Glyph *g = glyph_of(*text);
    if (!g) continue;
    for (int r = 0; r < GLYPH_H; r++)
      for (int c = 0; c < GLYPH_W; c++)
        if (g->rows[r][c] == '#') fill_rect(im, x + c * scale, y + r * scale, scale, scale, rgb);
  }
}

/* Tick spacing of 1, 2 or 5 times a power of ten giving about `want`
 * intervals over span. */
static double nice_step(double span, int want) {
  double raw = span / want, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void format_tick(char *buf, size_t cap, double v, double step) {
  if (fabs(v) < step * 1e-6) v = 0; /* no "-1.2e-17" for zero */
  snprintf(buf, cap, "%.4g", v);
}

/* The finite y range of every series, padded by 5%; a flat series gets a
 * band around its value. */
static void y_range(const ChartPanel *p, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (int s = 0; s < p->num_series; s++) {
    if (p->series[s].style == CHART_VERTICAL_RULES) continue;
    for (int i = 0; i < p->series[s].n; i++) {
      double y = p->series[s].y[i];
      if (!isfinite(y)) continue;
      *lo = fmin(*lo, y), *hi = fmax(*hi, y);
    }
  }
  if (!(*lo <= *hi)) *lo = 0, *hi = 1;
  double pad = (*hi - *lo) * 0.05;
  if (pad <= 0) pad = *lo != 0 ? fabs(*lo) * 0.1 : 1;
  *lo -= pad, *hi += pad;
}

static const float INK[3] = {0.1f, 0.1f, 0.1f}, GRID[3] = {0.88f, 0.88f, 0.88f}, RULE[3] = {0.7f, 0.7f, 0.7f};

int chart_draw_panel(Image *im, ChartRect r, const ChartPanel *p, Error *err) {
  if (im->channels != 3) return error_set(err, ERR_ARG, "a chart needs an RGB image, got %d channel(s)", im->channels);
  if (r.x0 < 0 || r.y0 < 0 || r.x0 + r.w > im->width || r.y0 + r.h > im->height)
    return error_set(err, ERR_ARG, "chart panel %dx%d at (%d, %d) does not fit in the %dx%d image", r.w, r.h, r.x0,
                     r.y0, im->width, im->height);
  const int s = chart_text_scale(im->width, im->height), line_h = (GLYPH_H + 3) * s;
  /* Room for tick numbers on the left, title above, numbers and x label below. */
  const int left = chart_text_width("-0.0000e-00", s) + 6 * s, top = line_h + 4 * s, bottom = 2 * line_h + 4 * s;
  const int pw = r.w - left - 16 * s, ph = r.h - top - bottom;
  if (pw < 40 || ph < 30)
    return error_set(err, ERR_ARG, "chart panel %dx%d is too small for its axes (at least %dx%d)", r.w, r.h,
                     left + 16 * s + 40, top + bottom + 30);
  const int px = r.x0 + left, py = r.y0 + top;
  double xlo = p->x_min, xhi = p->x_max, ylo, yhi;
  if (!(xhi > xlo)) xlo -= 0.5, xhi += 0.5;
  y_range(p, &ylo, &yhi);
  if (p->title) chart_text(im, px, r.y0 + 2 * s, p->title, s, INK);
  char num[48];
  /* Grid lines and numbered ticks. */
  double xs = nice_step(xhi - xlo, 6), ys = nice_step(yhi - ylo, 5);
  for (double v = ceil(xlo / xs) * xs; v <= xhi + xs * 1e-9; v += xs) {
    int x = px + (int)lround((v - xlo) / (xhi - xlo) * (pw - 1));
    draw_line(im, x, py, x, py + ph - 1, GRID, 1);
    draw_line(im, x, py + ph, x, py + ph + 3 * s, INK, 1);
    format_tick(num, sizeof num, v, xs);
    chart_text(im, x - chart_text_width(num, s) / 2, py + ph + 5 * s, num, s, INK);
  }
  for (double v = ceil(ylo / ys) * ys; v <= yhi + ys * 1e-9; v += ys) {
    int y = py + ph - 1 - (int)lround((v - ylo) / (yhi - ylo) * (ph - 1));
    draw_line(im, px, y, px + pw - 1, y, GRID, 1);
    draw_line(im, px - 3 * s, y, px, y, INK, 1);
    format_tick(num, sizeof num, v, ys);
    chart_text(im, px - 5 * s - chart_text_width(num, s), y - GLYPH_H * s / 2, num, s, INK);
  }
  if (p->x_label)
    chart_text(im, px + (pw - chart_text_width(p->x_label, s)) / 2, py + ph + 5 * s + line_h, p->x_label, s, INK);
  /* The series (the ranges cover every point, so nothing needs clipping). */
  for (int k = 0; k < p->num_series; k++) {
    const ChartSeries *se = &p->series[k];
    int have_prev = 0, prev_x = 0, prev_y = 0;
    for (int i = 0; i < se->n; i++) {
      int x = px + (int)lround((se->x[i] - xlo) / (xhi - xlo) * (pw - 1));
      if (se->style == CHART_VERTICAL_RULES) {
        for (int y = py; y < py + ph; y += 4 * s) draw_line(im, x, y, x, y + 2 * s - 1, se->rgb, 1);
        continue;
      }
      if (!isfinite(se->y[i]) || !isfinite(se->x[i])) {
        have_prev = 0;
        continue;
      }
      int y = py + ph - 1 - (int)lround((se->y[i] - ylo) / (yhi - ylo) * (ph - 1));
      if (se->style != CHART_MARKERS && have_prev) draw_line(im, prev_x, prev_y, x, y, se->rgb, s);
      if (se->style != CHART_LINE) fill_rect(im, x - 2 * s, y - 2 * s, 4 * s + 1, 4 * s + 1, se->rgb);
      have_prev = 1, prev_x = x, prev_y = y;
    }
  }
  /* Frame, then the legend in the top-right corner over a white box. */
  draw_line(im, px - 1, py - 1, px + pw, py - 1, INK, 1);
  draw_line(im, px - 1, py + ph, px + pw, py + ph, INK, 1);
  draw_line(im, px - 1, py - 1, px - 1, py + ph, INK, 1);
  draw_line(im, px + pw, py - 1, px + pw, py + ph, INK, 1);
  int widest = 0, entries = 0;
  for (int k = 0; k < p->num_series; k++)
    if (p->series[k].label) {
      int w = chart_text_width(p->series[k].label, s);
      widest = w > widest ? w : widest;
      entries++;
    }
  if (entries) {
    const float white[3] = {1, 1, 1};
    int bw = widest + 20 * s, bh = entries * line_h + 4 * s, bx = px + pw - bw - 4 * s, by = py + 4 * s;
    fill_rect(im, bx, by, bw, bh, white);
    draw_line(im, bx, by, bx + bw - 1, by, RULE, 1);
    draw_line(im, bx, by + bh - 1, bx + bw - 1, by + bh - 1, RULE, 1);
    draw_line(im, bx, by, bx, by + bh - 1, RULE, 1);
    draw_line(im, bx + bw - 1, by, bx + bw - 1, by + bh - 1, RULE, 1);
    int y = by + 4 * s;
    for (int k = 0; k < p->num_series; k++) {
      if (!p->series[k].label) continue;
      fill_rect(im, bx + 4 * s, y + GLYPH_H * s / 2 - s, 10 * s, 2 * s, p->series[k].rgb);
      chart_text(im, bx + 16 * s, y, p->series[k].label, s, INK);
      y += line_h;
    }
  }
  return 0;
}
