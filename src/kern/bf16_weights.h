/* The bf16 weight cache: bf16 copies of the fp32 master weights that the
 * bf16 GEMMs read instead of converting the weight operand at every call.
 *
 * Why: under --precision bf16 a weight is an input of its layer's forward
 * GEMM, of the backward's dX GEMM and, for the LM head, of every chunk of
 * the loss, in every micro-batch; converting it each time costs as much
 * memory traffic as reading it. The weights change only when the optimizer
 * (or a load) writes them, so one conversion per optimizer step serves all
 * of those products.
 *
 * How: the owner of a weight buffer registers its matrices (pointer and
 * shape; nothing is allocated then). gemm_onednn asks bf16_weights_lookup
 * for each bf16 operand: an operand lying inside a registered matrix is
 * read from its bf16 copy, converted on the first such read after the last
 * invalidation, by the same conversion (bf16_pack_rows) the per-call path
 * uses, so products are bit for bit those of the uncached path. Whoever
 * writes registered weights (the optimizer, a checkpoint load) calls
 * bf16_weights_invalidate on the range it wrote; whoever frees them calls
 * bf16_weights_forget first. Memory: a copy takes 2 bytes per element,
 * half of the fp32 weights it mirrors, and only matrices a bf16 GEMM reads
 * get one.
 *
 * FIVEFOLD_BF16_WEIGHT_CACHE=off (or 0) turns the cache off: every bf16
 * GEMM converts its weights again, as before the cache existed; "on" or
 * unset: on. Thread-safe: lookups from OpenMP workers run concurrently;
 * register and forget must not race with GEMMs reading the same tensors. */
#ifndef FIVEFOLD_KERN_BF16_WEIGHTS_H
#define FIVEFOLD_KERN_BF16_WEIGHTS_H

#include <stddef.h>

#include "kern/bf16.h"

/* Registers the dense fp32 matrix w[rows, cols] (no copy is made until a
 * bf16 GEMM reads it). A matrix overlapping registered ones replaces them.
 * Returns 0, or -1 when out of memory for the registry (the matrix then
 * stays uncached: correct, only slower). Does nothing when the cache is off. */
int bf16_weights_register(const float *w, long rows, long cols);

/* Registers a weight tensor of `ndim` dimensions, dim0 x dim1 x ... with
 * numel elements: a matrix [dim0, numel / dim0]; a 3-dimensional one (a
 * stack of expert matrices [E, R, C]) as dim0 matrices [dim1, C], so that
 * each expert converts on its own. Vectors (ndim < 2) are left out: no
 * GEMM reads them. Returns as bf16_weights_register. */
int bf16_weights_register_tensor(const float *w, int ndim, long dim0, long dim1, size_t numel);

/* Forgets (and frees the copies of) every registered matrix that overlaps
 * [base, base + n): call before the fp32 memory is freed or reused. */
void bf16_weights_forget(const float *base, size_t n);

/* Marks every registered matrix overlapping [base, base + n) stale, so the
 * next bf16 GEMM reading it converts it again: call after writing weights. */
void bf16_weights_invalidate(const float *base, size_t n);

/* For the GEMM: the bf16 copy of the operand at p read as `rows` rows of
 * `cols` elements with row stride ld (element (r, c) at p[r * ld + c]; the
 * copy keeps the same offsets and stride), converted first if stale. NULL
 * when the cache is off or the operand is not inside one registered
 * matrix. The pointer stays valid until the matrix is forgotten. */
const kern_bf16 *bf16_weights_lookup(const float *p, long rows, long cols, long ld);

/* Whether the cache is on: FIVEFOLD_BF16_WEIGHT_CACHE as read at the first
 * call, unless bf16_weights_set_enabled said otherwise. */
int bf16_weights_enabled(void);
/* Turns the cache on or off for the rest of the process (benchmarks and
 * tests comparing both in one process); off forgets every matrix. */
void bf16_weights_set_enabled(int on);
/* 0 when FIVEFOLD_BF16_WEIGHT_CACHE is unset, "on", "off", "1" or "0";
 * otherwise -1 with `err` naming the variable, its value and what is
 * expected (the trainer refuses to start; the cache itself treats such a
 * value as on). */
int bf16_weights_check_env(char *err, size_t err_len);

typedef struct Bf16WeightStats {
  long tensors;             /* matrices registered */
  size_t registered_bytes;  /* bf16 bytes they would take, all converted */
  size_t resident_bytes;    /* bf16 bytes of the copies that exist now */
  unsigned long long hits;  /* GEMM operands read from a copy */
  unsigned long long conversions; /* copies (re)made from the fp32 weights */
} Bf16WeightStats;
void bf16_weights_stats(Bf16WeightStats *out);

#endif
