/* MoE token dispatch on one rank: the capacity rule with its two drop
 * policies and optional padding, the permutation of assignments into
 * expert-major rows, and the weighted combine that undoes it, each with its
 * backward. Definitions: docs/moe-semantics.md, steps 5-7. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "model/moe.h"

int moe_capacity(const MoeSpec *s, int N) {
  if (!(s->capacity_factor > 0)) return 0;
  double c = ceil((double)N * (double)s->K * (double)s->capacity_factor / (double)s->E);
  return c > (double)INT_MAX ? INT_MAX : (int)c;
}

size_t moe_max_rows(const MoeSpec *s, int N) {
  size_t rows = (size_t)N * s->K;
  if (s->pad_to_capacity && s->capacity_factor > 0) {
    size_t padded = (size_t)moe_capacity(s, N) * s->E;
    if (padded > rows) rows = padded;
  }
  return rows;
}

typedef struct Ranked {
  float w;
  int a; /* assignment id n*K + j */
} Ranked;

/* Order of the probs policy: largest weight first; ties: smaller (n, j)
 * first. A total order, so the kept set does not depend on the sort. */
static int ranked_before(const Ranked *x, const Ranked *y) {
  if (x->w != y->w) return x->w > y->w;
  return x->a < y->a;
}

static void sift_down(Ranked *v, size_t root, size_t n) {
  for (;;) {
    size_t child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && ranked_before(&v[child], &v[child + 1])) child++;
    if (!ranked_before(&v[root], &v[child])) return;
    Ranked t = v[root];
    v[root] = v[child];
    v[child] = t;
    root = child;
  }
}

/* Heapsort: in place and allocation-free (qsort may allocate). */
static void sort_ranked(Ranked *v, size_t n) {
  for (size_t i = n / 2; i-- > 0;) sift_down(v, i, n);
  for (size_t end = n; end-- > 1;) {
    Ranked t = v[0];
    v[0] = v[end];
    v[end] = t;
    sift_down(v, 0, end);
  }
}

size_t moe_plan_scratch_bytes(const MoeSpec *s, int N) {
  size_t nk = (size_t)N * s->K;
  return nk * sizeof(int) + nk * sizeof(Ranked) + (size_t)(s->E + 1) * sizeof(int);
}

void moe_permute_plan(MoePermutation *p, const MoeRouting *r, int N, const MoeSpec *s, void *scratch) {
  const int E = s->E, K = s->K;
  const size_t NK = (size_t)N * K;
  int *by_expert = scratch;                    /* [NK] assignments grouped by expert, (n, j) order */
  Ranked *ranked = (Ranked *)(by_expert + NK); /* [NK] */
  int *bucket = (int *)(ranked + NK);          /* [E+1] */
  const int cap = moe_capacity(s, N);
  const int limit = cap > 0 ? cap : INT_MAX;

  bucket[0] = 0;
  for (int e = 0; e < E; e++) bucket[e + 1] = bucket[e] + (int)r->counts[e];
  for (int e = 0; e < E; e++) p->kept[e] = bucket[e]; /* cursor for now */
  for (size_t a = 0; a < NK; a++) by_expert[p->kept[r->topk_idx[a]]++] = (int)a;

  /* Mark the kept assignments: row_of = 1 keep, -1 drop (rows come later). */
  long dropped = 0;
  for (int e = 0; e < E; e++) {
    int count = bucket[e + 1] - bucket[e];
    p->kept[e] = count < limit ? count : limit;
    dropped += count - p->kept[e];
  }
#pragma omp parallel for schedule(dynamic, 1) if (NK > PARALLEL_MIN_WORK / 16)
  for (int e = 0; e < E; e++) {
    const int *seg = by_expert + bucket[e];
    const int count = bucket[e + 1] - bucket[e], keep = p->kept[e];
    if (keep == count || s->policy == DROP_POLICY_POSITION) {
      for (int i = 0; i < count; i++) p->row_of[seg[i]] = i < keep ? 1 : -1;
      continue;
    }
    Ranked *rk = ranked + bucket[e];
    for (int i = 0; i < count; i++) rk[i].a = seg[i], rk[i].w = r->topk_w[seg[i]];
    sort_ranked(rk, (size_t)count);
    for (int i = 0; i < count; i++) p->row_of[rk[i].a] = i < keep ? 1 : -1;
  }

  p->expert_offset[0] = 0;
  for (int e = 0; e < E; e++)
    p->expert_offset[e + 1] = p->expert_offset[e] + (s->pad_to_capacity && cap > 0 ? cap : p->kept[e]);
  p->rows = p->expert_offset[E];
  p->capacity = cap;
  p->dropped = dropped;

#pragma omp parallel for schedule(static) if (NK > PARALLEL_MIN_WORK / 16)
  for (int e = 0; e < E; e++) {
    const int *seg = by_expert + bucket[e];
    const int count = bucket[e + 1] - bucket[e];
    int row = p->expert_offset[e];
    for (int i = 0; i < count; i++) {
      int a = seg[i];
      if (p->row_of[a] < 0) continue;
      p->row_of[a] = row;
      p->token_of_row[row++] = a / K;
    }
    for (; row < p->expert_offset[e + 1]; row++) p->token_of_row[row] = -1;
  }
}

