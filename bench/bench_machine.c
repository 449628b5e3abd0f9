/* bench_machine: the machine's measured fp32 FMA peak and sgemm speed, at a
 * given thread count. These are the denominators of every MFU figure the
 * other benchmarks print. Usage: bench_machine [threads] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kern/peak.h"

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
  if (threads < 1) threads = 1;
  omp_set_num_threads(threads);
  double fma = peak_fma_gflops(threads, 0.5);
  printf("machine threads=%d fma_peak_gflops=%.1f\n", threads, fma);
  static const int sizes[] = {256, 512, 1024, 2048};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    double g = peak_sgemm_gflops(sizes[i], 0.5);
    printf("machine threads=%d sgemm_n=%d sgemm_gflops=%.1f pct_of_fma_peak=%.1f%%\n", threads, sizes[i], g,
           100.0 * g / fma);
  }
  return 0;
}
