/* A deep Q-network exploring the per-layer plan space (explore_space.h),
 * after Auto-MAP (REFERENCES.md): an episode fills the decision vector one
 * decision at a time (the layer groups' recomputation, then the stage
 * boundaries); the state is the partial plan, the action the next
 * decision's value.
 *
 *   state    one-hot of the decision being made + every decision made so far
 *            scaled to [-1, 1] (0 for those still open)
 *   network  one hidden layer of 64 ReLU units, one Q-value per action
 *            (max arity outputs); Adam, learning rate 1e-3, Huber loss
 *   pruning  actions that would leave a stage without a layer are masked
 *            (in acting and in the target's max), as Auto-MAP prunes
 *            splits that cannot be valid
 *   reward   0 until the last decision; then minus the energy of
 *            explore_sa.c: -(step time / uniform plan's) when the plan fits,
 *            -(2 + overflow) when it does not; gamma 1
 *   learning epsilon-greedy, epsilon from 1 to 0.05 linearly over the first
 *            60% of the budget; replay buffer of 20000 transitions, 4
 *            mini-batches of 32 per episode; target network copied every
 *            100 updates
 * It stops when the budget of simulations is spent or after 10 x budget
 * episodes (episodes that revisit cached plans are free), then plays one
 * greedy episode. The best feasible plan of every evaluation is the result
 * (the space keeps it). Everything is single-threaded double arithmetic
 * driven by one counter-based generator, so a seed gives one run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "plan/explore_space.h"

enum { HIDDEN = 64, BATCH = 32, BATCHES_PER_EPISODE = 4, TARGET_EVERY = 100, REPLAY = 20000 };

typedef struct Mlp {
  int in, out;
  double *w1, *b1, *w2, *b2; /* views into params */
  double *params;
  long num_params;
} Mlp;

typedef struct Dqn {
  const PlanExploreSpace *sp;
  Mlp online, target;
  double *grad, *adam_m, *adam_v;
  long adam_t;
  double *x, *hidden, *q; /* scratch */
  unsigned char *replay_plan; /* REPLAY x n */
  int *replay_t;
  double *replay_reward;
  long replay_count, replay_next;
  Rng rng;
} Dqn;

static int mlp_init(Mlp *m, int in, int out) {
  m->in = in;
  m->out = out;
  m->num_params = (long)HIDDEN * in + HIDDEN + (long)out * HIDDEN + out;
  m->params = calloc((size_t)m->num_params, sizeof *m->params);
  if (!m->params) return -1;
  m->w1 = m->params;
  m->b1 = m->w1 + (long)HIDDEN * in;
  m->w2 = m->b1 + HIDDEN;
  m->b2 = m->w2 + (long)out * HIDDEN;
  return 0;
}

static void mlp_forward(const Mlp *m, const double *x, double *hidden, double *q) {
  for (int h = 0; h < HIDDEN; h++) {
    double s = m->b1[h];
    const double *w = m->w1 + (long)h * m->in;
    for (int i = 0; i < m->in; i++) s += w[i] * x[i];
    hidden[h] = s > 0 ? s : 0;
  }
  for (int a = 0; a < m->out; a++) {
    double s = m->b2[a];
    const double *w = m->w2 + (long)a * HIDDEN;
    for (int h = 0; h < HIDDEN; h++) s += w[h] * hidden[h];
    q[a] = s;
  }
}

/* Adds d(loss)/d(params) for an output error `delta` on action a. */
static void mlp_backward(const Mlp *m, const double *x, const double *hidden, int a, double delta, double *grad) {
  double *g_w1 = grad, *g_b1 = g_w1 + (long)HIDDEN * m->in;
  double *g_w2 = g_b1 + HIDDEN, *g_b2 = g_w2 + (long)m->out * HIDDEN;
  g_b2[a] += delta;
  const double *w2 = m->w2 + (long)a * HIDDEN;
  for (int h = 0; h < HIDDEN; h++) {
    g_w2[(long)a * HIDDEN + h] += delta * hidden[h];
    if (hidden[h] <= 0) continue;
    double dh = delta * w2[h];
    g_b1[h] += dh;
    double *g = g_w1 + (long)h * m->in;
    for (int i = 0; i < m->in; i++) g[i] += dh * x[i];
  }
}

static void features(const PlanExploreSpace *sp, const unsigned char *plan, int t, double *x) {
  const int n = sp->num_decisions;
  memset(x, 0, sizeof *x * 2 * (size_t)n);
  x[t] = 1;
  for (int j = 0; j < t; j++) x[n + j] = sp->arity[j] > 1 ? 2.0 * plan[j] / (sp->arity[j] - 1) - 1.0 : 0;
}

