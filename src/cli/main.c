/* fivefold: one binary, subcommands. */
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f,
          "usage: fivefold <command> [options]\n\n"
          "commands:\n"
          "  train     train a model from a JSON config\n\n"
          "Run 'fivefold <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return argc < 2 ? 2 : 0;
  }
  fprintf(stderr, "fivefold: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
