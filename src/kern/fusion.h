/* Which elementwise chains run as one fused kernel, process-wide like the
 * precision (kern/precision.h): the runtime sets it once from the run
 * config (training.fuse_swiglu, training.fuse_bias_gelu,
 * training.fuse_norm_residual) before the first step. A fused chain reads
 * its inputs and writes its outputs once; the unfused one runs each
 * operation as a kernel of its own and writes every intermediate to memory
 * (what the planner prices as extra traffic, docs/planner.md). Both give
 * bit-identical results: the same float operations in the same order
 * (tests/kern/test_swiglu.c, test_gelu.c, test_norm_residual.c). */
#ifndef FIVEFOLD_KERN_FUSION_H
#define FIVEFOLD_KERN_FUSION_H

typedef struct KernFusion {
  int swiglu;    /* 1 (default): silu(gate) * up in one pass (kern/swiglu.h) */
  int bias_gelu; /* 1 (default): the bias add and the GeLU in one pass, and the bias gradient
                    summed where the GeLU gradient is written (kern/gelu.h) */
  int norm_residual; /* 1 (default): each residual add and the norm after it in one pass, and in
                        backward the norm's input gradient added to the residual gradient where it is
                        computed (kern/rmsnorm.h, kern/layernorm.h) */
} KernFusion;

void kern_set_fusion(KernFusion f);
KernFusion kern_fusion(void);

#endif
