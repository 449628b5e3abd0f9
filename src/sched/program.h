/* The per-rank program of one training iteration, as data (DESIGN.md: "the
 * schedule is data"). One module builds it (builders.h), three read it: the
 * executor runs it, the simulator prices it (evaluate.h), the tracer stamps
 * it with measured times. They meet on the action ids defined here.
 *
 * A program holds, for each pipeline rank, the ordered list of actions that
 * rank executes. Actions live in one flat array ordered by rank, then by
 * position in the rank's list, and an action's id is its position in that
 * array: id = rank_begin[rank] + index. Ids are therefore dense (consumers
 * index arrays by them) and stable (the same configuration always yields the
 * same ids on every rank).
 *
 * Execution model shared by all consumers:
 *  - every action runs on one stream of its rank, and actions on one stream
 *    never overlap. The compute stream is the rank's host thread: forwards,
 *    backwards, sends and the optimizer step run there one after another and
 *    block it (a SEND hands its tensor over; see evaluate.h for whether it
 *    waits for the receiver). The p2p stream holds receives: the host posts a
 *    RECV when it reaches it in list order and moves on; the RECV completes
 *    when its data has arrived, and the compute that needs the data waits
 *    for it through its dependency. The collective stream holds asynchronous
 *    collectives (gradient-bucket reductions), started when the host reaches
 *    them, so they overlap the remaining backward work.
 *  - an action starts when (a) the previous action on its stream finished,
 *    (b) for an action off the compute stream, the previous compute-stream
 *    action in list order finished (that is when the host issues it), and
 *    (c) all its dependencies finished. For a RECV, (c) includes the matching
 *    SEND on the peer rank plus the transfer time.
 *  - dependencies name data flow (a forward needs its received activation, a
 *    send needs the compute that produced the tensor); order on a stream is
 *    implied by the list and not repeated as a dependency.
 *  - the lists are also safe for the strictest executor, one that runs each
 *    rank's list in order with blocking calls only (sched_check proves it).
 *
 * This module never needs MPI or the model: it is pure data. */
#ifndef FIVEFOLD_SCHED_PROGRAM_H
#define FIVEFOLD_SCHED_PROGRAM_H

#include <stdio.h>

#include "base/error.h"

typedef struct cJSON cJSON;

typedef enum SchedActionKind {
  SCHED_FWD = 0,      /* forward of one micro-batch through one model chunk */
  SCHED_BWD,          /* backward of one micro-batch through one model chunk */
  SCHED_SEND_ACT,     /* send a chunk's output activation to the next stage */
  SCHED_RECV_ACT,     /* receive a chunk's input activation from the previous stage */
  SCHED_SEND_GRAD,    /* send the gradient w.r.t. a chunk's input to the previous stage */
  SCHED_RECV_GRAD,    /* receive the gradient w.r.t. a chunk's output from the next stage */
  SCHED_GRAD_REDUCE,  /* data-parallel reduction of one gradient bucket */
  SCHED_OPTIM,        /* optimizer step on this rank's parameters */
  /* Reserved for later builders (no builder emits them yet); every consumer
   * handles them generically as local actions on their stream. */
  SCHED_A2A_DISPATCH, /* MoE token dispatch (all-to-all over EP) of one layer */
  SCHED_A2A_COMBINE,  /* MoE token combine of one layer */
  SCHED_CP_RING_STEP, /* one K/V exchange step of context-parallel attention */
  /* The weight-gradient half of a split backward (zero-bubble orders,
   * SchedConfig.split_backward): the BWD of the same (micro-batch, chunk)
   * then computes only the input gradient the previous stage waits for, and
   * this action the weight gradients, later, from tensors the BWD kept. */
  SCHED_BWD_WEIGHT,
  SCHED_NUM_ACTION_KINDS
} SchedActionKind;

typedef enum SchedStream {
  SCHED_STREAM_COMPUTE = 0,    /* the host: blocking, in list order */
  SCHED_STREAM_P2P = 1,        /* posted receives */
  SCHED_STREAM_COLLECTIVE = 2, /* asynchronous collectives (gradient buckets, ...) */
  SCHED_NUM_STREAMS
} SchedStream;