void moe_permute_forward(float *xp, const float *x, const MoePermutation *p, int C) {
#pragma omp parallel for schedule(static) if ((size_t)p->rows * C > PARALLEL_MIN_WORK)
  for (int row = 0; row < p->rows; row++) {
    float *dst = xp + (size_t)row * C;
    int n = p->token_of_row[row];
    if (n < 0)
      memset(dst, 0, (size_t)C * sizeof *dst);
    else
      memcpy(dst, x + (size_t)n * C, (size_t)C * sizeof *dst);
  }
}

void moe_permute_backward(float *dx, const float *dxp, const MoePermutation *p, int N, int K, int C, int accumulate) {
#pragma omp parallel for schedule(static) if ((size_t)N * K * C > PARALLEL_MIN_WORK)
  for (int n = 0; n < N; n++) {
    float *d = dx + (size_t)n * C;
    if (!accumulate) memset(d, 0, (size_t)C * sizeof *d);
    for (int j = 0; j < K; j++) {
      int row = p->row_of[(size_t)n * K + j];
      if (row < 0) continue;
      const float *src = dxp + (size_t)row * C;
#pragma omp simd
      for (int c = 0; c < C; c++) d[c] += src[c];
    }
  }
}

void moe_combine_forward(float *out, const float *y, const MoePermutation *p, const float *topk_w, int N, int K,
                         int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * K * C > PARALLEL_MIN_WORK)
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * C;
    for (int j = 0; j < K; j++) {
      int row = p->row_of[(size_t)n * K + j];
      if (row < 0) continue;
      const float w = topk_w[(size_t)n * K + j];
      const float *src = y + (size_t)row * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] += w * src[c];
    }
  }
}

void moe_combine_backward(float *dy, float *dtopk_w, const float *dout, const float *y, const MoePermutation *p,
                          const float *topk_w, int N, int K, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * K * C > PARALLEL_MIN_WORK)
  for (int n = 0; n < N; n++) {
    const float *g = dout + (size_t)n * C;
    for (int j = 0; j < K; j++) {
      size_t a = (size_t)n * K + j;
      int row = p->row_of[a];
      if (row < 0) {
        dtopk_w[a] = 0;
        continue;
      }
      const float w = topk_w[a];
      const float *src = y + (size_t)row * C;
      float *d = dy + (size_t)row * C;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; c++) {
        d[c] = w * g[c];
        dot += g[c] * src[c];
      }
      dtopk_w[a] = dot;
    }
  }
  /* Padding rows: their outputs are never used, so their gradient is zero. */
  for (int row = 0; row < p->rows; row++)
    if (p->token_of_row[row] < 0) memset(dy + (size_t)row * C, 0, (size_t)C * sizeof *dy);
}
