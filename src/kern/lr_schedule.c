/* Learning-rate schedule: linear warm-up then cosine, linear or no decay. */
#include "kern/lr_schedule.h"

#include <math.h>
#include <string.h>

float lr_schedule_at(const LrSchedule *s, int step) {
  if (step < s->warmup_steps) return s->max_lr * (float)(step + 1) / (float)s->warmup_steps;
  if (s->decay == LR_DECAY_CONSTANT) return s->max_lr;
  if (step >= s->total_steps) return s->min_lr;
  /* warmup <= step < total here, so the span is positive. */
  double progress = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
  double span = (double)s->max_lr - (double)s->min_lr;
  double lr;
  if (s->decay == LR_DECAY_COSINE)
    lr = s->min_lr + 0.5 * span * (1.0 + cos(M_PI * progress));
  else
    lr = s->max_lr - span * progress;
  return (float)lr;
}

int lr_decay_parse(const char *name) {
  if (!name) return -1;
  if (strcmp(name, "cosine") == 0) return LR_DECAY_COSINE;
  if (strcmp(name, "linear") == 0) return LR_DECAY_LINEAR;
  if (strcmp(name, "constant") == 0) return LR_DECAY_CONSTANT;
  return -1;
}
