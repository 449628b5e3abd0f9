/* Tracing from outside with eBPF: bpftrace attached to the fivefold USDT
 * probes (probes.h) of a binary, plus the scheduler's sched_switch events of
 * the threads that fire them, turned into the same per-rank events the
 * built-in recorder produces (so the same writer, file and analyzer serve
 * both), with the on-CPU time of every action and operation added.
 *
 * `fivefold trace record --ebpf -- COMMAND...` is trace_ebpf_run followed by
 * trace_ebpf_convert and the Chrome writer. The runner mounts tracefs at
 * /sys/kernel/tracing when it is missing, checks that the binary carries
 * the probes, forks the command held before its exec, starts bpftrace on
 * the probes of that process and its descendants (not of other jobs that
 * run the same binary), waits until they are attached, releases the
 * command, then stops bpftrace (SIGINT) and keeps its output. Every
 * failure says what was missing or refused (no bpftrace, not root, eBPF or
 * tracefs not permitted in this container, no probes in the binary).
 *
 * bpftrace's output, one line per probe hit (ns = bpftrace nsecs, i.e.
 * CLOCK_MONOTONIC, the recorder's clock):
 *   R  tid pid world_rank pipeline_rank num_ranks ns
 *   I  tid iteration ns
 *   AB tid ns action_id iteration microbatch layer
 *   AE tid ns action_id iteration bytes peer group group_id
 *   OB tid ns op_kind layer microbatch
 *   OS tid ns m n k
 *   OE tid ns op_kind layer microbatch bytes peer group
 *   S  ns cpu prev_tid next_tid
 * Lines from different CPUs can arrive out of order, so the converter sorts
 * each thread's lines by time before pairing begins with ends. Other lines
 * (bpftrace's own messages) are ignored, and so are operations that began
 * while no action of their thread was open (the probes fire in every run,
 * also in the evaluation between steps; the recorder keeps only operations
 * inside actions too). */
#ifndef FIVEFOLD_TRACE_EBPF_H
#define FIVEFOLD_TRACE_EBPF_H

#include <stdio.h>

#include "base/error.h"
#include "trace/run.h"

/* The bpftrace program for `binary` (malloc'd). with_sched adds the
 * sched_switch tracepoint for the threads that fired a probe; root_pid > 0
 * keeps the probes of that process and its descendants only (0: of every
 * process running the binary). */
char *trace_ebpf_script(const char *binary, int with_sched, int root_pid);

typedef struct TraceEbpfOptions {
  int first_step, last_step; /* iterations kept (last < 0: all from first) */
} TraceEbpfOptions;

typedef struct TraceEbpfCapture {
  int num_ranks;
  TraceRankBuffer *ranks; /* by world rank, stamps in CLOCK_MONOTONIC ns */
  TraceEvent *pool;
  long lines;             /* probe lines read */
  long sched_switches;
  int have_sched;         /* on-CPU times are known (sched_switch lines seen) */
  long unmatched;         /* begins without an end and ends without a begin */
  long unranked;          /* events from threads that never fired `rank` */
} TraceEbpfCapture;

int trace_ebpf_convert(FILE *raw, const char *origin, const TraceEbpfOptions *opt, TraceEbpfCapture *out,
                       Error *err);
void trace_ebpf_capture_free(TraceEbpfCapture *cap);

typedef struct TraceEbpfRun {
  const char *bpftrace;  /* NULL: "bpftrace" from PATH */
  const char *binary;    /* whose probes to attach (an executable path) */
  const char *raw_path;  /* bpftrace's output goes here */
  int with_sched;
  double attach_timeout_s; /* 0: 60 s */
} TraceEbpfRun;

/* Runs argv (argv[0] searched in PATH) under bpftrace. *command_status gets
 * the command's exit status (128 + signal when killed). *lost gets the
 * events bpftrace reported lost. */
int trace_ebpf_run(const TraceEbpfRun *opt, char *const argv[], int *command_status, long *lost, Error *err);

/* Mounts tracefs at /sys/kernel/tracing unless tracing is reachable there
 * or under /sys/kernel/debug/tracing. */
int trace_ebpf_prepare_tracefs(Error *err);

#endif
