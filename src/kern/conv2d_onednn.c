/* conv2d on oneDNN: building the convolution / deconvolution primitive of
 * one pass for one shape, the reorders between the caller's plain fp32
 * tensors (NCHW or NHWC) and the layouts (and bf16) the primitive chose,
 * the cache that keeps all of that per shape, and the three public passes,
 * which hand the passes of conv2d_uses_direct to kern/conv2d_direct.c. */
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/conv2d.h"
#include "kern/conv2d_direct.h"
#include "kern/conv2d_geom.h"

enum { PASS_FORWARD, PASS_BACKWARD_DATA, PASS_BACKWARD_WEIGHTS };
enum { CACHE_CAPACITY = 64, MAX_ARGS = 4 };

/* Everything that changes a primitive; all ints, compared with memcmp. */
typedef struct ConvKey {
  Conv2dShape shape;
  int precision, pass, accumulate, has_bias, threads;
  int relu; /* forward: the ReLU post-op (accumulate is the sum post-op there) */
} ConvKey;

/* One tensor argument: the caller's memory (plain fp32, its pointer set per
 * call) and, when the primitive wants another layout or data type or the
 * output accumulates, a buffer of its own and the reorder between the two
 * (with a sum post-op when accumulating into the caller's tensor). */
typedef struct ConvArg {
  int arg, is_output;
  dnnl_memory_t user_mem, prim_mem;
  dnnl_primitive_t reorder;
  dnnl_primitive_t reorder_in; /* an output the primitive also reads (the sum post-op): user -> primitive first */
} ConvArg;

typedef struct ConvEntry {
  ConvKey key;
  int winograd; /* the primitive runs Winograd */
  pthread_mutex_t lock; /* held while the entry runs: memories carry per-call pointers */
  dnnl_stream_t stream;
  dnnl_primitive_t prim;
  ConvArg args[MAX_ARGS];
  int nargs;
  uint64_t last_use;
} ConvEntry;

static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_engine;
static ConvEntry *g_cache[CACHE_CAPACITY];
static size_t g_entries, g_creations, g_winograd_calls;
static uint64_t g_clock;

