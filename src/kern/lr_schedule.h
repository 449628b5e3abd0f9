/* Learning-rate schedule: linear warm-up, then cosine or linear decay to
 * min_lr at total_steps (constant after), or constant. */
#ifndef FIVEFOLD_KERN_LR_SCHEDULE_H
#define FIVEFOLD_KERN_LR_SCHEDULE_H

typedef enum { LR_DECAY_COSINE = 0, LR_DECAY_LINEAR, LR_DECAY_CONSTANT } LrDecay;

typedef struct LrSchedule {
  float max_lr, min_lr;
  int warmup_steps, total_steps;
  LrDecay decay;
} LrSchedule;

/* Learning rate for 0-based step `step`. Warm-up ramps (step+1)/warmup*max_lr. */
float lr_schedule_at(const LrSchedule *s, int step);

/* "cosine" | "linear" | "constant" -> enum; returns -1 if unknown. */
int lr_decay_parse(const char *name);

#endif
