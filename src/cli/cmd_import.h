/* `fivefold import`: a model directory of another tool as a fivefold run. */
#ifndef FIVEFOLD_CLI_CMD_IMPORT_H
#define FIVEFOLD_CLI_CMD_IMPORT_H

/* argv[0] is the command name; returns the process exit code (0 ok, 1 the
 * import failed or the model cannot be represented, 2 bad usage). */
int cmd_import(int argc, char **argv);

#endif
