/* `fivefold deblur`: a trained deblurring GAN's generator on one image. */
#ifndef FIVEFOLD_CLI_CMD_DEBLUR_H
#define FIVEFOLD_CLI_CMD_DEBLUR_H

int cmd_deblur(int argc, char **argv);

#endif
