/* `fivefold classify`: a trained vision network's top classes for image files. */
#ifndef FIVEFOLD_CLI_CMD_CLASSIFY_H
#define FIVEFOLD_CLI_CMD_CLASSIFY_H

int cmd_classify(int argc, char **argv);

#endif
