/* Piece-wise transfers of a replicated stage: requests per (slot or
 * buffer, peer replica), offsets by sequence. See pipeline_replicated.h. */
#include "train/pipeline_replicated.h"

#include <stdlib.h>
#include <string.h>

#include "train/trace_session.h"

struct PipeReplicated {
  SchedReplication r;
  int stage, replica, seq_begin, seq_count;
  int max_width;     /* pieces of one transfer, at most */
  size_t seq_floats; /* floats of one sequence's activation */
  int bufs[2];       /* receive buffers: activations, gradients */
  CommRequest *send[2]; /* [slot * max_width + k]: the sends of each slot, activation and gradient */
  CommRequest *recv[2]; /* [buffer * max_width + k] */
  const SchedAction **recv_of[2];
};

static int p2p_tag(const Pipeline *p, int link, int mb, int is_grad) { return (link * p->m + mb) * 2 + is_grad; }

int pipeline_replicated_attach(Pipeline *p, const SchedReplication *r, Error *err) {
  if (p->vpp != 1)
    return error_set(err, ERR_CONFIG, "stage replication: %d chunks per rank (it runs one)", p->vpp);
  struct PipeReplicated *x = calloc(1, sizeof *x);
  if (!x) return error_set(err, ERR_NOMEM, "pipeline: out of memory");
  p->repl = x;
  x->r = *r;
  x->stage = sched_replication_stage_of(r, p->rank, &x->replica);
  if (x->stage < 0) return error_set(err, ERR_INTERNAL, "stage replication: rank %d is in no stage", p->rank);
  sched_replication_range(r, x->stage, x->replica, &x->seq_begin, &x->seq_count);
  if (x->seq_count != p->B)
    return error_set(err, ERR_INTERNAL, "stage replication: rank %d holds %d sequences, its pipeline %d", p->rank,
                     x->seq_count, p->B);
  x->seq_floats = p->act_len / (size_t)p->B;
  for (int s = 0; s < r->stages; s++)
    if (r->width[s] > x->max_width) x->max_width = r->width[s];
  x->bufs[0] = p->act_in[0].count;
  x->bufs[1] = p->grad_in[0].count;
  size_t W = (size_t)x->max_width;
  for (int d = 0; d < 2; d++) {
    x->send[d] = calloc((size_t)p->num_slots * W, sizeof(CommRequest));
    x->recv[d] = calloc((size_t)(x->bufs[d] > 0 ? x->bufs[d] : 1) * W, sizeof(CommRequest));
    x->recv_of[d] = calloc((size_t)(x->bufs[d] > 0 ? x->bufs[d] : 1) * W, sizeof *x->recv_of[d]);
    if (!x->send[d] || !x->recv[d] || !x->recv_of[d]) return error_set(err, ERR_NOMEM, "pipeline: out of memory");
    for (size_t i = 0; i < (size_t)p->num_slots * W; i++) comm_request_init(&x->send[d][i]);
    for (size_t i = 0; i < (size_t)(x->bufs[d] > 0 ? x->bufs[d] : 1) * W; i++) comm_request_init(&x->recv[d][i]);
  }
  return 0;
}

void pipeline_replicated_free(Pipeline *p) {
  struct PipeReplicated *x = p->repl;
  if (!x) return;
  for (int d = 0; d < 2; d++) {
    free(x->send[d]);
    free(x->recv[d]);
    free(x->recv_of[d]);
  }
  free(x);
  p->repl = NULL;
}

/* Which of the other stage's replicas the piece goes to or comes from. */
static int peer_replica(const struct PipeReplicated *x, const SchedAction *a) {
  return a->peer - sched_replication_first_rank(&x->r, a->peer_stage);
}