#define DNNL_TRY(call)                                                                      \
  do {                                                                                      \
    dnnl_status_t st_ = (call);                                                             \
    if (st_ != dnnl_success) {                                                              \
      rc = error_set(err, st_ == dnnl_unimplemented ? ERR_UNSUPPORTED : ERR_INTERNAL,       \
                     "conv2d: oneDNN %s failed (status %d)", #call, (int)st_);              \
      goto done;                                                                            \
    }                                                                                       \
  } while (0)

static void entry_destroy(ConvEntry *e) {
  if (!e) return;
  for (int i = 0; i < e->nargs; i++) {
    ConvArg *a = &e->args[i];
    if (a->reorder) dnnl_primitive_destroy(a->reorder);
    if (a->reorder_in) dnnl_primitive_destroy(a->reorder_in);
    if (a->prim_mem && a->prim_mem != a->user_mem) dnnl_memory_destroy(a->prim_mem);
    if (a->user_mem) dnnl_memory_destroy(a->user_mem);
  }
  if (e->prim) dnnl_primitive_destroy(e->prim);
  if (e->stream) dnnl_stream_destroy(e->stream);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

/* The fp32 descriptor of n x c x h x w in the caller's layout inside a
 * tensor of rows h_full and columns w_full (a view when smaller). */
static dnnl_status_t user_activation_md(dnnl_memory_desc_t *md, int n, int c, int h, int w, int h_full, int w_full,
                                        int layout) {
  dnnl_dims_t dims = {n, c, h, w};
  if (layout == CONV2D_NCHW16C) {
    dnnl_memory_desc_t full;
    dnnl_dims_t full_dims = {n, c, h_full, w_full}, offsets = {0, 0, 0, 0};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(h == h_full && w == w_full ? md : &full, 4, full_dims, dnnl_f32,
                                                    dnnl_nChw16c);
    if (st != dnnl_success || (h == h_full && w == w_full)) return st;
    return dnnl_memory_desc_init_submemory(md, &full, dims, offsets);
  }
  dnnl_dim_t image = (dnnl_dim_t)c * h_full * w_full;
  dnnl_dims_t nchw_strides = {image, (dnnl_dim_t)h_full * w_full, w_full, 1};
  dnnl_dims_t nhwc_strides = {image, 1, (dnnl_dim_t)w_full * c, c};
  return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32,
                                          layout == CONV2D_NHWC ? nhwc_strides : nchw_strides);
}

/* PyTorch's weight layouts seen as oneDNN's logical (g,) o, i, kh, kw:
 * conv o = small side, i = big side; deconvolution o = big, i = small. */
static dnnl_status_t weights_md(dnnl_memory_desc_t *md, const Conv2dGeom *g, int transposed, dnnl_data_type_t dt,
                                int any) {
  dnnl_dim_t G = g->groups, cbg = g->cb / G, csg = g->cs / G, kk = (dnnl_dim_t)g->kh * g->kw;
  dnnl_dim_t o = transposed ? cbg : csg, i = transposed ? csg : cbg;
  /* Memory is [cs][cb / G][kh][kw] in both directions. */
  dnnl_dim_t o_stride = transposed ? kk : cbg * kk, i_stride = transposed ? cbg * kk : kk;
  if (G == 1) {
    dnnl_dims_t dims = {o, i, g->kh, g->kw};
    dnnl_dims_t strides = {o_stride, i_stride, g->kw, 1};
    return any ? dnnl_memory_desc_init_by_tag(md, 4, dims, dt, dnnl_format_tag_any)
               : dnnl_memory_desc_init_by_strides(md, 4, dims, dt, strides);
  }
  dnnl_dims_t dims = {G, o, i, g->kh, g->kw};
  dnnl_dims_t strides = {csg * cbg * kk, o_stride, i_stride, g->kw, 1};
  return any ? dnnl_memory_desc_init_by_tag(md, 5, dims, dt, dnnl_format_tag_any)
             : dnnl_memory_desc_init_by_strides(md, 5, dims, dt, strides);
}

/* The primitive's view of an activation: the caller's layout when it is
 * channels-last or blocked (oneDNN has kernels for both, so nothing is
 * reordered), otherwise the layout oneDNN prefers (its plain-NCHW kernels
 * are slow GEMM-based ones, so an NCHW tensor is reordered to and from a
 * blocked layout). */
static dnnl_status_t any_md(dnnl_memory_desc_t *md, int n, int c, int h, int w, dnnl_data_type_t dt, int layout) {
  dnnl_dims_t dims = {n, c, h, w};
  dnnl_format_tag_t tag = layout == CONV2D_NHWC      ? dnnl_nhwc
                          : layout == CONV2D_NCHW16C ? dnnl_nChw16c
                                                     : dnnl_format_tag_any;
  return dnnl_memory_desc_init_by_tag(md, 4, dims, dt, tag);
}

/* The operation descriptor of one pass (conv or deconv) in one direction.
 * src/dst are the primitive's (deconv: src = small side). */
typedef union OpDesc {
  dnnl_convolution_desc_t conv;
  dnnl_deconvolution_desc_t deconv;
} OpDesc;

static dnnl_status_t op_desc(OpDesc *d, int transposed, int pass, dnnl_alg_kind_t alg, const dnnl_memory_desc_t *src,
                             const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                             const dnnl_memory_desc_t *dst, const Conv2dGeom *g) {
  dnnl_dims_t strides = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pad_l = {g->ph, g->pw};
  /* Right padding that makes oneDNN's size relation hold on the view. */
  dnnl_dims_t pad_r = {(dnnl_dim_t)(g->hs - 1) * g->sh + (dnnl_dim_t)g->dh * (g->kh - 1) + 1 - g->hb_view - g->ph,
                       (dnnl_dim_t)(g->ws - 1) * g->sw + (dnnl_dim_t)g->dw * (g->kw - 1) + 1 - g->wb_view - g->pw};
  if (!transposed) {
    if (pass == PASS_FORWARD)
      return dnnl_dilated_convolution_forward_desc_init(&d->conv, dnnl_forward_training, alg, src, wei, bias, dst,
                                                        strides, dil, pad_l, pad_r);
    if (pass == PASS_BACKWARD_DATA)
      return dnnl_dilated_convolution_backward_data_desc_init(&d->conv, alg, src, wei, dst, strides, dil, pad_l,
                                                              pad_r);
    return dnnl_dilated_convolution_backward_weights_desc_init(&d->conv, alg, src, wei, NULL, dst, strides, dil,
                                                               pad_l, pad_r);
  }
  if (pass == PASS_FORWARD)
    return dnnl_dilated_deconvolution_forward_desc_init(&d->deconv, dnnl_forward_training, dnnl_deconvolution_direct,
                                                        src, wei, bias, dst, strides, dil, pad_l, pad_r);
  if (pass == PASS_BACKWARD_DATA)
    return dnnl_dilated_deconvolution_backward_data_desc_init(&d->deconv, dnnl_deconvolution_direct, src, wei, dst,
                                                              strides, dil, pad_l, pad_r);
  return dnnl_dilated_deconvolution_backward_weights_desc_init(&d->deconv, dnnl_deconvolution_direct, src, wei, NULL,
                                                               dst, strides, dil, pad_l, pad_r);
}

/* Adds one argument: the caller's descriptor, the primitive's, and a
 * reorder when they differ or the output accumulates (into the caller's
 * tensor, by the reorder's sum post-op); an inout output (the forward's
 * sum post-op reads it) is also reordered in before the primitive runs. */
static int add_arg(ConvEntry *e, const_dnnl_primitive_desc_t pd, int arg, int is_output,
                   const dnnl_memory_desc_t *user_md, int accumulate, int inout, Error *err) {
  int rc = 0;
  dnnl_primitive_desc_t rpd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  ConvArg *a = &e->args[e->nargs++];
  a->arg = arg, a->is_output = is_output;
  const dnnl_memory_desc_t *prim_md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
  if (!prim_md) return error_set(err, ERR_INTERNAL, "conv2d: oneDNN reports no descriptor for argument %d", arg);
  DNNL_TRY(dnnl_memory_create(&a->user_mem, user_md, g_engine, DNNL_MEMORY_NONE));
  int same = dnnl_memory_desc_equal(prim_md, user_md);
  if (same && !(is_output && accumulate)) {
    a->prim_mem = a->user_mem;
    goto done;
  }
  DNNL_TRY(dnnl_memory_create(&a->prim_mem, prim_md, g_engine, DNNL_MEMORY_ALLOCATE));
  DNNL_TRY(dnnl_primitive_attr_create(&attr));
  if (is_output && accumulate) {
    DNNL_TRY(dnnl_post_ops_create(&ops));
    DNNL_TRY(dnnl_post_ops_append_sum(ops, 1.0f));
    DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, ops));
  }
  if (is_output)
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, prim_md, g_engine, user_md, g_engine, attr));
  else
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, user_md, g_engine, prim_md, g_engine, attr));
  DNNL_TRY(dnnl_primitive_create(&a->reorder, rpd));
  if (inout) {
    dnnl_primitive_desc_destroy(rpd);
    rpd = NULL;
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, user_md, g_engine, prim_md, g_engine, NULL));
    DNNL_TRY(dnnl_primitive_create(&a->reorder_in, rpd));
  }
