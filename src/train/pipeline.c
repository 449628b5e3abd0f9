/* Pipeline execution on one rank: activation slots and receive buffers
 * sized from the program, the FWD/BWD/SEND/RECV handlers over the model's
 * chunk API and non-blocking point-to-point transfers, and a forward-only
 * pass for validation. See pipeline.h. */
#include "train/pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "train/pipeline_replicated.h"
#include "train/trace_session.h"

static int stage_of(const Pipeline *p, int chunk) { return chunk * p->pp + p->rank; }

/* (link between stage s and s + 1, micro-batch, direction) -> one tag. */
static int p2p_tag(const Pipeline *p, int link, int mb, int is_grad) { return (link * p->m + mb) * 2 + is_grad; }
static int eval_tag(const Pipeline *p, int link) { return 2 * p->num_stages * p->m + link; }

/* Whether action a ends its (mb, chunk)'s use of the activation slot: the
 * last in list order of its backward, its input-gradient send and, with a
 * split backward, its weight-gradient pass (which reads what the slot kept). */
static int releases_slot(const SchedProgram *prog, int rank, const SchedAction *a) {
  static const SchedActionKind users[] = {SCHED_BWD, SCHED_SEND_GRAD, SCHED_BWD_WEIGHT};
  int last = -1;
  for (int k = 0; k < 3; k++) {
    int id = sched_program_find(prog, rank, users[k], a->microbatch, a->chunk);
    if (id > last) last = id;
  }
  return last == a->id;
}

/* Walks the list counting what is live per chunk: slots (forward to the
 * send of the input gradient, or to the backward), received activations and
 * gradients (receive to backward). Maxima per chunk go to the arrays. */
static void count_live(const SchedProgram *prog, int rank, int *slots, int *acts, int *grads) {
  int n;
  const SchedAction *list = sched_program_rank_actions(prog, rank, &n);
  int live_s[MODEL_MAX_CHUNKS] = {0}, live_a[MODEL_MAX_CHUNKS] = {0}, live_g[MODEL_MAX_CHUNKS] = {0};
  for (int c = 0; c < MODEL_MAX_CHUNKS; c++) slots[c] = acts[c] = grads[c] = 0;
  for (int i = 0; i < n; i++) {
    const SchedAction *a = &list[i];
    int c = a->chunk;
    if (c < 0 || c >= MODEL_MAX_CHUNKS) continue;
    switch (a->kind) {
      case SCHED_FWD:
        if (++live_s[c] > slots[c]) slots[c] = live_s[c];
        break;
      /* A transfer in pieces (stage replication) counts once, at its first. */
      case SCHED_RECV_ACT:
        if (sched_program_find(prog, rank, a->kind, a->microbatch, c) == a->id && ++live_a[c] > acts[c])
          acts[c] = live_a[c];
        break;
      case SCHED_RECV_GRAD:
        if (sched_program_find(prog, rank, a->kind, a->microbatch, c) == a->id && ++live_g[c] > grads[c])
          grads[c] = live_g[c];
        break;
      case SCHED_BWD:
        if (sched_program_find(prog, rank, SCHED_RECV_ACT, a->microbatch, c) >= 0) live_a[c]--;
        if (sched_program_find(prog, rank, SCHED_RECV_GRAD, a->microbatch, c) >= 0) live_g[c]--;
        break;
      default: break;
    }
    if ((a->kind == SCHED_BWD || a->kind == SCHED_SEND_GRAD || a->kind == SCHED_BWD_WEIGHT) &&
        releases_slot(prog, rank, a))
      live_s[c]--;
  }
}

int pipeline_slots_needed(const SchedProgram *prog, int rank) {
  int slots[MODEL_MAX_CHUNKS], acts[MODEL_MAX_CHUNKS], grads[MODEL_MAX_CHUNKS];
  count_live(prog, rank, slots, acts, grads);
  int most = 1;
  for (int c = 0; c < MODEL_MAX_CHUNKS; c++)
    if (slots[c] > most) most = slots[c];
  return most;
}

