/* Row-wise softmax, sigmoid, log-sum-exp and top-k selection over [N, E]
 * (router scores). */
#ifndef FIVEFOLD_KERN_SOFTMAX_H
#define FIVEFOLD_KERN_SOFTMAX_H

void softmax_forward(float *p, const float *z, int N, int E);
/* dz (overwritten) from dp and the forward output p. */
void softmax_backward(float *dz, const float *dp, const float *p, int N, int E);

void sigmoid_forward(float *s, const float *z, int n);
/* dz (overwritten) from ds and the forward output s. */
void sigmoid_backward(float *dz, const float *ds, const float *s, int n);

void logsumexp_rows(float *lse, const float *z, int N, int E);

/* Top-k of each row: idx[N, k] in descending value order, ties broken by the
 * lower index (a fixed rule, so every rank picks the same experts); val[N, k]
 * the values (val may be NULL). */
void topk_rows(int *idx, float *val, const float *x, int N, int E, int k);

#endif
