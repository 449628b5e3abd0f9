/* The command-line option parser (see options.h for the conventions). */
#include "base/options.h"

#include <stdio.h>
#include <string.h>

#include "base/near_miss.h"

void option_parser_init(OptionParser *op, const char *command, int argc, char **argv, const char *const *known,
                        int n_known) {
  memset(op, 0, sizeof *op);
  op->command = command;
  op->known = known;
  op->n_known = n_known;
  op->argc = argc;
  op->argv = argv;
  op->index = 0;
}

int option_next(OptionParser *op) {
  if (op->index + 1 >= op->argc) {
    op->index = op->argc;
    op->arg = NULL;
    return 0;
  }
  op->index++;
  op->arg = op->argv[op->index];
  op->inline_value = NULL;
  const char *eq = strncmp(op->arg, "--", 2) == 0 ? strchr(op->arg, '=') : NULL;
  if (eq) {
    snprintf(op->name, sizeof op->name, "%.*s", (int)(eq - op->arg), op->arg);
    op->inline_value = eq + 1;
  } else {
    snprintf(op->name, sizeof op->name, "%s", op->arg);
  }
  return 1;
}

int option_is(const OptionParser *op, const char *name) { return op->arg && strcmp(op->name, name) == 0; }

int option_is_help(const OptionParser *op) { return option_is(op, "--help") || option_is(op, "-h"); }

int option_is_positional(const OptionParser *op) {
  return op->arg && strncmp(op->arg, "--", 2) != 0 && strcmp(op->arg, "-h") != 0;
}

static const char *next_argument(const OptionParser *op) {
  return op->index + 1 < op->argc ? op->argv[op->index + 1] : NULL;
}

int option_value(OptionParser *op, const char **value, Error *err) {
  if (op->inline_value) {
    *value = op->inline_value;
    return ERR_OK;
  }
  const char *next = next_argument(op);
  if (!next || strncmp(next, "--", 2) == 0)
    return error_set(err, ERR_ARG, "%s needs a value (see 'fivefold %s --help')", op->name, op->command);
  op->index++;
  *value = next;
  return ERR_OK;
}

const char *option_optional_value(OptionParser *op, int (*accept)(const char *next)) {
  if (op->inline_value) return op->inline_value;
  const char *next = next_argument(op);
  if (!next || strncmp(next, "--", 2) == 0 || (accept && !accept(next))) return NULL;
  op->index++;
  return next;
}

int option_switch(const OptionParser *op, Error *err) {
  if (op->inline_value)
    return error_set(err, ERR_ARG, "%s takes no value (see 'fivefold %s --help')", op->name, op->command);
  return ERR_OK;
}

int option_values_until_option(OptionParser *op, const char ***values, int *count) {
  int first = op->index + 1, n = 0;
  while (first + n < op->argc && strncmp(op->argv[first + n], "--", 2) != 0) n++;
  *values = (const char **)(op->argv + first);
  *count = n;
  op->index += n;
  return n;
}

int option_unknown(const OptionParser *op, Error *err) {
  if (option_is_positional(op))
    return error_set(err, ERR_ARG, "unexpected argument '%s' (options start with --; see 'fivefold %s --help')",
                     op->arg, op->command);
  const char *near = near_miss(op->name, op->known, op->n_known);
  if (near)
    return error_set(err, ERR_ARG, "unknown option '%s' (did you mean '%s'?; see 'fivefold %s --help')", op->name,
                     near, op->command);
  return error_set(err, ERR_ARG, "unknown option '%s' (see 'fivefold %s --help')", op->name, op->command);
}

int option_bad_value(const OptionParser *op, const char *value, const char *expected, Error *err) {
  return error_set(err, ERR_ARG, "%s '%s': expected %s (see 'fivefold %s --help')", op->name, value, expected,
                   op->command);
}
