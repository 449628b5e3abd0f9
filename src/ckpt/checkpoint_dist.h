/* Distributed checkpoints: every rank of a sharded run (TP x DP x PP) writes
 * and reads its own slices of the full logical tensors with MPI-IO, so the
 * files are exactly those of a one-rank checkpoint_save (checkpoint.h) and a
 * checkpoint saved under any layout loads under any other.
 *
 * Saving, collective over sh->world:
 *   1. every rank builds the header of both safetensors files from the
 *      network's logical tensors (network_logical_params: for the
 *      transformer model_global_tensors(cfg), so each rank knows every
 *      tensor's offset) and the list of slices it writes: a tensor of its
 *      parameter table is written by one of its replicas (dp_rank 0, or
 *      edp_rank 0 for NET_REDUCE_EXPERT tensors) and, of the tp_copies TP
 *      ranks holding the same slice, by the first; never when it is a copy
 *      of another (copy_of). The slices of all ranks must cover
 *      every element exactly once (checked before anything is created);
 *   2. rank 0 creates the temporary directory (its name is broadcast) and
 *      writes both headers and the optimizer's "step";
 *   3. each file is written with one collective MPI_File_write_all: the file
 *      view is a struct of subarray datatypes, one per slice, built from the
 *      tensor's view_shape / view_start / view_count (NetParam) at its data
 *      offset;
 *   4. MPI_File_sync and close, then rank 0 computes the CRC-32s, writes
 *      state.json, renames the directory into place and prunes, exactly as
 *      checkpoint_save does (same crash test hook).
 * After each phase the ranks agree on the outcome: the first failing rank's
 * message is broadcast and every rank returns it, so none is left waiting in
 * a collective, and a failure leaves the previous checkpoints untouched.
 *
 * Loading, collective: rank 0 verifies state.json, sizes, CRC-32s and that
 * the files hold exactly the network's logical tensors (result
 * broadcast); then every rank checks its config and each local tensor's
 * global shape against the files, and reads its slices with the same file
 * views and MPI_File_read_all. Copies read the tensor they copy
 * (embed.weight); every rank holding a tensor reads it (replicas included).
 *
 * Test hook: FIVEFOLD_TEST_CKPT_BATCH_BYTES=N cuts each rank's transfer of
 * a file into collective calls of at most N bytes (default 1 GiB; a bigger
 * slice goes alone), so a tiny model exercises ranks making different
 * numbers of calls. Only tests set it (tests/train/ckpt_dist_test.sh).
 *
 * Requirements: the run directory is on a file system every rank sees
 * (one node, or a shared/parallel file system); a local slice holds fewer
 * than 2^31 elements (MPI's int counts). */
#ifndef FIVEFOLD_CKPT_CHECKPOINT_DIST_H
#define FIVEFOLD_CKPT_CHECKPOINT_DIST_H

#include "base/error.h"
#include "comm/comm.h"
#include "ckpt/checkpoint.h"
#include "nets/network.h"

#define CHECKPOINT_DIST_BATCH_ENV "FIVEFOLD_TEST_CKPT_BATCH_BYTES"

/* Who this rank is for the purpose of writing: dp_rank is the rank among
 * the replicas of this rank's parameters (with context parallelism, the
 * dp-cp group), tp_rank the rank in the TP group. */
typedef struct CheckpointShardInfo {
  const CommGroup *world;
  int dp_rank;
  int tp_rank;
  int edp_rank; /* rank in the expert-data-parallel group: the replicas of tensors with
                   NET_REDUCE_EXPERT (MoE folding); 0 when there are none */
} CheckpointShardInfo;

/* Collective over sh->world. Same files and state.json as checkpoint_save;
 * every file holds full logical tensors under their names.
 * src->net is this rank's shard; src->opt holds the AdamW moments of its
 * whole local flat buffer (same offsets as the parameters). info (may be
 * NULL) is filled on every rank. */
int checkpoint_save_sharded(const char *run_dir, const CheckpointSource *src, const CheckpointShardInfo *sh,
                            int keep_last, CheckpointSaveInfo *info, Error *err);

/* Collective. Verifies (rank 0, result broadcast), checks the model config,
 * reads into every rank the slices its local tensors need (net's table with
 * their view_*), the AdamW moments likewise into opt (whose buffers cover
 * net's whole local flat buffer) and its step, and fills st. A tensor
 * missing from a file or with another global shape is an ERR_CONFIG naming
 * file and tensor. model_record as for checkpoint_load_training. */
int checkpoint_load_training_sharded(const char *ckpt_dir, Network *net, const struct cJSON *model_record,
                                     CheckpointOptimizer *opt, CheckpointTrainState *st,
                                     const CheckpointShardInfo *sh, Error *err);

#endif
