/* fivefold: one binary, subcommands. The command table below is the one
 * place a new subcommand is registered; `fivefold --help` lists it. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_blur.h"
#include "cli/cmd_deblur.h"
#include "cli/cmd_calibrate.h"
#include "cli/cmd_classify.h"
#include "cli/cmd_export.h"
#include "cli/cmd_images.h"
#include "cli/cmd_import.h"
#include "cli/cmd_plan.h"
#include "cli/cmd_plot.h"
#include "cli/cmd_sample.h"
#include "cli/cmd_schedule.h"
#include "cli/cmd_trace.h"
#include "cli/cmd_upcycle.h"

typedef struct Command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv);
} Command;

static const Command COMMANDS[] = {
    {"train", "train a model from a JSON run config (model, training, data sections)", cmd_train},
    {"tokenize", "turn text files into token shards (train.bin, val.bin) for training", cmd_tokenize},
    {"sample", "generate text from a trained checkpoint (temperature, top-k, top-p, seed)", cmd_sample},
    {"export", "write a checkpoint as a Hugging Face model directory (Llama / Qwen2 / Mixtral / Qwen2-MoE / GPT-2)",
     cmd_export},
    {"import", "read a Hugging Face model directory into a run directory that training continues", cmd_import},
    {"plan", "search the parallel configuration for a model on a cluster", cmd_plan},
    {"simulate", "predict step time, bubbles and memory of one parallel configuration", cmd_simulate_any},
    {"calibrate", "measure this machine (or refit from a trace) and write a cluster spec for the planner", cmd_calibrate},
    {"schedule", "build, check, print and price the per-rank program of one iteration", cmd_schedule},
    {"trace", "record a run with eBPF, analyze a trace as a timing DAG (critical path, stragglers)", cmd_trace},
    {"upcycle", "turn a trained dense checkpoint into an MoE checkpoint that training continues", cmd_upcycle},
    {"images", "build an image set (LFW faces, Fashion-MNIST) as PNG files with a split and a manifest", cmd_images},
    {"plot", "draw a run's losses, learning rate and throughput from metrics.jsonl as a PNG", cmd_plot},
    {"classify", "print a trained vision network's most probable classes for image files (PNG, PGM)", cmd_classify},
    {"blur", "motion-blur an image by a seeded camera-shake kernel, and save the kernel beside it", cmd_blur},
    {"deblur", "deblur an image of any size with a trained deblurring GAN's generator", cmd_deblur},
};
#define NUM_COMMANDS ((int)(sizeof COMMANDS / sizeof COMMANDS[0]))

static void usage(FILE *f) {
  fprintf(f, "usage: fivefold <command> [options]\n\ncommands:\n");
  for (int i = 0; i < NUM_COMMANDS; i++) fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
  fprintf(f,
          "\nRun 'fivefold <command> --help' for the options of a command.\n"
          "Quick start: make demo (prepares the KJV Bible corpus and trains a small MoE).\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  for (int i = 0; i < NUM_COMMANDS; i++)
    if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
  fprintf(stderr, "fivefold: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
