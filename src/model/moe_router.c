/* MoE router: logits, scores (softmax / sigmoid), top-k in either order,
 * routing weights, the aux load-balancing and z losses, and the backward
 * pass of all of it into the router weight and the layer input.
 * Definitions: docs/moe-semantics.md, steps 1-4. */
#include <math.h>
#include <string.h>

#include "kern/gemm.h"
#include "kern/softmax.h"
#include "model/moe.h"

void moe_spec_from_config(MoeSpec *s, const ModelConfig *cfg) {
  memset(s, 0, sizeof *s);
  s->C = cfg->hidden_size;
  s->E = cfg->num_experts;
  s->K = cfg->top_k;
  s->Fe = cfg->moe_intermediate_size;
  s->Fs = cfg->shared_expert_intermediate_size;
  s->score = cfg->router_score;
  s->order = cfg->router_order;
  s->norm_topk_prob = cfg->norm_topk_prob;
  s->scaling = cfg->topk_scaling_factor;
  s->aux_coeff = cfg->aux_loss_coeff;
  s->z_coeff = cfg->z_loss_coeff;
  s->capacity_factor = cfg->capacity_factor;
  s->policy = cfg->drop_policy;
  s->pad_to_capacity = cfg->pad_to_capacity;
}

/* Whether the kept top-k scores are divided by their sum. */
static int renormalises(const MoeSpec *s) { return s->score == ROUTER_SCORE_SIGMOID ? s->K > 1 : s->norm_topk_prob; }

static int picks_logits(const MoeSpec *s) {
  return s->score == ROUTER_SCORE_SOFTMAX && s->order == ROUTER_TOPK_THEN_SOFTMAX;
}

void moe_router_forward(MoeRouting *r, const float *x, const float *w_router, int N, const MoeSpec *s) {
  const int E = s->E, K = s->K;
  linear_forward_fp32(r->logits, x, w_router, N, s->C, E, 0); /* fp32 under bf16 too */
  if (s->score == ROUTER_SCORE_SOFTMAX)
    softmax_forward(r->scores, r->logits, N, E);
  else
    sigmoid_forward(r->scores, r->logits, N * E);
  if (s->z_coeff > 0) logsumexp_rows(r->lse, r->logits, N, E);

  /* topk_w first holds the picked values, then the weights. */
  topk_rows(r->topk_idx, r->topk_w, picks_logits(s) ? r->logits : r->scores, N, E, K);
  const int renorm = renormalises(s), softmax_of_picks = picks_logits(s);
  const float scaling = s->scaling;
#pragma omp parallel for schedule(static) if ((size_t)N * K > PARALLEL_MIN_WORK / 16)
  for (int n = 0; n < N; n++) {
    float *w = r->topk_w + (size_t)n * K;
    if (softmax_of_picks) {
      float mx = w[0], sum = 0; /* w[0] is the largest picked logit */
      for (int j = 0; j < K; j++) sum += (w[j] = expf(w[j] - mx));
      for (int j = 0; j < K; j++) w[j] /= sum;
    } else if (renorm) {
      float sum = 0;
      for (int j = 0; j < K; j++) sum += w[j];
      for (int j = 0; j < K; j++) w[j] /= sum;
    }
    for (int j = 0; j < K; j++) w[j] *= scaling;
  }

  /* Statistics, summed sequentially in double: cheap (N*E) and the same
   * order on every run. */
  for (int e = 0; e < E; e++) r->counts[e] = 0, r->prob_sum[e] = 0;
  for (size_t a = 0; a < (size_t)N * K; a++) r->counts[r->topk_idx[a]]++;
  if (s->aux_coeff > 0) {
    for (int n = 0; n < N; n++) {
      const float *q = r->scores + (size_t)n * E;
      double inv = 1.0;
      if (s->score == ROUTER_SCORE_SIGMOID) {
        double sum = 0;
        for (int e = 0; e < E; e++) sum += q[e];
        inv = 1.0 / sum;
      }
      for (int e = 0; e < E; e++) r->prob_sum[e] += q[e] * inv;
    }
  }
  r->lse_sq_sum = 0;
  if (s->z_coeff > 0)
    for (int n = 0; n < N; n++) r->lse_sq_sum += (double)r->lse[n] * r->lse[n];
}

