/* `fivefold classify --checkpoint RUN --input IMAGE... [--top K]`: a
 * trained vision network (nets/vision.h) applied to image files. The
 * network is rebuilt from the config record its checkpoint holds, its
 * weights loaded with the checks of every checkpoint read, and each image
 * is brought to the model's input as the run's data section brought the
 * training images: grey, the model's size, then (pixel - mean) / std when
 * the run normalised. What had to change about an image (colour, size) is
 * printed with its result, so a prediction on a converted image is never
 * mistaken for one on the image as given. */
#include "cli/cmd_classify.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file_text.h"
#include "base/idx.h"
#include "base/image_io.h"
#include "base/options.h"
#include "ckpt/checkpoint.h"
#include "cli/cli_util.h"
#include "data/image_set.h"
#include "nets/vision.h"

/* Fashion-MNIST's labels 0..9, in the order of its label files. */
static const char *const FASHION_MNIST_NAMES[FASHION_MNIST_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

static void classify_help(FILE *f) {
  fprintf(f,
          "usage: fivefold classify --checkpoint RUN --input IMAGE... [--top K]\n\n"
          "Classifies images with a trained vision network: RUN is a run directory (its newest valid\n"
          "checkpoint is used) or one checkpoint directory (step-N). Each IMAGE (PNG, PGM or JPEG) is\n"
          "turned grey, resized to the model's input size when it differs (said in the output),\n"
          "normalised as the run's data section normalised the training images, and the K most\n"
          "probable classes are printed with their softmax probabilities, one line each:\n\n"
          "  IMAGE: 28x28 grey\n"
          "    1. Ankle boot      0.912345\n\n"
          "Class names are Fashion-MNIST's for a 10-class model, else class-<i>.\n\n"
          "options:\n"
          "  --checkpoint RUN   the run or checkpoint directory\n"
          "  --input IMAGE...   one or more image files\n"
          "  --top K            how many classes per image (default 3; at most the model's classes)\n"
          "  -h, --help         show this help\n");
}

/* The network a checkpoint holds, with what its run did to the pixels. */
typedef struct Classifier {
  VisionConfig cfg;
  ImageSetConfig data;
  Network net;
  int have_net;
  char dir[CHECKPOINT_PATH_MAX];
} Classifier;

/* state.json of a resolved checkpoint: model_config must be a vision
 * network; the run config's data section gives the normalisation. */
static int load_classifier(Classifier *c, const char *path, Error *err) {
  int rc = checkpoint_resolve(path, c->dir, sizeof c->dir, err);
  if (!rc) rc = checkpoint_verify(c->dir, err);
  if (rc) return rc;
  char state_path[CHECKPOINT_PATH_MAX + 32];
  snprintf(state_path, sizeof state_path, "%s/%s", c->dir, CHECKPOINT_STATE_FILE);
  char *text = NULL;
  if ((rc = file_read_text(state_path, "checkpoint state", (size_t)64 << 20, &text, NULL, err))) return rc;
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model_config");
  const cJSON *family = cJSON_GetObjectItemCaseSensitive(model, "family");
  if (!cJSON_IsString(family) || strcmp(family->valuestring, "vision")) {
    cJSON_Delete(root);
    return error_set(err, ERR_CONFIG, "%s: model_config: expected a vision network (\"family\": \"vision\"), got %s",
                     state_path, cJSON_IsString(family) ? family->valuestring : "a transformer");
  }
  rc = vision_config_from_json(&c->cfg, model, state_path, err);
  image_set_config_defaults(&c->data);
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "train_config"), "data");
  if (!rc && data) rc = image_set_config_from_json(&c->data, data, state_path, err);
  if (!rc && !(rc = vision_create(&c->net, &c->cfg, 1, err))) {
    c->have_net = 1;
    vision_set_eval(&c->net, 1);
    rc = checkpoint_load_weights(c->dir, &c->net, model, err);
  }
  cJSON_Delete(root);
  return rc;
}

/* The image at path as the model's input x [in_c, in_h, in_w]; `changes`
 * says what conversion it took ("" when none). */
