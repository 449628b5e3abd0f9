/* `fivefold schedule`: build, check, print and price the per-rank program of
 * one training iteration (src/sched/). */
#ifndef FIVEFOLD_CLI_CMD_SCHEDULE_H
#define FIVEFOLD_CLI_CMD_SCHEDULE_H

/* argv[0] is the command name ("schedule"); returns the process exit code
 * (0 ok, 1 the program could not be built or written, 2 bad usage). */
int cmd_schedule(int argc, char **argv);

#endif
