/* The operation probe: a hook at the bottom of the module graph through
 * which layers (model/) and collectives (comm/) report the operations the
 * cost model prices, without knowing who listens (DESIGN.md: model and comm
 * never include trace/). The tracer installs a hook while a session records
 * its step window (train/trace_session.c) and forwards each operation to the
 * calling thread's recorder.
 *
 * At a call site:
 *   OP_PROBE_BEGIN(op, OP_PROBE_GEMM); linear_forward(...); OP_PROBE_END_GEMM(op, M, N, K);
 * With no hook installed, a span costs one load of the hook pointer, a
 * never-taken branch, and two calls that fire the op_begin / op_shape /
 * op_end USDT probes (base/usdt.h): nops with their arguments in registers,
 * fired in every run so that `fivefold trace record --ebpf` sees the
 * operations of a run that was not started for tracing (bench_op_probe
 * measures the cost). The numerics around it are untouched.
 *
 * The layer and micro-batch an operation belongs to come from this
 * thread's context (op_probe_set_layer / op_probe_set_microbatch), set by
 * whoever knows them: the model sets the layer, the trace session the
 * micro-batch of the action under way. The kinds' numbering is the one
 * trace/recorder.h's TraceOpKind uses. */
#ifndef FIVEFOLD_BASE_OP_PROBE_H
#define FIVEFOLD_BASE_OP_PROBE_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/usdt.h"

typedef enum OpProbeKind {
  OP_PROBE_ATTN_FWD = 0,
  OP_PROBE_ATTN_BWD,
  OP_PROBE_GEMM,
  OP_PROBE_NORM,
  OP_PROBE_ROPE,
  OP_PROBE_SWIGLU,
  OP_PROBE_ROUTER,
  OP_PROBE_MOE_PERMUTE,
  OP_PROBE_MOE_COUNTS,
  OP_PROBE_MOE_A2A,
  OP_PROBE_MOE_ALLGATHER,
  OP_PROBE_MOE_SORT,
  OP_PROBE_MOE_EXPERTS,
  OP_PROBE_MOE_UNSORT,
  OP_PROBE_MOE_REDUCE_SCATTER,
  OP_PROBE_MOE_A2A_COMBINE,
  OP_PROBE_MOE_UNPERMUTE,
  OP_PROBE_EMBEDDING,
  OP_PROBE_LM_HEAD,
  OP_PROBE_ALLREDUCE,
  OP_PROBE_REDUCE_SCATTER,
  OP_PROBE_ALLGATHER,
  OP_PROBE_ALLTOALL,
  OP_PROBE_BCAST,
  OP_PROBE_BARRIER,
  OP_PROBE_SEND,
  OP_PROBE_RECV,
  OP_PROBE_OPTIMIZER,
  OP_PROBE_OTHER,
  OP_PROBE_NUM_KINDS
} OpProbeKind;

/* What an operation reports when it ends; -1 marks a field that does not
 * apply. */
typedef struct OpProbeEvent {
  int kind;              /* OpProbeKind */
  int layer, microbatch; /* from the thread's context */
  int m, n, k;           /* GEMM shape (2mnk FLOPs) */
  int64_t bytes;         /* payload of a collective or message */
  int group;             /* process-group kind, numbered as comm/grid_math.h's GridGroupKind; -1 unknown */
  int group_size;        /* ranks in the communicator */
  int peer;              /* the other side of a message, rank in its group */
} OpProbeEvent;

typedef struct OpProbeHooks {
  /* A start stamp; 0 means "not recording": end is then not called. */
  uint64_t (*begin)(void);
  void (*end)(uint64_t begin_stamp, const OpProbeEvent *ev);
} OpProbeHooks;

/* Installs hooks process wide (NULL removes them). The hooks must stay
 * valid until removed; they are called from any thread. */
void op_probe_install(const OpProbeHooks *hooks);
const OpProbeHooks *op_probe_installed(void);

/* The calling thread's context for later operations (-1: unknown). */
void op_probe_set_layer(int layer);
void op_probe_set_microbatch(int microbatch);

/* The group kind a communicator's name stands for ("tp", "dp-cp", ...,
 * "world" = 12), -1 when the name is none of them. */
