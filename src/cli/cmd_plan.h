/* `fivefold plan` (search for the parallel configuration to book) and
 * `fivefold simulate` (predict one configuration), both on src/plan/. */
#ifndef FIVEFOLD_CLI_CMD_PLAN_H
#define FIVEFOLD_CLI_CMD_PLAN_H

/* argv[0] is the command name; returns the process exit code (0 ok, 1 the
 * plan or simulation failed, 2 bad usage). */
int cmd_plan(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
/* The `simulate` command of the binary (cmd_simulate_net.c): `simulate --net
 * FILE` prices a vision network trained data-parallel, anything else goes
 * to cmd_simulate. */
int cmd_simulate_any(int argc, char **argv);

#endif