static int pool_create(PipeBufferPool *pool, int count, int m, size_t len) {
  memset(pool, 0, sizeof *pool);
  pool->count = count;
  pool->buf_of_mb = malloc((size_t)m * sizeof(int));
  if (!pool->buf_of_mb) return -1;
  for (int i = 0; i < m; i++) pool->buf_of_mb[i] = -1;
  if (count == 0) return 0;
  pool->data = alloc_big((size_t)count * len * sizeof(float));
  pool->free_list = malloc((size_t)count * sizeof(int));
  pool->req = calloc((size_t)count, sizeof(CommRequest));
  pool->recv_of = calloc((size_t)count, sizeof *pool->recv_of);
  if (!pool->data || !pool->free_list || !pool->req || !pool->recv_of) return -1;
  for (int i = 0; i < count; i++) {
    pool->free_list[i] = count - 1 - i;
    comm_request_init(&pool->req[i]);
  }
  pool->num_free = count;
  return 0;
}

static void pool_free(PipeBufferPool *pool) {
  alloc_big_free(pool->data);
  free(pool->buf_of_mb);
  free(pool->free_list);
  free(pool->req);
  free(pool->recv_of);
  memset(pool, 0, sizeof *pool);
}

int pipeline_create(Pipeline *p, Model *model, const SchedProgram *prog, int rank, const CommGroup *group, int B,
                    int T, Error *err) {
  memset(p, 0, sizeof *p);
  p->model = model;
  p->prog = prog;
  p->rank = rank;
  p->pp = prog->config.pp;
  p->vpp = prog->config.vpp;
  p->m = prog->config.microbatches;
  p->B = B;
  p->T = T;
  p->num_stages = p->pp * p->vpp;
  p->group = group;
  p->act_len = (size_t)model_chunk_rows(model, B, T) * (size_t)model->cfg.hidden_size;
  if (p->vpp > MODEL_MAX_CHUNKS || p->vpp != model->shard.num_chunks)
    return error_set(err, ERR_CONFIG, "pipeline: the program has %d chunks per rank, the model shard %d", p->vpp,
                     model->shard.num_chunks);
  if (p->pp > 1 && (!group || group->size != prog->num_ranks))
    return error_set(err, ERR_ARG, "pipeline: needs the pipeline group of %d ranks", prog->num_ranks);
  if (p->pp > 1 && (long)eval_tag(p, p->num_stages) > (long)comm_tag_max())
    return error_set(err, ERR_CONFIG,
                     "pipeline: %d stages x %d micro-batches need message tags up to %d but MPI allows %d (fewer "
                     "micro-batches per step)",
                     p->num_stages, p->m, eval_tag(p, p->num_stages), comm_tag_max());
  int slots[MODEL_MAX_CHUNKS], acts[MODEL_MAX_CHUNKS], grads[MODEL_MAX_CHUNKS];
  count_live(prog, rank, slots, acts, grads);
  p->num_slots = model->shard.num_slots;
  for (int c = 0; c < p->vpp; c++)
    if (slots[c] > p->num_slots) {
      pipeline_free(p);
      return error_set(err, ERR_INTERNAL, "pipeline: chunk %d needs %d activation slots, the model has %d", c,
                       slots[c], p->num_slots);
    }
  for (int c = 0; c < p->vpp; c++) {
    p->slot_of[c] = malloc((size_t)p->m * sizeof(int));
    p->free_slots[c] = malloc((size_t)p->num_slots * sizeof(int));
    p->send_act[c] = calloc((size_t)p->num_slots, sizeof(CommRequest));
    p->send_grad[c] = calloc((size_t)p->num_slots, sizeof(CommRequest));
    int bad = !p->slot_of[c] || !p->free_slots[c] || !p->send_act[c] || !p->send_grad[c];
    bad = bad || pool_create(&p->act_in[c], acts[c], p->m, p->act_len) ||
          pool_create(&p->grad_in[c], grads[c], p->m, p->act_len);
    if (bad) {
      pipeline_free(p);
      return error_set(err, ERR_NOMEM, "pipeline: out of memory for the buffers of chunk %d", c);
    }
    for (int i = 0; i < p->m; i++) p->slot_of[c][i] = -1;
    for (int s = 0; s < p->num_slots; s++) {
      p->free_slots[c][s] = p->num_slots - 1 - s;
      comm_request_init(&p->send_act[c][s]);
      comm_request_init(&p->send_grad[c][s]);
    }
    p->num_free[c] = p->num_slots;
  }
  const ModelConfig *mc = &model->cfg;
  if (mc->num_experts > 0) {
    p->num_counts = (size_t)mc->num_layers * mc->num_experts;
    p->expert_counts = calloc(p->num_counts, sizeof(long));
    if (!p->expert_counts) {
      pipeline_free(p);
      return error_set(err, ERR_NOMEM, "pipeline: out of memory");
    }
  }
  return 0;
}