typedef enum SchedScheduleKind {
  SCHED_SCHEDULE_NONE = 0,    /* one stage, gradient accumulation over m micro-batches */
  SCHED_SCHEDULE_GPIPE,       /* all forwards, then all backwards */
  SCHED_SCHEDULE_1F1B,        /* PipeDream-flush / DAPPLE early backward */
  SCHED_SCHEDULE_INTERLEAVED, /* Megatron's interleaved 1F1B with v chunks per rank */
  SCHED_SCHEDULE_CUSTOM,      /* assembled by hand (tests, experiments, files) */
  SCHED_SCHEDULE_ZB_H1,       /* zero-bubble H1 (Qi et al.): 1F1B's memory, backward split, W fills bubbles */
  SCHED_NUM_SCHEDULES
} SchedScheduleKind;

#define SCHED_MAX_WARMUP_RANKS 64

/* What produced a program. Virtual stage s lives on rank s % pp as model
 * chunk s / pp (Megatron's layout), so chunk c of rank r is stage c*pp + r. */
typedef struct SchedConfig {
  SchedScheduleKind schedule;
  int pp;           /* pipeline ranks */
  int vpp;          /* model chunks (virtual stages) per rank; 1 = no interleaving */
  int microbatches; /* m */
  /* Relative forward/backward durations used only to decide where sends and
   * receives sit between computes (builders.h); 0 means the defaults 1 and 2. */
  double order_fwd_cost, order_bwd_cost;
  /* Parameter groups that step separately (a GAN's generator and critic,
   * nets/network.h). 0 or 1: one group, the program above. G > 1: the
   * program of one iteration is G phases, one per group in order, each the
   * one-group program of this config with every action naming its group
   * (SchedAction.group): the forwards and backwards of the phase, the
   * GRAD_REDUCE of that group's gradient, the OPTIM of that group. */
  int param_groups;
  /* 1: every BWD computes only its input gradient and a BWD_WEIGHT of the
   * same (micro-batch, chunk) the weight gradients (zb-h1 sets it; the
   * assembler sets it for any list holding a BWD_WEIGHT). */
  int split_backward;
  /* Per-rank warm-up depth of the 1F1B family (1f1b, zb-h1) and of
   * interleaved: warmup_set is 0 (the schedule's own: p - r - 1, or
   * interleaved's 2(p-r-1) + (v-1)p) or pp, the entries given; rank r then
   * runs min(warmup[r], m) (interleaved: min(warmup[r], m v) chunk) forwards
   * before its first backward. More costs memory (one micro-batch chunk's
   * activations each), fewer costs bubbles. The depths must not grow along
   * the pipeline (else it deadlocks); interleaved also bounds the last
   * rank's from below and rank 0's from above (builders.h). */
  int warmup_set;
  int warmup[SCHED_MAX_WARMUP_RANKS];
  /* With param_groups > 1: how many phases group g runs per iteration,
   * one after another, before the next group's (a GAN's k critic steps);
   * 0 or 1: one. Each repetition is a phase of its own (SchedAction.phase). */
  int phase_repeats[8];
} SchedConfig;

#define SCHED_MAX_PARAM_GROUPS 8
#define SCHED_MAX_PHASES 16

/* Phases of one iteration (1 without groups), and the group of phase p. */
int sched_config_num_phases(const SchedConfig *c);
int sched_config_phase_group(const SchedConfig *c, int phase);

