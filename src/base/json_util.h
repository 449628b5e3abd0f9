/* Words for JSON values in error messages ("expected a number, got a
 * string"), the same in every config, spec and state file reader; where a
 * syntax error is; float values written as they were typed. */
#ifndef FIVEFOLD_BASE_JSON_UTIL_H
#define FIVEFOLD_BASE_JSON_UTIL_H

#include <cjson/cJSON.h>

#include "base/error.h"

/* "a number", "a string", "a boolean", "null", "an array", "an object";
 * NULL (a missing field) reads "nothing (the field is missing)". */
const char *json_type_name(const cJSON *value);

/* The 1-based line and column of `at` (cJSON_GetErrorPtr()) in `text`;
 * 1, 1 when `at` is NULL or outside the text. */
void json_error_position(const char *text, const char *at, int *line, int *column);

/* The double of the shortest decimal that reads back as `x` (a float):
 * 0.003f is written 0.003, not 0.0030000000260770321, since cJSON prints
 * the double it is given. */
double json_float_value(float x);

/* json_float_value on every non-integer number under `node` that is
 * exactly a float, for a subtree written from float fields by code that
 * passes them as doubles (the model config's writer). A double that is not
 * a float, such as 0.1, stays as it is. */
void json_shorten_floats(cJSON *node);

/* root printed (indented) with a closing newline to path, which is
 * replaced; ERR_IO naming the path, ERR_NOMEM. Not atomic: for outputs a
 * crash may leave half written (manifests, kernel files), not for state. */
int json_write_file(const char *path, const cJSON *root, Error *err);

#endif
