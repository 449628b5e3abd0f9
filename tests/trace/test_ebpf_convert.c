/* The eBPF converter on a recorded sample of real bpftrace output
 * (data/bpftrace_pp2_m4.txt: `trace record --ebpf` of trace_pipeline with
 * 1F1B, pp 2, 4 micro-batches, 2 iterations, with sched_switch), and on
 * hand-made lines for the corner cases: every action of both iterations is
 * recovered and the DAG has no gaps, GEMM shapes attach to their
 * operation, on-CPU time is within the duration and right for a made-up
 * schedule of switches, the step filter works, line order does not matter
 * (lines from different CPUs arrive out of order), and malformed or
 * rank-less input is refused with a message. Also the bpftrace script. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/chrome_writer.h"
#include "trace/ebpf.h"
#include "trace/stats.h"

static char sample_path[4096], program_path[4096];

static int setup(void **state) {
  (void)state;
  char here[4096];
  snprintf(here, sizeof here, "%s", __FILE__);
  const char *dir = dirname(here);
  snprintf(sample_path, sizeof sample_path, "%s/data/bpftrace_pp2_m4.txt", dir);
  snprintf(program_path, sizeof program_path, "%s/data/program_pp2_m4.json", dir);
  return access(sample_path, R_OK) || access(program_path, R_OK);
}

static int convert_file(const char *path, const TraceEbpfOptions *opt, TraceEbpfCapture *cap, Error *err) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int rc = trace_ebpf_convert(f, path, opt, cap, err);
  fclose(f);
  return rc;
}

static int convert_text(const char *text, TraceEbpfCapture *cap, Error *err) {
  FILE *f = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(f);
  int rc = trace_ebpf_convert(f, "text", NULL, cap, err);
  fclose(f);
  return rc;
}

static void test_sample_converts_to_a_complete_run(void **state) {
  (void)state;
  Error err = {0};
  TraceEbpfCapture cap;
  assert_int_equal(convert_file(sample_path, NULL, &cap, &err), ERR_OK);
  assert_int_equal(cap.num_ranks, 2);
  assert_true(cap.have_sched);
  assert_int_equal(cap.unmatched, 0);
  assert_int_equal(cap.unranked, 0);
  SchedProgram *prog;
  assert_int_equal(sched_program_read_json(program_path, &prog, &err), ERR_OK);
  int actions = 0, gemms = 0;
  for (int r = 0; r < cap.num_ranks; r++) {
    assert_int_equal(cap.ranks[r].info.pipeline_rank, r);
    for (size_t i = 0; i < cap.ranks[r].count; i++) {
      const TraceEvent *e = &cap.ranks[r].events[i];
      assert_true(e->end >= e->begin);
      assert_true(e->oncpu_ns >= 0 && e->oncpu_ns <= (int64_t)(e->end - e->begin));
      assert_true(i == 0 || e->begin >= cap.ranks[r].events[i - 1].begin);
      if (e->type == TRACE_EVENT_ACTION) {
        actions++;
        assert_true(e->iteration == 0 || e->iteration == 1);
        assert_int_equal(sched_program_action(prog, e->id)->rank, r);
      } else if (e->id == TRACE_OP_GEMM) {
        gemms++;
        assert_int_equal(e->m, 512), assert_int_equal(e->n, 1024), assert_int_equal(e->k, 256);
      } else {
        assert_int_equal(e->m, -1);
      }
    }
  }
  assert_int_equal(actions, 2 * prog->num_actions);
  assert_int_equal(gemms, 2 * 2 * 4); /* one per forward */
  /* Through the writer and back, the analyzer finds every action and edge. */
  char path[64];
  snprintf(path, sizeof path, "/tmp/fivefold_ebpf_sample_%d.json", (int)getpid());
  TraceRunMeta meta = {.program = prog, .source = "ebpf"};
  assert_int_equal(trace_chrome_write(path, &meta, cap.ranks, cap.num_ranks, &err), ERR_OK);
  TraceRun run;
  assert_int_equal(trace_chrome_read(path, &run, &err), ERR_OK);
  assert_string_equal(run.source, "ebpf");
  TraceReport rep;
  assert_int_equal(trace_analyze(&run, -1, &rep, &err), ERR_OK);
  assert_int_equal(rep.num_iterations, 2);
  assert_int_equal(rep.missing_actions, 0);
  assert_int_equal(rep.missing_edges, 0);
  assert_true(rep.action_kind[SCHED_FWD].oncpu_count == 2 * 2 * 4);
  for (int i = 0; i < rep.num_iterations; i++) assert_true(rep.iters[i].path.length == rep.iters[i].time);
  trace_report_free(&rep);
  trace_run_free(&run);
  remove(path);
  sched_program_free(prog);
  trace_ebpf_capture_free(&cap);
}

static void test_step_filter(void **state) {
  (void)state;
  Error err = {0};
  TraceEbpfCapture cap;
  TraceEbpfOptions opt = {1, 1};
  assert_int_equal(convert_file(sample_path, &opt, &cap, &err), ERR_OK);
  for (int r = 0; r < cap.num_ranks; r++)
    for (size_t i = 0; i < cap.ranks[r].count; i++) assert_int_equal(cap.ranks[r].events[i].iteration, 1);
  trace_ebpf_capture_free(&cap);
}

