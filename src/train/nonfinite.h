/* The guard against a non-finite loss or gradient, and against writing a
 * checkpoint with non-finite weights.
 *
 * Before every optimizer update (after the gradient reduction) the squared
 * global gradient norm and the pipeline's loss flag say whether anything is
 * not finite; the verdict is agreed over the whole world, so every rank
 * skips or stops together. The first tensor that is not finite (lowest
 * pipeline rank, then parameter-table order) is named on every rank.
 * training.nonfinite "skip" leaves weights and optimizer state untouched
 * (the step's batch is consumed, the learning-rate schedule does not
 * advance) up to training.max_nonfinite_skips steps in a row; "stop" ends
 * the run with an error at the first one.
 *
 * Test hook: FIVEFOLD_TEST_NONFINITE="grad:STEP:TENSOR" puts a NaN into the
 * first element of TENSOR's gradient on world rank 0 at the start of step
 * STEP (before the backward passes accumulate into it, so the reduction
 * carries it to the other ranks); "weight:STEP:TENSOR" puts one into the
 * weight after step STEP's update. */
#ifndef FIVEFOLD_TRAIN_NONFINITE_H
#define FIVEFOLD_TRAIN_NONFINITE_H

#include "base/error.h"
#include "train/trainer.h"

#define NONFINITE_TEST_ENV "FIVEFOLD_TEST_NONFINITE"

/* Collective over the world, once per update, before it. sumsq: the
 * squared global norm of the gradient about to be applied. *skip = 1: do
 * not update this step. Returns an error (on every rank) when the step is
 * not finite and the run must stop. */
int nonfinite_guard_step(Trainer *tr, double sumsq, int *skip, Error *err);

/* Collective over the world, before a checkpoint: an error naming the
 * first tensor whose weights are not finite, on every rank. */
int nonfinite_guard_weights(Trainer *tr, Error *err);

/* The test hook above; kind "grad" at the start of a step (before its
 * step number is counted), "weight" after it. No-op without the variable. */
void nonfinite_test_poison(Trainer *tr, const char *kind);

#endif
