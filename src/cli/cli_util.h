/* Small helpers the subcommands share: the one way a command reports a
 * failure ("fivefold <command>: <message>" on stderr, returning its exit
 * code) and a checked number for an option's value. */
#ifndef FIVEFOLD_CLI_CLI_UTIL_H
#define FIVEFOLD_CLI_CLI_UTIL_H

#include "base/error.h"
#include "base/options.h"

/* Prints "fivefold <command>: <message>" and returns code. */
int cli_fail(const char *command, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The current option's value v as a number in lo..hi (an integer when
 * `integer`); ERR_ARG through option_bad_value otherwise. */
int cli_parse_number(OptionParser *op, const char *v, double lo, double hi, int integer, double *out, Error *err);

#endif