typedef struct SchedAction {
  int id;    /* position in SchedProgram.actions */
  int rank;  /* pipeline rank that executes it */
  int index; /* position in that rank's list */
  SchedActionKind kind;
  SchedStream stream;
  int microbatch; /* -1 when not about one micro-batch */
  int chunk;      /* model chunk on this rank, -1 when none */
  int stage;      /* virtual stage = chunk * pp + rank, -1 when none */
  int peer;       /* SEND/RECV: the other rank; else -1 */
  int peer_chunk; /* SEND/RECV: the chunk on the other rank; else -1 */
  int peer_stage; /* SEND/RECV: the stage on the other rank; else -1 */
  int match;      /* SEND/RECV: id of the partner action; -1 when unmatched */
  int bucket;     /* GRAD_REDUCE: gradient bucket id on this rank; else -1 */
  int layer;      /* per-layer kinds (A2A, CP): layer index; else -1 */
  int group;      /* the parameter group of the action's phase (config.param_groups > 1); else -1 */
  /* SEND/RECV of a replicated stage (sched/replicated.h): the piece of the
   * micro-batch it carries, sequences [seq_begin, seq_begin + seq_count)
   * of the micro-batch; -1 when it carries the whole tensor. */
  int seq_begin, seq_count;
  int phase;      /* the index of that phase in the iteration (config.param_groups > 1); else -1 */
  int num_deps;
  const int *deps; /* ids this action waits for (a RECV lists its SEND) */
} SchedAction;

typedef struct SchedProgram {
  SchedConfig config;
  int num_ranks;
  int num_actions;
  SchedAction *actions; /* by id */
  int *rank_begin;      /* num_ranks + 1 offsets into actions */
  int *dep_pool;        /* storage behind every action's deps */
  int num_dep_pool;
} SchedProgram;

/* ---- names ---- */

const char *sched_action_kind_name(SchedActionKind kind); /* "FWD", "SEND_ACT", ... */
int sched_action_kind_from_name(const char *name, SchedActionKind *kind); /* 0 or -1 */
const char *sched_stream_name(SchedStream stream); /* "compute", "p2p", "collective" */
int sched_stream_from_name(const char *name, SchedStream *stream);
const char *sched_schedule_name(SchedScheduleKind schedule); /* "1f1b", ... */
int sched_schedule_from_name(const char *name, SchedScheduleKind *schedule);

/* Kind predicates. Compute kinds count as busy time in the evaluation. */
int sched_kind_is_send(SchedActionKind kind);
int sched_kind_is_recv(SchedActionKind kind);
int sched_kind_is_compute(SchedActionKind kind);
SchedActionKind sched_kind_partner(SchedActionKind kind); /* SEND_ACT <-> RECV_ACT, ...; else itself */
SchedStream sched_kind_default_stream(SchedActionKind kind);

/* A template with every optional field -1 and the kind's default stream. */
SchedAction sched_action_make(SchedActionKind kind);

/* Short label used in tables and accepted by the text parser:
 * F3, B3 (F3.1 with chunk 1 when vpp > 1), SA3>2 (send activation of mb 3 to
 * rank 2), RA3<1, SG3>1, RG3<2, AR0 (reduce bucket 0), OPT. */
const char *sched_action_label(const SchedProgram *prog, const SchedAction *a, char *buf, size_t size);
/* "rank 1 #7 SEND_ACT mb 3 stage 1->2 (id 23)" for messages. */
const char *sched_action_describe(const SchedAction *a, char *buf, size_t size);

/* ---- building ---- */

typedef struct SchedActionRef {
  int rank, index;
} SchedActionRef;

typedef struct SchedBuilder SchedBuilder;

/* num_ranks is usually config->pp. NULL when out of memory. */
SchedBuilder *sched_builder_new(const SchedConfig *config, int num_ranks);
void sched_builder_free(SchedBuilder *b);
/* Appends a copy of `action` (its id, rank, index, match and deps are
 * ignored) to rank's list; *ref (may be NULL) receives where it went. */
int sched_builder_append(SchedBuilder *b, int rank, const SchedAction *action, SchedActionRef *ref, Error *err);
int sched_builder_count(const SchedBuilder *b, int rank);
const SchedAction *sched_builder_get(const SchedBuilder *b, SchedActionRef ref); /* NULL if out of range */
int sched_builder_add_dep(SchedBuilder *b, SchedActionRef action, SchedActionRef dep, Error *err);
/* Sets action's match field only (one direction). */
int sched_builder_set_match(SchedBuilder *b, SchedActionRef action, SchedActionRef match, Error *err);
/* Pairs a SEND with its RECV: both match fields, and the RECV depends on the SEND. */
int sched_builder_link(SchedBuilder *b, SchedActionRef send, SchedActionRef recv, Error *err);
/* Assigns ids and produces the program. The builder is left empty-but-valid
 * (free it as usual). */
