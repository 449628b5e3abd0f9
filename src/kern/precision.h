/* The process-wide compute precision of the GEMMs (and of flash
 * attention's two matmuls): fp32, or bf16 inputs with fp32 accumulation as
 * Megatron-Core trains. The trainer sets it once before the first step;
 * kernels read it. Norms, softmax, the router, losses, reductions and the
 * optimizer never read it: they are fp32 either way. */
#ifndef FIVEFOLD_KERN_PRECISION_H
#define FIVEFOLD_KERN_PRECISION_H

#include <stddef.h>

typedef enum { KERN_PRECISION_FP32 = 0, KERN_PRECISION_BF16 = 1 } KernPrecision;

/* 0 on success; -1 when bf16 cannot run on this CPU (the precision stays
 * as it was and `err` names the missing feature). */
int kern_set_precision(KernPrecision precision, char *err, size_t err_len);
KernPrecision kern_precision(void);

/* "fp32" / "bf16". */
const char *kern_precision_name(KernPrecision precision);
/* 0 and *out set for "fp32" or "bf16"; -1 for anything else. */
int kern_precision_parse(const char *name, KernPrecision *out);

#endif
