/* Measured peaks: a register-resident FMA loop and a bf16 dot-product loop
 * (vdpbf16ps, or the AMX tile product where oneDNN uses AMX) per OpenMP
 * thread, and square GEMMs through the backends. */
#include "kern/peak.h"

#include <dnnl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/timer.h"
#include "kern/bf16.h"
#include "kern/gemm.h"
#include "kern/peak_timing.h"

#if defined(__AVX512BF16__) || (defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__))
#include <immintrin.h>
#endif

/* Independent accumulator chains: FMA latency (4-5 cycles) times FMA issue
 * width (2 per cycle) is 8-10 chains in flight; 12 covers both and still
 * fits in 16 vector registers with the two constants. */
#define PEAK_CHAINS 12

#if defined(__GNUC__)
#if defined(__AVX512F__)
#define PEAK_LANES 16
#elif defined(__AVX__)
#define PEAK_LANES 8
#else
#define PEAK_LANES 4
#endif
typedef float peak_vec __attribute__((vector_size(PEAK_LANES * sizeof(float))));
#else
#define PEAK_LANES 1
typedef float peak_vec;
#endif

/* Runs `iters` rounds of PEAK_CHAINS vector FMAs and returns a value that
 * depends on all of them so the compiler cannot drop the work. x*a + b with
 * a just below 1 converges to b/(1-a): no overflow, no denormals. */
__attribute__((noinline)) static float fma_rounds(long iters, float seed) {
  peak_vec acc[PEAK_CHAINS];
  peak_vec a, b;
  for (int l = 0; l < PEAK_LANES; l++) {
#if PEAK_LANES > 1
    a[l] = 0.999999f;
    b[l] = 1e-6f;
#else
    a = 0.999999f;
    b = 1e-6f;
#endif
  }
  for (int j = 0; j < PEAK_CHAINS; j++) acc[j] = a * (seed + (float)j);
  for (long it = 0; it < iters; it++) {
    for (int j = 0; j < PEAK_CHAINS; j++) acc[j] = acc[j] * a + b;
  }
  peak_vec total = acc[0];
  for (int j = 1; j < PEAK_CHAINS; j++) total += acc[j];
  float sum = 0.0f;
#if PEAK_LANES > 1
  for (int l = 0; l < PEAK_LANES; l++) sum += total[l];
#else
  sum = total;
#endif
  return sum;
}

double peak_fma_gflops(int threads, double seconds) {
  const long rounds_per_batch = 1L << 15;
  const double flops_per_batch = 2.0 * PEAK_LANES * PEAK_CHAINS * (double)rounds_per_batch;
  return peak_timed_rate(fma_rounds, rounds_per_batch, flops_per_batch, threads, seconds);
}

/* Best single n x n x n product on (backend, precision), as for the FMA
 * loop: robust to a shared machine. */
double peak_gemm_gflops(GemmBackend backend, KernPrecision precision, int n, double seconds) {
  if (n <= 0) return 0.0;
  size_t elems = (size_t)n * (size_t)n;
  float *a = malloc(elems * sizeof *a), *b = malloc(elems * sizeof *b), *c = malloc(elems * sizeof *c);
  double gflops = 0.0;
  if (!a || !b || !c) goto out;
  for (size_t i = 0; i < elems; i++) {
    a[i] = (float)(i % 17) * 0.01f;
    b[i] = (float)(i % 13) * 0.01f;
    c[i] = 0.0f;
  }
  /* warm-up: thread pool, page faults, the primitive's creation */
  if (gemm_with(backend, precision, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, NULL, 0) != 0) goto out;
  double start = timer_now(), now = start, best = 1e30;
  do {
    double rep_start = now;
    gemm_with(backend, precision, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, NULL, 0);
    now = timer_now();
    if (now - rep_start < best) best = now - rep_start;
  } while (now - start < seconds);
  gflops = 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
out:
  free(a);
  free(b);
  free(c);
  return gflops;
}

