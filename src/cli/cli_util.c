/* Failure reports and checked option numbers of the subcommands
 * (cli/cli_util.h). */
#include "cli/cli_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int cli_fail(const char *command, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fivefold %s: ", command);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

int cli_parse_number(OptionParser *op, const char *v, double lo, double hi, int integer, double *out, Error *err) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= lo && x <= hi) || (integer && x != (double)(long long)x)) {
    char expected[96];
    snprintf(expected, sizeof expected, "%s in %g..%g", integer ? "an integer" : "a number", lo, hi);
    return option_bad_value(op, v, expected, err);
  }
  *out = x;
  return 0;
}