done:
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (ops) dnnl_post_ops_destroy(ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return rc;
}

/* The shapes and passes conv2d.h promises Winograd for, when they ask for
 * it. Its backward-weights only on one thread: with two it measured no
 * faster than direct (0.50 against 0.48 ms, 32 -> 32 channels, 8 x 32 x
 * 32) and slower inside the deblurring generator (about 330 against 363
 * images/s), where on one thread it is 1.4 times as fast. */
static int winograd_wanted(const Conv2dShape *s, int precision, int pass, int threads) {
  if (pass == PASS_BACKWARD_WEIGHTS && threads > 1) return 0;
  return s->winograd && precision == CONV2D_FP32 && !s->transposed && s->groups == 1 && s->kernel_h == 3 &&
         s->kernel_w == 3 && s->stride_h == 1 && s->stride_w == 1 && s->dilation_h == 1 && s->dilation_w == 1 &&
         s->in_channels % 16 == 0 && s->out_channels % 16 == 0;
}

static int entry_create(const ConvKey *key, ConvEntry **out, Error *err) {
  int rc = 0;
  Conv2dGeom g;
  if ((rc = conv2d_geom(&key->shape, &g, err))) return rc;
  ConvEntry *e = calloc(1, sizeof *e);
  if (!e) return error_set(err, ERR_NOMEM, "conv2d: out of memory for a primitive cache entry");
  e->key = *key;
  pthread_mutex_init(&e->lock, NULL);
  dnnl_primitive_desc_t pd = NULL, hint = NULL;
  int tr = key->shape.transposed, pass = key->pass;
  dnnl_data_type_t in_dt = key->precision == CONV2D_BF16 ? dnnl_bf16 : dnnl_f32;
  /* The primitive's view of both sides: conv src = big, deconv src = small. */
  dnnl_memory_desc_t big_user, small_user, wei_user, bias_md, big_any, small_any, wei_any, big_in, small_in, wei_in;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post_ops = NULL;
  /* One channel is the same memory in NCHW and NHWC: such a side follows
   * a channels-last other side, so that oneDNN picks its NHWC kernels (an
   * NCHW side of one channel beside an NHWC one left it a reference
   * kernel, hundreds of times slower). */
  if (g.cb == 1 && g.small_layout == CONV2D_NHWC) g.big_layout = CONV2D_NHWC;
  if (g.cs == 1 && g.big_layout == CONV2D_NHWC) g.small_layout = CONV2D_NHWC;
  DNNL_TRY(user_activation_md(&big_user, g.n, g.cb, g.hb_view, g.wb_view, g.hb, g.wb, g.big_layout));
  DNNL_TRY(user_activation_md(&small_user, g.n, g.cs, g.hs, g.ws, g.hs, g.ws, g.small_layout));
  /* oneDNN's NHWC kernels want NHWC on both sides: a channels-last side
   * beside another layout is left to oneDNN's choice and reordered (forced,
   * beside a 3-channel NCHW side, it left a reference kernel, 400 times
   * slower). Blocked beside NCHW is one of oneDNN's own choices. */
  int prim_big = g.big_layout, prim_small = g.small_layout;
  if ((prim_big == CONV2D_NHWC) != (prim_small == CONV2D_NHWC)) {
    if (prim_big == CONV2D_NHWC) prim_big = CONV2D_NCHW;
    if (prim_small == CONV2D_NHWC) prim_small = CONV2D_NCHW;
  }
  DNNL_TRY(weights_md(&wei_user, &g, tr, dnnl_f32, 0));
  dnnl_dims_t bias_dims = {key->shape.out_channels};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&bias_md, 1, bias_dims, dnnl_f32, dnnl_x));
  /* Inputs of a pass in the compute type, its output in fp32. */
  DNNL_TRY(any_md(&big_in, g.n, g.cb, g.hb_view, g.wb_view, in_dt, prim_big));
  DNNL_TRY(any_md(&small_in, g.n, g.cs, g.hs, g.ws, in_dt, prim_small));
  DNNL_TRY(weights_md(&wei_in, &g, tr, in_dt, 1));
  DNNL_TRY(any_md(&big_any, g.n, g.cb, g.hb_view, g.wb_view, dnnl_f32, prim_big));
  DNNL_TRY(any_md(&small_any, g.n, g.cs, g.hs, g.ws, dnnl_f32, prim_small));
  DNNL_TRY(weights_md(&wei_any, &g, tr, dnnl_f32, 1));
  /* x / y as the primitive's src / dst. */
  const dnnl_memory_desc_t *x_user = tr ? &small_user : &big_user, *y_user = tr ? &big_user : &small_user;
  const dnnl_memory_desc_t *x_in = tr ? &small_in : &big_in, *y_in = tr ? &big_in : &small_in;
  const dnnl_memory_desc_t *x_out = tr ? &small_any : &big_any, *y_out = tr ? &big_any : &small_any;
  OpDesc d, hd;
  /* The forward's epilogue as post-ops: the sum (y += the convolution) and
   * then the ReLU, oneDNN's order. */
  if (pass == PASS_FORWARD && (key->accumulate || key->relu)) {
    DNNL_TRY(dnnl_primitive_attr_create(&attr));
    DNNL_TRY(dnnl_post_ops_create(&post_ops));
    if (key->accumulate) DNNL_TRY(dnnl_post_ops_append_sum(post_ops, 1.0f));
    if (key->relu) DNNL_TRY(dnnl_post_ops_append_eltwise(post_ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
    DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, post_ops));
  }
  /* Winograd where asked for and oneDNN has it; direct where it has not
   * (the descriptors accept any shape, the primitive reports unimplemented). */
  for (int wino = winograd_wanted(&key->shape, key->precision, pass, key->threads); wino >= 0; wino--) {
    dnnl_alg_kind_t alg = wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
    if (hint) dnnl_primitive_desc_destroy(hint), hint = NULL;
    if (pass == PASS_FORWARD) {
      DNNL_TRY(op_desc(&d, tr, pass, alg, x_in, &wei_in, key->has_bias ? &bias_md : NULL, y_out, &g));
    } else {
      /* Backward primitives want the forward one as a hint. */
      DNNL_TRY(op_desc(&hd, tr, PASS_FORWARD, alg, x_in, &wei_in, NULL, y_in, &g));
      dnnl_status_t st = dnnl_primitive_desc_create(&hint, &hd, NULL, g_engine, NULL);
      if (st == dnnl_unimplemented && wino) continue;
      DNNL_TRY(st);
      if (pass == PASS_BACKWARD_DATA) DNNL_TRY(op_desc(&d, tr, pass, alg, x_out, &wei_in, NULL, y_in, &g));
      else DNNL_TRY(op_desc(&d, tr, pass, alg, x_in, &wei_any, NULL, y_in, &g));
    }
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &d, attr, g_engine, hint);
    if (st == dnnl_unimplemented && wino) continue;
    DNNL_TRY(st);
    e->winograd = wino;
    break;
  }
  DNNL_TRY(dnnl_primitive_create(&e->prim, pd));
  DNNL_TRY(dnnl_stream_create(&e->stream, g_engine, dnnl_stream_default_flags));
  int acc = key->accumulate;
  if (pass == PASS_FORWARD) {
    /* with the sum post-op the primitive reads y too: no accumulating reorder out, y reordered in */
    if ((rc = add_arg(e, pd, DNNL_ARG_SRC, 0, x_user, 0, 0, err)) ||
        (rc = add_arg(e, pd, DNNL_ARG_WEIGHTS, 0, &wei_user, 0, 0, err)) ||
        (key->has_bias && (rc = add_arg(e, pd, DNNL_ARG_BIAS, 0, &bias_md, 0, 0, err))) ||
        (rc = add_arg(e, pd, DNNL_ARG_DST, 1, y_user, 0, acc, err)))
      goto done;
  } else if (pass == PASS_BACKWARD_DATA) {
    if ((rc = add_arg(e, pd, DNNL_ARG_DIFF_DST, 0, y_user, 0, 0, err)) ||
        (rc = add_arg(e, pd, DNNL_ARG_WEIGHTS, 0, &wei_user, 0, 0, err)) ||
        (rc = add_arg(e, pd, DNNL_ARG_DIFF_SRC, 1, x_user, acc, 0, err)))
      goto done;
  } else {
    if ((rc = add_arg(e, pd, DNNL_ARG_SRC, 0, x_user, 0, 0, err)) ||
        (rc = add_arg(e, pd, DNNL_ARG_DIFF_DST, 0, y_user, 0, 0, err)) ||
        (rc = add_arg(e, pd, DNNL_ARG_DIFF_WEIGHTS, 1, &wei_user, acc, 0, err)))
      goto done;
  }
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (hint) dnnl_primitive_desc_destroy(hint);
  if (post_ops) dnnl_post_ops_destroy(post_ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (rc) {
    entry_destroy(e);
    return error_wrap(err, "conv2d %s of %dx%dx%dx%d", pass == PASS_FORWARD ? "forward"
                                                       : pass == PASS_BACKWARD_DATA ? "backward-data"
                                                                                     : "backward-weights",
                      key->shape.batch, key->shape.in_channels, key->shape.in_h, key->shape.in_w);
  }
  *out = e;
  return 0;
}

