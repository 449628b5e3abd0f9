/* The process-wide operation hook and the per-thread context (op_probe.h). */
#include "base/op_probe.h"

#include <string.h>

_Atomic(const OpProbeHooks *) op_probe_hooks_ = NULL;
_Thread_local int op_probe_tls_layer_ = -1, op_probe_tls_microbatch_ = -1;

void op_probe_install(const OpProbeHooks *hooks) {
  atomic_store_explicit(&op_probe_hooks_, hooks, memory_order_release);
}

const OpProbeHooks *op_probe_installed(void) { return atomic_load_explicit(&op_probe_hooks_, memory_order_acquire); }

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
