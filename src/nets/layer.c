/* The layer registry: the config's "type" -> the kind's creator. Every kind
 * lives in its own nets/layer_<file>.c; this table is the one place that
 * knows them all, so a network built from a layer list never names a kind. */
#include "nets/layer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "base/json_util.h"
#include "base/near_miss.h"
#include "nets/layer_act.h"
#include "nets/layer_conv.h"
#include "nets/layer_gan.h"
#include "nets/layer_linear.h"
#include "nets/layer_pool.h"
#include "nets/layer_tropical.h"

typedef int (*LayerCreator)(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin,
                            Error *err);

static const struct {
  const char *type;
  LayerCreator create;
} KINDS[] = {
    {"linear", layer_create_linear},   {"conv2d", layer_create_conv2d},
    {"maxpool", layer_create_maxpool}, {"avgpool", layer_create_avgpool},
    {"relu", layer_create_relu},       {"leaky_relu", layer_create_leaky_relu},
    {"tanh", layer_create_tanh},
    {"conv_transpose2d", layer_create_conv_transpose2d}, {"instance_norm", layer_create_instance_norm},
    {"tropical_conv2d", layer_create_tropical_conv2d},   {"maxplus", layer_create_maxplus},
    {"minplus", layer_create_minplus},                   {"standardize", layer_create_standardize},
};
#define NUM_KINDS ((int)(sizeof KINDS / sizeof KINDS[0]))

const char *layer_kinds(void) {
  static char list[512];
  if (!list[0])
    for (int i = 0; i < NUM_KINDS; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", KINDS[i].type);
  return list;
}

int layer_create(Layer *l, const cJSON *spec, LayerShape in, int max_batch, const char *origin, Error *err) {
  memset(l, 0, sizeof *l);
  if (!cJSON_IsObject(spec))
    return error_set(err, ERR_CONFIG, "%s: expected a layer object such as {\"type\": \"linear\", \"out\": 10}, got %s",
                     origin, json_type_name(spec));
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(spec, "type");
  if (!cJSON_IsString(type))
    return error_set(err, ERR_CONFIG, "%s.type: expected one of %s, got %s", origin, layer_kinds(),
                     type ? json_type_name(type) : "nothing (the field is required)");
  if (in.c < 1 || in.h < 1 || in.w < 1)
    return error_set(err, ERR_CONFIG, "%s: the layer's input is %d x %d x %d (expected every size >= 1)", origin,
                     in.c, in.h, in.w);
  if (max_batch < 1) return error_set(err, ERR_ARG, "%s: max_batch %d, expected >= 1", origin, max_batch);
  for (int i = 0; i < NUM_KINDS; i++)
    if (!strcmp(type->valuestring, KINDS[i].type)) {
      int rc = KINDS[i].create(l, spec, in, max_batch, origin, err);
      if (rc) layer_free(l);
      return rc;
    }
  const char *names[NUM_KINDS];
  for (int i = 0; i < NUM_KINDS; i++) names[i] = KINDS[i].type;
  const char *close = near_miss(type->valuestring, names, NUM_KINDS);
  return error_set(err, ERR_CONFIG, "%s.type: unknown layer type \"%s\"%s%s%s (expected one of %s)", origin,
                   type->valuestring, close ? " (did you mean \"" : "", close ? close : "", close ? "\"?)" : "",
                   layer_kinds());
}

void layer_free(Layer *l) {
  if (l->ops && l->ops->free) l->ops->free(l);
  l->impl = NULL;
  l->ops = NULL;
}
