/* The machine's measured fp32 FMA peak: a register-resident FMA loop run on
 * every thread of the OpenMP pool. This is the "stated peak" MFU is measured
 * against when no peak is given. */
#ifndef FIVEFOLD_KERN_PEAK_H
#define FIVEFOLD_KERN_PEAK_H

/* GFLOP/s (1 FMA = 2 FLOPs) summed over `threads` threads, measured for about
 * `seconds`. */
double peak_fma_gflops(int threads, double seconds);

#endif
