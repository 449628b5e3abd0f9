/* tropical_dump: runs fivefold's tropical kernels on tensors from a file,
 * for the PyTorch parity test (tests/torch_ref/tropical_parity.py).
 *
 *   tropical_dump IN.safetensors OUT.safetensors
 *
 * IN holds x, w, dy (and b for a dense layer), float32 in the layouts of
 * src/kern/tropical.h, and metadata: kind "dense" (with m, n, k, semiring
 * "max_plus"|"min_plus") or "conv" (with the TropicalConvShape fields
 * batch ... pad_w, inner "max"|"min", outer "sum"|"max"|"min"). OUT receives
 * y and, for the loss sum(y * dy), dx, dw (and db). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/tropical.h"

/* Index of `v` in the NULL-terminated `names`, or an error naming the key. */
static int meta_choice(const SafetensorsReader *r, const char *key, const char *const *names, int *out, Error *err) {
  const char *v = safetensors_metadata_get(r, key);
  for (int i = 0; v && names[i]; i++)
    if (!strcmp(v, names[i])) return *out = i, 0;
  return error_set(err, ERR_FORMAT, "%s: metadata '%s' is '%s', expected one of %s|%s...", safetensors_path(r), key,
                   v ? v : "(missing)", names[0], names[1]);
}

typedef struct Outputs {
  float *y, *dx, *dw, *db;
  int y_shape[4], x_shape[4], w_shape[4], ndim_y, ndim_x, ndim_w, nb;
} Outputs;

static int run_dense(const SafetensorsReader *r, Outputs *o, Error *err) {
  static const char *const semirings[] = {"max_plus", "min_plus", NULL};
  int m, n, k, sr, rc;
  if ((rc = dump_meta_int(r, "m", &m, err)) || (rc = dump_meta_int(r, "n", &n, err)) || (rc = dump_meta_int(r, "k", &k, err)) ||
      (rc = meta_choice(r, "semiring", semirings, &sr, err)))
    return rc;
  float *x = NULL, *w = NULL, *b = NULL, *dy = NULL;
  int32_t *win = NULL;
  if (m < 1 || n < 1 || k < 1) return error_set(err, ERR_FORMAT, "%s: m, n, k must be >= 1", safetensors_path(r));
  if (!(rc = dump_read_tensor(r, "x", (size_t)m * k, &x, err)) &&
      !(rc = dump_read_tensor(r, "w", (size_t)n * k, &w, err)) && !(rc = dump_read_tensor(r, "b", (size_t)n, &b, err)) &&
      !(rc = dump_read_tensor(r, "dy", (size_t)m * n, &dy, err))) {
    o->y = calloc((size_t)m * n, sizeof(float)), o->dx = calloc((size_t)m * k, sizeof(float));
    o->dw = calloc((size_t)n * k, sizeof(float)), o->db = calloc((size_t)n, sizeof(float));
    win = calloc((size_t)m * n, sizeof *win);
    if (!o->y || !o->dx || !o->dw || !o->db || !win) rc = error_set(err, ERR_NOMEM, "out of memory for the outputs");
  }
  if (!rc) rc = tropical_matmul_forward((TropicalSemiring)sr, m, n, k, x, w, b, o->y, win, err);
  if (!rc) rc = tropical_matmul_backward(m, n, k, dy, win, o->dx, o->dw, o->db, 0, err);
  o->ndim_y = o->ndim_x = o->ndim_w = 2;
  o->y_shape[0] = m, o->y_shape[1] = n, o->x_shape[0] = m, o->x_shape[1] = k, o->w_shape[0] = n, o->w_shape[1] = k;
  o->nb = n;
  free(x), free(w), free(b), free(dy), free(win);
  return rc;
}

