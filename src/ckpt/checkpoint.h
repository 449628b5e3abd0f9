/* Checkpoints: everything needed to continue a run bit for bit, and to
 * sample from or export a trained model.
 *
 * Layout: RUN_DIR/checkpoints/step-00000120/ holding
 *   model.safetensors      every parameter under its name in the network's table, F32, full tensors
 *   optimizer.safetensors  AdamW moments "m.<param>" and "v.<param>" (F32) and
 *                          "step", the optimizer's step count (I64 scalar)
 *   state.json             {"format": "fivefold-checkpoint", "version": 1, "step": 120,
 *                           "model_config": <model_config_to_json>,
 *                           "train_config": <train_config_to_json>,
 *                           "tokenizer": "tokenizer.json" | "byte-level",
 *                           "tokenizer_file": {"bytes": N, "crc32": "xxxxxxxx", "source": "<path>"},
 *                           "data_loader": {"seed", "epoch", "position", "num_windows"},
 *                           "rng": {"seed"},
 *                           "files": {"model.safetensors": {"bytes": N, "crc32": "xxxxxxxx"},
 *                                     "optimizer.safetensors": {...}}}
 *   tokenizer.json         a copy of the run's tokenizer.json (not for byte-level
 *                          runs), checked against "tokenizer_file" when sample or
 *                          export read it (checkpoint_tokenizer.c); checkpoints of
 *                          older builds record the tokenizer's absolute path instead
 * 64-bit integers in state.json are JSON numbers up to 2^53 and decimal
 * strings above (a double cannot hold them exactly). "rng" holds only the
 * seed: every random draw in fivefold is a pure function of (seed, stream,
 * index) (base/rng.h), and the one sequential stream, the training data
 * order, is the data_loader state.
 *
 * Writing: everything goes to RUN_DIR/checkpoints/.tmp-step-00000120-<pid>/,
 * each file is fsynced, the directory is fsynced and renamed to step-00000120,
 * and the parent is fsynced. Only directories named step-<8 or more digits>
 * are checkpoints, so a crash at any point leaves either the previous
 * checkpoints alone or the new one complete. Older checkpoints beyond the
 * last K are removed only once the new one is in place (renamed to
 * .del-step-... first, so a crash while deleting leaves nothing that looks
 * like a checkpoint). Leftover .tmp- and .del- directories of processes that
 * no longer run are removed by the next save.
 *
 * Validity: a checkpoint is complete when its state.json parses with every
 * field (format, version, step equal to the directory's number, a valid model
 * config, ...) and each recorded file has its recorded size and CRC-32 and
 * opens as a valid safetensors file. The newest checkpoint of a run is the
 * valid one with the highest step; invalid newer ones are reported with a
 * warning naming the file and what was wrong, never used.
 *
 * Test hook: FIVEFOLD_TEST_CRASH_IN_CHECKPOINT=N makes the N-th checkpoint
 * this process writes _exit(CHECKPOINT_TEST_CRASH_EXIT) halfway, after
 * both safetensors files are in the temporary directory and before state.json
 * and the rename: how a process killed while writing leaves the run
 * directory. Only tests set it (tests/train/resume_test.sh).
 *
 * Implementation: checkpoint_write.c (save, prune, run-directory checks) and
 * checkpoint_read.c (listing, validation, resolution, loading). */
#ifndef FIVEFOLD_CKPT_CHECKPOINT_H
#define FIVEFOLD_CKPT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/config.h"
#include "nets/network.h"
#include "data/data_loader.h"

struct cJSON;

#define CHECKPOINT_FORMAT "fivefold-checkpoint"
#define CHECKPOINT_VERSION 1
#define CHECKPOINT_SUBDIR "checkpoints"
#define CHECKPOINT_MODEL_FILE "model.safetensors"
#define CHECKPOINT_OPTIMIZER_FILE "optimizer.safetensors"
#define CHECKPOINT_STATE_FILE "state.json"
#define CHECKPOINT_BYTE_LEVEL "byte-level"
#define CHECKPOINT_TOKENIZER_FILE "tokenizer.json"
#define CHECKPOINT_CRASH_ENV "FIVEFOLD_TEST_CRASH_IN_CHECKPOINT"
#define CHECKPOINT_TEST_CRASH_EXIT 86
/* Longest run directory and tokenizer path a checkpoint records. */
#define CHECKPOINT_NAME_MAX 4096
/* Longest checkpoint directory path: a run directory plus its own names. */
#define CHECKPOINT_PATH_MAX (CHECKPOINT_NAME_MAX + 128)

/* ---- the functions `fivefold sample` and `fivefold export` rely on ---- */

/* `path` may be a checkpoint directory (step-N) or a run directory (or its
 * checkpoints/ dir): then the newest valid checkpoint in it is used, skipping
 * invalid ones with a warning. Writes the resolved checkpoint directory into
 * out (size n). */
int checkpoint_resolve(const char *path, char *out, size_t n, Error *err);
/* Reads and validates state.json of a resolved checkpoint dir; fills the
 * model config. tokenizer (size tn; NULL when the caller brings its own)
 * receives the tokenizer to decode with: "byte-level", the path of the
 * checkpoint's stored tokenizer.json after checking it against the size and
 * CRC-32 state.json records (a changed copy is ERR_FORMAT), or an older
 * checkpoint's recorded path. step may be NULL. */
