/* `fivefold upcycle`: a dense checkpoint turned into an MoE run directory
 * that `fivefold train --resume` continues (convert/upcycle.h). */
#ifndef FIVEFOLD_CLI_CMD_UPCYCLE_H
#define FIVEFOLD_CLI_CMD_UPCYCLE_H

/* argv[0] is the command name; returns the process exit code (0 ok, 1 the
 * checkpoint could not be read or written or does not fit the options,
 * 2 bad usage). */
int cmd_upcycle(int argc, char **argv);

#endif