/* Pruning: a boundary value must leave every stage at least one layer,
 * given the boundaries already chosen. */
static int action_allowed(const PlanExploreSpace *sp, const unsigned char *plan, int t, int a) {
  if (a >= sp->arity[t]) return 0;
  if (t < sp->num_groups) return 1;
  int b = t - sp->num_groups, K = sp->spec.max_shift, S = sp->num_stages;
  int pos = 0, prev = 0;
  for (int s = 0; s <= b; s++) pos += sp->base.layers_per_stage[s];
  int here = pos + a - K;
  if (b > 0) prev = pos - sp->base.layers_per_stage[b] + (int)plan[t - 1] - K;
  return here > prev && here <= sp->num_layers - (S - 1 - b);
}

static int best_action(const Dqn *q, const unsigned char *plan, int t, const double *values, double *best) {
  int arg = -1;
  for (int a = 0; a < q->sp->max_arity; a++)
    if (action_allowed(q->sp, plan, t, a) && (arg < 0 || values[a] > values[arg])) arg = a;
  if (best) *best = arg >= 0 ? values[arg] : 0;
  return arg;
}

static void train_batch(Dqn *q) {
  const PlanExploreSpace *sp = q->sp;
  const int n = sp->num_decisions;
  memset(q->grad, 0, sizeof *q->grad * (size_t)q->online.num_params);
  double next_q[256];
  for (int k = 0; k < BATCH; k++) {
    long idx = (long)rng_next_below(&q->rng, (uint64_t)q->replay_count);
    const unsigned char *plan = q->replay_plan + idx * n;
    int t = q->replay_t[idx];
    double y = q->replay_reward[idx];
    if (t < n - 1) {
      features(sp, plan, t + 1, q->x);
      mlp_forward(&q->target, q->x, q->hidden, next_q);
      best_action(q, plan, t + 1, next_q, &y);
    }
    features(sp, plan, t, q->x);
    mlp_forward(&q->online, q->x, q->hidden, q->q);
    double delta = q->q[plan[t]] - y;
    if (delta > 1) delta = 1; /* Huber */
    if (delta < -1) delta = -1;
    mlp_backward(&q->online, q->x, q->hidden, plan[t], delta / BATCH, q->grad);
  }
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  q->adam_t++;
  double c1 = 1 - pow(b1, (double)q->adam_t), c2 = 1 - pow(b2, (double)q->adam_t);
  for (long i = 0; i < q->online.num_params; i++) {
    q->adam_m[i] = b1 * q->adam_m[i] + (1 - b1) * q->grad[i];
    q->adam_v[i] = b2 * q->adam_v[i] + (1 - b2) * q->grad[i] * q->grad[i];
    q->online.params[i] -= lr * (q->adam_m[i] / c1) / (sqrt(q->adam_v[i] / c2) + eps);
  }
  if (q->adam_t % TARGET_EVERY == 0)
    memcpy(q->target.params, q->online.params, sizeof *q->online.params * (size_t)q->online.num_params);
}

static void dqn_free(Dqn *q) {
  free(q->online.params);
  free(q->target.params);
  free(q->grad);
  free(q->adam_m);
  free(q->adam_v);
  free(q->x);
  free(q->hidden);
  free(q->q);
  free(q->replay_plan);
  free(q->replay_t);
  free(q->replay_reward);
}