int checkpoint_read_model_config(const char *ckpt_dir, ModelConfig *cfg, char *tokenizer, size_t tn, int *step,
                                 Error *err);
/* Loads all parameters into the values of a network (its parameter table,
 * nets/network.h; the transformer's is its bound network,
 * train/net_transformer.h) whose config record equals the checkpoint's
 * (model_record: see CheckpointSource; ERR_CONFIG naming the first field
 * that differs). Checks names, shapes, sizes, checksums. */
int checkpoint_load_weights(const char *ckpt_dir, Network *net, const struct cJSON *model_record, Error *err);

/* ---- saving ---- */

/* The optimizer state a checkpoint holds, as the runtime lends it: AdamW's
 * two moments, laid out like the parameters, and its step count. The
 * checkpoint module knows no optimizer type, only these buffers. */
typedef struct CheckpointOptimizer {
  float *m, *v; /* num_params floats each */
  size_t num_params;
  int step; /* optimizer steps taken */
} CheckpointOptimizer;

/* What a training run puts in a checkpoint besides its tensors. The
 * tensors are the network's parameter table (nets/network.h): each rank's
 * slices of the logical tensors, which the files hold whole. The run
 * configuration is an opaque record: the runtime hands it as JSON and gets
 * the same JSON back (checkpoint_read_train_config). */
typedef struct CheckpointSource {
  int step; /* optimizer steps done */
  const Network *net;
  CheckpointOptimizer opt;
  DataLoaderState data_loader;
  uint64_t data_windows;            /* windows in the training data (a resume on other data is reported) */
  const struct cJSON *train_config; /* the resolved run config, recorded as is (not taken over) */
  const struct cJSON *model_record; /* the network's config, recorded as model_config: a transformer's
                                       model_config_to_json, a network of nets/ its own (with "family") */
  const char *tokenizer;            /* its tokenizer.json, or "byte-level" */
  uint64_t seed;                    /* its seed: every random draw derives from it */
} CheckpointSource;

typedef struct CheckpointSaveInfo {
  char dir[CHECKPOINT_PATH_MAX]; /* the new checkpoint directory */
  uint64_t bytes;                /* all its files */
  int removed;                   /* older checkpoints deleted by keep_last */
} CheckpointSaveInfo;

/* Writes run_dir/checkpoints/step-<src->step> as described above (replacing
 * a checkpoint of the same step), then keeps only the keep_last newest
 * (keep_last <= 0: keeps all). info may be NULL. */
int checkpoint_save(const char *run_dir, const CheckpointSource *src, int keep_last, CheckpointSaveInfo *info,
                    Error *err);

/* Deletes all but the keep_last highest-step checkpoints under dir (a run
 * directory or its checkpoints/ dir). *removed (may be NULL) gets the count. */
int checkpoint_prune(const char *dir, int keep_last, int *removed, Error *err);

/* Checks, before a run starts saving into run_dir, that no checkpoint there
 * is newer than `from_step` (0 for a fresh run, the resumed step otherwise):
 * a fresh run into a directory with checkpoints, or a resume from an older
 * checkpoint, would otherwise mix two histories. Invalid newer checkpoints
 * (the ones a resume skipped) are moved aside to invalid-step-N, with a
 * warning; valid ones are an error that says what to do. */
int checkpoint_check_run_dir(const char *run_dir, int from_step, Error *err);

/* ---- reading ---- */

/* The step numbers of the step-N directories directly under `dir`, highest
 * first (*steps is malloc'd, NULL when *n = 0). A missing dir has none. */
int checkpoint_list(const char *dir, int **steps, int *n, Error *err);

/* "dir/step-00000120" into out. */
int checkpoint_dir_name(const char *dir, int step, char *out, size_t n, Error *err);

/* Full validation of one checkpoint directory: state.json, the size and
 * CRC-32 of every file, safetensors structure. */
int checkpoint_verify(const char *ckpt_dir, Error *err);

/* The training state of a checkpoint. */
typedef struct CheckpointTrainState {
  int step;
  DataLoaderState data_loader;
  uint64_t data_windows;
  uint64_t seed;
} CheckpointTrainState;

/* Everything a resume needs: verifies the checkpoint, checks that its model
 * config equals model_record (naming the first field that differs), loads
 * the weights into net's values, the AdamW moments into opt's buffers and
 * its step into opt->step, and fills st. */
int checkpoint_load_training(const char *ckpt_dir, Network *net, const struct cJSON *model_record,
                             CheckpointOptimizer *opt, CheckpointTrainState *st, Error *err);

/* The "train_config" object of a checkpoint's state.json (caller frees with
 * cJSON_Delete), to report what a resume changed. */
int checkpoint_read_train_config(const char *ckpt_dir, struct cJSON **train_config, Error *err);

/* 0 when both model configs have the same canonical JSON; otherwise an
 * ERR_CONFIG naming the first field that differs and both values. `what_a`
 * and `what_b` name the two sides in the message ("the checkpoint"). */
int checkpoint_compare_model_configs(const ModelConfig *a, const char *what_a, const ModelConfig *b,
                                     const char *what_b, Error *err);

#endif
