/* Fuzz harness of the safetensors reader (src/base/safetensors.h).
 *
 * Each input is a would-be .safetensors file. An opened file is read the way
 * checkpoint and reference loaders read it: metadata, every tensor by index
 * and by name, whole reads, range reads, float32 conversion of the float
 * dtypes, and reads that must be refused (wrong dtype, short buffer, a range
 * past the end). The index must describe the input truthfully: every read
 * returns exactly the bytes the header's data_offsets point at. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include "base/safetensors.h"

static int is_float_dtype(SafetensorsDtype d) { return d == ST_F32 || d == ST_F64 || d == ST_F16 || d == ST_BF16; }

static void check_tensor(const SafetensorsReader *r, const SafetensorsTensorInfo *t, const uint8_t *data_section,
                         uint64_t data_size) {
  if (t->data_end < t->data_begin || t->data_end > data_size || t->data_end - t->data_begin != t->nbytes ||
      t->nbytes != t->numel * safetensors_dtype_size(t->dtype) || t->ndim < 0 || t->ndim > SAFETENSORS_MAX_DIMS ||
      !memchr(t->name, '\0', sizeof t->name) || !t->name[0])
    fuzz_fail("safetensors_open", "accepted a tensor whose index entry is inconsistent");
  if (safetensors_find(r, t->name) != t) fuzz_fail("safetensors_find", "does not find a listed tensor");

  Error err;
  /* One spare byte: a read must never write past nbytes. */
  uint8_t *buf = malloc(t->nbytes + 1);
  if (!buf) fuzz_fail("out of memory", NULL);
  buf[t->nbytes] = 0xa5;
  fuzz_error_reset(&err);
  int rc = safetensors_read(r, t->name, t->dtype, buf, t->nbytes, &err);
  fuzz_check_result(rc, &err, "safetensors_read");
  if (rc) fuzz_fail("safetensors_read", "refuses a tensor the index lists");
  if (buf[t->nbytes] != 0xa5) fuzz_fail("safetensors_read", "wrote past the tensor");
  if (t->nbytes && memcmp(buf, data_section + t->data_begin, t->nbytes) != 0)
    fuzz_fail("safetensors_read", "returned bytes other than those data_offsets point at");

  size_t es = safetensors_dtype_size(t->dtype);
  if (t->numel > 0) {
    uint64_t first = t->numel / 2, count = t->numel - first;
    fuzz_error_reset(&err);
    rc = safetensors_read_range(r, t->name, t->dtype, first, count, buf, (size_t)(count * es), &err);
    fuzz_check_result(rc, &err, "safetensors_read_range");
    if (rc || memcmp(buf, data_section + t->data_begin + first * es, count * es) != 0)
      fuzz_fail("safetensors_read_range", "wrong bytes for the second half of a tensor");
    /* Must be refused: a short buffer, and a range one past the end. */
    fuzz_error_reset(&err);
    rc = safetensors_read(r, t->name, t->dtype, buf, t->nbytes - 1, &err);
    fuzz_check_result(rc, &err, "safetensors_read");
    if (!rc) fuzz_fail("safetensors_read", "accepted a buffer one byte short");
    fuzz_error_reset(&err);
    rc = safetensors_read_range(r, t->name, t->dtype, first, count + 1, buf, t->nbytes + 1, &err);
    fuzz_check_result(rc, &err, "safetensors_read_range");
    if (!rc) fuzz_fail("safetensors_read_range", "accepted a range past the end");
  }
  SafetensorsDtype other = t->dtype == ST_F32 ? ST_I32 : ST_F32;
  fuzz_error_reset(&err);
  rc = safetensors_read(r, t->name, other, buf, t->nbytes, &err);
  fuzz_check_result(rc, &err, "safetensors_read");
  if (!rc) fuzz_fail("safetensors_read", "accepted the wrong dtype");
  free(buf);

  if (is_float_dtype(t->dtype)) {
    float *f = malloc((size_t)t->numel * sizeof *f + 1);
    if (!f) fuzz_fail("out of memory", NULL);
    fuzz_error_reset(&err);
    rc = safetensors_read_f32(r, t->name, t->ndim, t->shape, f, &err);
    fuzz_check_result(rc, &err, "safetensors_read_f32");
    if (rc) fuzz_fail("safetensors_read_f32", "refuses a float tensor with its own shape");
    if (t->ndim > 0) {
      int64_t wrong[SAFETENSORS_MAX_DIMS];
      memcpy(wrong, t->shape, sizeof wrong);
      wrong[0] ^= 1;
      fuzz_error_reset(&err);
      rc = safetensors_read_f32(r, t->name, t->ndim, wrong, f, &err);
      fuzz_check_result(rc, &err, "safetensors_read_f32");
      if (!rc) fuzz_fail("safetensors_read_f32", "accepted a wrong shape");
    }
    free(f);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SafetensorsReader *r = NULL;
  Error err;
  fuzz_error_reset(&err);
  int rc = safetensors_open(&r, fuzz_input_path(data, size), &err);
  fuzz_check_result(rc, &err, "safetensors_open");
  if ((rc == 0) != (r != NULL)) fuzz_fail("safetensors_open", "result and return code disagree");
  if (rc) return 0;

  /* Where the data section starts, from the input's own length prefix. */
  if (size < 8) fuzz_fail("safetensors_open", "accepted a file shorter than the length prefix");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
  if (hlen > size - 8) fuzz_fail("safetensors_open", "accepted a header longer than the file");
  const uint8_t *data_section = data + 8 + hlen;
  uint64_t data_size = size - 8 - hlen;

  for (int i = 0; i < safetensors_num_metadata(r); i++) {
    const char *key, *value;
    safetensors_metadata_at(r, i, &key, &value);
    if (!key || !value || !safetensors_metadata_get(r, key)) fuzz_fail("safetensors_metadata_at", "a missing entry");
  }
  const char *key, *value;
  safetensors_metadata_at(r, safetensors_num_metadata(r), &key, &value);
  if (key || value) fuzz_fail("safetensors_metadata_at", "an entry past the end");

  int n = safetensors_num_tensors(r);
  uint64_t covered = 0;
  for (int i = 0; i < n; i++) {
    const SafetensorsTensorInfo *t = safetensors_tensor_at(r, i);
    if (!t) fuzz_fail("safetensors_tensor_at", "NULL for a listed index");
    check_tensor(r, t, data_section, data_size);
    covered += t->nbytes;
  }
  if (covered != data_size) fuzz_fail("safetensors_open", "accepted a data section the tensors do not tile");
  if (safetensors_tensor_at(r, n) || safetensors_tensor_at(r, -1)) fuzz_fail("safetensors_tensor_at", "out of range");
  if (safetensors_find(r, "") != NULL) fuzz_fail("safetensors_find", "found a tensor with an empty name");
  safetensors_close(r);
  return 0;
}
