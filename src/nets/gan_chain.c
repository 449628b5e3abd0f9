/* A chain of layers with residual skips (nets/gan_chain.h): building it
 * from layer specs, the layout of its inner activations, its buffers,
 * forward and backward. */
#include "nets/gan_chain.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "kern/conv2d.h"
#include "kern/vecops.h"

LayerShape gan_chain_out_shape(const Chain *c) { return c->num_layers ? c->layers[c->num_layers - 1].out : c->in; }

const float *gan_chain_output_of(const Chain *c, int i, const float *x) {
  if (i < 0) return x;
  return c->sum[i] ? c->sum[i] : c->act[i];
}

int gan_chain_add(Chain *c, const char *spec, int skip_from, Error *err) {
  if (c->num_layers >= GAN_MAX_LAYERS)
    return error_set(err, ERR_CONFIG, "gan: more than %d layers in one network", GAN_MAX_LAYERS);
  cJSON *obj = cJSON_Parse(spec);
  if (!obj) return error_set(err, ERR_NOMEM, "gan: out of memory for a layer spec");
  int i = c->num_layers;
  int rc = layer_create(&c->layers[i], obj, gan_chain_out_shape(c), c->max_batch, "gan", err);
  cJSON_Delete(obj);
  if (rc) return rc;
  c->skip_from[i] = skip_from;
  c->num_layers++;
  return 0;
}

/* Activation j (the output of layer j; -1 is the chain's input) is in the
 * inner layout when layer j sets its output so, or is elementwise on an
 * input in it. A layer that sets layouts writes the inner layout when a
 * later layer sets layouts too (it reads it), so the last such layer, and
 * the elementwise ones after it, leave NCHW: the chain's output keeps the
 * layout of its input. */
int gan_chain_inner_layout(Chain *c, int *chosen, Error *err) {
  *chosen = CONV2D_NCHW;
  int last_setter = -1, inner[GAN_MAX_LAYERS];
  for (int i = 0; i < c->num_layers; i++) {
    const LayerOps *ops = c->layers[i].ops;
    if (!ops->elementwise && !ops->set_layout) return 0; /* a layer that needs NCHW: stay NCHW */
    if (ops->set_layout) last_setter = i;
  }
  if (last_setter < 0) return 0;
  int all16 = 1;
  for (int i = 0; i < c->num_layers; i++) {
    int in = i > 0 ? inner[i - 1] : 0;
    inner[i] = c->layers[i].ops->set_layout ? i < last_setter : in;
    all16 &= !inner[i] || c->layers[i].out.c % 16 == 0;
  }
  for (int i = 0; i < c->num_layers; i++) /* a skip adds two activations: both in one layout */
    if (c->skip_from[i] >= 0 && inner[c->skip_from[i]] != inner[i]) return 0;
  /* blocked (oneDNN's own layout, where its Winograd kernels run) when
   * every inner activation has a multiple of 16 channels, else
   * channels-last */
  int layout = all16 ? CONV2D_NCHW16C : CONV2D_NHWC;
  for (int i = 0; i < c->num_layers; i++) {
    Layer *l = &c->layers[i];
    if (!l->ops->set_layout) continue;
    int in = i > 0 && inner[i - 1] ? layout : CONV2D_NCHW, out = inner[i] ? layout : CONV2D_NCHW;
    int rc = l->ops->set_layout(l, in, out, err);
    if (rc) return error_wrap(err, "gan: layer %d (%s), activations in layout %d", i, l->ops->kind, layout);
  }
  c->inner_layout = *chosen = layout;
  return 0;
}

/* All of a chain's activation and gradient buffers in one arena
 * (base/alloc.h: 2 MiB aligned, transparent huge pages advised), each
 * buffer 64-byte aligned: a vector load of a whole cache line never
 * straddles two (the kernels of kern/conv2d_direct.c ran 25% slower on
 * malloc's 16-byte alignment). */
static size_t aligned_floats(size_t count) { return (count + 15) / 16 * 16; }