static int prepare_image(const Classifier *c, const char *path, float *x, char *changes, size_t cap, Error *err) {
  Image im = {0}, grey = {0}, sized = {0};
  int rc = image_read(path, &im, err);
  if (rc) return rc;
  changes[0] = '\0';
  size_t at = 0;
  if (c->cfg.in_c != 1) {
    rc = error_set(err, ERR_CONFIG, "%s: the model takes %d channels; classify feeds grey images only", path,
                   c->cfg.in_c);
  } else if (im.channels != 1) {
    rc = image_to_grey(&im, &grey, err);
    at += (size_t)snprintf(changes + at, cap - at, "; converted from RGB to grey");
  } else {
    grey = im;
    im.data = NULL;
  }
  if (!rc && (grey.height != c->cfg.in_h || grey.width != c->cfg.in_w)) {
    rc = image_resize(&grey, c->cfg.in_h, c->cfg.in_w, &sized, err);
    if (at < cap)
      snprintf(changes + at, cap - at, "; resized from %dx%d to %dx%d", grey.width, grey.height, c->cfg.in_w,
               c->cfg.in_h);
  } else if (!rc) {
    sized = grey;
    grey.data = NULL;
  }
  if (rc) error_wrap(err, "%s", path);
  for (size_t i = 0; !rc && i < image_numel(&sized); i++) {
    float u = sized.data[i] < 0 ? 0.0f : sized.data[i] > 1 ? 1.0f : sized.data[i];
    x[i] = c->data.normalize ? (float)((u - c->data.mean) / c->data.std) : u;
  }
  image_free(&im);
  image_free(&grey);
  image_free(&sized);
  return rc;
}

static void print_top(const Classifier *c, const char *path, const char *changes, const float *p, int top) {
  int classes = c->cfg.classes;
  printf("%s: %dx%d grey%s\n", path, c->cfg.in_w, c->cfg.in_h, changes);
  int *order = malloc((size_t)classes * sizeof *order);
  if (!order) return;
  for (int k = 0; k < classes; k++) order[k] = k;
  /* Most probable first; the lower class first among equal ones. */
  for (int i = 0; i < top; i++) {
    int best = i;
    for (int k = i + 1; k < classes; k++)
      if (p[order[k]] > p[order[best]] || (p[order[k]] == p[order[best]] && order[k] < order[best])) best = k;
    int t = order[i];
    order[i] = order[best];
    order[best] = t;
    char name[32];
    if (classes == FASHION_MNIST_CLASSES) snprintf(name, sizeof name, "%s", FASHION_MNIST_NAMES[order[i]]);
    else snprintf(name, sizeof name, "class-%d", order[i]);
    printf("  %2d. %-14s %.6f\n", i + 1, name, p[order[i]]);
  }
  free(order);
}

int cmd_classify(int argc, char **argv) {
  static const char *const KNOWN[] = {"--checkpoint", "--input", "--top", "--help"};
  const char *checkpoint = NULL;
  const char **inputs = NULL, *inline_input = NULL;
  int num_inputs = 0;
  double top = 3;
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "classify", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    const char *v;
    if (option_is_help(&op)) {
      classify_help(stdout);
      return 0;
    } else if (option_is(&op, "--input")) {
      if (op.inline_value) { /* --input=A: one image */
        inline_input = op.inline_value;
        inputs = &inline_input;
        num_inputs = 1;
      } else if (option_values_until_option(&op, &inputs, &num_inputs) == 0) {
        return cli_fail("classify", 2, "--input needs a value (see 'fivefold classify --help')");
      }
    } else if (option_is(&op, "--checkpoint")) {
      if (option_value(&op, &checkpoint, &err)) return cli_fail("classify", 2, "%s", err.msg);
    } else if (option_is(&op, "--top")) {
      if (option_value(&op, &v, &err) || cli_parse_number(&op, v, 1, 1 << 16, 1, &top, &err))
        return cli_fail("classify", 2, "%s", err.msg);
    } else {
      return cli_fail("classify", 2, "%s", (option_unknown(&op, &err), err.msg));
    }
  }
  if (!checkpoint) return cli_fail("classify", 2, "no checkpoint given (--checkpoint RUN; see 'fivefold classify --help')");
  if (!num_inputs) return cli_fail("classify", 2, "no image given (--input IMAGE...; see 'fivefold classify --help')");
  Classifier c;
  memset(&c, 0, sizeof c);
  int rc = load_classifier(&c, checkpoint, &err);
  float *x = rc ? NULL : malloc((size_t)c.cfg.in_c * c.cfg.in_h * c.cfg.in_w * sizeof *x);
  if (!rc && !x) rc = error_set(&err, ERR_NOMEM, "out of memory for an image");
  int k = (int)top < c.cfg.classes ? (int)top : c.cfg.classes;
  for (int i = 0; i < num_inputs && !rc; i++) {
    char changes[160];
    int label = 0; /* the loss needs one; only the probabilities are read */
    if ((rc = prepare_image(&c, inputs[i], x, changes, sizeof changes, &err))) break;
    VisionBatch b = {.n = 1, .x = x, .y = &label};
    if ((rc = c.net.ops->forward(&c.net, 0, &b, &err))) break;
    print_top(&c, inputs[i], changes, vision_probabilities(&c.net), k);
  }
  free(x);
  if (c.have_net) network_free(&c.net);
  fflush(stdout);
  return rc ? cli_fail("classify", 1, "%s", err.msg) : 0;
}
