/* Instrumented multiplication counting: while counting is on, every
 * forward kernel call of the vision layers adds the multiplications it
 * performs (from the arguments it was called with, or counted in the loop
 * that multiplies), so a forward pass's real count can be compared with
 * the layers' analytic formulas (nets/layer.h's mults_per_sample) and the
 * experiments of docs/tropical.md report the counted figure.
 *
 * Off by default. When off, a count is one test of a thread-local flag per
 * kernel call (never per element), so training pays nothing measurable.
 * The count belongs to the calling thread: a kernel call counts once, on
 * the thread that made it, however many OpenMP workers it used. The total
 * is a double, exact for integers up to 2^53. */
#ifndef FIVEFOLD_KERN_OP_COUNT_H
#define FIVEFOLD_KERN_OP_COUNT_H

extern _Thread_local int op_count_on;
extern _Thread_local double op_count_mults_total;

/* Zeroes this thread's count and turns counting on. */
void op_count_begin(void);
/* Turns counting off and returns the multiplications counted since
 * op_count_begin. */
double op_count_end(void);

static inline void op_count_mults(double n) {
  if (op_count_on) op_count_mults_total += n;
}

#endif