int sched_builder_finish(SchedBuilder *b, SchedProgram **out, Error *err);

/* Builds a program from per-rank lists of action templates, deriving the
 * standard data-flow dependencies from the fields: a FWD needs the RECV_ACT
 * of its (micro-batch, stage) on this rank or, when the previous stage is on
 * the same rank, that stage's FWD; a BWD needs its FWD and the RECV_GRAD (or
 * the local BWD of the next stage); a SEND needs the compute that produced
 * its tensor; each RECV is linked to the SEND on its peer with the same
 * micro-batch and stage pair; GRAD_REDUCE of bucket b (= chunk b) needs the
 * chunk's last BWD; OPTIM needs every GRAD_REDUCE of its rank. Anything
 * missing is left unlinked for sched_check to report. stage/peer fields left
 * at -1 are filled from chunk and the kind. */
int sched_program_assemble(const SchedConfig *config, SchedAction *const *lists, const int *counts,
                           SchedProgram **out, Error *err);

/* Parses one line per rank of whitespace-separated labels (the format of
 * sched_action_label; the ">q"/"<q" peer suffixes are optional and checked
 * when present) and assembles the program. Lines are separated by '\n' or
 * ';'. Meant for tests and experiments. */
int sched_program_parse_text(const SchedConfig *config, const char *text, SchedProgram **out, Error *err);

void sched_program_free(SchedProgram *prog);

/* -1 when a and b are the same program action for action (ranks, every
 * field of every action, its dependencies); else the first id where they
 * differ (the shorter one's count when one is a prefix of the other). The
 * configs are not compared: two configs may build one program. */
int sched_program_first_difference(const SchedProgram *a, const SchedProgram *b);

/* ---- reading ---- */

static inline int sched_action_id(const SchedProgram *prog, int rank, int index) {
  return prog->rank_begin[rank] + index;
}
const SchedAction *sched_program_action(const SchedProgram *prog, int id); /* NULL if out of range */
/* The rank's actions in execution order; *count receives how many. */
const SchedAction *sched_program_rank_actions(const SchedProgram *prog, int rank, int *count);
/* First action on rank with this kind, micro-batch and chunk (-1 matches
 * actions whose field is -1); returns its id or -1. */
int sched_program_find(const SchedProgram *prog, int rank, SchedActionKind kind, int microbatch, int chunk);

/* One column per rank, one row per position in the lists. */
void sched_program_print_table(const SchedProgram *prog, FILE *f);

/* ---- JSON (program_json.c) ----
 * {"format": "fivefold.sched.program", "version": 1,
 *  "config": {"schedule", "pp", "vpp", "microbatches", "order_fwd_cost", "order_bwd_cost"},
 *  "num_actions": N,
 *  "ranks": [{"rank": r, "actions": [{"id", "index", "kind", "stream", "mb", "chunk",
 *             "stage", "peer", "peer_chunk", "peer_stage", "match", "bucket", "layer",
 *             "group", "seq_begin", "seq_count", "deps": [ids]}, ...]}, ...]}
 * Fields that are -1 are omitted; a reader treats an absent field as -1.
 * config.param_groups is written only when above 1. */
cJSON *sched_program_to_json(const SchedProgram *prog); /* NULL when out of memory */
int sched_program_write_json(const SchedProgram *prog, const char *path, Error *err);
int sched_program_from_json(const cJSON *json, SchedProgram **out, Error *err);
int sched_program_read_json(const char *path, SchedProgram **out, Error *err);

/* Writes text to path via path.tmp + rename, so readers never see half a file. */
int sched_write_text_file(const char *path, const char *text, Error *err);

#endif
