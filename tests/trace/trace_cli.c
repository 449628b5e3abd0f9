/* `fivefold trace` as its own program for the scripted tests, so they do
 * not depend on the command being registered in the fivefold binary. */
#include "cli/cmd_trace.h"

int main(int argc, char **argv) { return cmd_trace(argc - 1, argv + 1); }
