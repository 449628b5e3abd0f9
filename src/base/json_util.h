/* Words for JSON values in error messages ("expected a number, got a
 * string"), the same in every config, spec and state file reader. */
#ifndef FIVEFOLD_BASE_JSON_UTIL_H
#define FIVEFOLD_BASE_JSON_UTIL_H

#include <cjson/cJSON.h>

/* "a number", "a string", "a boolean", "null", "an array", "an object";
 * NULL (a missing field) reads "nothing (the field is missing)". */
const char *json_type_name(const cJSON *value);

#endif
