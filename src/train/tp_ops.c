/* ModelParallelOps over the TP communicator: blocking all-reduce (sum,
 * max), all-gather and reduce-scatter, with the aliasing the model may use
 * (in == out) resolved here. The callbacks cannot return errors (the model
 * calls them from deep inside a pass), so a failure ends the job the way
 * every MPI failure does (comm/world.h). See tp_ops.h. */
#include "train/tp_ops.h"

#include <stdlib.h>
#include <string.h>

static float *scratch(TpOps *t, size_t n) {
  if (n > t->scratch_len) {
    float *grown = realloc(t->scratch, n * sizeof(float));
    if (!grown) comm_abort(1, "tensor parallel: out of memory for a %zu-float staging buffer", n);
    t->scratch = grown;
    t->scratch_len = n;
  }
  return t->scratch;
}

static void check(int rc, const Error *err) {
  if (rc) comm_abort(1, "tensor parallel collective: %s", err->msg);
}

static void tp_allreduce_sum(void *ctx, float *buf, size_t n) {
  TpOps *t = ctx;
  Error err = {0};
  check(comm_allreduce_f32(t->group, buf, n, COMM_SUM, NULL, &err), &err);
}

static void tp_allreduce_max(void *ctx, float *buf, size_t n) {
  TpOps *t = ctx;
  Error err = {0};
  check(comm_allreduce_f32(t->group, buf, n, COMM_MAX, NULL, &err), &err);
}

static int overlaps(const float *a, size_t na, const float *b, size_t nb) { return a < b + nb && b < a + na; }

static void tp_allgather(void *ctx, float *out, const float *in, size_t count) {
  TpOps *t = ctx;
  Error err = {0};
  size_t size = (size_t)t->group->size;
  float *mine = out + (size_t)t->group->rank * count;
  if (in == mine) {
    check(comm_allgather_f32(t->group, NULL, out, count, NULL, &err), &err);
    return;
  }
  if (overlaps(in, count, out, size * count)) {
    /* The input sits where other ranks' blocks land: move it to its own block first. */
    float *tmp = scratch(t, count);
    memcpy(tmp, in, count * sizeof(float));
    memcpy(mine, tmp, count * sizeof(float));
    check(comm_allgather_f32(t->group, NULL, out, count, NULL, &err), &err);
    return;
  }
  check(comm_allgather_f32(t->group, in, out, count, NULL, &err), &err);
}

static void tp_reduce_scatter(void *ctx, float *out, const float *in, size_t count) {
  TpOps *t = ctx;
  Error err = {0};
  size_t size = (size_t)t->group->size;
  if (!overlaps(out, count, in, size * count)) {
    check(comm_reduce_scatter_sum_f32(t->group, in, out, count, NULL, &err), &err);
    return;
  }
  float *tmp = scratch(t, count);
  check(comm_reduce_scatter_sum_f32(t->group, in, tmp, count, NULL, &err), &err);
  memcpy(out, tmp, count * sizeof(float));
}

void tp_ops_init(TpOps *t, const CommGroup *group) {
  memset(t, 0, sizeof *t);
  t->group = group;
  t->ops.ctx = t;
  t->ops.allreduce_sum = tp_allreduce_sum;
  t->ops.allreduce_max = tp_allreduce_max;
  t->ops.allgather = tp_allgather;
  t->ops.reduce_scatter = tp_reduce_scatter;
}

void tp_ops_free(TpOps *t) {
  free(t->scratch);
  t->scratch = NULL;
  t->scratch_len = 0;
}
