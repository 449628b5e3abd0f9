/* norm_residual_dump: runs fivefold's residual add + norm (kern/rmsnorm.h,
 * kern/layernorm.h), fused or unfused (kern/fusion.h), on tensors from a
 * file, for the PyTorch parity test (tests/torch_ref/norm_residual_parity.py).
 *
 *   norm_residual_dump IN.safetensors OUT.safetensors
 *
 * IN holds res, y, dout, ds [rows, cols] and bias, w, b [cols] (float32),
 * and metadata rows, cols, fused (1 or 0), layernorm (1: LayerNorm with
 * its bias b, 0: RMSNorm) and with_bias (1: the projection bias added to
 * the sum). OUT receives, for the loss sum(out * dout) + sum(x * ds) of
 * x = res + y (+ bias), out = norm(x): x, out, dres (the gradient in res,
 * which is also y's), dbias (summed over the rows as the model does), dw
 * and, for LayerNorm, db. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/fusion.h"
#include "kern/gelu.h"
#include "kern/layernorm.h"
#include "kern/rmsnorm.h"

static const float kEps = 1e-5f;

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  int rows = 0, cols = 0, fused = 1, ln = 0, with_bias = 0;
  if (!rc) rc = dump_meta_int(r, "rows", &rows, err);
  if (!rc) rc = dump_meta_int(r, "cols", &cols, err);
  if (!rc) rc = dump_meta_int(r, "fused", &fused, err);
  if (!rc) rc = dump_meta_int(r, "layernorm", &ln, err);
  if (!rc) rc = dump_meta_int(r, "with_bias", &with_bias, err);
  size_t n = (size_t)rows * cols;
  float *res = NULL, *y = NULL, *dout = NULL, *ds = NULL, *bias = NULL, *w = NULL, *b = NULL;
  if (!rc) rc = dump_read_tensor(r, "res", n, &res, err);
  if (!rc) rc = dump_read_tensor(r, "y", n, &y, err);
  if (!rc) rc = dump_read_tensor(r, "dout", n, &dout, err);
  if (!rc) rc = dump_read_tensor(r, "ds", n, &ds, err);
  if (!rc) rc = dump_read_tensor(r, "bias", (size_t)cols, &bias, err);
  if (!rc) rc = dump_read_tensor(r, "w", (size_t)cols, &w, err);
  if (!rc) rc = dump_read_tensor(r, "b", (size_t)cols, &b, err);
  float *x = rc ? NULL : malloc(n * sizeof *x), *out = rc ? NULL : malloc(n * sizeof *out);
  float *tmp = rc ? NULL : malloc(n * sizeof *tmp), *rstd = rc ? NULL : malloc((size_t)rows * sizeof *rstd);
  float *dw = rc ? NULL : calloc((size_t)cols, sizeof *dw), *db = rc ? NULL : calloc((size_t)cols, sizeof *db);
  float *dbias = rc ? NULL : calloc((size_t)cols, sizeof *dbias);
  if (!rc && (!x || !out || !tmp || !rstd || !dw || !db || !dbias))
    rc = error_set(err, ERR_NOMEM, "out of memory for the outputs");
  if (!rc) {
    KernFusion f = kern_fusion();
    f.norm_residual = fused;
    kern_set_fusion(f);
    const float *pb = with_bias ? bias : NULL;
    float *dres = ds; /* the new residual stream's gradient, to which the norm's is added */
    if (ln) {
      add_layernorm_forward(x, out, rstd, res, y, pb, w, b, rows, cols, kEps);
      add_layernorm_backward(dres, tmp, dw, db, dout, x, w, rstd, rows, cols);
    } else {
      add_rmsnorm_forward(x, out, rstd, res, y, pb, w, rows, cols, kEps);
      add_rmsnorm_backward(dres, tmp, dw, dout, x, w, rstd, rows, cols);
    }
    bias_backward_rows(dbias, dres, rows, cols);
  }
  SafetensorsWriter *o = rc ? NULL : safetensors_writer_new();
  if (!rc && !o) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
  if (!rc) {
    int shape[2] = {rows, cols}, vec[1] = {cols};
    if (!(rc = safetensors_writer_add_f32(o, "x", 2, shape, x, err)) &&
        !(rc = safetensors_writer_add_f32(o, "out", 2, shape, out, err)) &&
        !(rc = safetensors_writer_add_f32(o, "dres", 2, shape, ds, err)) &&
        !(rc = safetensors_writer_add_f32(o, "dbias", 1, vec, dbias, err)) &&
        !(rc = safetensors_writer_add_f32(o, "dw", 1, vec, dw, err)) &&
        !(rc = safetensors_writer_add_f32(o, "db", 1, vec, db, err)))
      rc = safetensors_writer_write(o, out_path, err);
  }
  safetensors_writer_free(o);
  safetensors_close(r);
  free(res), free(y), free(dout), free(ds), free(bias), free(w), free(b);
  free(x), free(out), free(tmp), free(rstd), free(dw), free(db), free(dbias);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: norm_residual_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "norm_residual_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
