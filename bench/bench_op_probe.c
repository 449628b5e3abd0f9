/* What an operation probe costs when nothing listens (base/op_probe.h):
 * the hook test plus the calls that fire the op_begin / op_shape / op_end
 * USDT probes (base/usdt.h), against the same loop without them. The body
 * is a tiny dependent computation, so the figure is the probes' overhead
 * per operation in ns (a real operation is a GEMM or a norm: microseconds).
 * With bpftrace attached (`fivefold trace record --ebpf`), each fired
 * probe costs a uprobe trap instead; run this under it to see that cost.
 *
 * usage: bench_op_probe [operations (default 20000000)] [repetitions (5)]
 * Prints figures only, never a verdict. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/op_probe.h"
#include "base/timer.h"

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t plain_loop(long n, uint64_t x) {
  for (long i = 0; i < n; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

__attribute__((noinline)) static uint64_t probed_loop(long n, uint64_t x) {
  for (long i = 0; i < n; i++) {
    OP_PROBE_BEGIN(op, OP_PROBE_GEMM);
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    OP_PROBE_END_GEMM(op, 64, 128, (int)(x & 255));
  }
  return x;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000000;
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  if (n < 1 || reps < 1 || reps > 100) {
    fprintf(stderr, "usage: %s [operations > 0] [repetitions 1..100]\n", argv[0]);
    return 2;
  }
  double plain[100], probed[100];
  for (int r = 0; r < reps; r++) { /* interleaved, so drift hits both alike */
    double t0 = timer_now();
    sink = plain_loop(n, (uint64_t)r);
    double t1 = timer_now();
    sink = probed_loop(n, (uint64_t)r);
    double t2 = timer_now();
    plain[r] = (t1 - t0) * 1e9 / (double)n;
    probed[r] = (t2 - t1) * 1e9 / (double)n;
  }
  qsort(plain, (size_t)reps, sizeof *plain, cmp_double);
  qsort(probed, (size_t)reps, sizeof *probed, cmp_double);
  printf("operation probes (%s, no hook installed), %ld operations x %d repetitions, medians:\n",
         FIVEFOLD_USDT_ENABLED ? "with USDT probes" : "no USDT in this build", n, reps);
  printf("  loop body alone   %.2f ns per operation\n", plain[reps / 2]);
  printf("  with its probes   %.2f ns per operation\n", probed[reps / 2]);
  printf("  probe overhead    %.2f ns per operation\n", probed[reps / 2] - plain[reps / 2]);
  return 0;
}
