/* `fivefold plot`: a run's losses, learning rate and throughput as a PNG. */
#ifndef FIVEFOLD_CLI_CMD_PLOT_H
#define FIVEFOLD_CLI_CMD_PLOT_H

int cmd_plot(int argc, char **argv);

#endif
