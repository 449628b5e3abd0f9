/* The bf16 weight cache (see bf16_weights.h): a registry of fp32 matrices
 * sorted by address, each with a lazily made bf16 copy and a generation
 * count.
 *
 * Staleness is by generations, not a flag: invalidation bumps `gen`, and a
 * conversion records the generation it read before converting. A copy is
 * current when the two agree, so an invalidation that lands while a copy
 * is being made still leaves it stale.
 *
 * FIVEFOLD_TEST_BF16_CACHE_STALE (non-empty) makes invalidation do nothing:
 * only for the tests that prove a cache left stale after an optimizer step
 * is caught (tests/parallel/precision_test.sh, mode cache-bf16). */
#include "kern/bf16_weights.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Entry {
  const float *w;
  long rows, cols;
  size_t n; /* rows * cols */
  kern_bf16 *copy;
  _Atomic unsigned long gen;       /* bumped by every invalidation */
  _Atomic unsigned long converted; /* the generation the copy holds, + 1 (0: none) */
  pthread_mutex_t lock;            /* one conversion at a time */
} Entry;

static pthread_rwlock_t registry_lock = PTHREAD_RWLOCK_INITIALIZER;
static Entry **entries; /* sorted by w, non-overlapping */
static long num_entries, cap_entries;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static _Atomic int enabled = 1;
static int skip_invalidation;
static _Atomic unsigned long long stat_hits, stat_conversions;

enum { ENV_ON = 1, ENV_OFF = 0, ENV_BAD = -1 };

static int env_value(const char **raw) {
  const char *v = getenv("FIVEFOLD_BF16_WEIGHT_CACHE");
  *raw = v;
  if (!v || !*v || !strcmp(v, "on") || !strcmp(v, "1")) return ENV_ON;
  if (!strcmp(v, "off") || !strcmp(v, "0")) return ENV_OFF;
  return ENV_BAD;
}

static void read_env(void) {
  const char *raw;
  atomic_store(&enabled, env_value(&raw) != ENV_OFF);
  const char *stale = getenv("FIVEFOLD_TEST_BF16_CACHE_STALE");
  skip_invalidation = stale && *stale;
}

int bf16_weights_check_env(char *err, size_t err_len) {
  const char *raw;
  if (env_value(&raw) != ENV_BAD) return 0;
  if (err && err_len)
    snprintf(err, err_len, "environment variable FIVEFOLD_BF16_WEIGHT_CACHE must be \"on\" or \"off\", got \"%s\"",
             raw);
  return -1;
}

int bf16_weights_enabled(void) {
  pthread_once(&env_once, read_env);
  return atomic_load_explicit(&enabled, memory_order_relaxed);
}

