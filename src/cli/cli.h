/* The subcommands of the `fivefold` binary. Each takes the arguments after
 * its name (argv[0] is the command name) and returns the process exit code:
 * 0 success, 1 failure while running, 2 bad usage. Errors are printed as
 * "fivefold <command>: <message>". */
#ifndef FIVEFOLD_CLI_CLI_H
#define FIVEFOLD_CLI_CLI_H

int cmd_train(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

#endif
