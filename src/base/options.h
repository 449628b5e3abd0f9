/* The one command-line option parser of every subcommand: `--flag value`
 * and `--flag=value` are the same everywhere, and every command words its
 * usage errors the same way ("unknown option '--fromat' (did you mean
 * '--format'?; see 'fivefold export --help')", "--out needs a value (see
 * 'fivefold export --help')").
 *
 * It is an iterator rather than a table so that commands with options that
 * come from elsewhere (train's config-field flags), lists (--input A B C) or
 * a trailing command (`trace record -- prog args`) use it as well:
 *
 *   OptionParser op;
 *   option_parser_init(&op, "export", argc, argv, KNOWN, KNOWN_COUNT);
 *   while (option_next(&op)) {
 *     if (option_is(&op, "--out")) { if (option_value(&op, &out, &err)) ... }
 *     else if (option_is_help(&op)) ...
 *     else return option_unknown(&op, &err);
 *   }
 */
#ifndef FIVEFOLD_BASE_OPTIONS_H
#define FIVEFOLD_BASE_OPTIONS_H

#include "base/error.h"

typedef struct OptionParser {
  const char *command;       /* "export", "trace record": for "see 'fivefold <command> --help'" */
  const char *const *known;  /* the options the command accepts, for near-miss hints */
  int n_known;
  int argc;
  char **argv;
  int index;                 /* of the current argument in argv */
  const char *arg;           /* the current argument as given */
  char name[64];             /* its option name: "--out" for "--out=x" and "--out" */
  const char *inline_value;  /* the text after '=', or NULL */
} OptionParser;

/* argv[0] is the command's name and is skipped, as in main(). */
void option_parser_init(OptionParser *op, const char *command, int argc, char **argv, const char *const *known,
                        int n_known);

/* Moves to the next argument; 0 when there is none left. */
int option_next(OptionParser *op);

/* Whether the current argument is the option `name` in either form. */
int option_is(const OptionParser *op, const char *name);
/* -h or --help. */
int option_is_help(const OptionParser *op);
/* An argument that is not an option (does not start with "--"; "-h" aside). */
int option_is_positional(const OptionParser *op);

/* The option's value: after '=' or the next argument. A next argument that
 * starts with "--" is another option, so the value counts as missing
 * (write --flag=--text for such a value). ERR_ARG "--x needs a value". */
int option_value(OptionParser *op, const char **value, Error *err);
/* A value that may be left out: after '=', or the next argument when it
 * does not start with "--" and accept (if given) takes it; else NULL. */
const char *option_optional_value(OptionParser *op, int (*accept)(const char *next));
/* A switch: ERR_ARG when it was given a value with '='. */
int option_switch(const OptionParser *op, Error *err);
/* Every following argument up to the next option (--input A B C). */
int option_values_until_option(OptionParser *op, const char ***values, int *count);

/* ERR_ARG for the current argument: an unknown option with a near-miss
 * hint from the known list, or an unexpected positional argument. */
int option_unknown(const OptionParser *op, Error *err);
/* ERR_ARG "<what> (see 'fivefold <command> --help')" for a bad value. */
int option_bad_value(const OptionParser *op, const char *value, const char *expected, Error *err);

#endif
