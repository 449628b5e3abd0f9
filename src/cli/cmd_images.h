/* `fivefold images`: an image set directory from offline sources. */
#ifndef FIVEFOLD_CLI_CMD_IMAGES_H
#define FIVEFOLD_CLI_CMD_IMAGES_H

int cmd_images(int argc, char **argv);

#endif
