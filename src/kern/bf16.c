/* bf16 conversion of GEMM operands and the check that bf16 compute can run
 * on this CPU. The vector path converts every element, tails included,
 * with the same instruction (masked loads and stores), so the bf16 value
 * of an element never depends on where it sits in a row. */
#include "kern/bf16.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define BF16_VECTOR_CONVERT 1
#endif

/* Conversion below this many elements runs on the calling thread. */
#define BF16_PAR_MIN_ELEMS (1L << 16)

static void pack_row(kern_bf16 *dst, const float *src, long cols) {
#ifdef BF16_VECTOR_CONVERT
  long c = 0;
  for (; c + 16 <= cols; c += 16) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + c));
    _mm256_storeu_si256((__m256i *)(dst + c), (__m256i)h);
  }
  if (c < cols) {
    const __mmask16 mask = (__mmask16)((1u << (cols - c)) - 1u);
    __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + c));
    _mm256_mask_storeu_epi16(dst + c, mask, (__m256i)h);
  }
#else
  for (long c = 0; c < cols; c++) dst[c] = bf16_from_float(src[c]);
#endif
}

void bf16_pack_rows(kern_bf16 *dst, const float *src, long rows, long cols, long ld) {
  if (rows <= 0 || cols <= 0) return;
#pragma omp parallel for schedule(static) if (rows * cols >= BF16_PAR_MIN_ELEMS && !omp_in_parallel())
  for (long r = 0; r < rows; r++) pack_row(dst + r * cols, src + r * ld, cols);
}

void bf16_round_array(float *x, long n) {
  for (long i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

/* The answer cannot change while the process runs (oneDNN fixes its ISA at
 * the first query), and GEMMs ask on every bf16 call: decided once. */
static pthread_once_t support_once = PTHREAD_ONCE_INIT;
static int support_ok;
static char support_why[512];

static int decide_support(char *why, size_t why_len) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    if (why && why_len)
      snprintf(why, why_len,
               "this CPU lacks the avx512_bf16 feature (AVX-512 BF16, the vdpbf16ps instruction) that bf16 "
               "compute needs; train with --precision fp32");
    return 0;
  }
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) != (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
    if (why && why_len)
      snprintf(why, why_len,
               "oneDNN runs with ISA %s, below avx512_core_bf16 (capped by ONEDNN_MAX_CPU_ISA or "
               "DNNL_MAX_CPU_ISA?), so the avx512_bf16 CPU feature cannot be used; unset the cap or train "
               "with --precision fp32",
               dnnl_cpu_isa2str(isa) + (strncmp(dnnl_cpu_isa2str(isa), "cpu_isa_", 8) == 0 ? 8 : 0));
    return 0;
  }
  return 1;
}

static void decide_support_once(void) { support_ok = decide_support(support_why, sizeof support_why); }

int kern_bf16_supported(char *why, size_t why_len) {
  pthread_once(&support_once, decide_support_once);
  if (!support_ok && why && why_len) snprintf(why, why_len, "%s", support_why);
  return support_ok;
}