/* Finds or creates the entry of key and returns it locked. */
static int cache_acquire(const ConvKey *key, ConvEntry **out, Error *err) {
  int rc = 0;
  pthread_mutex_lock(&g_cache_lock);
  if (!g_engine) {
    dnnl_status_t st = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    if (st != dnnl_success) {
      g_engine = NULL;
      pthread_mutex_unlock(&g_cache_lock);
      return error_set(err, ERR_INTERNAL, "conv2d: cannot create oneDNN's CPU engine (status %d)", (int)st);
    }
  }
  ConvEntry *e = NULL;
  size_t oldest = 0;
  for (size_t i = 0; i < g_entries; i++) {
    if (!memcmp(&g_cache[i]->key, key, sizeof *key)) {
      e = g_cache[i];
      break;
    }
    if (g_cache[i]->last_use < g_cache[oldest]->last_use) oldest = i;
  }
  if (!e) {
    if ((rc = entry_create(key, &e, err))) goto out;
    g_creations++;
    if (g_entries == CACHE_CAPACITY) {
      /* Wait until the least recently used entry is idle, then drop it. */
      pthread_mutex_lock(&g_cache[oldest]->lock);
      pthread_mutex_unlock(&g_cache[oldest]->lock);
      entry_destroy(g_cache[oldest]);
      g_cache[oldest] = e;
    } else {
      g_cache[g_entries++] = e;
    }
  }
  e->last_use = ++g_clock;
  /* Locked before the cache is released, so eviction cannot free it. */
  pthread_mutex_lock(&e->lock);
  *out = e;
out:
  pthread_mutex_unlock(&g_cache_lock);
  return rc;
}

