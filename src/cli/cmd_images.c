/* `fivefold images --out DIR [--lfw [NPY]] [--dlib [DIR]] [--fashion-mnist [DIR]] ...`:
 * builds an image set directory (data/image_dir.h) from the face crops and
 * image files Debian ships, for the image networks and the deblurring
 * experiment. */
#include "cli/cmd_images.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/idx.h"
#include "base/npy.h"
#include "base/options.h"
#include "cli/cli_util.h"
#include "data/image_boxes.h"
#include "data/image_dir.h"

static void images_help(FILE *f) {
  fprintf(f,
          "usage: fivefold images --out DIR [--lfw [NPY]] [--lfw-all] [--dlib [DIR]] [--dlib-margin F]\n"
          "                       [--fashion-mnist [DIR]] [--fashion-limit N] [--size S] [--rgb] [--crop F]\n"
          "                       [--val F] [--test F] [--seed S]\n\n"
          "Builds an image set: every image centre-cropped to a square, converted to grey (or RGB),\n"
          "resized to S x S, split into train/val/test by a seeded shuffle, and written as\n"
          "DIR/{train,val,test}/<source>_<index>.png with DIR/manifest.json (sizes, split, the\n"
          "source and label of every file). The same options give the same files.\n\n"
          "Sources (at least one):\n"
          "  --lfw [NPY]          the 100 face crops of scikit-image's lfw_subset.npy (25 x 25 grey;\n"
          "                       default %s, Debian python3-skimage)\n"
          "  --lfw-all            all 200 images of it: the faces (label 1) and the non-faces (label 0)\n"
          "  --dlib [DIR]         one crop per annotated face of dlib's example photos (DIR/training.xml\n"
          "                       and DIR/testing.xml; default %s, Debian libdlib19.1)\n"
          "  --dlib-margin F      context around each face box, a fraction of its side (default 0.25)\n"
          "  --fashion-mnist [DIR]  Fashion-MNIST's training images (default %s,\n"
          "                       Debian dataset-fashion-mnist), labels 0..9\n"
          "  --fashion-limit N    the first N of them (default 2000; 0 for all 60000)\n\n"
          "options:\n"
          "  --out DIR            the set's directory (created; files of the same names replaced)\n"
          "  --size S             side of the written images in pixels, 4..4096 (default 64)\n"
          "  --rgb                write RGB (grey sources repeated in 3 channels); default grey\n"
          "  --crop F             keep the centred square of F times the shorter side, (0, 1] (default 1)\n"
          "  --val F, --test F    fractions of the images for validation and test (default 0.1 each)\n"
          "  --seed S             seed of the split (default 1)\n"
          "  -h, --help           show this help\n\n"
          "Augmentation (flips, small shifts) is left to the loader that reads the set (a gan run's\n"
          "data.flip and data.shift).\n",
          SKIMAGE_LFW_SUBSET, DLIB_FACES_DIR, FASHION_MNIST_DIR);
}

/* An optional path value: the next argument unless it is an option. */
static int not_an_option(const char *next) { return next[0] != '-'; }