static void entry_free(Entry *e) {
  free(e->copy);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

static int overlaps(const Entry *e, const float *base, size_t n) { return e->w < base + n && base < e->w + e->n; }

/* Index of the first entry whose end lies past `p` (entries are sorted and
 * disjoint, so that is the only one that can contain p). */
static long first_ending_after(const float *p) {
  long lo = 0, hi = num_entries;
  while (lo < hi) {
    long mid = lo + (hi - lo) / 2;
    if (entries[mid]->w + entries[mid]->n <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Removes the entries overlapping [base, base + n); the write lock is held. */
static void remove_overlapping(const float *base, size_t n) {
  long i = first_ending_after(base), j = i;
  while (j < num_entries && overlaps(entries[j], base, n)) entry_free(entries[j++]);
  if (j > i && j < num_entries) memmove(entries + i, entries + j, (size_t)(num_entries - j) * sizeof *entries);
  num_entries -= j - i;
}

int bf16_weights_register(const float *w, long rows, long cols) {
  if (!w || rows <= 0 || cols <= 0 || !bf16_weights_enabled()) return 0;
  Entry *e = calloc(1, sizeof *e);
  if (!e) return -1;
  e->w = w;
  e->rows = rows;
  e->cols = cols;
  e->n = (size_t)rows * (size_t)cols;
  pthread_mutex_init(&e->lock, NULL);
  pthread_rwlock_wrlock(&registry_lock);
  remove_overlapping(w, e->n);
  int rc = 0;
  if (num_entries == cap_entries) {
    long cap = cap_entries ? 2 * cap_entries : 64;
    Entry **grown = realloc(entries, (size_t)cap * sizeof *grown);
    if (!grown) rc = -1;
    else {
      entries = grown;
      cap_entries = cap;
    }
  }
  if (rc == 0) {
    long at = first_ending_after(w);
    if (at < num_entries) memmove(entries + at + 1, entries + at, (size_t)(num_entries - at) * sizeof *entries);
    entries[at] = e;
    num_entries++;
  }
  pthread_rwlock_unlock(&registry_lock);
  if (rc) entry_free(e);
  return rc;
}

int bf16_weights_register_tensor(const float *w, int ndim, long dim0, long dim1, size_t numel) {
  if (ndim < 2 || dim0 <= 0 || numel == 0) return 0;
  if (ndim != 3 || dim1 <= 0) return bf16_weights_register(w, dim0, (long)(numel / (size_t)dim0));
  const size_t each = numel / (size_t)dim0;
  int rc = 0;
  for (long e = 0; e < dim0 && !rc; e++) rc = bf16_weights_register(w + (size_t)e * each, dim1, (long)each / dim1);
  return rc;
}

void bf16_weights_forget(const float *base, size_t n) {
  if (!base || !n) return;
  pthread_rwlock_wrlock(&registry_lock);
  remove_overlapping(base, n);
  pthread_rwlock_unlock(&registry_lock);
}

void bf16_weights_invalidate(const float *base, size_t n) {
  pthread_once(&env_once, read_env);
  if (!base || !n || skip_invalidation) return;
  pthread_rwlock_rdlock(&registry_lock);
  for (long i = first_ending_after(base); i < num_entries && overlaps(entries[i], base, n); i++)
    atomic_fetch_add_explicit(&entries[i]->gen, 1, memory_order_release);
  pthread_rwlock_unlock(&registry_lock);
}

/* Makes e's copy current; 0, or -1 when out of memory (no copy then). */
static int make_current(Entry *e) {
  unsigned long gen = atomic_load_explicit(&e->gen, memory_order_acquire);
  if (atomic_load_explicit(&e->converted, memory_order_acquire) == gen + 1) return 0;
  pthread_mutex_lock(&e->lock);
  int rc = 0;
  gen = atomic_load_explicit(&e->gen, memory_order_acquire);
  if (atomic_load_explicit(&e->converted, memory_order_acquire) != gen + 1) {
    if (!e->copy) e->copy = aligned_alloc(64, (e->n * sizeof(kern_bf16) + 63) / 64 * 64);
    if (!e->copy) {
      rc = -1;
    } else {
      /* The conversion of the per-call path, so every element rounds alike. */
      bf16_pack_rows(e->copy, e->w, e->rows, e->cols, e->cols);
      atomic_store_explicit(&e->converted, gen + 1, memory_order_release);
      atomic_fetch_add_explicit(&stat_conversions, 1, memory_order_relaxed);
    }
  }
  pthread_mutex_unlock(&e->lock);
  return rc;
}

const kern_bf16 *bf16_weights_lookup(const float *p, long rows, long cols, long ld) {
  if (!p || rows <= 0 || cols <= 0 || ld < cols || !bf16_weights_enabled()) return NULL;
  const size_t extent = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
  const kern_bf16 *out = NULL;
  pthread_rwlock_rdlock(&registry_lock);
  long i = first_ending_after(p);
  if (i < num_entries) {
    Entry *e = entries[i];
    if (p >= e->w && p + extent <= e->w + e->n && make_current(e) == 0) {
      out = e->copy + (p - e->w);
      atomic_fetch_add_explicit(&stat_hits, 1, memory_order_relaxed);
    }
  }
  pthread_rwlock_unlock(&registry_lock);
  return out;
}

void bf16_weights_set_enabled(int on) {
  pthread_once(&env_once, read_env);
  atomic_store(&enabled, on != 0);
  if (on) return;
  pthread_rwlock_wrlock(&registry_lock);
  for (long i = 0; i < num_entries; i++) entry_free(entries[i]);
  num_entries = 0;
  pthread_rwlock_unlock(&registry_lock);
}

void bf16_weights_stats(Bf16WeightStats *out) {
  memset(out, 0, sizeof *out);
  pthread_rwlock_rdlock(&registry_lock);
  out->tensors = num_entries;
  for (long i = 0; i < num_entries; i++) {
    Entry *e = entries[i];
    out->registered_bytes += e->n * sizeof(kern_bf16);
    pthread_mutex_lock(&e->lock);
    if (e->copy) out->resident_bytes += e->n * sizeof(kern_bf16);
    pthread_mutex_unlock(&e->lock);
  }
  pthread_rwlock_unlock(&registry_lock);
  out->hits = atomic_load(&stat_hits);
  out->conversions = atomic_load(&stat_conversions);
}