/* Runs the entry on the caller's pointers (in the order of e->args). */
static int entry_run(ConvEntry *e, void *const *ptrs, Error *err) {
  int rc = 0;
  dnnl_exec_arg_t exec[MAX_ARGS];
  for (int i = 0; i < e->nargs; i++) {
    ConvArg *a = &e->args[i];
    DNNL_TRY(dnnl_memory_set_data_handle(a->user_mem, ptrs[i]));
    exec[i] = (dnnl_exec_arg_t){a->arg, a->prim_mem};
    dnnl_primitive_t in = a->is_output ? a->reorder_in : a->reorder;
    if (in) {
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->user_mem}, {DNNL_ARG_TO, a->prim_mem}};
      DNNL_TRY(dnnl_primitive_execute(in, e->stream, 2, r));
    }
  }
  DNNL_TRY(dnnl_primitive_execute(e->prim, e->stream, e->nargs, exec));
  for (int i = 0; i < e->nargs; i++) {
    ConvArg *a = &e->args[i];
    if (a->is_output && a->reorder) {
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->prim_mem}, {DNNL_ARG_TO, a->user_mem}};
      DNNL_TRY(dnnl_primitive_execute(a->reorder, e->stream, 2, r));
    }
  }
  DNNL_TRY(dnnl_stream_wait(e->stream));
