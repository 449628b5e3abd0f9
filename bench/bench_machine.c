/* bench_machine: the machine's measured peaks and GEMM speeds at a given
 * thread count: the fp32 FMA peak and the bf16 product (vdpbf16ps, or AMX)
 * peak, the denominators of every MFU figure the other benchmarks print;
 * square sgemm through OpenBLAS and through oneDNN, and oneDNN's bf16
 * matmul (bf16 inputs, fp32 accumulation). Names the oneDNN ISA and the
 * default backend. Usage: bench_machine [threads [peaks]]; with "peaks" only
 * the line of the two peaks is printed (what bench/llmc/compare.sh divides
 * every side's GFLOP/s by), without the GEMM sizes. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/bf16.h"
#include "kern/gemm.h"
#include "kern/peak.h"

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
  if (threads < 1) threads = 1;
  const int peaks_only = argc > 2 && strcmp(argv[2], "peaks") == 0;
  if (argc > 2 && !peaks_only) {
    fprintf(stderr, "bench_machine: the second argument must be \"peaks\", got \"%s\"\n", argv[2]);
    return 2;
  }
  omp_set_num_threads(threads);
  char why[512] = "";
  const int bf16 = kern_bf16_supported(why, sizeof why);
  printf("machine threads=%d gemm_backend=%s onednn_isa=%s bf16=%s\n", threads,
         kern_gemm_backend_name(kern_gemm_backend()), kern_gemm_isa_name(), bf16 ? "yes" : why);
  double fma = peak_fma_gflops(threads, 0.5);
  double bf16_peak = bf16 ? peak_bf16_gflops(threads, 0.5) : 0.0;
  printf("machine threads=%d fma_peak_gflops=%.1f bf16_peak_gflops=%.1f bf16_peak_source=\"%s\"\n", threads, fma, bf16_peak,
         bf16 ? peak_bf16_source() : "none");
  if (peaks_only) return 0;
  static const int sizes[] = {256, 512, 1024, 2048};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    double blas = peak_gemm_gflops(GEMM_BACKEND_OPENBLAS, KERN_PRECISION_FP32, sizes[i], 0.5);
    double dnnl = peak_gemm_gflops(GEMM_BACKEND_ONEDNN, KERN_PRECISION_FP32, sizes[i], 0.5);
    printf("machine threads=%d n=%d sgemm_openblas_gflops=%.1f (%.1f%% of fma peak) sgemm_onednn_gflops=%.1f "
           "(%.1f%%)",
           threads, sizes[i], blas, 100.0 * blas / fma, dnnl, 100.0 * dnnl / fma);
    if (bf16) {
      double b16 = peak_gemm_gflops(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16, sizes[i], 0.5);
      printf(" bf16_matmul_onednn_gflops=%.1f (%.1f%% of bf16 peak)", b16, 100.0 * b16 / bf16_peak);
    }
    printf("\n");
  }
  return 0;
}
