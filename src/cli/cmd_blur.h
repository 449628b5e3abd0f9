/* `fivefold blur`: a motion-blurred copy of an image and its kernel. */
#ifndef FIVEFOLD_CLI_CMD_BLUR_H
#define FIVEFOLD_CLI_CMD_BLUR_H

int cmd_blur(int argc, char **argv);

#endif