done:
  return rc;
}

static int run_pass(const Conv2dShape *s, Conv2dPrecision prec, int pass, int accumulate, int relu, int has_bias,
                    void *const *ptrs, Error *err) {
  if (prec != CONV2D_FP32 && prec != CONV2D_BF16)
    return error_set(err, ERR_ARG, "conv2d: precision %d, expected CONV2D_FP32 or CONV2D_BF16", (int)prec);
  if (prec == CONV2D_BF16) {
    char why[160];
    if (!conv2d_bf16_supported(why, sizeof why))
      return error_set(err, ERR_UNSUPPORTED, "conv2d: bf16 needs AVX-512 BF16, but %s; use fp32", why);
  }
  ConvKey key;
  memset(&key, 0, sizeof key);
  key.shape = *s;
  key.precision = prec, key.pass = pass, key.accumulate = accumulate, key.has_bias = has_bias, key.relu = relu;
  key.threads = omp_get_max_threads();
  ConvEntry *e = NULL;
  int rc = cache_acquire(&key, &e, err);
  if (rc) return rc;
  rc = entry_run(e, ptrs, err);
  int winograd = e->winograd;
  pthread_mutex_unlock(&e->lock);
  if (!rc && winograd) {
    pthread_mutex_lock(&g_cache_lock);
    g_winograd_calls++;
    pthread_mutex_unlock(&g_cache_lock);
  }
  return rc;
}

