/* The process-wide compute precision (see precision.h). An atomic so that
 * OpenMP workers reading it while another thread sets it see one value. */
#include "kern/precision.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kern/bf16.h"

static _Atomic int current_precision = KERN_PRECISION_FP32;

int kern_set_precision(KernPrecision precision, char *err, size_t err_len) {
  if (precision != KERN_PRECISION_FP32 && precision != KERN_PRECISION_BF16) {
    if (err && err_len) snprintf(err, err_len, "unknown precision %d (expected fp32 or bf16)", (int)precision);
    return -1;
  }
  if (precision == KERN_PRECISION_BF16 && !kern_bf16_supported(err, err_len)) return -1;
  atomic_store(&current_precision, (int)precision);
  return 0;
}

KernPrecision kern_precision(void) { return (KernPrecision)atomic_load_explicit(&current_precision, memory_order_relaxed); }

const char *kern_precision_name(KernPrecision precision) {
  return precision == KERN_PRECISION_BF16 ? "bf16" : "fp32";
}

int kern_precision_parse(const char *name, KernPrecision *out) {
  if (!name) return -1;
  if (strcmp(name, "fp32") == 0) {
    *out = KERN_PRECISION_FP32;
    return 0;
  }
  if (strcmp(name, "bf16") == 0) {
    *out = KERN_PRECISION_BF16;
    return 0;
  }
  return -1;
}