static int check_piece(const Pipeline *p, const SchedAction *a, Error *err) {
  const struct PipeReplicated *x = p->repl;
  char what[128];
  if (!x || a->chunk != 0 || a->microbatch < 0 || a->microbatch >= p->m || a->seq_count < 1 ||
      a->seq_begin < x->seq_begin || a->seq_begin + a->seq_count > x->seq_begin + x->seq_count ||
      peer_replica(x, a) < 0 || peer_replica(x, a) >= x->max_width)
    return error_set(err, ERR_INTERNAL, "pipeline: %s is not a piece of this rank's sequences %d..%d",
                     sched_action_describe(a, what, sizeof what), x ? x->seq_begin : -1,
                     x ? x->seq_begin + x->seq_count - 1 : -1);
  return 0;
}

int pipeline_replicated_send(Pipeline *p, const SchedAction *a, Error *err) {
  int rc = check_piece(p, a, err);
  if (rc) return rc;
  struct PipeReplicated *x = p->repl;
  int mb = a->microbatch, slot = p->slot_of[0][mb], is_grad = a->kind == SCHED_SEND_GRAD;
  if (slot < 0)
    return error_set(err, ERR_INTERNAL, "pipeline: send of micro-batch %d without its computation", mb);
  size_t off = (size_t)(a->seq_begin - x->seq_begin) * x->seq_floats, len = (size_t)a->seq_count * x->seq_floats;
  const float *src = is_grad ? model_chunk_input_grad(p->model, 0, slot) : model_chunk_output(p->model, 0, slot);
  int link = is_grad ? x->stage - 1 : x->stage;
  CommRequest *req = &x->send[is_grad][(size_t)slot * x->max_width + peer_replica(x, a)];
  if ((rc = comm_wait(req, err))) return rc;
  rc = comm_send_f32(p->group, a->peer, p2p_tag(p, link, mb, is_grad), src + off, len, req, err);
  /* After the last piece of the input gradient the slot is free for the
   * next forward, which waits for these sends first. */
  if (!rc && is_grad && a->seq_begin + a->seq_count == x->seq_begin + x->seq_count) {
    p->slot_of[0][mb] = -1;
    p->free_slots[0][p->num_free[0]++] = slot;
  }
  return rc;
}

int pipeline_replicated_recv(Pipeline *p, const SchedAction *a, Error *err) {
  int rc = check_piece(p, a, err);
  if (rc) return rc;
  struct PipeReplicated *x = p->repl;
  int mb = a->microbatch, is_grad = a->kind == SCHED_RECV_GRAD;
  PipeBufferPool *pool = is_grad ? &p->grad_in[0] : &p->act_in[0];
  int b = pool->buf_of_mb[mb];
  if (b < 0) { /* the micro-batch's first piece takes the buffer */
    if (pool->num_free == 0)
      return error_set(err, ERR_INTERNAL, "pipeline: no receive buffer for micro-batch %d", mb);
    b = pool->free_list[--pool->num_free];
    pool->buf_of_mb[mb] = b;
    pool->recv_of[b] = a;
  }
  size_t k = (size_t)b * x->max_width + peer_replica(x, a);
  size_t off = (size_t)(a->seq_begin - x->seq_begin) * x->seq_floats, len = (size_t)a->seq_count * x->seq_floats;
  int link = is_grad ? x->stage : x->stage - 1;
  x->recv_of[is_grad][k] = a;
  return comm_recv_f32(p->group, a->peer, p2p_tag(p, link, mb, is_grad), pool->data + (size_t)b * p->act_len + off,
                       len, &x->recv[is_grad][k], err);
}

static int wait_sends_of_slot(struct PipeReplicated *x, int slot, Error *err) {
  int rc = 0;
  for (int d = 0; d < 2 && !rc; d++)
    for (int k = 0; k < x->max_width && !rc; k++) rc = comm_wait(&x->send[d][(size_t)slot * x->max_width + k], err);
  return rc;
}

