/* conv2d_dump: runs fivefold's conv2d / conv_transpose2d on tensors from a
 * file, for the PyTorch parity test (tests/torch_ref/conv_parity.py).
 *
 *   conv2d_dump IN.safetensors OUT.safetensors
 *
 * IN holds x, w, b and dy (float32, the layouts of src/kern/conv2d.h) and
 * the shape as metadata (batch, in_channels, in_h, in_w, out_channels,
 * kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h,
 * dilation_w, groups, transposed, output_pad_h, output_pad_w, precision
 * "fp32"|"bf16"). OUT receives y = conv(x, w) + b and, for the loss
 * sum(y * dy), dx, dw and db. Exit 77 when the precision is not supported
 * here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/conv2d.h"

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  Conv2dShape s = conv2d_shape_default();
  struct {
    const char *key;
    int *field;
  } fields[] = {{"batch", &s.batch}, {"in_channels", &s.in_channels}, {"in_h", &s.in_h}, {"in_w", &s.in_w},
                {"out_channels", &s.out_channels}, {"kernel_h", &s.kernel_h}, {"kernel_w", &s.kernel_w},
                {"stride_h", &s.stride_h}, {"stride_w", &s.stride_w}, {"pad_h", &s.pad_h}, {"pad_w", &s.pad_w},
                {"dilation_h", &s.dilation_h}, {"dilation_w", &s.dilation_w}, {"groups", &s.groups},
                {"transposed", &s.transposed}, {"output_pad_h", &s.output_pad_h},
                {"output_pad_w", &s.output_pad_w}};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !rc; i++)
    rc = dump_meta_int(r, fields[i].key, fields[i].field, err);
  const char *prec_name = safetensors_metadata_get(r, "precision");
  Conv2dPrecision prec = prec_name && !strcmp(prec_name, "bf16") ? CONV2D_BF16 : CONV2D_FP32;
  float *x = NULL, *w = NULL, *b = NULL, *dy = NULL, *y = NULL, *dx = NULL, *dw = NULL, *db = NULL;
  int oh = 0, ow = 0;
  if (!rc) rc = conv2d_output_size(&s, &oh, &ow, err);
  size_t nx = conv2d_input_count(&s), ny = conv2d_output_count(&s), nw = conv2d_weight_count(&s);
  if (!rc) rc = dump_read_tensor(r, "x", nx, &x, err);
  if (!rc) rc = dump_read_tensor(r, "w", nw, &w, err);
  if (!rc) rc = dump_read_tensor(r, "b", (size_t)s.out_channels, &b, err);
  if (!rc) rc = dump_read_tensor(r, "dy", ny, &dy, err);
  if (!rc) {
    y = calloc(ny, sizeof *y), dx = calloc(nx, sizeof *dx), dw = calloc(nw, sizeof *dw);
    db = calloc((size_t)s.out_channels, sizeof *db);
    if (!y || !dx || !dw || !db) rc = error_set(err, ERR_NOMEM, "out of memory for the outputs");
  }
  if (!rc) rc = conv2d_forward(&s, prec, y, x, w, b, err);
  if (!rc) rc = conv2d_backward_data(&s, prec, dx, dy, w, 0, err);
  if (!rc) rc = conv2d_backward_weights(&s, prec, dw, db, dy, x, 0, err);
  SafetensorsWriter *out = rc ? NULL : safetensors_writer_new();
  if (!rc && !out) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
  if (!rc) {
    int xs[4] = {s.batch, s.in_channels, s.in_h, s.in_w}, ys[4] = {s.batch, s.out_channels, oh, ow};
    int ws[4] = {s.transposed ? s.in_channels : s.out_channels,
                 (s.transposed ? s.out_channels : s.in_channels) / s.groups, s.kernel_h, s.kernel_w};
    int bs[1] = {s.out_channels};
    if (!(rc = safetensors_writer_add_f32(out, "y", 4, ys, y, err)) &&
        !(rc = safetensors_writer_add_f32(out, "dx", 4, xs, dx, err)) &&
        !(rc = safetensors_writer_add_f32(out, "dw", 4, ws, dw, err)) &&
        !(rc = safetensors_writer_add_f32(out, "db", 1, bs, db, err)))
      rc = safetensors_writer_write(out, out_path, err);
  }
  safetensors_writer_free(out);
  safetensors_close(r);
  free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
  conv2d_cache_clear();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: conv2d_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "conv2d_dump: %s\n", err.msg);
    return rc == ERR_UNSUPPORTED ? 77 : 1;
  }
  return 0;
}
