/* `fivefold export`: a checkpoint as a model directory other tools load;
 * the option parsing `fivefold import` shares with it. */
#ifndef FIVEFOLD_CLI_CMD_EXPORT_H
#define FIVEFOLD_CLI_CMD_EXPORT_H

#include <stdio.h>

#include "cli/cli_util.h"

/* argv[0] is the command name; returns the process exit code (0 ok, 1 the
 * export failed or the model cannot be represented, 2 bad usage). */
int cmd_export(int argc, char **argv);

/* The options export and import share: --format hf, the source
 * (source_flag: "--checkpoint" or "--model"), --out, --tokenizer. */
typedef struct CliHfOptions {
  const char *format, *source, *out, *tokenizer;
} CliHfOptions;

/* Parses them with base/options.h; -1 when the command should run, else
 * the exit code (0 after --help, 2 for a usage error, already printed). */
int cli_hf_options(int argc, char **argv, const char *command, const char *source_flag, const char *source_what,
                   void (*help)(FILE *), CliHfOptions *o);

#endif
