/* Helper program for the scripted trace tests: runs a schedule program
 * with the threaded pipeline driver (pipeline_driver.h), so bpftrace has a
 * real binary with fivefold probes to attach to, and writes the program
 * (for `trace record --program`) and, unless --no-record, the built-in
 * recorder's trace of the same run for comparison.
 *
 *   trace_pipeline --pp 4 --microbatches 8 --iterations 2 --program-out P.json
 *                  [--trace-out T.json] [--trace-steps A:B] [--fwd-ms 2] [--bwd-ms 4]
 *                  [--delay RANK:MB:ITERATION:MS] [--no-record] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/builders.h"
#include "trace/pipeline_driver.h"

int main(int argc, char **argv) {
  SchedConfig sc = {.schedule = SCHED_SCHEDULE_1F1B, .pp = 4, .vpp = 1, .microbatches = 8};
  DriverConfig cfg = {.iterations = 2, .first_step = 0, .last_step = -1, .fwd_ms = 2, .bwd_ms = 4, .optim_ms = 1,
                      .message_bytes = 1 << 20, .delay_rank = -1, .delay_action = -1, .delay_iteration = -1,
                      .record = 1};
  const char *program_out = NULL, *trace_out = NULL;
  int delay_mb = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-record")) {
      cfg.record = 0;
      continue;
    }
    if (!v) {
      fprintf(stderr, "trace_pipeline: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--pp")) sc.pp = atoi(v);
    else if (!strcmp(a, "--microbatches")) sc.microbatches = atoi(v);
    else if (!strcmp(a, "--iterations")) cfg.iterations = atoi(v);
    else if (!strcmp(a, "--fwd-ms")) cfg.fwd_ms = atof(v);
    else if (!strcmp(a, "--bwd-ms")) cfg.bwd_ms = atof(v);
    else if (!strcmp(a, "--program-out")) program_out = v;
    else if (!strcmp(a, "--trace-out")) trace_out = v;
    else if (!strcmp(a, "--trace-steps")) {
      Error err = {0};
      if (trace_steps_parse(v, &cfg.first_step, &cfg.last_step, &err)) {
        fprintf(stderr, "trace_pipeline: %s\n", err.msg);
        return 2;
      }
    } else if (!strcmp(a, "--delay")) {
      if (sscanf(v, "%d:%d:%d:%lf", &cfg.delay_rank, &delay_mb, &cfg.delay_iteration, &cfg.delay_ms) != 4) {
        fprintf(stderr, "trace_pipeline: --delay RANK:MB:ITERATION:MS\n");
        return 2;
      }
    } else {
      fprintf(stderr, "trace_pipeline: unknown option %s\n", a);
      return 2;
    }
  }
  Error err = {0};
  SchedProgram *prog;
  if (sched_build(&sc, &prog, &err)) {
    fprintf(stderr, "trace_pipeline: %s\n", err.msg);
    return 1;
  }
  cfg.prog = prog;
  if (delay_mb >= 0) cfg.delay_action = sched_program_find(prog, cfg.delay_rank, SCHED_FWD, delay_mb, 0);
  int rc = 0;
  if (program_out && sched_program_write_json(prog, program_out, &err)) rc = 1;
  DriverResult res;
  if (!rc && driver_run(&cfg, &res)) {
    error_set(&err, ERR_NOMEM, "the driver could not start");
    rc = 1;
  }
  if (!rc) {
    if (trace_out && cfg.record && driver_write_trace(&cfg, &res, trace_out, &err)) rc = 1;
    driver_result_free(&res);
  }
  if (rc) fprintf(stderr, "trace_pipeline: %s\n", err.msg);
  sched_program_free(prog);
  return rc;
}
