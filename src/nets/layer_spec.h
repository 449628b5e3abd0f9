/* Reading a layer's config object ({"type": "conv2d", "kernel": 3, ...})
 * with errors that name the origin, the field and what was expected: the
 * one set of field readers every layer kind of nets/ uses.
 *
 * Each reader leaves *out at `def` when the field is absent and
 * `required` is 0; a present field of the wrong type or out of range is an
 * error (ERR_CONFIG). layer_spec_check_fields refuses fields the kind does
 * not know, so a misspelt option never silently takes its default. */
#ifndef FIVEFOLD_NETS_LAYER_SPEC_H
#define FIVEFOLD_NETS_LAYER_SPEC_H

#include "base/error.h"

struct cJSON;

int layer_spec_int(const struct cJSON *spec, const char *field, int required, int def, int lo, int hi, int *out,
                   const char *origin, Error *err);
/* An integer or a pair [a, b] (kernel sizes, strides): both of *a, *b. */
int layer_spec_pair(const struct cJSON *spec, const char *field, int required, int def, int lo, int hi, int *a, int *b,
                    const char *origin, Error *err);
int layer_spec_bool(const struct cJSON *spec, const char *field, int def, int *out, const char *origin, Error *err);
int layer_spec_double(const struct cJSON *spec, const char *field, double def, double lo, double hi, double *out,
                      const char *origin, Error *err);
/* One of `choices` (NULL-terminated); *out is its index. */
int layer_spec_choice(const struct cJSON *spec, const char *field, int required, int def, const char *const *choices,
                      int *out, const char *origin, Error *err);
/* Every field of spec must be "type" or one of `known` (NULL-terminated). */
int layer_spec_check_fields(const struct cJSON *spec, const char *const *known, const char *origin, Error *err);

#endif
