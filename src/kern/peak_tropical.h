/* The machine's measured tropical peak: a register-resident add + max loop
 * (one tropical multiply-add = one vector add and one vector max per lane)
 * on every thread of the OpenMP pool, the denominator the tropical kernels'
 * speed is stated against (as peak.h's FMA loop is for GEMMs). */
#ifndef FIVEFOLD_KERN_PEAK_TROPICAL_H
#define FIVEFOLD_KERN_PEAK_TROPICAL_H

/* G tropical multiply-adds/s summed over `threads` threads (<= 0: the
 * OpenMP default), measured for about `seconds` after a short warm-up;
 * each thread reports its fastest short batch, so time slices taken by
 * other processes do not lower the figure. Vector width: AVX-512, AVX or
 * scalar, as the build targets. */
double peak_add_max_gops(int threads, double seconds);

#endif
