/* Fuzz harness of the .npy reader (src/base/npy.h). A refused input fails
 * with a known code and a message naming the file; an accepted one has a
 * shape whose element count is `count`, a supported element type, and
 * exactly as many data bytes as the shape needs (so the header plus the
 * data is the whole input). */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include "base/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  NpyArray a;
  Error err;
  fuzz_error_reset(&err);
  int rc = npy_decode_f32("fuzz-input", data, size, &a, &err);
  fuzz_check_result(rc, &err, "npy_decode_f32");
  if (rc) {
    if (!strstr(err.msg, "fuzz-input")) fuzz_fail("npy_decode_f32", "an error that does not name the file");
    npy_free(&a);
    return 0;
  }
  size_t count = 1, item = !strcmp(a.descr, "<f8") ? 8 : !strcmp(a.descr, "<f4") ? 4 : 1;
  for (int d = 0; d < a.ndim; d++) count *= (size_t)a.dims[d];
  if (count != a.count || !a.data) fuzz_fail("npy_decode_f32", "a count that is not the product of the shape");
  if (count * item > size) fuzz_fail("npy_decode_f32", "accepted more data than the input holds");
  npy_free(&a);
  return 0;
}
