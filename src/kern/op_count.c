/* The thread-local multiplication counter of kern/op_count.h. */
#include "kern/op_count.h"

_Thread_local int op_count_on;
_Thread_local double op_count_mults_total;

void op_count_begin(void) {
  op_count_mults_total = 0.0;
  op_count_on = 1;
}

double op_count_end(void) {
  op_count_on = 0;
  return op_count_mults_total;
}
