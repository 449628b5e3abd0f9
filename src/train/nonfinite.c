/* The non-finite guard: the agreed verdict, the name of the first tensor
 * that is not finite, skip or stop, the weight check before checkpoints
 * and the NaN-injection test hook. See nonfinite.h. */
#include "train/nonfinite.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/collectives.h"
#include "comm/world.h"
#include "kern/vecops.h"

/* Name bytes carried per rank when locating the first bad tensor. */
enum { NAME_WORDS = 8 };

/* The first tensor of this rank whose values in buf are not finite; -1
 * when all are. Double accumulation cannot overflow for finite floats, so
 * a non-finite sum means a non-finite element. */
static int first_nonfinite_tensor(const Network *net, const float *buf) {
  for (int i = 0; i < net->num_tensors; i++)
    if (!isfinite(vec_sumsq(buf + net->params[i].offset, net->params[i].numel))) return i;
  return -1;
}

/* The gradient this rank applies: whole, or its ZeRO-1 shard. */
static int first_nonfinite_gradient(const Trainer *tr) {
  if (tr->zero) return dist_optimizer_first_nonfinite(&tr->dist_opt, &tr->net);
  return first_nonfinite_tensor(&tr->net, tr->net.grads);
}

/* Whether any rank's flag is set (every rank gets the same answer). */
static int any_rank(const Trainer *tr, int flag, int *any, Error *err) {
  int64_t v = flag != 0;
  if (tr->world > 1 && comm_initialized()) {
    int rc = comm_allreduce_i64(comm_world(), &v, 1, COMM_MAX, NULL, err);
    if (rc) return error_wrap(err, "agreeing whether the step is finite");
  }
  *any = v != 0;
  return 0;
}

/* The name of the first tensor any rank found (local: this rank's tensor
 * index, -1 none), the same on every rank; "" when none did. */
static int agree_on_name(const Trainer *tr, int local, char *name, size_t cap, Error *err) {
  int64_t mine[1 + NAME_WORDS];
  memset(mine, 0, sizeof mine);
  mine[0] = local < 0 ? INT64_MAX : ((int64_t)tr->pp_rank << 32) + local;
  /* Names longer than the record are cut (none of the model's are). */
  if (local >= 0) memcpy(&mine[1], tr->net.params[local].name,
                         strnlen(tr->net.params[local].name, NAME_WORDS * sizeof(int64_t) - 1));
  int n = tr->world > 1 && comm_initialized() ? tr->world : 1;
  int64_t *all = n > 1 ? malloc((size_t)n * sizeof mine) : mine;
  if (!all) return error_set(err, ERR_NOMEM, "out of memory naming the non-finite tensor");
  if (n > 1) {
    int rc = comm_allgather_i64(comm_world(), mine, all, 1 + NAME_WORDS, NULL, err);
    if (rc) {
      free(all);
      return error_wrap(err, "naming the non-finite tensor");
    }
  }
  int best = 0;
  for (int r = 1; r < n; r++)
    if (all[r * (1 + NAME_WORDS)] < all[best * (1 + NAME_WORDS)]) best = r;
  const int64_t *rec = all + best * (1 + NAME_WORDS);
  char text[NAME_WORDS * sizeof(int64_t) + 1];
  memcpy(text, rec + 1, NAME_WORDS * sizeof(int64_t));
  text[NAME_WORDS * sizeof(int64_t)] = 0;
  snprintf(name, cap, "%s", rec[0] == INT64_MAX ? "" : text);
  if (all != mine) free(all);
  return 0;
}

int nonfinite_guard_step(Trainer *tr, double sumsq, int *skip, Error *err) {
  *skip = 0;
  int loss_bad = tr->cfg->family == TRAIN_FAMILY_TRANSFORMER && tr->pipe.loss_nonfinite;
  int any = 0;
  int rc = any_rank(tr, !isfinite(sumsq) || loss_bad, &any, err);
  if (rc || !any) {
    if (!rc) tr->nonfinite_consecutive = 0;
    return rc;
  }
  char tensor[96];
  if ((rc = agree_on_name(tr, first_nonfinite_gradient(tr), tensor, sizeof tensor, err))) return rc;
  char what[160];
  if (tensor[0]) snprintf(what, sizeof what, "the gradient of %s is not finite", tensor);
  else snprintf(what, sizeof what, "the loss is not finite");
  int step = tr->step + 1;
  const TrainConfig *cfg = tr->cfg;
  if (!strcmp(cfg->nonfinite, "stop"))
    return error_set(err, ERR_INTERNAL,
                     "step %d: %s; stopping (training.nonfinite \"stop\"; diverged? try a lower training.lr or a "
                     "grad_clip)",
                     step, what);
  tr->nonfinite_consecutive++;
  if (tr->nonfinite_consecutive > cfg->max_nonfinite_skips)
    return error_set(err, ERR_INTERNAL,
                     "step %d: %s, %d steps in a row (more than training.max_nonfinite_skips = %d); stopping "
                     "(diverged? try a lower training.lr or a grad_clip)",
                     step, what, tr->nonfinite_consecutive, cfg->max_nonfinite_skips);
  tr->nonfinite_skipped++;
  tr->step_skipped = 1;
  *skip = 1;
  if (tr->world_rank == 0) {
    fprintf(stderr,
            "warning: step %d: %s; step skipped, weights and optimizer state unchanged (%d in a row, at most "
            "training.max_nonfinite_skips = %d)\n",
            step, what, tr->nonfinite_consecutive, cfg->max_nonfinite_skips);
    fflush(stderr);
  }
  return 0;
}

int nonfinite_guard_weights(Trainer *tr, Error *err) {
  int local = first_nonfinite_tensor(&tr->net, tr->net.values);
  int any = 0;
  int rc = any_rank(tr, local >= 0, &any, err);
  if (rc || !any) return rc;
  char tensor[96];
  if ((rc = agree_on_name(tr, local, tensor, sizeof tensor, err))) return rc;
  return error_set(err, ERR_INTERNAL,
                   "not writing the checkpoint of step %d: the weights of %s are not finite (the previous "
                   "checkpoint stays the newest)",
                   tr->step, tensor);
}

void nonfinite_test_poison(Trainer *tr, const char *kind) {
  const char *spec = getenv(NONFINITE_TEST_ENV);
  if (!spec || tr->world_rank != 0) return;
  size_t k = strlen(kind);
  if (strncmp(spec, kind, k) || spec[k] != ':') return;
  char *end;
  long step = strtol(spec + k + 1, &end, 10);
  if (*end != ':') return;
  /* grad: before the step's number is counted; weight: after. */
  long now = !strcmp(kind, "grad") ? tr->step + 1 : tr->step;
  if (step != now) return;
  for (int i = 0; i < tr->net.num_tensors; i++) {
    const NetParam *p = &tr->net.params[i];
    if (strcmp(p->name, end + 1)) continue;
    float *buf = !strcmp(kind, "grad") ? tr->net.grads : tr->net.values;
    buf[p->offset] = NAN;
    return;
  }
}
