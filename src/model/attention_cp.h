/* Context-parallel (CP) causal attention: the sequence is split over the
 * ranks of a CP group, K/V blocks travel around a ring and each rank merges
 * the partial attention of its queries over every block with the online
 * softmax (kern/attention.h: attention_forward_block / attention_merge /
 * attention_backward_block). The backward runs the ring again; the dK/dV
 * partial sums travel with their K/V block and arrive back at the block's
 * owner after one extra shift. MPI-free: all communication goes through the
 * CpCommOps callbacks the runtime supplies.
 *
 * What the runtime must do
 * ------------------------
 * The CP group: the ranks of the attention grid (tp-cp-dp-pp) that share
 * their tp, dp and pp coordinates; `cp_rank` is the cp coordinate. The ring
 * runs in cp_rank order: rank r sends to (r + 1) % cp_size and receives from
 * (r - 1 + cp_size) % cp_size. Every rank of a group must make the same
 * sequence of calls with the same shapes (the callbacks are collectives).
 *
 * How data is split: every CP rank of a group sees the SAME micro-batch of
 * B sequences of T tokens (T divisible by 2 * cp_size). Each sequence is cut
 * into 2 * cp_size chunks of T / (2 * cp_size) tokens and rank r keeps
 * chunks r and 2 * cp_size - 1 - r, in that order, so T_local = T / cp_size
 * rows per sequence. Under a causal mask the early chunk is cheap and the
 * late one expensive: this pairing gives every rank the same number of
 * (query, key) pairs (cp_rank_causal_pairs); a contiguous split would give
 * the last rank about 2 * cp_size - 1 times the work of the first.
 * cp_split_rows applies the split to any [B, T, ...] tensor (tokens, labels,
 * loss masks, reference activations); cp_unsplit_rows puts a rank's part
 * back into the full tensor. Next-token labels are formed on the full
 * sequence and then split (the chunks are not contiguous, so shifting a
 * rank's local tokens by one would be wrong). RoPE must use the GLOBAL positions of the local
 * rows (cp_local_positions), applied to q and k before calling in here. Loss:
 * a rank sums over its B * T_local tokens; the token mean divides the sum
 * over the CP group by B * T. Weight gradients of everything outside the
 * attention core are partial sums over the rank's tokens and reduce over the
 * dp x cp group (DESIGN.md). With TP, Hq and Hkv are the rank's local heads.
 *
 * Layouts are the kernel's, over the local rows:
 *   q, out, dq, dout: [B, T_local, Hq, D];  k, v, dk, dv: [B, T_local, Hkv, D];
 *   lse: [B, Hq, T_local].  Row t of sequence b is global position pos[t]
 *   (cp_local_positions) of that sequence. */
#ifndef FIVEFOLD_MODEL_ATTENTION_CP_H
#define FIVEFOLD_MODEL_ATTENTION_CP_H

#include <stddef.h>

#include "base/error.h"

/* Communication of one CP group, seen from one rank. `ring_shift` is
 * required: send `count` floats to the next rank and receive `count` from
 * the previous one; blocking, `send` and `recv` never overlap. Optionally
 * `ring_shift_start` / `ring_shift_wait` (both or neither) split the same
 * shift so it overlaps computation: between them the caller neither writes
 * `send` nor reads `recv`, and at most one shift is in flight. The forward
 * overlaps each K/V shift with the block computation; the backward overlaps
 * the K/V shift and sends the dK/dV partial sums after the block (they are
 * only final then). With MPI: Isend/Irecv (or Sendrecv) on the CP communicator. */
typedef struct CpCommOps {
  void *ctx;
  void (*ring_shift)(void *ctx, const float *send, float *recv, size_t count);
  void (*ring_shift_start)(void *ctx, const float *send, float *recv, size_t count);
  void (*ring_shift_wait)(void *ctx);
  /* In place sum of n doubles over the CP group (blocking). Not used by the
   * attention here; the model sums the LM loss and its token count with it
   * (model.h). May be NULL when only the attention functions are called. */
  void (*allreduce_sum_f64)(void *ctx, double *buf, size_t n);
} CpCommOps;

/* 0 when a CP group of cp_size ranks can split sequences of T tokens
 * (cp_size >= 1, T > 0 and divisible by 2 * cp_size); else ERR_CONFIG. */
int cp_check_split(int T, int cp_size, Error *err);

/* pos[0 .. T/cp_size) = global positions of rank cp_rank's rows: chunk
 * cp_rank then chunk 2*cp_size-1-cp_rank. Increasing. Same for every
 * sequence of the micro-batch. Call cp_check_split first. */
void cp_local_positions(int *pos, int T, int cp_size, int cp_rank);

/* Load-balanced split of a tensor of `outer` sequences of T rows of
 * `row_bytes` each ([B, T, ...] with outer = B; lse [B, Hq, T] with
 * outer = B * Hq and row_bytes = sizeof(float)). `local` gets rank cp_rank's
 * [outer, T/cp_size, ...] part; cp_unsplit_rows writes it back into `full`
 * (the other ranks' rows untouched). */
void cp_split_rows(void *local, const void *full, int outer, int T, size_t row_bytes, int cp_size, int cp_rank);
void cp_unsplit_rows(void *full, const void *local, int outer, int T, size_t row_bytes, int cp_size, int cp_rank);

/* Causal (query, key) pairs rank cp_rank computes per sequence and head:
 * the sum over its rows of (global position + 1). Equal for every rank. */
long long cp_rank_causal_pairs(int T, int cp_size, int cp_rank);

/* Bytes of workspace cp_attention_forward and cp_attention_backward need
 * (one size serves both; it may be shared across layers since nothing in it
 * lives between calls). Any float-aligned block; 64-byte aligned is best. */
size_t cp_attention_workspace_bytes(int B, int T_local, int Hq, int Hkv, int D);

/* Causal attention of the local queries over the whole sequence. Writes out
 * and lse (kept for the backward). Allocates nothing; makes cp_size - 1 ring
 * shifts of 2 * B * T_local * Hkv * D floats. Returns ERR_ARG on a bad shape
 * or rank (before any communication: all ranks fail alike). */
int cp_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T_local,
                         int Hq, int Hkv, int D, int cp_size, int cp_rank, void *workspace, const CpCommOps *ops,
                         Error *err);

/* Overwrites dq, dk, dv of the local rows: the full gradients (over every
 * rank's queries) of the rank's own q, k, v. `out` and `lse` are this rank's
 * forward results. Allocates nothing. With start/wait: cp_size - 1 shifts of
 * K/V and cp_size of dK/dV, each 2 * B * T_local * Hkv * D floats; with
 * ring_shift alone, K/V and dK/dV go together (cp_size - 1 shifts of twice
 * that, then one of dK/dV home to their owner). */
int cp_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int B, int T_local, int Hq, int Hkv, int D,
                          int cp_size, int cp_rank, void *workspace, const CpCommOps *ops, Error *err);

#endif