/* The same lines in reverse order give the same events. */
static void test_line_order_does_not_matter(void **state) {
  (void)state;
  FILE *f = fopen(sample_path, "r");
  char **lines = NULL;
  size_t n = 0, cap_lines = 0;
  char buf[512];
  while (fgets(buf, sizeof buf, f)) {
    if (n == cap_lines) lines = realloc(lines, (cap_lines = cap_lines ? 2 * cap_lines : 256) * sizeof *lines);
    lines[n++] = strdup(buf);
  }
  fclose(f);
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += strlen(lines[i]);
  char *reversed = malloc(total + 1), *p = reversed;
  for (size_t i = n; i-- > 0;) {
    size_t len = strlen(lines[i]);
    memcpy(p, lines[i], len);
    p += len;
    free(lines[i]);
  }
  *p = '\0';
  free(lines);
  Error err = {0};
  TraceEbpfCapture a, b;
  assert_int_equal(convert_file(sample_path, NULL, &a, &err), ERR_OK);
  assert_int_equal(convert_text(reversed, &b, &err), ERR_OK);
  assert_int_equal(a.num_ranks, b.num_ranks);
  for (int r = 0; r < a.num_ranks; r++) {
    assert_int_equal(a.ranks[r].count, b.ranks[r].count);
    assert_memory_equal(a.ranks[r].events, b.ranks[r].events, a.ranks[r].count * sizeof(TraceEvent));
  }
  trace_ebpf_capture_free(&a);
  trace_ebpf_capture_free(&b);
  free(reversed);
}

static void test_oncpu_from_switches(void **state) {
  (void)state;
  /* Thread 7 runs action 3 over [1000, 9000): off the CPU over [2000, 5000)
   * and [8000, 9500); thread 8 (not traced) never counts. */
  const char *text = "Attaching 9 probes...\n"
                     "R 7 7 0 0 1 500\n"
                     "I 7 0 600\n"
                     "AB 7 1000 3 0 2 -1\n"
                     "S 2000 0 7 8\n"
                     "S 5000 1 8 7\n"
                     "OB 7 6000 2 4 2\n"
                     "OS 7 6500 8 16 32\n"
                     "OE 7 6600 2 4 2 -1 -1 -1\n"
                     "S 8000 0 7 8\n"
                     "AE 7 9000 3 0 4096 1 2 0\n"
                     "S 9500 0 8 7\n";
  Error err = {0};
  TraceEbpfCapture cap;
  assert_int_equal(convert_text(text, &cap, &err), ERR_OK);
  assert_int_equal(cap.num_ranks, 1);
  assert_int_equal(cap.ranks[0].count, 2);
  const TraceEvent *act = &cap.ranks[0].events[0], *op = &cap.ranks[0].events[1];
  assert_int_equal(act->type, TRACE_EVENT_ACTION);
  assert_int_equal(act->begin, 1000), assert_int_equal(act->end, 9000);
  assert_int_equal(act->oncpu_ns, 8000 - 3000 - 1000);
  assert_int_equal(act->microbatch, 2), assert_int_equal(act->bytes, 4096), assert_int_equal(act->peer, 1);
  assert_int_equal(act->group, 2), assert_int_equal(act->group_id, 0);
  assert_int_equal(op->id, TRACE_OP_GEMM), assert_int_equal(op->layer, 4), assert_int_equal(op->iteration, 0);
  assert_int_equal(op->m, 8), assert_int_equal(op->n, 16), assert_int_equal(op->k, 32);
  assert_int_equal(op->oncpu_ns, 600);
  trace_ebpf_capture_free(&cap);
}

static void test_bad_input_is_refused(void **state) {
  (void)state;
  Error err = {0};
  TraceEbpfCapture cap;
  assert_int_equal(convert_text("R 7 7 0 0 1 500\nAB 7 1000 3\n", &cap, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "text:2"));
  assert_int_equal(convert_text("AB 7 1000 3 0 2 -1\nAE 7 9000 3 0 4096 1 2 0\n", &cap, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "no fivefold:rank probe"));
  /* An end without a begin is counted, not fatal. */
  assert_int_equal(convert_text("R 7 7 0 0 1 500\nAE 7 9000 3 0 4096 1 2 0\n", &cap, &err), ERR_OK);
  assert_int_equal(cap.unmatched, 1);
  trace_ebpf_capture_free(&cap);
}

static void test_script(void **state) {
  (void)state;
  char *s = trace_ebpf_script("/opt/bin/prog", 1, 0);
  assert_non_null(strstr(s, "usdt:/opt/bin/prog:fivefold:action_begin {"));
  assert_non_null(strstr(s, "usdt:/opt/bin/prog:fivefold:op_shape {"));
  assert_non_null(strstr(s, "tracepoint:sched:sched_switch"));
  assert_null(strstr(s, "@ff_mine"));
  free(s);
  s = trace_ebpf_script("/opt/bin/prog", 0, 0);
  assert_null(strstr(s, "sched_switch"));
  free(s);
  /* With a root process, every USDT probe keeps its descendants only. */
  s = trace_ebpf_script("/opt/bin/prog", 1, 4242);
  assert_non_null(strstr(s, "BEGIN { @ff_mine[4242] = 1; }"));
  assert_non_null(strstr(s, "sched_process_fork /@ff_mine[args->parent_pid]/ { @ff_mine[args->child_pid] = 1; }"));
  int probes = 0, filtered = 0;
  for (const char *p = s; (p = strstr(p, "usdt:")); p++, probes++)
    filtered += strncmp(strchr(p, ' '), " /@ff_mine[pid]/ {", 18) == 0;
  assert_int_equal(probes, 7);
  assert_int_equal(filtered, 7);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sample_converts_to_a_complete_run), cmocka_unit_test(test_step_filter),
      cmocka_unit_test(test_line_order_does_not_matter),        cmocka_unit_test(test_oncpu_from_switches),
      cmocka_unit_test(test_bad_input_is_refused),              cmocka_unit_test(test_script),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