/* The rows and columns of a big-side tensor outside the view, which no
 * kernel tap reaches, get value[c] (or 0), through the forward's epilogue
 * when there is one: added to what they hold (accumulate), then the ReLU. */
static float outside_value(float old, const float *value, int c, Conv2dEpilogue ep) {
  float v = (value ? value[c] : 0.0f) + (ep.accumulate ? old : 0.0f);
  return ep.relu && v < 0.0f ? 0.0f : v;
}

static void fill_outside_view(const Conv2dGeom *g, float *big, const float *value, Conv2dEpilogue ep) {
  if (g->hb_view == g->hb && g->wb_view == g->wb) return;
  size_t rows = (size_t)g->n * g->hb;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) {
    int n = (int)(r / (size_t)g->hb), h = (int)(r % (size_t)g->hb);
    for (int w = (h < g->hb_view ? g->wb_view : 0); w < g->wb; w++)
      for (int c = 0; c < g->cb; c++) {
        float *at = &big[conv2d_layout_index(g->big_layout, g->cb, g->hb, g->wb, n, c, h, w)];
        *at = outside_value(*at, value, c, ep);
      }
  }
}

static int check_pointers(const void *a, const void *b, const void *c, const char *what, Error *err) {
  if (!a || !b || !c) return error_set(err, ERR_ARG, "conv2d %s: a tensor pointer is NULL", what);
  return 0;
}

int conv2d_forward_epilogue(const Conv2dShape *s, Conv2dPrecision prec, float *y, const float *x, const float *w,
                            const float *bias, Conv2dEpilogue ep, Error *err) {
  Conv2dGeom g;
  int rc;
  if ((rc = conv2d_geom(s, &g, err)) || (rc = check_pointers(y, x, w, "forward", err))) return rc;
  ep.accumulate = ep.accumulate != 0, ep.relu = ep.relu != 0;
  if (conv2d_uses_direct(s, prec, CONV2D_PASS_FORWARD)) return conv2d_direct_forward(s, y, x, w, bias, ep, err);
  void *ptrs[MAX_ARGS];
  int n = 0;
  ptrs[n++] = (void *)x, ptrs[n++] = (void *)w;
  if (bias) ptrs[n++] = (void *)bias;
  ptrs[n++] = y;
  if ((rc = run_pass(s, prec, PASS_FORWARD, ep.accumulate, ep.relu, bias != NULL, ptrs, err))) return rc;
  if (s->transposed) fill_outside_view(&g, y, bias, ep);
  return 0;
}