int pipeline_replicated_prepare(Pipeline *p, const SchedAction *a, Error *err) {
  struct PipeReplicated *x = p->repl;
  const ModelShard *sh = &p->model->shard;
  int rc = 0, mb = a->microbatch;
  if (a->chunk != 0 || mb < 0 || mb >= p->m) return 0; /* the handler names the problem */
  if (a->kind == SCHED_FWD && p->num_free[0] > 0)
    rc = wait_sends_of_slot(x, p->free_slots[0][p->num_free[0] - 1], err);
  int is_grad = a->kind == SCHED_BWD;
  if (rc || (a->kind == SCHED_FWD && sh->has_embedding[0]) || (is_grad && sh->has_head[0])) return rc;
  if (a->kind != SCHED_FWD && a->kind != SCHED_BWD) return 0;
  PipeBufferPool *pool = is_grad ? &p->grad_in[0] : &p->act_in[0];
  int b = pool->buf_of_mb[mb];
  for (int k = 0; b >= 0 && k < x->max_width && !rc; k++) {
    size_t i = (size_t)b * x->max_width + k;
    int was_active = x->recv[is_grad][i].active;
    rc = comm_wait(&x->recv[is_grad][i], err);
    if (!rc && was_active && x->recv_of[is_grad][i]) trace_session_complete(p->trace, x->recv_of[is_grad][i]);
  }
  return rc;
}

int pipeline_replicated_end_step(Pipeline *p, Error *err) {
  struct PipeReplicated *x = p->repl;
  int rc = 0;
  for (int s = 0; s < p->num_slots && !rc; s++) rc = wait_sends_of_slot(x, s, err);
  return rc;
}

/* Validation: this rank's sequences of one batch through its stage, the
 * pieces received and sent with blocking calls in the order of the
 * sequences (so every send meets its receive). */
int pipeline_replicated_eval_forward(Pipeline *p, const int *tokens, const int *targets, ModelLoss *loss,
                                     Error *err) {
  struct PipeReplicated *x = p->repl;
  const SchedReplication *r = &x->r;
  const ModelShard *sh = &p->model->shard;
  int tag_base = 2 * p->num_stages * p->m, rc = 0;
  memset(loss, 0, sizeof *loss);
  const float *x_in = NULL;
  if (x->stage > 0) {
    PipeBufferPool *pool = &p->act_in[0];
    if (pool->count == 0) return error_set(err, ERR_INTERNAL, "pipeline: no receive buffer for validation");
    int o = x->stage - 1, first = sched_replication_first_rank(r, o);
    for (int j = 0; j < r->width[o] && !rc; j++) {
      int b1, n1;
      sched_replication_range(r, o, j, &b1, &n1);
      int lo = b1 > x->seq_begin ? b1 : x->seq_begin;
      int hi = b1 + n1 < x->seq_begin + x->seq_count ? b1 + n1 : x->seq_begin + x->seq_count;
      if (lo >= hi) continue;
      rc = comm_recv_f32(p->group, first + j, tag_base + o, pool->data + (size_t)(lo - x->seq_begin) * x->seq_floats,
                         (size_t)(hi - lo) * x->seq_floats, NULL, err);
    }
    x_in = pool->data;
  }
  if (rc) return rc;
  size_t off = (size_t)x->seq_begin * (size_t)p->T;
  ModelLoss l = {0};
  rc = model_chunk_forward(p->model, 0, 0, sh->has_embedding[0] ? tokens + off : NULL,
                           sh->has_head[0] ? targets + off : NULL, x_in, p->B, p->T, 0, 1.0f, &l, err);
  if (rc) return rc;
  if (sh->has_head[0]) {
    loss->lm = l.lm;
    loss->tokens = l.tokens;
  }
  if (x->stage + 1 < r->stages) {
    int o = x->stage + 1, first = sched_replication_first_rank(r, o);
    const float *y = model_chunk_output(p->model, 0, 0);
    for (int j = 0; j < r->width[o] && !rc; j++) {
      int b1, n1;
      sched_replication_range(r, o, j, &b1, &n1);
      int lo = b1 > x->seq_begin ? b1 : x->seq_begin;
      int hi = b1 + n1 < x->seq_begin + x->seq_count ? b1 + n1 : x->seq_begin + x->seq_count;
      if (lo >= hi) continue;
      rc = comm_send_f32(p->group, first + j, tag_base + x->stage, y + (size_t)(lo - x->seq_begin) * x->seq_floats,
                         (size_t)(hi - lo) * x->seq_floats, NULL, err);
    }
  }
  return rc;
}
