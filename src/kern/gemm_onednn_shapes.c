/* The table of fixed-shape oneDNN primitives for bf16 GEMMs, and the
 * switch that decides whether they are used (FIVEFOLD_GEMM_FIXED_SHAPES).
 *
 * Why fixed shapes at all: a matmul primitive whose dimensions are known
 * when it is created can be oneDNN's brgemm kernel, which on CPUs with AMX
 * runs bf16 products on the tile unit; a primitive with run-time
 * dimensions (gemm_onednn.c's default) is always the older gemm:jit kernel,
 * which does not use the tile unit. Measured for GPT-2 124M's products at
 * 256 rows on 2 threads of an AMX Xeon: 1.3x to 2.4x faster (the LM head
 * 458 -> 720 GFLOP/s, the MLP's down projection 386 -> 1,072). Without AMX
 * the two kernels are within a few percent either way (fp32, and bf16 on
 * avx512_core_bf16), so "auto" uses them only where oneDNN's ISA has AMX.
 *
 * Which products: every bf16 product, from its first call, except those a
 * thread marks as having row counts that change from call to call
 * (kern_gemm_rows_vary_begin: the dropless MoE experts), which would
 * JIT-compile a kernel (milliseconds) for nearly every call. The choice is
 * a pure function of the shape and the mark, never of what ran before, so
 * a resumed run, a recomputed forward or a rerun computes bit for bit what
 * the straight run did. The table keeps up to TABLE_SLOTS / 2 primitives;
 * past that, a new shape's primitive is made for the one call and
 * destroyed (slow, the same result).
 *
 * Thread-safety: one mutex guards the table; a GEMM that takes it costs
 * tens of microseconds or more, so the lock is not contended in practice. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/gemm.h"
#include "kern/gemm_internal.h"

enum { TABLE_SLOTS = 4096 };

typedef struct Slot {
  GemmShapeKey key;
  int used;
  int failed; /* creation failed once: keep the run-time primitive */
  void *primitive;
} Slot;

static Slot table[TABLE_SLOTS];
static int table_used;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int fixed_created;
static _Atomic long fixed_products;
static _Thread_local int rows_vary;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static _Atomic int mode = GEMM_FIXED_SHAPES_AUTO;

static int env_value(const char **raw) {
  const char *v = getenv("FIVEFOLD_GEMM_FIXED_SHAPES");
  *raw = v;
  if (!v || !*v || !strcmp(v, "auto")) return GEMM_FIXED_SHAPES_AUTO;
  if (!strcmp(v, "on") || !strcmp(v, "1")) return GEMM_FIXED_SHAPES_ON;
  if (!strcmp(v, "off") || !strcmp(v, "0")) return GEMM_FIXED_SHAPES_OFF;
  return -1;
}

static void read_env(void) {
  const char *raw;
  const int v = env_value(&raw);
  atomic_store(&mode, v < 0 ? GEMM_FIXED_SHAPES_AUTO : v);
}

int kern_gemm_fixed_shapes_check_env(char *err, size_t err_len) {
  const char *raw;
  if (env_value(&raw) >= 0) return 0;
  if (err && err_len)
    snprintf(err, err_len,
             "environment variable FIVEFOLD_GEMM_FIXED_SHAPES must be \"auto\", \"on\" or \"off\", got \"%s\"", raw);
  return -1;
}

GemmFixedShapes kern_gemm_fixed_shapes_mode(void) {
  pthread_once(&env_once, read_env);
  return (GemmFixedShapes)atomic_load_explicit(&mode, memory_order_relaxed);
}

void kern_gemm_set_fixed_shapes(GemmFixedShapes m) {
  pthread_once(&env_once, read_env);
  atomic_store(&mode, (int)m);
}

/* oneDNN fixes its ISA at its first use, so "auto" is resolved once
 * instead of on every product. */
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int isa_has_amx;
static void read_isa(void) { isa_has_amx = strstr(gemm_onednn_isa_name(), "amx") != NULL; }

int kern_gemm_fixed_shapes_active(void) {
  switch (kern_gemm_fixed_shapes_mode()) {
  case GEMM_FIXED_SHAPES_ON:
    return 1;
  case GEMM_FIXED_SHAPES_OFF:
    return 0;
  default:
    pthread_once(&amx_once, read_isa);
    return isa_has_amx;
  }
}

int kern_gemm_fixed_shape_count(void) { return atomic_load(&fixed_created); }

long kern_gemm_fixed_shape_products(void) { return atomic_load(&fixed_products); }

void gemm_shape_count_product(void) { atomic_fetch_add_explicit(&fixed_products, 1, memory_order_relaxed); }

int kern_gemm_rows_vary_begin(void) {
  const int previous = rows_vary;
  rows_vary = 1;
  return previous;
}

void kern_gemm_rows_vary_end(int previous) { rows_vary = previous; }

int gemm_shape_rows_vary(void) { return rows_vary; }

static unsigned long key_hash(const GemmShapeKey *k) {
  unsigned long h = 1469598103934665603ul;
  const int v[] = {k->ta, k->tb, k->beta_sum, k->alpha_scaled, k->M, k->N, k->K, k->ldc};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) h = (h ^ (unsigned)v[i]) * 1099511628211ul;
  return h;
}

static int key_equal(const GemmShapeKey *a, const GemmShapeKey *b) {
  return a->ta == b->ta && a->tb == b->tb && a->beta_sum == b->beta_sum && a->alpha_scaled == b->alpha_scaled &&
         a->M == b->M && a->N == b->N && a->K == b->K && a->ldc == b->ldc;
}

void *gemm_shape_primitive(const GemmShapeKey *key, GemmShapeCreate create, int *owned) {
  void *out = NULL;
  *owned = 0;
  pthread_mutex_lock(&table_lock);
  Slot *slot = NULL;
  int full = 0;
  for (unsigned long i = key_hash(key) % TABLE_SLOTS, probes = 0; probes < TABLE_SLOTS;
       i = (i + 1) % TABLE_SLOTS, probes++) {
    if (!table[i].used) {
      /* Half full is the limit, so probes stay short. */
      if (table_used < TABLE_SLOTS / 2) {
        table[i].used = 1;
        table[i].key = *key;
        table_used++;
        slot = &table[i];
      } else {
        full = 1;
      }
      break;
    }
    if (key_equal(&table[i].key, key)) {
      slot = &table[i];
      break;
    }
  }
  if (slot && !slot->primitive && !slot->failed) {
    slot->primitive = create(key);
    if (slot->primitive)
      atomic_fetch_add(&fixed_created, 1);
    else
      slot->failed = 1;
  }
  if (slot) out = slot->primitive;
  pthread_mutex_unlock(&table_lock);
  if (full) {
    out = create(key);
    *owned = out != NULL;
  }
  return out;
}
