/* fused_act_dump: runs fivefold's fused elementwise chains (GPT-2's bias +
 * GeLU, SwiGLU) on tensors from a file, fused or unfused (kern/fusion.h),
 * for the PyTorch parity test (tests/torch_ref/fused_act_parity.py).
 *
 *   fused_act_dump IN.safetensors OUT.safetensors
 *
 * IN holds h [rows, cols] (before the bias), b [cols], da [rows, cols],
 * gate_up [rows, 2 cols] and dy [rows, cols] (float32), and metadata rows,
 * cols and fused (1 or 0). OUT receives, for the loss sum(a * da) of
 * a = gelu(h + b): biased (h + b), a, dh (the gradient in h) and db; and
 * for the loss sum(s * dy) of s = silu(gate) * up: s and dgate_up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/fusion.h"
#include "kern/gelu.h"
#include "kern/swiglu.h"

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  int rows = 0, cols = 0, fused = 1;
  if (!rc) rc = dump_meta_int(r, "rows", &rows, err);
  if (!rc) rc = dump_meta_int(r, "cols", &cols, err);
  if (!rc) rc = dump_meta_int(r, "fused", &fused, err);
  size_t n = (size_t)rows * cols;
  float *h = NULL, *b = NULL, *da = NULL, *gu = NULL, *dy = NULL;
  if (!rc) rc = dump_read_tensor(r, "h", n, &h, err);
  if (!rc) rc = dump_read_tensor(r, "b", (size_t)cols, &b, err);
  if (!rc) rc = dump_read_tensor(r, "da", n, &da, err);
  if (!rc) rc = dump_read_tensor(r, "gate_up", 2 * n, &gu, err);
  if (!rc) rc = dump_read_tensor(r, "dy", n, &dy, err);
  float *a = rc ? NULL : malloc(n * sizeof *a), *dh = rc ? NULL : malloc(n * sizeof *dh);
  float *db = rc ? NULL : calloc((size_t)cols, sizeof *db), *s = rc ? NULL : malloc(n * sizeof *s);
  float *dgu = rc ? NULL : malloc(2 * n * sizeof *dgu);
  if (!rc && (!a || !dh || !db || !s || !dgu)) rc = error_set(err, ERR_NOMEM, "out of memory for the outputs");
  if (!rc) {
    kern_set_fusion((KernFusion){.swiglu = fused, .bias_gelu = fused, .norm_residual = fused});
    bias_gelu_forward(h, a, b, rows, cols); /* h becomes h + b */
    bias_gelu_backward(dh, db, da, h, rows, cols);
    swiglu_forward(s, gu, rows, cols);
    swiglu_backward(dgu, dy, gu, rows, cols);
  }
  SafetensorsWriter *out = rc ? NULL : safetensors_writer_new();
  if (!rc && !out) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
  if (!rc) {
    int shape[2] = {rows, cols}, wide[2] = {rows, 2 * cols}, bias[1] = {cols};
    if (!(rc = safetensors_writer_add_f32(out, "biased", 2, shape, h, err)) &&
        !(rc = safetensors_writer_add_f32(out, "a", 2, shape, a, err)) &&
        !(rc = safetensors_writer_add_f32(out, "dh", 2, shape, dh, err)) &&
        !(rc = safetensors_writer_add_f32(out, "db", 1, bias, db, err)) &&
        !(rc = safetensors_writer_add_f32(out, "s", 2, shape, s, err)) &&
        !(rc = safetensors_writer_add_f32(out, "dgate_up", 2, wide, dgu, err)))
      rc = safetensors_writer_write(out, out_path, err);
  }
  safetensors_writer_free(out);
  safetensors_close(r);
  free(h), free(b), free(da), free(gu), free(dy), free(a), free(dh), free(db), free(s), free(dgu);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fused_act_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "fused_act_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
