/* The table of run-config fields (train_config.c) as the other parts of
 * the run configuration read it: the checks after loading and the JSON
 * writer (train_config_check.c). Internal to train/. */
#ifndef FIVEFOLD_TRAIN_TRAIN_CONFIG_FIELDS_H
#define FIVEFOLD_TRAIN_TRAIN_CONFIG_FIELDS_H

#include <stddef.h>

typedef enum {
  FIELD_INT,    /* int, with [min, max] */
  FIELD_FLOAT,  /* float, with [min, max] (exclusive ends when flagged) */
  FIELD_DOUBLE, /* double */
  FIELD_SEED,   /* uint64_t, any non-negative integer */
  FIELD_DECAY,  /* "cosine" | "linear" | "constant" */
  FIELD_PATHS,  /* string or list of strings: shard paths (data section) */
  FIELD_PATH,   /* one string path */
  FIELD_TOKENIZER, /* "byte-level" or a path to a tokenizer.json */
  FIELD_SCHEDULE,  /* "none" | "gpipe" | "1f1b" | "interleaved" (int, -1 = default) */
  FIELD_STAGES,    /* list of non-negative ints (layers_per_stage); "2,1,1" as a flag */
  FIELD_TEXT,      /* a short string kept as given (trace.steps; checked at finalize) */
  FIELD_NAMES,     /* list of names (or one string), kept comma-joined like FIELD_TEXT; "a,b" as a flag */
  FIELD_AUTO_SWITCH, /* "auto" | 0 | 1 (int, TRAIN_AUTO = auto) */
  FIELD_PROGRESS,    /* "auto" | "always" | "never" (int, TrainProgress) */
} FieldKind;

typedef struct FieldSpec {
  const char *section; /* "training", "data", "checkpoint", "parallel", "trace" or "" for top level */
  const char *name;
  const char *flag; /* NULL: config file only */
  const char *arg;  /* metavariable in --help */
  FieldKind kind;
  size_t offset; /* into TrainConfig; for FIELD_PATHS the char ** member */
  double min, max;
  int min_open, max_open; /* exclusive bounds */
  const char *help;
} FieldSpec;

extern const FieldSpec *const train_config_fields;
extern const int train_config_num_fields;

#endif