void moe_router_losses(MoeRouting *r, long num_tokens, const MoeSpec *s, double *aux, double *z) {
  const int E = s->E;
  double a = 0;
  for (int e = 0; e < E; e++) r->aux_dq[e] = 0;
  if (s->aux_coeff > 0 && num_tokens > 0) {
    for (int e = 0; e < E; e++) {
      double f = (double)r->counts[e] / ((double)num_tokens * s->K);
      double P = r->prob_sum[e] / (double)num_tokens;
      a += f * P;
      r->aux_dq[e] = s->aux_coeff * E * f / (double)num_tokens;
    }
    a *= (double)s->aux_coeff * E;
  }
  r->z_dlse2 = 0;
  double zl = 0;
  if (s->z_coeff > 0 && num_tokens > 0) {
    r->z_dlse2 = (double)s->z_coeff / (double)num_tokens;
    zl = r->lse_sq_sum * r->z_dlse2;
  }
  if (aux) *aux = a;
  if (z) *z = zl;
}

void moe_router_backward(float *dx, float *dw_router, float *dz, float *dscore, const float *dtopk_w, const float *x,
                         const float *w_router, const MoeRouting *r, int N, const MoeSpec *s, float grad_scale) {
  const int E = s->E, K = s->K;
  const int renorm = renormalises(s), softmax_of_picks = picks_logits(s);
  const int sigmoid = s->score == ROUTER_SCORE_SIGMOID;
  const int aux = s->aux_coeff > 0, zloss = s->z_coeff > 0;
  const float scaling = s->scaling;
#pragma omp parallel for schedule(static) if ((size_t)N * E > PARALLEL_MIN_WORK / 16)
  for (int n = 0; n < N; n++) {
    float *dzn = dz + (size_t)n * E, *ds = dscore + (size_t)n * E;
    const float *sc = r->scores + (size_t)n * E;
    const int *idx = r->topk_idx + (size_t)n * K;
    const float *w = r->topk_w + (size_t)n * K, *dw = dtopk_w + (size_t)n * K;
    for (int e = 0; e < E; e++) dzn[e] = 0, ds[e] = 0;

    /* Routing weights: w = scaling * w', w' = softmax(z[idx]) or
     * (renormalised) scores[idx]. */
    float dot = 0;
    for (int j = 0; j < K; j++) dot += (w[j] / scaling) * (dw[j] * scaling);
    if (softmax_of_picks) {
      for (int j = 0; j < K; j++) dzn[idx[j]] += (w[j] / scaling) * (dw[j] * scaling - dot);
    } else if (renorm) {
      float S = 0;
      for (int j = 0; j < K; j++) S += sc[idx[j]];
      for (int j = 0; j < K; j++) ds[idx[j]] += (dw[j] * scaling - dot) / S;
    } else {
      for (int j = 0; j < K; j++) ds[idx[j]] += dw[j] * scaling;
    }

    /* Aux loss: gradient aux_dq[e] on q[n, e]. */
    if (aux) {
      if (!sigmoid) {
        for (int e = 0; e < E; e++) ds[e] += grad_scale * (float)r->aux_dq[e];
      } else { /* q = s / sum(s) */
        double ssum = 0, cbar = 0;
        for (int e = 0; e < E; e++) ssum += sc[e], cbar += r->aux_dq[e] * sc[e];
        cbar /= ssum;
        for (int e = 0; e < E; e++) ds[e] += grad_scale * (float)((r->aux_dq[e] - cbar) / ssum);
      }
    }

    /* Through the score function. */
    if (!sigmoid) {
      float pd = 0;
      for (int e = 0; e < E; e++) pd += sc[e] * ds[e];
      for (int e = 0; e < E; e++) dzn[e] += sc[e] * (ds[e] - pd);
    } else {
      for (int e = 0; e < E; e++) dzn[e] += ds[e] * sc[e] * (1.0f - sc[e]);
    }

    /* z-loss: d(lse^2)/dz = 2 lse softmax(z). */
    if (zloss) {
      const float lse = r->lse[n];
      const float g = grad_scale * (float)(2.0 * r->z_dlse2) * lse;
      const float *zn = r->logits + (size_t)n * E;
      for (int e = 0; e < E; e++) dzn[e] += g * (sigmoid ? expf(zn[e] - lse) : sc[e]);
    }
  }
  linear_backward_fp32(dx, dw_router, dz, x, w_router, N, s->C, E, 1);
}