int gan_chain_alloc(Chain *c) {
  size_t total = 0;
  for (int i = 0; i < c->num_layers; i++) {
    size_t count = aligned_floats((size_t)c->max_batch * layer_shape_numel(c->layers[i].out));
    total += (2 + (c->skip_from[i] >= 0)) * count;
  }
  if (!(c->arena = alloc_big(total * sizeof(float)))) return ERR_NOMEM;
  float *at = c->arena;
  for (int i = 0; i < c->num_layers; i++) {
    size_t count = aligned_floats((size_t)c->max_batch * layer_shape_numel(c->layers[i].out));
    c->act[i] = at, at += count;
    c->grad[i] = at, at += count;
    if (c->skip_from[i] >= 0) c->sum[i] = at, at += count;
  }
  return 0;
}

void gan_chain_free(Chain *c) {
  for (int i = 0; i < c->num_layers; i++) layer_free(&c->layers[i]);
  alloc_big_free(c->arena);
  c->arena = NULL;
}

/* Layer i's forward can take the ReLU of layer i + 1 into its epilogue:
 * then it writes the ReLU's output, and its own raw output, which only
 * that ReLU would read (no skip starts or ends at i), is never written
 * (its backward does not read it: nets/layer.h). The ReLU's backward reads
 * its own output only. */
static int relu_fuses(const Chain *c, int i) {
  if (!c->layers[i].ops->forward_epilogue || i + 1 >= c->num_layers || c->sum[i] ||
      strcmp(c->layers[i + 1].ops->kind, "relu") || c->skip_from[i + 1] >= 0)
    return 0;
  for (int k = 0; k < c->num_layers; k++)
    if (c->skip_from[k] == i) return 0;
  return 1;
}

/* Layers with an epilogue write the end of a residual block straight into
 * its sum (a copy of the skip, the output added in the kernel's stores)
 * and a following ReLU's output: two passes over memory fewer than a
 * separate add or ReLU (vec_add reads two tensors and writes one; the copy
 * reads one). */
int gan_chain_forward(Chain *c, const float *x, int n, int train, Error *err) {
  for (int i = 0; i < c->num_layers; i++) {
    Layer *l = &c->layers[i];
    const float *in = gan_chain_output_of(c, i - 1, x), *skip = gan_chain_output_of(c, c->skip_from[i], x);
    size_t len = (size_t)n * layer_shape_numel(l->out);
    int rc, fused_relu = 0;
    if (c->sum[i] && l->ops->forward_epilogue) {
      vec_copy(c->sum[i], skip, len);
      rc = l->ops->forward_epilogue(l, in, c->sum[i], n, train, 1, 0, err);
    } else if ((fused_relu = relu_fuses(c, i))) {
      rc = l->ops->forward_epilogue(l, in, c->act[i + 1], n, train, 0, 1, err);
    } else {
      rc = l->ops->forward(l, in, c->act[i], n, train, err);
      if (!rc && c->sum[i]) vec_add(c->sum[i], c->act[i], skip, len);
    }
    if (rc) return error_wrap(err, "gan: layer %d (%s) forward", i, l->ops->kind);
    i += fused_relu; /* the ReLU's output is written */
  }
  return 0;
}

/* Each layer writes its input gradient straight into the gradient of the
 * layer before it (no zeroing, no copy), and an output that also feeds a
 * skip then gets the gradients of the skips that read it added. */
int gan_chain_backward(Chain *c, const float *x, const float *dy, float *dx, int n, Error *err) {
  int last = c->num_layers - 1;
  memcpy(c->grad[last], dy, (size_t)n * layer_shape_numel(c->layers[last].out) * sizeof(float));
  for (int i = last; i >= 0; i--) {
    Layer *l = &c->layers[i];
    float *into = i > 0 ? c->grad[i - 1] : dx;
    int rc = l->ops->backward(l, gan_chain_output_of(c, i - 1, x), c->act[i], c->grad[i], into, n, err);
    if (rc) return error_wrap(err, "gan: layer %d (%s) backward", i, l->ops->kind);
    if (i == 0) break;
    /* every later layer k that adds output i - 1 to its own passes its gradient on */
    size_t len = (size_t)n * layer_shape_numel(c->layers[i - 1].out);
    for (int k = i; k <= last; k++)
      if (c->skip_from[k] == i - 1) vec_acc(c->grad[i - 1], c->grad[k], len);
  }
  return 0;
}

double gan_chain_mults(const Chain *c) {
  double sum = 0;
  for (int i = 0; i < c->num_layers; i++) sum += c->layers[i].mults_per_sample;
  return sum;
}