static int run_conv(const SafetensorsReader *r, Outputs *o, Error *err) {
  static const char *const inners[] = {"max", "min", NULL}, *const outers[] = {"sum", "max", "min", NULL};
  TropicalConvShape s;
  int inner = 0, outer = 0, rc = 0;
  struct {
    const char *key;
    int *field;
  } fields[] = {{"batch", &s.batch},       {"in_channels", &s.in_channels}, {"in_h", &s.in_h},
                {"in_w", &s.in_w},         {"out_channels", &s.out_channels}, {"kernel_h", &s.kernel_h},
                {"kernel_w", &s.kernel_w}, {"stride_h", &s.stride_h},       {"stride_w", &s.stride_w},
                {"pad_h", &s.pad_h},       {"pad_w", &s.pad_w}};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !rc; i++)
    rc = dump_meta_int(r, fields[i].key, fields[i].field, err);
  if (!rc) rc = meta_choice(r, "inner", inners, &inner, err);
  if (!rc) rc = meta_choice(r, "outer", outers, &outer, err);
  if (rc) return rc;
  s.inner = (TropicalInner)inner, s.outer = (TropicalOuter)outer;
  int oh = 0, ow = 0;
  if ((rc = tropical_conv2d_output_size(&s, &oh, &ow, err))) return rc;
  size_t nx = tropical_conv2d_input_count(&s), ny = tropical_conv2d_output_count(&s);
  size_t nw = tropical_conv2d_weight_count(&s);
  float *x = NULL, *w = NULL, *dy = NULL;
  int32_t *win = NULL;
  if (!(rc = dump_read_tensor(r, "x", nx, &x, err)) && !(rc = dump_read_tensor(r, "w", nw, &w, err)) &&
      !(rc = dump_read_tensor(r, "dy", ny, &dy, err))) {
    o->y = calloc(ny, sizeof(float)), o->dx = calloc(nx, sizeof(float)), o->dw = calloc(nw, sizeof(float));
    win = calloc(tropical_conv2d_winner_count(&s), sizeof *win);
    if (!o->y || !o->dx || !o->dw || !win) rc = error_set(err, ERR_NOMEM, "out of memory for the outputs");
  }
  if (!rc) rc = tropical_conv2d_forward(&s, x, w, o->y, win, err);
  if (!rc) rc = tropical_conv2d_backward(&s, dy, win, o->dx, o->dw, 0, err);
  o->ndim_y = o->ndim_x = o->ndim_w = 4;
  int ys[4] = {s.batch, s.out_channels, oh, ow}, xs[4] = {s.batch, s.in_channels, s.in_h, s.in_w};
  int ws[4] = {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
  memcpy(o->y_shape, ys, sizeof ys), memcpy(o->x_shape, xs, sizeof xs), memcpy(o->w_shape, ws, sizeof ws);
  free(x), free(w), free(dy), free(win);
  return rc;
}

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  static const char *const kinds[] = {"dense", "conv", NULL};
  int kind = 0;
  Outputs o = {0};
  rc = meta_choice(r, "kind", kinds, &kind, err);
  if (!rc) rc = kind == 0 ? run_dense(r, &o, err) : run_conv(r, &o, err);
  SafetensorsWriter *out = rc ? NULL : safetensors_writer_new();
  if (!rc && !out) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
  if (!rc && !(rc = safetensors_writer_add_f32(out, "y", o.ndim_y, o.y_shape, o.y, err)) &&
      !(rc = safetensors_writer_add_f32(out, "dx", o.ndim_x, o.x_shape, o.dx, err)) &&
      !(rc = safetensors_writer_add_f32(out, "dw", o.ndim_w, o.w_shape, o.dw, err))) {
    int bs[1] = {o.nb};
    if (o.db) rc = safetensors_writer_add_f32(out, "db", 1, bs, o.db, err);
    if (!rc) rc = safetensors_writer_write(out, out_path, err);
  }
  safetensors_writer_free(out);
  safetensors_close(r);
  free(o.y), free(o.dx), free(o.dw), free(o.db);
  tropical_scratch_release();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: tropical_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "tropical_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
