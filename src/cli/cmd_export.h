/* `fivefold export`: a checkpoint as a model directory other tools load. */
#ifndef FIVEFOLD_CLI_CMD_EXPORT_H
#define FIVEFOLD_CLI_CMD_EXPORT_H

/* argv[0] is the command name; returns the process exit code (0 ok, 1 the
 * export failed or the model cannot be represented, 2 bad usage). */
int cmd_export(int argc, char **argv);

#endif
