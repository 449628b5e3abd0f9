/* Context-parallel ring attention (contract in attention_cp.h).
 *
 * Forward: rank r starts with its own K/V block; at step s it holds the block
 * of rank (r - s) mod cp_size, whose key positions it recomputes locally (the
 * split is a pure function of the rank), so only K/V travel. Partial results
 * fold into (out, lse) with attention_merge, which is exact for any order.
 *
 * Backward: the same walk. dQ accumulates in place; the dK/dV of a block
 * accumulate in a buffer that travels right behind the block, so after the
 * last step each partial sum has visited every rank and one more shift
 * brings it to the block's owner. The kernel's backward needs only the
 * merged (out, lse), so no per-block forward state is kept.
 *
 * The workspace holds the two position arrays and a pair of ring buffers
 * (send from one, receive into the other, then swap): [K | V] in the forward
 * plus one block's partial (out, lse); [K | V | dK | dV] in the backward. */
#include "model/attention_cp.h"

#include <string.h>

#include "kern/attention.h"

static size_t round_up_64(size_t bytes) { return (bytes + 63) / 64 * 64; }

int cp_check_split(int T, int cp_size, Error *err) {
  if (cp_size < 1) return error_set(err, ERR_CONFIG, "context parallelism: cp_size = %d, expected >= 1", cp_size);
  if (T <= 0 || T % (2 * cp_size) != 0)
    return error_set(err, ERR_CONFIG,
                     "context parallelism: sequence length %d must be a positive multiple of 2 * cp_size = %d "
                     "(each rank holds two of 2 * cp_size equal chunks)",
                     T, 2 * cp_size);
  return ERR_OK;
}

/* Chunk held in local half `half` (0: first rows, 1: second rows). */
static int chunk_of(int half, int cp_size, int cp_rank) { return half ? 2 * cp_size - 1 - cp_rank : cp_rank; }

void cp_local_positions(int *pos, int T, int cp_size, int cp_rank) {
  const int C = T / (2 * cp_size);
  for (int half = 0; half < 2; half++) {
    const int first = chunk_of(half, cp_size, cp_rank) * C;
    for (int i = 0; i < C; i++) pos[half * C + i] = first + i;
  }
}

void cp_split_rows(void *local, const void *full, int outer, int T, size_t row_bytes, int cp_size, int cp_rank) {
  const size_t C = (size_t)(T / (2 * cp_size)), chunk_bytes = C * row_bytes;
  for (size_t o = 0; o < (size_t)outer; o++)
    for (int half = 0; half < 2; half++) {
      const size_t chunk = (size_t)chunk_of(half, cp_size, cp_rank);
      memcpy((char *)local + (o * 2 * C + half * C) * row_bytes,
             (const char *)full + (o * (size_t)T + chunk * C) * row_bytes, chunk_bytes);
    }
}

void cp_unsplit_rows(void *full, const void *local, int outer, int T, size_t row_bytes, int cp_size, int cp_rank) {
  const size_t C = (size_t)(T / (2 * cp_size)), chunk_bytes = C * row_bytes;
  for (size_t o = 0; o < (size_t)outer; o++)
    for (int half = 0; half < 2; half++) {
      const size_t chunk = (size_t)chunk_of(half, cp_size, cp_rank);
      memcpy((char *)full + (o * (size_t)T + chunk * C) * row_bytes,
             (const char *)local + (o * 2 * C + half * C) * row_bytes, chunk_bytes);
    }
}

long long cp_rank_causal_pairs(int T, int cp_size, int cp_rank) {
  const long long C = T / (2 * cp_size);
  long long pairs = 0;
  for (int half = 0; half < 2; half++) /* sum over the chunk of (position + 1) */
    pairs += C * (chunk_of(half, cp_size, cp_rank) * C) + C * (C + 1) / 2;
  return pairs;
}

/* ------------------------------------------------------------ workspace */

typedef struct CpWork {
  int *qpos, *kpos;   /* [T_local] each */
  float *ring[2];     /* forward: [K | V]; backward: [K | V | dK | dV] */
  float *out_block;   /* forward only: [B, T_local, Hq, D] */
  float *lse_block;   /* forward only: [B, Hq, T_local] */
} CpWork;

typedef struct CpSizes {
  size_t kv;  /* floats of one of K, V, dK, dV */
  size_t q;   /* floats of q / out */
  size_t lse; /* floats of lse */
} CpSizes;

