/* The process-wide operation hook, the per-thread context and the
 * operations' USDT probe sites (op_probe.h). */
#include "base/op_probe.h"

#include <string.h>

_Atomic(const OpProbeHooks *) op_probe_hooks_ = NULL;
_Thread_local int op_probe_tls_layer_ = -1, op_probe_tls_microbatch_ = -1;

void op_probe_install(const OpProbeHooks *hooks) {
  atomic_store_explicit(&op_probe_hooks_, hooks, memory_order_release);
}

const OpProbeHooks *op_probe_installed(void) { return atomic_load_explicit(&op_probe_hooks_, memory_order_acquire); }

#ifdef FIVEFOLD_HAVE_USDT
/* noinline: exactly one probe site per probe in the binary. The thread's
 * layer and micro-batch are put in registers first (a %fs-relative
 * operand is one bpftrace cannot read). */
__attribute__((noinline)) void op_probe_usdt_begin(int kind) {
  int layer = op_probe_tls_layer_, microbatch = op_probe_tls_microbatch_;
  FIVEFOLD_USDT_IN_REGISTER(layer);
  FIVEFOLD_USDT_IN_REGISTER(microbatch);
  FIVEFOLD_PROBE_OP_BEGIN(kind, layer, microbatch);
}

__attribute__((noinline)) void op_probe_usdt_end(int kind, int m, int n, int k, int64_t bytes, int peer, int group) {
  int layer = op_probe_tls_layer_, microbatch = op_probe_tls_microbatch_;
  FIVEFOLD_USDT_IN_REGISTER(layer);
  FIVEFOLD_USDT_IN_REGISTER(microbatch);
  if (m >= 0) FIVEFOLD_PROBE_OP_SHAPE(m, n, k);
  FIVEFOLD_PROBE_OP_END(kind, layer, microbatch, bytes, peer, group);
}
#else
void op_probe_usdt_begin(int kind) { (void)kind; }
void op_probe_usdt_end(int kind, int m, int n, int k, int64_t bytes, int peer, int group) {
  (void)kind, (void)m, (void)n, (void)k, (void)bytes, (void)peer, (void)group;
}
#endif

void op_probe_set_layer(int layer) { op_probe_tls_layer_ = layer; }
void op_probe_set_microbatch(int microbatch) { op_probe_tls_microbatch_ = microbatch; }

/* The names comm/grid.c gives its communicators, in GridGroupKind order,
 * then the world. */
static const char *const GROUP_NAMES[] = {"tp",  "cp", "dp",  "pp",     "dp-cp",      "tp-cp", "tp-pp",
                                          "etp", "ep", "edp", "ep-etp", "etp-ep-pp", "world"};

int op_probe_group_from_name(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < (int)(sizeof GROUP_NAMES / sizeof GROUP_NAMES[0]); i++)
    if (!strcmp(name, GROUP_NAMES[i])) return i;
  return -1;
}
