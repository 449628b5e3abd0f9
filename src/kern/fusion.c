/* The process-wide fusion switches (fusion.h). */
#include "kern/fusion.h"

static KernFusion g_fusion = {1, 1, 1};

void kern_set_fusion(KernFusion f) {
  g_fusion.swiglu = f.swiglu != 0;
  g_fusion.bias_gelu = f.bias_gelu != 0;
  g_fusion.norm_residual = f.norm_residual != 0;
}

KernFusion kern_fusion(void) { return g_fusion; }
