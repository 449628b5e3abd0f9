/* The machine's measured fp32 FMA peak: a register-resident FMA loop run on
 * every thread of the OpenMP pool. This is the "stated peak" MFU is measured
 * against when no peak is given. */
#ifndef FIVEFOLD_KERN_PEAK_H
#define FIVEFOLD_KERN_PEAK_H

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

#endif