void pipeline_free(Pipeline *p) {
  for (int c = 0; c < MODEL_MAX_CHUNKS; c++) {
    free(p->slot_of[c]);
    free(p->free_slots[c]);
    free(p->send_act[c]);
    free(p->send_grad[c]);
    pool_free(&p->act_in[c]);
    pool_free(&p->grad_in[c]);
  }
  free(p->expert_counts);
  pipeline_replicated_free(p);
  memset(p, 0, sizeof *p);
}

void pipeline_begin_step(Pipeline *p, const int *tokens, const int *targets, float grad_scale) {
  p->tokens = tokens;
  p->targets = targets;
  p->grad_scale = grad_scale;
  p->lm_sum = p->aux_sum = p->z_sum = 0;
  p->loss_nonfinite = 0;
  p->tokens_counted = 0;
  if (p->num_counts) memset(p->expert_counts, 0, p->num_counts * sizeof(long));
}

static int check_action(const Pipeline *p, const SchedAction *a, Error *err) {
  if (a->chunk < 0 || a->chunk >= p->vpp || a->microbatch < 0 || a->microbatch >= p->m)
    return error_set(err, ERR_INTERNAL, "pipeline: micro-batch %d / chunk %d outside the program's %d x %d",
                     a->microbatch, a->chunk, p->m, p->vpp);
  return 0;
}

int pipeline_forward(Pipeline *p, const SchedAction *a, Error *err) {
  int rc = check_action(p, a, err);
  if (rc) return rc;
  int c = a->chunk, mb = a->microbatch;
  if (p->slot_of[c][mb] >= 0 || p->num_free[c] == 0)
    return error_set(err, ERR_INTERNAL, "pipeline: no free activation slot for micro-batch %d of chunk %d", mb, c);
  int slot = p->free_slots[c][--p->num_free[c]];
  p->slot_of[c][mb] = slot;
  /* The slot's last sends read its buffers. */
  if ((rc = comm_wait(&p->send_act[c][slot], err)) || (rc = comm_wait(&p->send_grad[c][slot], err))) return rc;
  const ModelShard *sh = &p->model->shard;
  const float *x_in = NULL;
  if (!sh->has_embedding[c]) {
    PipeBufferPool *pool = &p->act_in[c];
    int b = pool->buf_of_mb[mb];
    if (b < 0)
      return error_set(err, ERR_INTERNAL, "pipeline: forward of micro-batch %d, chunk %d before its activation was received",
                       mb, c);
    if ((rc = comm_wait(&pool->req[b], err))) return rc;
    x_in = pool->data + (size_t)b * p->act_len;
  }
  size_t bt = (size_t)p->B * p->T;
  const int *tokens = sh->has_embedding[c] ? p->tokens + (size_t)mb * bt : NULL;
  const int *targets = sh->has_head[c] ? p->targets + (size_t)mb * bt : NULL;
  ModelLoss loss = {0};
  rc = model_chunk_forward(p->model, c, slot, tokens, targets, x_in, p->B, p->T, 1, p->grad_scale, &loss, err);
  if (rc) return rc;
  /* Not an error here: the non-finite guard before the optimizer decides,
   * on every rank alike (train/nonfinite.h). */
  if (!isfinite(loss.lm) || !isfinite(loss.aux) || !isfinite(loss.z)) p->loss_nonfinite = 1;
  p->lm_sum += loss.lm * (double)loss.tokens;
  p->tokens_counted += loss.tokens;
  p->aux_sum += loss.aux;
  p->z_sum += loss.z;
  if (p->num_counts) {
    size_t E = (size_t)p->model->cfg.num_experts;
    for (size_t i = (size_t)sh->layer_begin[c] * E; i < (size_t)sh->layer_end[c] * E; i++)
      p->expert_counts[i] += p->model->expert_counts[i];
  }
  return 0;
}

static void pool_release(PipeBufferPool *pool, int mb) {
  int b = pool->buf_of_mb[mb];
  if (b < 0) return;
  pool->buf_of_mb[mb] = -1;
  pool->free_list[pool->num_free++] = b;
}

static void release_slot(Pipeline *p, int c, int mb) {
  int slot = p->slot_of[c][mb];
  p->slot_of[c][mb] = -1;
  p->free_slots[c][p->num_free[c]++] = slot;
}

