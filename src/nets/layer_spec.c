/* The field readers of layer config objects (nets/layer_spec.h). */
#include "nets/layer_spec.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/json_util.h"

static int is_int_in(const cJSON *v, int lo, int hi) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo && v->valuedouble <= hi;
}

static const char *what(const cJSON *v) { return cJSON_IsNumber(v) ? "a number out of range" : json_type_name(v); }

int layer_spec_int(const cJSON *spec, const char *field, int required, int def, int lo, int hi, int *out,
                   const char *origin, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, field);
  if (!v && !required) {
    *out = def;
    return 0;
  }
  if (!is_int_in(v, lo, hi))
    return error_set(err, ERR_CONFIG, "%s.%s: expected an integer in %d..%d, got %s", origin, field, lo, hi,
                     v ? what(v) : "nothing (the field is required)");
  *out = (int)v->valuedouble;
  return 0;
}

int layer_spec_pair(const cJSON *spec, const char *field, int required, int def, int lo, int hi, int *a, int *b,
                    const char *origin, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, field);
  if (cJSON_IsArray(v)) {
    const cJSON *x = cJSON_GetArrayItem(v, 0), *y = cJSON_GetArrayItem(v, 1);
    if (cJSON_GetArraySize(v) != 2 || !is_int_in(x, lo, hi) || !is_int_in(y, lo, hi))
      return error_set(err, ERR_CONFIG, "%s.%s: expected an integer in %d..%d or a pair of them, got an array of %d "
                       "that is not such a pair", origin, field, lo, hi, cJSON_GetArraySize(v));
    *a = (int)x->valuedouble;
    *b = (int)y->valuedouble;
    return 0;
  }
  int rc = layer_spec_int(spec, field, required, def, lo, hi, a, origin, err);
  if (!rc) *b = *a;
  return rc;
}

int layer_spec_bool(const cJSON *spec, const char *field, int def, int *out, const char *origin, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, field);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsBool(v))
    return error_set(err, ERR_CONFIG, "%s.%s: expected true or false, got %s", origin, field, json_type_name(v));
  *out = cJSON_IsTrue(v);
  return 0;
}

int layer_spec_double(const cJSON *spec, const char *field, double def, double lo, double hi, double *out,
                      const char *origin, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, field);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
    return error_set(err, ERR_CONFIG, "%s.%s: expected a number in %g..%g, got %s", origin, field, lo, hi, what(v));
  *out = v->valuedouble;
  return 0;
}

int layer_spec_choice(const cJSON *spec, const char *field, int required, int def, const char *const *choices,
                      int *out, const char *origin, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, field);
  if (!v && !required) {
    *out = def;
    return 0;
  }
  if (cJSON_IsString(v))
    for (int i = 0; choices[i]; i++)
      if (!strcmp(v->valuestring, choices[i])) {
        *out = i;
        return 0;
      }
  char list[256] = "";
  for (int i = 0; choices[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "", choices[i]);
  return error_set(err, ERR_CONFIG, "%s.%s: expected one of %s, got %s%s%s", origin, field, list,
                   cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : v ? json_type_name(v)
                   : "nothing (the field is required)", cJSON_IsString(v) ? "\"" : "");
}

int layer_spec_check_fields(const cJSON *spec, const char *const *known, const char *origin, Error *err) {
  if (!cJSON_IsObject(spec))
    return error_set(err, ERR_CONFIG, "%s: expected a layer object such as {\"type\": \"linear\", \"out\": 10}, got %s",
                     origin, json_type_name(spec));
  for (const cJSON *f = spec->child; f; f = f->next) {
    int ok = !strcmp(f->string, "type");
    for (int i = 0; !ok && known[i]; i++) ok = !strcmp(f->string, known[i]);
    if (!ok) {
      char list[256] = "";
      for (int i = 0; known[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", known[i]);
      return error_set(err, ERR_CONFIG, "%s.%s: unknown field of this layer (expected type%s%s)", origin, f->string,
                       known[0] ? ", " : "", list);
    }
  }
  return 0;
}
