/* The compute fields of the run configuration: which GEMM library runs the
 * matrix products and in which precision, and which elementwise chains run
 * fused (training.fuse_swiglu, training.fuse_bias_gelu,
 * training.fuse_norm_residual: kern/fusion.h). Names only here; whether bf16
 * can run on this CPU is decided when the trainer applies them
 * (kern_set_precision), before the first step. */
#include <string.h>

#include "kern/bf16_weights.h"
#include "kern/fusion.h"
#include "kern/gemm.h"
#include "kern/precision.h"
#include "train/train_config.h"

int train_config_check_compute(const TrainConfig *cfg, const char *origin, Error *err) {
  GemmBackend backend;
  KernPrecision precision;
  if (kern_gemm_backend_parse(cfg->gemm_backend, &backend) != 0)
    return error_set(err, ERR_CONFIG, "%s: training.gemm_backend must be \"onednn\" or \"openblas\", got \"%s\"",
                     origin, cfg->gemm_backend);
  if (kern_precision_parse(cfg->precision, &precision) != 0)
    return error_set(err, ERR_CONFIG, "%s: training.precision must be \"fp32\" or \"bf16\", got \"%s\"", origin,
                     cfg->precision);
  return 0;
}

int train_config_apply_compute(const TrainConfig *cfg, Error *err) {
  const char *origin = cfg->config_path[0] ? cfg->config_path : "config";
  int rc = train_config_check_compute(cfg, origin, err);
  if (rc) return rc;
  GemmBackend backend;
  KernPrecision precision;
  kern_gemm_backend_parse(cfg->gemm_backend, &backend);
  kern_precision_parse(cfg->precision, &precision);
  char why[512];
  if (kern_gemm_set_backend(backend, why, sizeof why) != 0)
    return error_set(err, ERR_CONFIG, "training.gemm_backend \"%s\" cannot run here: %s (try --gemm-backend openblas)",
                     cfg->gemm_backend, why);
  if (kern_set_precision(precision, why, sizeof why) != 0)
    return error_set(err, ERR_CONFIG, "training.precision \"%s\" cannot run here: %s", cfg->precision, why);
  if (bf16_weights_check_env(why, sizeof why) != 0) return error_set(err, ERR_CONFIG, "%s", why);
  if (kern_gemm_fixed_shapes_check_env(why, sizeof why) != 0) return error_set(err, ERR_CONFIG, "%s", why);
  kern_set_fusion((KernFusion){
      .swiglu = cfg->fuse_swiglu, .bias_gelu = cfg->fuse_bias_gelu, .norm_residual = cfg->fuse_norm_residual});
  return 0;
}