int cmd_images(int argc, char **argv) {
  static const char *const KNOWN[] = {"--out",           "--lfw",           "--lfw-all", "--dlib", "--dlib-margin",
                                      "--fashion-mnist", "--fashion-limit", "--size",    "--rgb",  "--crop",
                                      "--val",           "--test",          "--seed",    "--help"};
  const char *out = NULL, *lfw = NULL, *fashion = NULL, *dlib = NULL;
  int lfw_all = 0;
  double dlib_margin = 0.25, fashion_limit = 2000, size = 64, crop = 1, val = 0.1, test = 0.1, seed = 1;
  ImageDirOptions o = image_dir_options_default();
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "images", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    const char *v;
    int rc = 0;
    if (option_is_help(&op)) {
      images_help(stdout);
      return 0;
    } else if (option_is(&op, "--out")) {
      rc = option_value(&op, &out, &err);
    } else if (option_is(&op, "--lfw") || option_is(&op, "--lfw-all")) {
      if (option_is(&op, "--lfw-all")) lfw_all = 1, rc = option_switch(&op, &err);
      else lfw = option_optional_value(&op, not_an_option);
      if (!lfw) lfw = SKIMAGE_LFW_SUBSET;
    } else if (option_is(&op, "--dlib")) {
      dlib = option_optional_value(&op, not_an_option);
      if (!dlib) dlib = DLIB_FACES_DIR;
    } else if (option_is(&op, "--fashion-mnist")) {
      fashion = option_optional_value(&op, not_an_option);
      if (!fashion) fashion = FASHION_MNIST_DIR;
    } else if (option_is(&op, "--rgb")) {
      rc = option_switch(&op, &err);
      o.channels = 3;
    } else {
      double *num = option_is(&op, "--fashion-limit") ? &fashion_limit
                    : option_is(&op, "--dlib-margin") ? &dlib_margin
                    : option_is(&op, "--size")        ? &size
                    : option_is(&op, "--crop")        ? &crop
                    : option_is(&op, "--val")         ? &val
                    : option_is(&op, "--test")        ? &test
                    : option_is(&op, "--seed")        ? &seed
                                                      : NULL;
      if (!num) return cli_fail("images", 2, "%s", (option_unknown(&op, &err), err.msg));
      const int integer = num == &fashion_limit || num == &size || num == &seed;
      const double hi = num == &seed            ? 9007199254740992.0
                        : num == &fashion_limit ? 1e9
                        : num == &size          ? 4096
                        : num == &dlib_margin   ? 2
                                                : 1;
      rc = option_value(&op, &v, &err);
      if (!rc) rc = cli_parse_number(&op, v, num == &size ? 4 : 0, hi, integer, num, &err);
    }
    if (rc) return cli_fail("images", 2, "%s", err.msg);
  }
  if (!out) return cli_fail("images", 2, "no output directory given (--out DIR)");
  if (!lfw && !dlib && !fashion)
    return cli_fail("images", 2, "no source given (--lfw, --dlib, --fashion-mnist; see 'fivefold images --help')");
  o.size = (int)size, o.crop = crop, o.val_fraction = val, o.test_fraction = test, o.seed = (uint64_t)seed;
  ImageDir set = {0};
  int rc = 0;
  if (lfw) rc = image_dir_add_npy(&set, lfw, "lfw", 0, lfw_all ? 0 : SKIMAGE_LFW_FACES, -1, &err);
  /* The LFW subset's labels: its first 100 images are faces. */
  for (size_t i = 0; !rc && i < set.count; i++) set.items[i].label = set.items[i].index < SKIMAGE_LFW_FACES;
  char images[4096], labels[4096];
  for (int part = 0; !rc && dlib && part < 2; part++) {
    snprintf(images, sizeof images, "%s/%s.xml", dlib, part ? "testing" : "training");
    rc = image_dir_add_boxes(&set, images, part ? "dlib-testing" : "dlib-training", dlib_margin, 1, &err);
  }
  if (!rc && fashion) {
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", fashion);
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", fashion);
    rc = image_dir_add_idx(&set, images, labels, FASHION_MNIST_CLASSES, "fashion-mnist", (size_t)fashion_limit, &err);
  }
  ImageDirCounts counts;
  if (!rc) rc = image_dir_write(&set, out, &o, &counts, &err);
  if (!rc) {
    printf("images: %zu images", set.count);
    for (int s = 0; s < set.num_sources; s++)
      printf("%s%zu from %s (%s)", s ? ", " : " (", set.source_count[s], set.source_name[s], set.source_path[s]);
    printf(") -> %s: %d x %d %s, split train %zu / val %zu / test %zu (seed %.0f); manifest %s/manifest.json\n", out,
           o.size, o.size, o.channels == 1 ? "grey" : "RGB", counts.train, counts.val, counts.test, seed, out);
  }
  image_dir_free(&set);
  return rc ? cli_fail("images", rc == ERR_ARG ? 2 : 1, "%s", err.msg) : 0;
}