static int dqn_init(Dqn *q, const PlanExploreSpace *sp) {
  memset(q, 0, sizeof *q);
  q->sp = sp;
  const int n = sp->num_decisions;
  q->rng = rng_make(sp->spec.seed, rng_stream_id("plan.explore.dqn"));
  if (mlp_init(&q->online, 2 * n, sp->max_arity) || mlp_init(&q->target, 2 * n, sp->max_arity)) return -1;
  long np = q->online.num_params;
  q->grad = calloc((size_t)np, sizeof *q->grad);
  q->adam_m = calloc((size_t)np, sizeof *q->adam_m);
  q->adam_v = calloc((size_t)np, sizeof *q->adam_v);
  q->x = calloc(2 * (size_t)n, sizeof *q->x);
  q->hidden = calloc(HIDDEN, sizeof *q->hidden);
  q->q = calloc((size_t)sp->max_arity, sizeof *q->q);
  q->replay_plan = calloc((size_t)REPLAY * (size_t)n, 1);
  q->replay_t = calloc(REPLAY, sizeof *q->replay_t);
  q->replay_reward = calloc(REPLAY, sizeof *q->replay_reward);
  if (!q->grad || !q->adam_m || !q->adam_v || !q->x || !q->hidden || !q->q || !q->replay_plan || !q->replay_t ||
      !q->replay_reward)
    return -1;
  /* He initialisation of the hidden layer, small outputs. */
  double s1 = sqrt(2.0 / (2 * n)), s2 = 0.1 / sqrt((double)HIDDEN);
  for (long i = 0; i < (long)HIDDEN * 2 * n; i++) q->online.w1[i] = s1 * rng_normal(sp->spec.seed, 7, (uint64_t)i);
  for (long i = 0; i < (long)sp->max_arity * HIDDEN; i++)
    q->online.w2[i] = s2 * rng_normal(sp->spec.seed, 8, (uint64_t)i);
  memcpy(q->target.params, q->online.params, sizeof *q->online.params * (size_t)np);
  return 0;
}

static double reward_of(const PlanExploreSpace *sp, const PlanExploreEval *ev) {
  double ref = sp->uniform_eval.step_time > 0 ? sp->uniform_eval.step_time : 1;
  if (!ev->valid) return -3.0;
  if (ev->fits) return -ev->step_time / ref;
  double cap = sp->cluster->memory_capacity > 0 ? sp->cluster->memory_capacity : 1;
  return -(2.0 + ev->peak_memory / cap - 1.0);
}

/* One episode; epsilon 0 plays greedily. *stop when the budget ran out. */
static int play_episode(Dqn *q, double epsilon, int *stop, Error *err) {
  PlanExploreSpace *sp = (PlanExploreSpace *)q->sp;
  const int n = sp->num_decisions;
  unsigned char plan[PLAN_EXPLORE_MAX_DECISIONS];
  memset(plan, 0, (size_t)n);
  for (int t = 0; t < n; t++) {
    int allowed[256], num_allowed = 0;
    for (int a = 0; a < sp->max_arity; a++)
      if (action_allowed(sp, plan, t, a)) allowed[num_allowed++] = a;
    if (num_allowed == 0) return error_set(err, ERR_INTERNAL, "explore dqn: no allowed action at decision %d", t);
    int a;
    if (rng_next_uniform(&q->rng) < epsilon) {
      a = allowed[rng_next_below(&q->rng, (uint64_t)num_allowed)];
    } else {
      features(sp, plan, t, q->x);
      mlp_forward(&q->online, q->x, q->hidden, q->q);
      a = best_action(q, plan, t, q->q, NULL);
    }
    plan[t] = (unsigned char)a;
  }
  PlanExploreEval ev;
  int spent;
  int rc = plan_explore_evaluate(sp, plan, &ev, &spent, err);
  if (rc) return rc;
  if (spent) {
    *stop = 1;
    return 0;
  }
  double r = reward_of(sp, &ev);
  for (int t = 0; t < n; t++) {
    long slot = q->replay_next;
    memcpy(q->replay_plan + slot * n, plan, (size_t)n);
    q->replay_t[slot] = t;
    q->replay_reward[slot] = t == n - 1 ? r : 0;
    q->replay_next = (slot + 1) % REPLAY;
    if (q->replay_count < REPLAY) q->replay_count++;
  }
  return 0;
}

int plan_explore_dqn(PlanExploreSpace *sp, long *episodes, Error *err) {
  Dqn q;
  if (dqn_init(&q, sp)) {
    dqn_free(&q);
    return error_set(err, ERR_NOMEM, "explore dqn: out of memory for the network and replay buffer");
  }
  const long max_episodes = 10 * sp->spec.budget;
  int stop = 0, rc = 0;
  long ep = 0;
  for (; ep < max_episodes && !stop && !plan_explore_exhausted(sp); ep++) {
    double p = fmax((double)sp->evaluations / sp->spec.budget, (double)ep / max_episodes);
    double epsilon = p >= 0.6 ? 0.05 : 1.0 - (1.0 - 0.05) * p / 0.6;
    if ((rc = play_episode(&q, epsilon, &stop, err))) break;
    if (q.replay_count >= BATCH)
      for (int b = 0; b < BATCHES_PER_EPISODE; b++) train_batch(&q);
  }
  if (!rc && !stop) rc = play_episode(&q, 0.0, &stop, err);
  if (episodes) *episodes = ep + 1;
  dqn_free(&q);
  return rc;
}