int pipeline_backward(Pipeline *p, const SchedAction *a, Error *err) {
  int rc = check_action(p, a, err);
  if (rc) return rc;
  int c = a->chunk, mb = a->microbatch;
  int slot = p->slot_of[c][mb];
  if (slot < 0)
    return error_set(err, ERR_INTERNAL, "pipeline: backward of micro-batch %d, chunk %d without its forward", mb, c);
  const float *dy = NULL;
  if (!p->model->shard.has_head[c]) {
    PipeBufferPool *pool = &p->grad_in[c];
    int b = pool->buf_of_mb[mb];
    if (b < 0)
      return error_set(err, ERR_INTERNAL,
                       "pipeline: backward of micro-batch %d, chunk %d before its output gradient was received", mb, c);
    if ((rc = comm_wait(&pool->req[b], err))) return rc;
    dy = pool->data + (size_t)b * p->act_len;
  }
  /* The backward that completes a chunk's gradient starts its bucket
   * reductions as its layers finish (with a split backward, the last weight
   * gradient pass does: pipeline_backward_weights). */
  const int split = p->prog->config.split_backward;
  int hook = !split && p->dp_grads && p->last_backward && p->last_backward[a->index];
  if (hook) {
    size_t off, count;
    model_chunk_params(p->model, c, &off, &count);
    dp_grads_set_window(p->dp_grads, off, off + count);
    p->model->on_grads_ready = dp_grads_on_ready;
    p->model->on_grads_ready_ctx = p->dp_grads;
  }
  rc = split ? model_chunk_backward_input(p->model, c, slot, dy, err) : model_chunk_backward(p->model, c, slot, dy, err);
  p->model->on_grads_ready = NULL;
  p->model->on_grads_ready_ctx = NULL;
  if (rc) return rc;
  pool_release(&p->act_in[c], mb);
  pool_release(&p->grad_in[c], mb);
  if (releases_slot(p->prog, p->rank, a)) release_slot(p, c, mb);
  return 0;
}

int pipeline_backward_weights(Pipeline *p, const SchedAction *a, Error *err) {
  int rc = check_action(p, a, err);
  if (rc) return rc;
  int c = a->chunk, mb = a->microbatch;
  int slot = p->slot_of[c][mb];
  if (slot < 0 || !p->prog->config.split_backward)
    return error_set(err, ERR_INTERNAL, "pipeline: weight gradients of micro-batch %d, chunk %d without its backward", mb, c);
  int hook = p->dp_grads && p->last_backward && p->last_backward[a->index];
  if (hook) {
    size_t off, count;
    model_chunk_params(p->model, c, &off, &count);
    dp_grads_set_window(p->dp_grads, off, off + count);
    p->model->on_grads_ready = dp_grads_on_ready;
    p->model->on_grads_ready_ctx = p->dp_grads;
  }
  rc = model_chunk_backward_weights(p->model, c, slot, err);
  p->model->on_grads_ready = NULL;
  p->model->on_grads_ready_ctx = NULL;
  if (!rc && releases_slot(p->prog, p->rank, a)) release_slot(p, c, mb);
  return rc;
}

int pipeline_send(Pipeline *p, const SchedAction *a, Error *err) {
  if (a->seq_count > 0) return pipeline_replicated_send(p, a, err);
  int rc = check_action(p, a, err);
  if (rc) return rc;
  int c = a->chunk, mb = a->microbatch, stage = stage_of(p, c);
  int slot = p->slot_of[c][mb];
  if (slot < 0 || !p->group)
    return error_set(err, ERR_INTERNAL, "pipeline: send of micro-batch %d, chunk %d without its computation", mb, c);
  if (a->kind == SCHED_SEND_ACT) {
    int peer = (stage + 1) % p->pp;
    const float *y = model_chunk_output(p->model, c, slot);
    return comm_send_f32(p->group, peer, p2p_tag(p, stage, mb, 0), y, p->act_len, &p->send_act[c][slot], err);
  }
  int peer = (stage - 1 + p->pp) % p->pp;
  const float *dx = model_chunk_input_grad(p->model, c, slot);
  rc = comm_send_f32(p->group, peer, p2p_tag(p, stage - 1, mb, 1), dx, p->act_len, &p->send_grad[c][slot], err);
  /* The slot is free for the next forward, which waits for this send first
   * (unless a weight-gradient pass still reads it). */
  if (!rc && releases_slot(p->prog, p->rank, a)) release_slot(p, c, mb);
  return rc;
}

