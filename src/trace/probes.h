/* USDT (user-level statically defined tracing) probes of the fivefold
 * provider, so an outside tracer (bpftrace, `fivefold trace record --ebpf`)
 * can time the same actions and operations the built-in recorder does
 * without rebuilding or enabling anything: they fire in every run, traced
 * or not. Each probe is one nop in the instruction stream plus its
 * arguments kept in registers or on the stack; it costs nothing measurable
 * until a tracer attaches a uprobe to it. The operation probes live in
 * base/usdt.h (fired by base/op_probe.h, below the modules that report
 * operations); this header adds the rank, iteration and action probes.
 *
 * Probes (provider "fivefold"), arguments in order (at most six: what
 * bpftrace reads from a USDT probe on x86-64):
 *   rank          world_rank, pipeline_rank, num_world_ranks
 *   iteration     iteration
 *   action_begin  action_id, iteration, microbatch, layer
 *   action_end    action_id, iteration, bytes, peer, group, group_id
 *   op_begin      op_kind, layer, microbatch
 *   op_shape      m, n, k         (GEMMs, fired just before their op_end)
 *   op_end        op_kind, layer, microbatch, bytes, peer, group
 * Enumerations (op_kind, group) are the values of recorder.h; -1 means
 * "not applicable". The converter in ebpf_convert.c reads exactly these.
 *
 * Without <sys/sdt.h> (Debian: systemtap-sdt-dev) every probe compiles to
 * nothing and the binary simply has no probes to attach to. */
#ifndef FIVEFOLD_TRACE_PROBES_H
#define FIVEFOLD_TRACE_PROBES_H

#include "base/usdt.h"

#ifdef FIVEFOLD_HAVE_USDT
#define FIVEFOLD_PROBE_RANK(world, pipeline, num) DTRACE_PROBE3(fivefold, rank, world, pipeline, num)
#define FIVEFOLD_PROBE_ITERATION(it) DTRACE_PROBE1(fivefold, iteration, it)
#define FIVEFOLD_PROBE_ACTION_BEGIN(id, it, mb, layer) DTRACE_PROBE4(fivefold, action_begin, id, it, mb, layer)
#define FIVEFOLD_PROBE_ACTION_END(id, it, bytes, peer, group, group_id) \
  DTRACE_PROBE6(fivefold, action_end, id, it, bytes, peer, group, group_id)
#else
#define FIVEFOLD_PROBE_RANK(world, pipeline, num) ((void)0)
#define FIVEFOLD_PROBE_ITERATION(it) ((void)0)
#define FIVEFOLD_PROBE_ACTION_BEGIN(id, it, mb, layer) ((void)0)
#define FIVEFOLD_PROBE_ACTION_END(id, it, bytes, peer, group, group_id) ((void)0)
#endif

#endif
