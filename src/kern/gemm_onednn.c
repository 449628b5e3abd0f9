/* The oneDNN backend of gemm(): matmul primitives with run-time shapes,
 * and for bf16 on AMX CPUs fixed-shape ones (gemm_onednn_shapes.c says when
 * and why).
 *
 * Why run-time dimensions: the dropless expert GEMMs change their row count
 * every step, and a primitive per shape would be created (JIT-compiled, a
 * few milliseconds) on the hot path again and again. A primitive whose M,
 * N, K and strides are DNNL_RUNTIME_DIM_VAL is created once and takes the
 * shape at execution. There is one per (transA, transB, beta 0 or not,
 * alpha 1 or not, fp32 or bf16 inputs): 32 at most, each created on first
 * use under a lock and then only read.
 *
 * Thread-safety: per-expert GEMMs run on OpenMP workers concurrently.
 * Executing one primitive from several threads is safe in oneDNN as long as
 * each call brings its own scratchpad, so primitives use the user
 * scratchpad mode and every thread keeps its own stream, scratchpad and
 * bf16 conversion buffers (ThreadState). Those states are linked into a
 * global list: they live as long as the process and stay reachable.
 *
 * bf16: A and B are converted (round-to-nearest-even) into dense bf16
 * copies in the thread's buffers, then multiplied with fp32 accumulation
 * into fp32 C; beta == 1 is a sum post-op, so gradients accumulate in fp32.
 * An operand that is a registered weight is read from the bf16 weight
 * cache instead (kern/bf16_weights.h), converted once per optimizer step. */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/bf16.h"
#include "kern/bf16_weights.h"
#include "kern/gemm.h"
#include "kern/gemm_internal.h"

typedef struct ThreadState {
  dnnl_stream_t stream;
  void *scratchpad;
  size_t scratchpad_bytes;
  kern_bf16 *a16, *b16;
  size_t a16_bytes, b16_bytes;
  struct ThreadState *next;
} ThreadState;

typedef struct Primitive {
  dnnl_primitive_t primitive;
  size_t scratchpad_bytes;
} Primitive;

enum { KEY_DTYPES = 2, KEY_TRANS = 2, KEY_BETA = 2, KEY_ALPHA = 2 };

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status = dnnl_success;
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
static Primitive *_Atomic cache[KEY_DTYPES][KEY_TRANS][KEY_TRANS][KEY_BETA][KEY_ALPHA];
static ThreadState *_Atomic all_states;
static _Atomic int primitives_created;
static _Thread_local ThreadState *my_state;

static void engine_init(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

static int fail(char *err, size_t err_len, const char *what, dnnl_status_t status) {
  if (err && err_len) snprintf(err, err_len, "oneDNN %s failed (%s)", what, dnnl_status2str(status));
  return -1;
}

/* Row-major [rows, cols] with row stride ld; a transposed operand is the
 * stored matrix read column-wise: dims swap, strides {1, ld}. */
static void operand_dims(int trans, dnnl_dim_t rows, dnnl_dim_t cols, dnnl_dim_t ld, dnnl_dims_t dims,
                         dnnl_dims_t strides) {
  dims[0] = rows;
  dims[1] = cols;
  strides[0] = trans ? 1 : ld;
  strides[1] = trans ? ld : 1;
}

/* A primitive for one kind of product. `shape` NULL: every dimension and
 * stride is a run-time value; else the shape's own, with A and B dense (as
 * the bf16 path always makes them). */
static int create_primitive(Primitive *out, int bf16, int ta, int tb, int beta_sum, int alpha_scaled,
                            const GemmShapeKey *shape, char *err, size_t err_len) {
  const dnnl_dim_t R = DNNL_RUNTIME_DIM_VAL;
  const dnnl_dim_t M = shape ? shape->M : R, N = shape ? shape->N : R, K = shape ? shape->K : R;
  const dnnl_dim_t lda = shape ? (ta ? M : K) : R, ldb = shape ? (tb ? K : N) : R, ldc = shape ? shape->ldc : R;
  const dnnl_data_type_t in_type = bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_dims_t dims, strides;
  dnnl_memory_desc_t a_md, b_md, c_md;
  dnnl_status_t st;
  operand_dims(ta, M, K, lda, dims, strides);
  if ((st = dnnl_memory_desc_init_by_strides(&a_md, 2, dims, in_type, strides)) != dnnl_success)
    return fail(err, err_len, "memory descriptor", st);
  operand_dims(tb, K, N, ldb, dims, strides);
  if ((st = dnnl_memory_desc_init_by_strides(&b_md, 2, dims, in_type, strides)) != dnnl_success)
    return fail(err, err_len, "memory descriptor", st);
  operand_dims(0, M, N, ldc, dims, strides);
  if ((st = dnnl_memory_desc_init_by_strides(&c_md, 2, dims, dnnl_f32, strides)) != dnnl_success)
    return fail(err, err_len, "memory descriptor", st);
  dnnl_matmul_desc_t desc;
  if ((st = dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md)) != dnnl_success)
    return fail(err, err_len, "matmul descriptor", st);

  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post_ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  int rc = -1;
  if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success) goto out;
  if ((st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success) goto out;
  if (alpha_scaled) {
    const float runtime_scale = DNNL_RUNTIME_F32_VAL;
    if ((st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &runtime_scale)) != dnnl_success) goto out;
  }
  if (beta_sum) {
    if ((st = dnnl_post_ops_create(&post_ops)) != dnnl_success) goto out;
    if ((st = dnnl_post_ops_append_sum(post_ops, 1.0f)) != dnnl_success) goto out;
    if ((st = dnnl_primitive_attr_set_post_ops(attr, post_ops)) != dnnl_success) goto out;
  }
  if ((st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL)) != dnnl_success) goto out;
  const dnnl_memory_desc_t *scratch_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  out->scratchpad_bytes = scratch_md ? dnnl_memory_desc_get_size(scratch_md) : 0;
  if ((st = dnnl_primitive_create(&out->primitive, pd)) != dnnl_success) goto out;
  rc = 0;
out:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (post_ops) dnnl_post_ops_destroy(post_ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return rc == 0 ? 0 : fail(err, err_len, "matmul primitive creation", st);
}

static const Primitive *get_primitive(int bf16, int ta, int tb, int beta_sum, int alpha_scaled, char *err,
                                      size_t err_len) {
  Primitive *_Atomic *slot = &cache[bf16][ta][tb][beta_sum][alpha_scaled];
  Primitive *p = atomic_load_explicit(slot, memory_order_acquire);
  if (p) return p;
  pthread_mutex_lock(&create_lock);
  p = atomic_load_explicit(slot, memory_order_acquire);
  if (!p) {
    Primitive *fresh = calloc(1, sizeof *fresh);
    if (!fresh) {
      if (err && err_len) snprintf(err, err_len, "out of memory creating a oneDNN primitive");
    } else if (create_primitive(fresh, bf16, ta, tb, beta_sum, alpha_scaled, NULL, err, err_len) != 0) {
      free(fresh);
    } else {
      atomic_store_explicit(slot, fresh, memory_order_release);
      atomic_fetch_add(&primitives_created, 1);
      p = fresh;
    }
  }
  pthread_mutex_unlock(&create_lock);
  return p;
}

/* gemm_shape_primitive's creator: a bf16 primitive for exactly this shape,
 * or NULL (the caller then keeps the run-time primitive). */
static void *create_fixed(const GemmShapeKey *key) {
  Primitive *fresh = calloc(1, sizeof *fresh);
  if (!fresh) return NULL;
  if (create_primitive(fresh, 1, key->ta, key->tb, key->beta_sum, key->alpha_scaled, key, NULL, 0) != 0) {
    free(fresh);
    return NULL;
  }
  return fresh;
}

static ThreadState *thread_state(char *err, size_t err_len) {
  if (my_state) return my_state;
  ThreadState *s = calloc(1, sizeof *s);
  if (!s) {
    if (err && err_len) snprintf(err, err_len, "out of memory for a GEMM thread state");
    return NULL;
  }
  dnnl_status_t st = dnnl_stream_create(&s->stream, engine, dnnl_stream_default_flags);
  if (st != dnnl_success) {
    free(s);
    fail(err, err_len, "stream creation", st);
    return NULL;
  }
  ThreadState *head = atomic_load(&all_states);
  do s->next = head;
  while (!atomic_compare_exchange_weak(&all_states, &head, s));
  my_state = s;
  return s;
}

/* Grows *buf to at least `bytes`; the old contents need not survive. */
static int ensure_bytes(void **buf, size_t *have, size_t bytes) {
  if (*have >= bytes) return 0;
  void *fresh = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!fresh) return -1;
  free(*buf);
  *buf = fresh;
  *have = bytes;
  return 0;
}

/* The dense bf16 [rows, cols] form of the fp32 operand X (row stride ld):
 * a registered weight's copy from the cache (kern/bf16_weights.h) when X
 * lies in one, else X converted into the thread's buffer *buf. Either way
 * the matrix oneDNN reads is dense with the same bf16 values, so cached
 * and uncached products are the same bit for bit. */
static int bf16_operand(const void **out, kern_bf16 **buf, size_t *have, const float *X, long rows, long cols,
                        long ld) {
  const kern_bf16 *cached = bf16_weights_lookup(X, rows, cols, ld);
  if (cached && ld == cols) {
    *out = cached;
    return 0;
  }
  if (ensure_bytes((void **)buf, have, (size_t)rows * cols * sizeof(kern_bf16)) != 0) return -1;
  if (cached) {
    for (long r = 0; r < rows; r++) memcpy(*buf + r * cols, cached + r * ld, (size_t)cols * sizeof(kern_bf16));
  } else {
    bf16_pack_rows(*buf, X, rows, cols, ld);
  }
  *out = *buf;
  return 0;
}

