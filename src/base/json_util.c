/* JSON type names and syntax-error positions for messages; float values
 * in their shortest form for the JSON writers. */
#include "base/json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *json_type_name(const cJSON *v) {
  if (!v) return "nothing (the field is missing)";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsNull(v)) return "null";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  return "an invalid value";
}

void json_error_position(const char *text, const char *at, int *line, int *column) {
  *line = *column = 1;
  if (!text || !at || at < text || at > text + strlen(text)) return;
  for (const char *p = text; p < at; p++) {
    if (*p == '\n') {
      (*line)++;
      *column = 1;
    } else {
      (*column)++;
    }
  }
}

double json_float_value(float x) {
  if (!isfinite(x)) return x;
  char text[32];
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, (double)x);
    /* As a JSON reader sees it: a double, then the float field. 9
     * significant digits always round-trip. */
    if ((float)strtod(text, NULL) == x) break;
  }
  return strtod(text, NULL);
}

void json_shorten_floats(cJSON *node) {
  for (cJSON *c = node ? node->child : NULL; c; c = c->next) {
    if (cJSON_IsNumber(c)) {
      double v = c->valuedouble;
      if (isfinite(v) && v != floor(v) && fabs(v) < 3e38 && (double)(float)v == v)
        cJSON_SetNumberValue(c, json_float_value((float)v));
    } else {
      json_shorten_floats(c);
    }
  }
}

int json_write_file(const char *path, const cJSON *root, Error *err) {
  char *text = cJSON_Print(root);
  if (!text) return error_set(err, ERR_NOMEM, "%s: out of memory printing JSON", path);
  FILE *f = fopen(path, "w");
  int rc = 0;
  if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0)
    rc = error_set(err, ERR_IO, "%s: cannot write: %s", path, error_errno_text(errno));
  if (f && fclose(f) && !rc) rc = error_set(err, ERR_IO, "%s: cannot write: %s", path, error_errno_text(errno));
  free(text);
  return rc;
}
