/* Elementwise helpers on float arrays (OpenMP-parallel for large n). */
#ifndef FIVEFOLD_KERN_VECOPS_H
#define FIVEFOLD_KERN_VECOPS_H

#include <stddef.h>

void vec_zero(float *x, size_t n);
void vec_copy(float *dst, const float *src, size_t n);
void vec_add(float *out, const float *a, const float *b, size_t n); /* out = a + b */
void vec_acc(float *acc, const float *x, size_t n);                 /* acc += x */
void vec_scale(float *x, float s, size_t n);                        /* x *= s */
void vec_axpy(float *y, float a, const float *x, size_t n);         /* y += a*x */
double vec_sumsq(const float *x, size_t n);                         /* double accumulation */

#endif