int conv2d_forward(const Conv2dShape *s, Conv2dPrecision prec, float *y, const float *x, const float *w,
                   const float *bias, Error *err) {
  return conv2d_forward_epilogue(s, prec, y, x, w, bias, (Conv2dEpilogue){0, 0}, err);
}

int conv2d_backward_data(const Conv2dShape *s, Conv2dPrecision prec, float *dx, const float *dy, const float *w,
                         int accumulate, Error *err) {
  Conv2dGeom g;
  int rc;
  if ((rc = conv2d_geom(s, &g, err)) || (rc = check_pointers(dx, dy, w, "backward-data", err))) return rc;
  if (conv2d_uses_direct(s, prec, CONV2D_PASS_BACKWARD_DATA))
    return conv2d_direct_backward_data(s, dx, dy, w, accumulate != 0, err);
  void *ptrs[MAX_ARGS] = {(void *)dy, (void *)w, dx};
  if ((rc = run_pass(s, prec, PASS_BACKWARD_DATA, accumulate != 0, 0, 0, ptrs, err))) return rc;
  if (!s->transposed && !accumulate) fill_outside_view(&g, dx, NULL, (Conv2dEpilogue){0, 0});
  return 0;
}

int conv2d_backward_weights(const Conv2dShape *s, Conv2dPrecision prec, float *dw, float *dbias, const float *dy,
                            const float *x, int accumulate, Error *err) {
  Conv2dGeom g;
  int rc;
  if ((rc = conv2d_geom(s, &g, err)) || (rc = check_pointers(dw, dy, x, "backward-weights", err))) return rc;
  if (conv2d_uses_direct(s, prec, CONV2D_PASS_BACKWARD_WEIGHTS))
    return conv2d_direct_backward_weights(s, dw, dbias, dy, x, accumulate != 0, err);
  void *ptrs[MAX_ARGS] = {(void *)x, (void *)dy, dw};
  if ((rc = run_pass(s, prec, PASS_BACKWARD_WEIGHTS, accumulate != 0, 0, 0, ptrs, err))) return rc;
  /* dbias here, not in the primitive: over the full output (the view
   * oneDNN sees of a transposed convolution's dy may leave out trailing
   * rows that still carry gradient), and summed partly in double: oneDNN's
   * float sum moved near-zero bias gradients enough that Adam's steps on
   * them parted a two-rank run from one rank (nets.gan_train, WGAN-GP). */
  if (dbias) conv2d_bias_gradient(s, dbias, dy, accumulate != 0);
  return 0;
}

size_t conv2d_cache_entries(void) {
  pthread_mutex_lock(&g_cache_lock);
  size_t n = g_entries;
  pthread_mutex_unlock(&g_cache_lock);
  return n;
}

size_t conv2d_winograd_calls(void) {
  pthread_mutex_lock(&g_cache_lock);
  size_t n = g_winograd_calls;
  pthread_mutex_unlock(&g_cache_lock);
  return n;
}

size_t conv2d_cache_creations(void) {
  pthread_mutex_lock(&g_cache_lock);
  size_t n = g_creations;
  pthread_mutex_unlock(&g_cache_lock);
  return n;
}

void conv2d_cache_clear(void) {
  pthread_mutex_lock(&g_cache_lock);
  for (size_t i = 0; i < g_entries; i++) {
    pthread_mutex_lock(&g_cache[i]->lock);
    pthread_mutex_unlock(&g_cache[i]->lock);
    entry_destroy(g_cache[i]);
    g_cache[i] = NULL;
  }
  g_entries = 0;
  pthread_mutex_unlock(&g_cache_lock);
}