int pipeline_recv(Pipeline *p, const SchedAction *a, Error *err) {
  if (a->seq_count > 0) return pipeline_replicated_recv(p, a, err);
  int rc = check_action(p, a, err);
  if (rc) return rc;
  int c = a->chunk, mb = a->microbatch, stage = stage_of(p, c);
  int is_grad = a->kind == SCHED_RECV_GRAD;
  PipeBufferPool *pool = is_grad ? &p->grad_in[c] : &p->act_in[c];
  if (!p->group || pool->num_free == 0 || pool->buf_of_mb[mb] >= 0)
    return error_set(err, ERR_INTERNAL, "pipeline: no receive buffer for micro-batch %d of chunk %d", mb, c);
  int b = pool->free_list[--pool->num_free];
  pool->buf_of_mb[mb] = b;
  pool->recv_of[b] = a;
  int peer = is_grad ? (stage + 1) % p->pp : (stage - 1 + p->pp) % p->pp;
  int link = is_grad ? stage : stage - 1;
  return comm_recv_f32(p->group, peer, p2p_tag(p, link, mb, is_grad), pool->data + (size_t)b * p->act_len, p->act_len,
                       &pool->req[b], err);
}

int pipeline_prepare(Pipeline *p, const SchedAction *a, Error *err) {
  if (p->repl) return pipeline_replicated_prepare(p, a, err);
  if (check_action(p, a, err)) return err ? err->code : ERR_INTERNAL;
  int c = a->chunk, mb = a->microbatch;
  const ModelShard *sh = &p->model->shard;
  PipeBufferPool *pool = NULL;
  if (a->kind == SCHED_FWD && !sh->has_embedding[c]) pool = &p->act_in[c];
  if (a->kind == SCHED_BWD && !sh->has_head[c]) pool = &p->grad_in[c];
  int b = pool ? pool->buf_of_mb[mb] : -1;
  if (b < 0) return 0; /* nothing received (the handler reports a missing receive) */
  int was_active = pool->req[b].active;
  int rc = comm_wait(&pool->req[b], err);
  if (!rc && was_active && pool->recv_of[b]) trace_session_complete(p->trace, pool->recv_of[b]);
  return rc;
}

int pipeline_end_step(Pipeline *p, Error *err) {
  int rc = p->repl ? pipeline_replicated_end_step(p, err) : 0;
  for (int c = 0; c < p->vpp && !rc; c++) {
    for (int s = 0; s < p->num_slots && !rc; s++) {
      rc = comm_wait(&p->send_act[c][s], err);
      if (!rc) rc = comm_wait(&p->send_grad[c][s], err);
    }
    if (!rc && p->num_free[c] != p->num_slots)
      rc = error_set(err, ERR_INTERNAL, "pipeline: %d micro-batch(es) of chunk %d still hold a slot at the end of the step",
                     p->num_slots - p->num_free[c], c);
  }
  return rc;
}

int pipeline_eval_forward(Pipeline *p, const int *tokens, const int *targets, ModelLoss *loss, Error *err) {
  if (p->repl) return pipeline_replicated_eval_forward(p, tokens, targets, loss, err);
  memset(loss, 0, sizeof *loss);
  const ModelShard *sh = &p->model->shard;
  for (int s = 0; s < p->num_stages; s++) {
    if (s % p->pp != p->rank) continue;
    int c = s / p->pp, rc;
    const float *x_in = NULL;
    if (s > 0) {
      /* Between steps every buffer is free: the first of the pool (or the
       * slot's own output, for a chunk fed on this rank) takes it. */
      PipeBufferPool *pool = &p->act_in[c];
      if (pool->count == 0)
        return error_set(err, ERR_INTERNAL, "pipeline: chunk %d has no receive buffer for validation", c);
      rc = comm_recv_f32(p->group, (s - 1) % p->pp, eval_tag(p, s - 1), pool->data, p->act_len, NULL, err);
      if (rc) return rc;
      x_in = pool->data;
    }
    ModelLoss l = {0};
    rc = model_chunk_forward(p->model, c, 0, sh->has_embedding[c] ? tokens : NULL, sh->has_head[c] ? targets : NULL,
                             x_in, p->B, p->T, 0, 1.0f, &l, err);
    if (rc) return rc;
    if (sh->has_head[c]) {
      loss->lm = l.lm;
      loss->tokens = l.tokens;
    }
    if (s + 1 < p->num_stages) {
      rc = comm_send_f32(p->group, (s + 1) % p->pp, eval_tag(p, s), model_chunk_output(p->model, c, 0), p->act_len,
                         NULL, err);
      if (rc) return rc;
    }
  }
  return 0;
}
