/* Monotonic wall-clock time. */
#ifndef FIVEFOLD_BASE_TIMER_H
#define FIVEFOLD_BASE_TIMER_H

double timer_now(void); /* seconds since an arbitrary start, monotonic */

#endif