static CpSizes cp_sizes(int B, int T_local, int Hq, int Hkv, int D) {
  CpSizes s = {(size_t)B * T_local * Hkv * D, (size_t)B * T_local * Hq * D, (size_t)B * Hq * T_local};
  return s;
}

/* Lays the pieces out from `base` (NULL: only measures) for the forward
 * (`backward` = 0) or the backward; returns the bytes that pass needs. The
 * passes never run at once, so both start at the same place. */
static size_t cp_layout(CpWork *w, void *base, int backward, int B, int T_local, int Hq, int Hkv, int D) {
  const CpSizes s = cp_sizes(B, T_local, Hq, Hkv, D);
  const size_t pos_bytes = round_up_64((size_t)T_local * sizeof(int));
  const size_t ring_bytes = round_up_64((backward ? 4 : 2) * s.kv * sizeof(float));
  const size_t out_bytes = backward ? 0 : round_up_64(s.q * sizeof(float));
  const size_t lse_bytes = backward ? 0 : round_up_64(s.lse * sizeof(float));
  char *p = base;
  if (w) {
    w->qpos = (int *)p;
    w->kpos = (int *)(p + pos_bytes);
    w->ring[0] = (float *)(p + 2 * pos_bytes);
    w->ring[1] = (float *)(p + 2 * pos_bytes + ring_bytes);
    w->out_block = backward ? NULL : (float *)(p + 2 * pos_bytes + 2 * ring_bytes);
    w->lse_block = backward ? NULL : (float *)(p + 2 * pos_bytes + 2 * ring_bytes + out_bytes);
  }
  return 2 * pos_bytes + 2 * ring_bytes + out_bytes + lse_bytes;
}

size_t cp_attention_workspace_bytes(int B, int T_local, int Hq, int Hkv, int D) {
  const size_t fwd = cp_layout(NULL, NULL, 0, B, T_local, Hq, Hkv, D);
  const size_t bwd = cp_layout(NULL, NULL, 1, B, T_local, Hq, Hkv, D);
  return fwd > bwd ? fwd : bwd;
}

static int check_call(const char *who, int B, int T_local, int Hq, int Hkv, int D, int cp_size, int cp_rank,
                      const void *workspace, const CpCommOps *ops, Error *err) {
  if (B < 1 || T_local < 2 || T_local % 2 != 0 || Hq < 1 || Hkv < 1 || Hq % Hkv != 0 || D < 1)
    return error_set(err, ERR_ARG,
                     "%s: shape B=%d T_local=%d Hq=%d Hkv=%d D=%d: expected positive sizes, T_local even "
                     "(two chunks per rank) and Hq a multiple of Hkv",
                     who, B, T_local, Hq, Hkv, D);
  if (cp_size < 1 || cp_rank < 0 || cp_rank >= cp_size)
    return error_set(err, ERR_ARG, "%s: cp_rank %d of cp_size %d: expected 0 <= cp_rank < cp_size", who, cp_rank,
                     cp_size);
  if (cp_size > 1 && (!workspace || !ops || !ops->ring_shift))
    return error_set(err, ERR_ARG, "%s: cp_size %d needs a workspace and ops->ring_shift", who, cp_size);
  if (ops && (!ops->ring_shift_start) != (!ops->ring_shift_wait))
    return error_set(err, ERR_ARG, "%s: ops->ring_shift_start and ring_shift_wait must be given together", who);
  return ERR_OK;
}

/* ------------------------------------------------------------ ring passes */

/* Moves `count` floats one rank along the ring, blocking. */
static void shift_now(const CpCommOps *ops, const float *send, float *recv, size_t count) {
  if (ops->ring_shift_start) {
    ops->ring_shift_start(ops->ctx, send, recv, count);
    ops->ring_shift_wait(ops->ctx);
  } else {
    ops->ring_shift(ops->ctx, send, recv, count);
  }
}

/* The rank whose block rank `cp_rank` holds at ring step `step`. */
static int block_owner(int step, int cp_size, int cp_rank) { return (cp_rank - step % cp_size + cp_size) % cp_size; }

