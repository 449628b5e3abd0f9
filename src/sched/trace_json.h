/* An evaluated program as a Chrome trace (open in Perfetto or
 * chrome://tracing): {"traceEvents": [...]} with one process per pipeline
 * rank (pid = rank), one thread per stream (tid 0 compute, tid 1
 * communication; named by "M" metadata events), one complete event ("X",
 * ts/dur in µs) per action, and a flow arrow ("s" -> "f", bp "e", shared id)
 * from every SEND to its RECV. The real tracer (trace/) writes measured runs
 * in the same shape, so predicted and measured traces open side by side. */
#ifndef FIVEFOLD_SCHED_TRACE_JSON_H
#define FIVEFOLD_SCHED_TRACE_JSON_H

#include "base/error.h"
#include "sched/evaluate.h"
#include "sched/program.h"

/* us_per_unit converts evaluation time to trace microseconds (1e6 when the
 * costs are seconds). Actions that never started are left out. NULL when
 * out of memory. */
cJSON *sched_trace_to_json(const SchedProgram *prog, const SchedEval *eval, double us_per_unit);
int sched_trace_write(const SchedProgram *prog, const SchedEval *eval, double us_per_unit, const char *path, Error *err);

#endif