double peak_sgemm_gflops(int n, double seconds) {
  return peak_gemm_gflops(kern_gemm_backend(), KERN_PRECISION_FP32, n, seconds);
}

#if defined(__AVX512BF16__)
/* PEAK_CHAINS independent vdpbf16ps chains, each 16 lanes x 2 bf16 pairs
 * = 64 FLOPs per instruction. The bf16 inputs are constants near 1 and
 * tiny, so the fp32 accumulators grow slowly and never overflow. */
__attribute__((noinline)) static float bf16_dot_rounds(long iters, float seed) {
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(1e-7f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
  __m512 acc[PEAK_CHAINS];
  for (int j = 0; j < PEAK_CHAINS; j++) acc[j] = _mm512_set1_ps(seed + (float)j);
  for (long it = 0; it < iters; it++)
    for (int j = 0; j < PEAK_CHAINS; j++) acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
  __m512 total = acc[0];
  for (int j = 1; j < PEAK_CHAINS; j++) total = _mm512_add_ps(total, acc[j]);
  return _mm512_reduce_add_ps(total);
}
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* AMX (Sapphire Rapids and later): oneDNN's bf16 GEMMs run on the tile
 * unit, whose rate is many times the vdpbf16ps loop's, so on such a CPU
 * the bf16 peak is the tile product's. Four independent tdpbf16ps per
 * round, each 16 x 16 outputs of 32 bf16 pairs (16,384 FLOPs), on tiles
 * of 16 rows of 64 bytes; the inputs are 1e-3, so the fp32 accumulators
 * stay small. Compiled for AMX with a function attribute, run only where
 * amx_usable() says the CPU, the kernel and oneDNN all use it. */
#define PEAK_AMX_TILE_FLOPS 16384.0
typedef struct AmxTileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} AmxTileConfig;

__attribute__((target("amx-tile,amx-bf16"), noinline)) static float amx_rounds(long iters, float seed) {
  static _Thread_local uint16_t in[16 * 32];
  float out[16 * 16];
  AmxTileConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  for (int i = 0; i < 16 * 32; i++) in[i] = 0x3a83; /* bf16 of about 1e-3 */
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, in, 64);
  _tile_loadd(5, in, 64);
  _tile_loadd(6, in, 64);
  _tile_loadd(7, in, 64);
  for (long it = 0; it < iters; it++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0] + seed;
}

/* The CPU has AMX-BF16, Linux grants this process the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, as oneDNN itself asks)
 * and oneDNN's ISA, which ONEDNN_MAX_CPU_ISA may cap, includes AMX. */
static int amx_usable(void) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("amx-bf16") || !__builtin_cpu_supports("amx-tile")) return 0;
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) return 0;
  const unsigned amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
  return ((unsigned)dnnl_get_effective_cpu_isa() & amx) == amx;
}
#else
static int amx_usable(void) { return 0; }
#endif

static const char *g_bf16_peak_source = "vdpbf16ps";

const char *peak_bf16_source(void) { return g_bf16_peak_source; }

double peak_bf16_gflops(int threads, double seconds) {
#if defined(__AVX512BF16__)
  if (!kern_bf16_supported(NULL, 0)) return 0.0;
  if (amx_usable()) {
    g_bf16_peak_source = "tdpbf16ps (AMX)";
    const long rounds_per_batch = 1L << 11;
    const double flops_per_batch = 4.0 * PEAK_AMX_TILE_FLOPS * (double)rounds_per_batch;
    return peak_timed_rate(amx_rounds, rounds_per_batch, flops_per_batch, threads, seconds);
  }
  g_bf16_peak_source = "vdpbf16ps";
  const long rounds_per_batch = 1L << 14;
  const double flops_per_batch = 64.0 * PEAK_CHAINS * (double)rounds_per_batch;
  return peak_timed_rate(bf16_dot_rounds, rounds_per_batch, flops_per_batch, threads, seconds);
#else
  (void)threads, (void)seconds;
  return 0.0;
#endif
}