int cp_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T_local,
                         int Hq, int Hkv, int D, int cp_size, int cp_rank, void *workspace, const CpCommOps *ops,
                         Error *err) {
  int rc = check_call("cp_attention_forward", B, T_local, Hq, Hkv, D, cp_size, cp_rank, workspace, ops, err);
  if (rc) return rc;
  if (cp_size == 1) { /* the whole sequence is here, in order */
    attention_forward(out, lse, q, k, v, B, T_local, Hq, Hkv, D);
    return ERR_OK;
  }
  const int T = T_local * cp_size;
  const CpSizes sz = cp_sizes(B, T_local, Hq, Hkv, D);
  CpWork w;
  cp_layout(&w, workspace, 0, B, T_local, Hq, Hkv, D);
  cp_local_positions(w.qpos, T, cp_size, cp_rank);
  float *cur = w.ring[0], *next = w.ring[1];
  memcpy(cur, k, sz.kv * sizeof(float));
  memcpy(cur + sz.kv, v, sz.kv * sizeof(float));
  const int overlap = ops->ring_shift_start != NULL;

  for (int step = 0; step < cp_size; step++) {
    const int more = step + 1 < cp_size;
    if (more && overlap) ops->ring_shift_start(ops->ctx, cur, next, 2 * sz.kv);
    cp_local_positions(w.kpos, T, cp_size, block_owner(step, cp_size, cp_rank));
    if (step == 0) {
      attention_forward_block(out, lse, q, w.qpos, T_local, cur, cur + sz.kv, w.kpos, T_local, B, Hq, Hkv, D);
    } else {
      attention_forward_block(w.out_block, w.lse_block, q, w.qpos, T_local, cur, cur + sz.kv, w.kpos, T_local, B,
                              Hq, Hkv, D);
      attention_merge(out, lse, w.out_block, w.lse_block, B, T_local, Hq, D);
    }
    if (!more) break;
    if (overlap)
      ops->ring_shift_wait(ops->ctx);
    else
      ops->ring_shift(ops->ctx, cur, next, 2 * sz.kv);
    float *t = cur;
    cur = next;
    next = t;
  }
  return ERR_OK;
}

int cp_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int B, int T_local, int Hq, int Hkv, int D,
                          int cp_size, int cp_rank, void *workspace, const CpCommOps *ops, Error *err) {
  int rc = check_call("cp_attention_backward", B, T_local, Hq, Hkv, D, cp_size, cp_rank, workspace, ops, err);
  if (rc) return rc;
  if (cp_size == 1) {
    attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T_local, Hq, Hkv, D);
    return ERR_OK;
  }
  const int T = T_local * cp_size;
  const CpSizes sz = cp_sizes(B, T_local, Hq, Hkv, D);
  CpWork w;
  cp_layout(&w, workspace, 1, B, T_local, Hq, Hkv, D);
  cp_local_positions(w.qpos, T, cp_size, cp_rank);
  /* ring buffer: [K | V | dK | dV] of the block being visited */
  float *cur = w.ring[0], *next = w.ring[1];
  memcpy(cur, k, sz.kv * sizeof(float));
  memcpy(cur + sz.kv, v, sz.kv * sizeof(float));
  memset(cur + 2 * sz.kv, 0, 2 * sz.kv * sizeof(float));
  memset(dq, 0, sz.q * sizeof(float));
  const int overlap = ops->ring_shift_start != NULL;

  for (int step = 0; step < cp_size; step++) {
    const int more = step + 1 < cp_size;
    /* K/V are final, so they may leave while this block is worked on; its
     * dK/dV only after (it then arrives before the block is needed again). */
    if (more && overlap) ops->ring_shift_start(ops->ctx, cur, next, 2 * sz.kv);
    cp_local_positions(w.kpos, T, cp_size, block_owner(step, cp_size, cp_rank));
    attention_backward_block(dq, cur + 2 * sz.kv, cur + 3 * sz.kv, dout, out, lse, q, w.qpos, T_local, cur,
                             cur + sz.kv, w.kpos, T_local, B, Hq, Hkv, D);
    if (overlap) {
      if (more) ops->ring_shift_wait(ops->ctx);
      shift_now(ops, cur + 2 * sz.kv, next + 2 * sz.kv, 2 * sz.kv);
    } else if (more) {
      ops->ring_shift(ops->ctx, cur, next, 4 * sz.kv);
    } else { /* last step: only the finished dK/dV go home */
      ops->ring_shift(ops->ctx, cur + 2 * sz.kv, next + 2 * sz.kv, 2 * sz.kv);
    }
    float *t = cur;
    cur = next;
    next = t;
  }
  /* After cp_size shifts the partial sums of this rank's own block are back. */
  memcpy(dk, cur + 2 * sz.kv, sz.kv * sizeof(float));
  memcpy(dv, cur + 3 * sz.kv, sz.kv * sizeof(float));
  return ERR_OK;
}
