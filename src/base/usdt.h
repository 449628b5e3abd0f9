/* USDT (user-level statically defined tracing) support at the bottom of the
 * module graph: whether this build can carry probes (<sys/sdt.h>, Debian
 * package systemtap-sdt-dev), and the probes of the fivefold provider that
 * base/op_probe.h fires for every operation of every run. trace/probes.h
 * defines the rank, iteration and action probes on the same detection.
 *
 * A probe is one nop in the instruction stream, its arguments left in
 * registers or on the stack where the compiler already has them, plus a
 * note in the ELF file saying where they are; it costs nothing else until
 * a tracer (bpftrace, `fivefold trace record --ebpf`) attaches a uprobe to
 * it. bench/bench_op_probe.c measures what one operation's probes cost.
 *
 * Build with -DFIVEFOLD_NO_USDT, or without the header, and every probe
 * compiles to nothing. */
#ifndef FIVEFOLD_BASE_USDT_H
#define FIVEFOLD_BASE_USDT_H

#if defined(__has_include)
#if __has_include(<sys/sdt.h>) && !defined(FIVEFOLD_NO_USDT)
#include <sys/sdt.h>
#define FIVEFOLD_HAVE_USDT 1
#endif
#endif

#ifdef FIVEFOLD_HAVE_USDT
#define FIVEFOLD_USDT_ENABLED 1
/* Puts a probe argument in a register. The compiler may otherwise describe
 * a thread-local one as a %fs-relative memory operand, which bpftrace
 * cannot read ("Parse error: -4@%fs:(%rax)"). */
#define FIVEFOLD_USDT_IN_REGISTER(x) __asm__("" : "+r"(x))
/* op_begin(op_kind, layer, microbatch); op_shape(m, n, k), GEMMs only, just
 * before their op_end; op_end(op_kind, layer, microbatch, bytes, peer,
 * group). -1 marks a field that does not apply. */
#define FIVEFOLD_PROBE_OP_BEGIN(kind, layer, mb) DTRACE_PROBE3(fivefold, op_begin, kind, layer, mb)
#define FIVEFOLD_PROBE_OP_SHAPE(m, n, k) DTRACE_PROBE3(fivefold, op_shape, m, n, k)
#define FIVEFOLD_PROBE_OP_END(kind, layer, mb, bytes, peer, group) \
  DTRACE_PROBE6(fivefold, op_end, kind, layer, mb, bytes, peer, group)
#else
#define FIVEFOLD_USDT_ENABLED 0
#define FIVEFOLD_USDT_IN_REGISTER(x) ((void)0)
#define FIVEFOLD_PROBE_OP_BEGIN(kind, layer, mb) ((void)0)
#define FIVEFOLD_PROBE_OP_SHAPE(m, n, k) ((void)0)
#define FIVEFOLD_PROBE_OP_END(kind, layer, mb, bytes, peer, group) ((void)0)
#endif

#endif
