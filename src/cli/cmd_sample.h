/* `fivefold sample`: text generation from a checkpoint. */
#ifndef FIVEFOLD_CLI_CMD_SAMPLE_H
#define FIVEFOLD_CLI_CMD_SAMPLE_H

/* argv[0] is the command name; returns the process exit code (0 ok, 1 the
 * checkpoint, tokenizer or generation failed, 2 bad usage). */
int cmd_sample(int argc, char **argv);

#endif