int op_probe_group_from_name(const char *name);

/* ---- the hot path ---- */

/* The USDT probes of an operation (base/usdt.h), out of line on purpose:
 * one probe site each for the whole binary instead of one per inlined call
 * site, since a tracer pays about 0.1 s per site to attach (hundreds of
 * sites made `trace record --ebpf` wait 20 s). Costs a call and a nop. */
void op_probe_usdt_begin(int kind);
void op_probe_usdt_end(int kind, int m, int n, int k, int64_t bytes, int peer, int group);

extern _Atomic(const OpProbeHooks *) op_probe_hooks_;
extern _Thread_local int op_probe_tls_layer_, op_probe_tls_microbatch_;

typedef struct OpProbeSpan {
  const OpProbeHooks *hooks; /* NULL: nothing to report */
  uint64_t begin;
  int kind;
} OpProbeSpan;

static inline OpProbeSpan op_probe_begin(int kind) {
  OpProbeSpan s = {atomic_load_explicit(&op_probe_hooks_, memory_order_relaxed), 0, kind};
#ifdef FIVEFOLD_HAVE_USDT
  op_probe_usdt_begin(kind);
#endif
  if (__builtin_expect(s.hooks != 0, 0)) {
    s.begin = s.hooks->begin();
    if (!s.begin) s.hooks = 0;
  }
  return s;
}

static inline void op_probe_end(const OpProbeSpan *s, int m, int n, int k, int64_t bytes, int group, int group_size,
                                int peer) {
#ifdef FIVEFOLD_HAVE_USDT
  op_probe_usdt_end(s->kind, m, n, k, bytes, peer, group);
#endif
  if (__builtin_expect(s->hooks != 0, 0)) {
    OpProbeEvent ev = {s->kind, op_probe_tls_layer_, op_probe_tls_microbatch_, m, n, k, bytes, group, group_size, peer};
    s->hooks->end(s->begin, &ev);
  }
}

#define OP_PROBE_BEGIN(span, kind) const OpProbeSpan span = op_probe_begin(kind)
/* With USDT probes in the build the END macros evaluate their arguments in
 * every run (the op_end probe carries them); without, only while a hook
 * listens. Either way they must be cheap and free of side effects. */
#ifdef FIVEFOLD_HAVE_USDT
#define OP_PROBE_WHEN_LISTENED_(span, call) (call)
#else
#define OP_PROBE_WHEN_LISTENED_(span, call) ((span).hooks ? (call) : (void)0)
#endif
#define OP_PROBE_END(span) op_probe_end(&(span), -1, -1, -1, -1, -1, -1, -1)
#define OP_PROBE_END_GEMM(span, M, N, K) \
  OP_PROBE_WHEN_LISTENED_(span, op_probe_end(&(span), (int)(M), (int)(N), (int)(K), -1, -1, -1, -1))
#define OP_PROBE_END_BYTES(span, BYTES) \
  OP_PROBE_WHEN_LISTENED_(span, op_probe_end(&(span), -1, -1, -1, (int64_t)(BYTES), -1, -1, -1))
#define OP_PROBE_END_COMM(span, GROUP, GROUP_SIZE, BYTES, PEER) \
  OP_PROBE_WHEN_LISTENED_(span, op_probe_end(&(span), -1, -1, -1, (int64_t)(BYTES), (GROUP), (GROUP_SIZE), (PEER)))
/* One call as one span (the span's name is local to the block):
 *   OP_PROBED_GEMM(M, N, K, linear_forward(y, x, w, M, K, N, 0)); */
#define OP_PROBED(kind, call)                  \
  do {                                         \
    OP_PROBE_BEGIN(op_probe_span_, (kind));    \
    call;                                      \
    OP_PROBE_END(op_probe_span_);              \
  } while (0)
#define OP_PROBED_GEMM(M, N, K, call)                \
  do {                                               \
    OP_PROBE_BEGIN(op_probe_span_, OP_PROBE_GEMM);   \
    call;                                            \
    OP_PROBE_END_GEMM(op_probe_span_, (M), (N), (K)); \
  } while (0)
/* The layer of the operations that follow on this thread. */
#define OP_PROBE_LAYER(layer) op_probe_set_layer(layer)

#endif