static int make_memory(dnnl_memory_t *mem, dnnl_data_type_t type, int trans, int rows, int cols, int ld,
                       const void *data, char *err, size_t err_len) {
  dnnl_dims_t dims, strides;
  dnnl_memory_desc_t md;
  operand_dims(trans, rows, cols, ld, dims, strides);
  dnnl_status_t st = dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides);
  if (st == dnnl_success) st = dnnl_memory_create(mem, &md, engine, (void *)data);
  return st == dnnl_success ? 0 : fail(err, err_len, "memory creation", st);
}

int gemm_onednn(int bf16, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc, char *err, size_t err_len) {
  pthread_once(&engine_once, engine_init);
  if (engine_status != dnnl_success) return fail(err, err_len, "CPU engine creation", engine_status);
  if (beta != 0.0f && beta != 1.0f) {
    if (err && err_len) snprintf(err, err_len, "internal: beta %g reached the oneDNN backend (0 or 1 expected)", beta);
    return -1;
  }
  const int ta = transA != 0, tb = transB != 0;
  ThreadState *ts = thread_state(err, err_len);
  if (!ts) return -1;

  const void *a_data = A, *b_data = B;
  if (bf16) {
    /* Stored shapes: A is [M, K] or, transposed, [K, M]; B [K, N] or [N, K]. */
    const long a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    if (bf16_operand(&a_data, &ts->a16, &ts->a16_bytes, A, a_rows, a_cols, lda) != 0 ||
        bf16_operand(&b_data, &ts->b16, &ts->b16_bytes, B, b_rows, b_cols, ldb) != 0) {
      if (err && err_len) snprintf(err, err_len, "out of memory for bf16 GEMM operands");
      return -1;
    }
    lda = (int)a_cols;
    ldb = (int)b_cols;
  }
  const Primitive *prim = NULL;
  Primitive *owned_prim = NULL;
  if (bf16 && !gemm_shape_rows_vary() && kern_gemm_fixed_shapes_active()) {
    const GemmShapeKey key = {ta, tb, beta != 0.0f, alpha != 1.0f, M, N, K, ldc};
    int owned = 0;
    prim = gemm_shape_primitive(&key, create_fixed, &owned);
    if (owned) owned_prim = (Primitive *)prim;
    if (prim) gemm_shape_count_product();
  }
  if (!prim) prim = get_primitive(bf16 != 0, ta, tb, beta != 0.0f, alpha != 1.0f, err, err_len);
  if (!prim) return -1;
  if (prim->scratchpad_bytes && ensure_bytes(&ts->scratchpad, &ts->scratchpad_bytes, prim->scratchpad_bytes) != 0) {
    if (err && err_len) snprintf(err, err_len, "out of memory for the oneDNN scratchpad");
    return -1;
  }
  const dnnl_data_type_t in_type = bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
  dnnl_exec_arg_t args[5];
  int nargs = 0, rc = -1;
  float alpha_value = alpha;
  if (make_memory(&mem[0], in_type, ta, M, K, lda, a_data, err, err_len) != 0) goto out;
  args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem[0]};
  if (make_memory(&mem[1], in_type, tb, K, N, ldb, b_data, err, err_len) != 0) goto out;
  args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem[1]};
  if (make_memory(&mem[2], dnnl_f32, 0, M, N, ldc, C, err, err_len) != 0) goto out;
  args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem[2]};
  if (alpha != 1.0f) {
    const dnnl_dims_t one = {1};
    dnnl_memory_desc_t scale_md;
    dnnl_status_t st_scale = dnnl_memory_desc_init_by_tag(&scale_md, 1, one, dnnl_f32, dnnl_a);
    if (st_scale == dnnl_success) st_scale = dnnl_memory_create(&mem[3], &scale_md, engine, &alpha_value);
    if (st_scale != dnnl_success) {
      fail(err, err_len, "memory creation", st_scale);
      goto out;
    }
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_OUTPUT_SCALES, mem[3]};
  }
  if (prim->scratchpad_bytes) {
    if (make_memory(&mem[4], dnnl_u8, 0, 1, (int)prim->scratchpad_bytes, (int)prim->scratchpad_bytes,
                    ts->scratchpad, err, err_len) != 0)
      goto out;
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[4]};
  }
  dnnl_status_t st = dnnl_primitive_execute(prim->primitive, ts->stream, nargs, args);
  if (st == dnnl_success) st = dnnl_stream_wait(ts->stream);
  rc = st == dnnl_success ? 0 : fail(err, err_len, "matmul execution", st);
out:
  for (int i = 0; i < 5; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  if (owned_prim) {
    dnnl_primitive_destroy(owned_prim->primitive);
    free(owned_prim);
  }
  return rc;
}

const char *gemm_onednn_isa_name(void) {
  const char *name = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
  return strncmp(name, "cpu_isa_", 8) == 0 ? name + 8 : name; /* "avx512_core_bf16", not "cpu_isa_..." */
}

int gemm_onednn_primitive_count(void) { return atomic_load(&primitives_created); }
