/* The machine's measured peaks: a register-resident fp32 FMA loop and a
 * bf16 product loop (vdpbf16ps, or AMX's tdpbf16ps) run on every thread of
 * the OpenMP pool.
 * These are the "stated peaks" MFU is measured against when no peak is
 * given: fp32 runs against the FMA peak, bf16 runs against the bf16 one. */
#ifndef FIVEFOLD_KERN_PEAK_H
#define FIVEFOLD_KERN_PEAK_H

#include "kern/gemm.h"

/* GFLOP/s (1 FMA = 2 FLOPs) summed over `threads` threads (<= 0: the
 * OpenMP default), measured for about `seconds` after a short warm-up; each
 * thread reports its fastest short batch, so time slices taken by other
 * processes do not lower the figure. */
double peak_fma_gflops(int threads, double seconds);

/* GFLOP/s (2 n^3 per product) of square n x n SGEMM through gemm(), called
 * from outside any parallel region so the BLAS uses the whole OpenMP pool:
 * the fastest of the products run in about `seconds` after a warm-up one.
 * 0 if n <= 0 or the three matrices cannot be allocated. */
double peak_sgemm_gflops(int n, double seconds);

/* GFLOP/s of bf16 products with fp32 accumulation (2 FLOPs per bf16 pair),
 * measured as peak_fma_gflops measures the FMA: the AMX tile product
 * (tdpbf16ps) where the CPU has AMX and oneDNN uses it (its bf16 GEMMs run
 * there, far above the vector instruction), else the vector dot product
 * (vdpbf16ps). 0 where bf16 compute cannot run (kern_bf16_supported()) or
 * the build has no AVX-512 BF16. */
double peak_bf16_gflops(int threads, double seconds);
/* Which instruction the last peak_bf16_gflops measured: "vdpbf16ps" or
 * "tdpbf16ps (AMX)". */
const char *peak_bf16_source(void);

/* As peak_sgemm_gflops, on an explicit GEMM backend and precision. 0 if
 * that combination cannot run here. */
double peak_gemm_gflops(GemmBackend backend, KernPrecision precision, int n, double seconds);

#endif
