/* Fuzz harness of the image file reader (src/base/image_io.h): PGM, PNG
 * and JPEG through image_decode. A refused input fails with a known code
 * and a message; an accepted one is a 1- or 3-channel image of a sane size
 * whose every value is finite and within 0..1, and it resizes and converts
 * to grey to values within 0..1 as well. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>

#include "base/image_io.h"

static void check_range(const Image *im, const char *what) {
  for (size_t i = 0; i < image_numel(im); i++)
    if (!(im->data[i] >= 0.0f && im->data[i] <= 1.0f)) fuzz_fail(what, "a value outside 0..1");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Image im;
  Error err;
  fuzz_error_reset(&err);
  int rc = image_decode("fuzz-input", data, size, &im, &err);
  fuzz_check_result(rc, &err, "image_decode");
  if (rc) {
    if (im.data) fuzz_fail("image_decode", "failed but left pixels allocated");
    if (!strstr(err.msg, "fuzz-input")) fuzz_fail("image_decode", "an error that does not name the file");
    return 0;
  }
  if ((im.channels != 1 && im.channels != 3) || im.height < 1 || im.width < 1 || im.height > IMAGE_MAX_SIDE ||
      im.width > IMAGE_MAX_SIDE)
    fuzz_fail("image_decode", "accepted an image of an impossible shape");
  check_range(&im, "image_decode");
  /* Bounded work per input: resize only what is small. */
  if ((size_t)im.height * (size_t)im.width <= 1 << 16) {
    Image small, grey;
    fuzz_error_reset(&err);
    rc = image_resize(&im, 3, 5, &small, &err);
    fuzz_check_result(rc, &err, "image_resize");
    if (rc) fuzz_fail("image_resize", "refused a decoded image");
    check_range(&small, "image_resize");
    fuzz_error_reset(&err);
    rc = image_to_grey(&small, &grey, &err);
    fuzz_check_result(rc, &err, "image_to_grey");
    if (rc) fuzz_fail("image_to_grey", "refused a decoded image");
    check_range(&grey, "image_to_grey");
    image_free(&small), image_free(&grey);
  }
  image_free(&im);
  return 0;
}
