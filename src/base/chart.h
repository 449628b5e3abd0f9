/* Line charts drawn into an RGB Image (base/image_io.h), so that a user's
 * plots need nothing beyond the PNG writer the project already has: a
 * panel with a frame, axes with "nice" tick values printed in a built-in
 * 5x7 bitmap font, a title, series as lines or markers, and a legend.
 * Several panels share one image by drawing each into its own rectangle.
 *
 * The font knows digits, letters (lower case is drawn as upper case) and
 * the punctuation numbers and units need (. - + / ( ) % : , _ =); any
 * other character is drawn as a blank. */
#ifndef FIVEFOLD_BASE_CHART_H
#define FIVEFOLD_BASE_CHART_H

#include "base/error.h"
#include "base/image_io.h"

typedef enum { CHART_LINE, CHART_MARKERS, CHART_LINE_AND_MARKERS, CHART_VERTICAL_RULES } ChartStyle;

typedef struct ChartSeries {
  const char *label; /* in the legend; NULL leaves the series out of it */
  const double *x, *y; /* n points; y is unused by CHART_VERTICAL_RULES */
  int n;
  float rgb[3];
  ChartStyle style;
} ChartSeries;

typedef struct ChartPanel {
  const char *title, *x_label;
  const ChartSeries *series;
  int num_series;
  double x_min, x_max; /* the x range shown (panels stacked share it) */
} ChartPanel;

/* The rectangle [x0, x0 + w) x [y0, y0 + h) of a 3-channel image. */
typedef struct ChartRect {
  int x0, y0, w, h;
} ChartRect;

/* Pixels per font pixel that suit an image of this size (1 or 2). */
int chart_text_scale(int width, int height);

/* Fills the whole image with white. */
void chart_clear(Image *im);

/* Draws text with its top-left corner at (x, y), clipped to the image. */
void chart_text(Image *im, int x, int y, const char *text, int scale, const float rgb[3]);

/* Width in pixels of text drawn at scale. */
int chart_text_width(const char *text, int scale);

/* Draws one panel into rect: frame, ticks and numbers on both axes, the
 * series (the y range covers every finite point, padded), and a legend.
 * ERR_ARG when the image is not 3 channels or rect does not fit in it or
 * is too small to hold axes. Series with no finite points draw nothing. */
int chart_draw_panel(Image *im, ChartRect rect, const ChartPanel *panel, Error *err);

#endif
