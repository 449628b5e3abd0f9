/* bfloat16 for mixed-precision compute: conversion from fp32 with
 * round-to-nearest-even, and whether this CPU (and oneDNN, as capped by
 * ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) can multiply in it. bf16 only ever
 * holds GEMM inputs; everything stored or accumulated stays fp32. */
#ifndef FIVEFOLD_KERN_BF16_H
#define FIVEFOLD_KERN_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t kern_bf16;

/* Round-to-nearest-even on the 16 dropped mantissa bits; NaN stays a
 * (quiet) NaN instead of rounding into infinity. */
static inline kern_bf16 bf16_from_float(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (kern_bf16)((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (kern_bf16)(bits >> 16);
}

static inline float bf16_to_float(kern_bf16 h) {
  uint32_t bits = (uint32_t)h << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* x rounded to the nearest bf16 value, kept as a float. */
static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

/* dst[r * cols + c] = bf16(src[r * ld + c]): a strided fp32 matrix packed
 * densely (row stride cols). Uses the CPU's conversion instruction where
 * the build has it (same rounding). */
void bf16_pack_rows(kern_bf16 *dst, const float *src, long rows, long cols, long ld);

/* In place: every float rounded to bf16 precision. */
void bf16_round_array(float *x, long n);

/* 1 when bf16 compute can run here. Otherwise 0, and `why` (if not NULL)
 * names the missing CPU feature, or says that oneDNN is capped below
 * avx512_core_bf16 by ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA. */
int kern_bf16_supported(char *why, size_t why_len);

#endif
