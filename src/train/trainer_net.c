/* Training a network of nets/ with the trainer (see trainer_net.h): its
 * creation, one optimizer step, validation and the banner. */
#include "train/trainer_net.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "data/image_set.h"
#include "kern/image_metrics.h"
#include "kern/vecops.h"
#include "nets/gan.h"
#include "nets/vision.h"
#include "sched/builders.h"
#include "train/gan_data.h"
#include "train/nonfinite.h"
#include "train/phases.h"
#include "train/trace_session.h"

/* Every rank a data-parallel replica; the gradient summed over all of them. */
static int create_data_parallel(Trainer *tr, const OptimizerConfig *oc, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  tr->world_rank = comm_world_rank();
  tr->dp_rank = tr->world_rank;
  tr->dp_group = tr->world > 1 ? comm_world() : NULL;
  tr->reduce_grads = tr->dp > 1;
  tr->zero = tr->dp > 1 && cfg->distributed_optimizer != 0;
  /* Waits spin here even where ranks share cores (comm/waits.h): sleeping
   * made LeNet-5 DP4 on 2 cores slower, 23.9-24.1 ms a step against
   * 19.3-21.2 ms spinning, its steps being short and its waits few. */
  int rc = 0;
  if (tr->reduce_grads) {
    double bucket_bytes = cfg->bucket_mb > 0 ? cfg->bucket_mb * 1e6 : (double)tr->net.num_values;
    /* Buckets never mix parameter groups that step in phases of their own. */
    size_t cuts[128];
    int num_cuts = phases_group_cuts(&tr->net, cuts, 128);
    if (num_cuts > 128) return error_set(err, ERR_CONFIG, "%d parameter group boundaries, at most 128", num_cuts);
    rc = dp_grads_create(&tr->dp_grads, tr->dp_group, tr->net.grads, tr->net.num_values, num_cuts ? cuts : NULL,
                         num_cuts, bucket_bytes, tr->zero, err);
    if (!rc) rc = phases_tag_buckets(&tr->dp_grads, &tr->net, err);
    if (!rc) dp_grads_set_overlap(&tr->dp_grads, 0); /* one chunk: the whole gradient is ready at once */
    if (!rc) rc = dp_grads_calibrate(&tr->dp_grads, err);
  }
  if (!rc && tr->zero) {
    rc = dist_optimizer_create(&tr->dist_opt, &tr->dp_grads, &tr->net, oc, err);
    tr->opt.cfg = *oc;
    tr->opt.num_params = tr->net.num_values;
  } else if (!rc) {
    rc = optimizer_create(&tr->opt, tr->net.num_values, oc, err);
  }
  return rc;
}

/* The sum over the replicas in rank order, so that every rank gets the same bits. */
static int sum_over_replicas(const Trainer *tr, double *x, Error *err) {
  return tr->dp > 1 ? trainer_sum_over_group(comm_world(), x, err) : 0;
}

static int is_vision(const Trainer *tr) { return tr->cfg->family == TRAIN_FAMILY_VISION; }
static int is_gan(const Trainer *tr) { return tr->cfg->family == TRAIN_FAMILY_GAN; }

/* Floats per sample of the network's input (a gan's: the sharp image and
 * the blurred one). */
static size_t sample_floats(const Trainer *tr) {
  const TrainConfig *cfg = tr->cfg;
  if (is_gan(tr)) return 2 * gan_data_image_floats(tr->pairs);
  return is_vision(tr) ? (size_t)cfg->vision.in_c * cfg->vision.in_h * cfg->vision.in_w : (size_t)cfg->mlp.inputs;
}

/* The batch of n samples at x, y as the family's forward takes it; a gan's
 * n sharp images at x, then their n blurred ones. */
typedef struct NetBatch {
  MlpBatch mlp;
  VisionBatch vision;
  GanBatch gan;
} NetBatch;

static const void *as_batch(const Trainer *tr, NetBatch *b, int n, float *x, int *y) {
  b->mlp = (MlpBatch){.n = n, .x = x, .y = y};
  b->vision = (VisionBatch){.n = n, .x = x, .y = y};
  if (is_gan(tr)) {
    b->gan = (GanBatch){.n = n, .sharp = x, .blurred = x + (size_t)n * gan_data_image_floats(tr->pairs)};
    return &b->gan;
  }
  return is_vision(tr) ? (const void *)&b->vision : (const void *)&b->mlp;
}

/* Data rounds of one step: a network whose group runs k phases in a row
 * (a GAN's critic steps) draws a fresh global batch for each of them; 1
 * otherwise. */
static int data_rounds(const Trainer *tr) {
  int rounds = 1;
  for (int g = 0; g < tr->net.num_param_groups && g < NET_MAX_PARAM_GROUPS; g++)
    rounds = tr->net.phase_repeats[g] > rounds ? tr->net.phase_repeats[g] : rounds;
  return rounds;
}

/* The data round of an action's phase: a group's phases take the step's
 * last rounds, one each, so k critic phases read rounds 0..k-1 and the
 * generator phase after them the last critic phase's batch again (with one
 * phase per group every phase reads round 0, as before repeats existed). */
static int data_round(const Trainer *tr, const SchedAction *a) {
  if (a->group < 0) return 0;
  int first = 0;
  for (int p = 0; p < a->phase; p++) first += sched_config_phase_group(&tr->prog->config, p) == a->group;
  int repeats = tr->net.phase_repeats[a->group] > 1 ? tr->net.phase_repeats[a->group] : 1;
  return first + data_rounds(tr) - repeats;
}

/* The number of the first sample of micro-batch mb of this replica in data
 * round `round` among every sample the run draws (offsets as in fill_step_batch). */
static uint64_t sample_draw(const Trainer *tr, int mb, int round) {
  const TrainConfig *cfg = tr->cfg;
  uint64_t step_first = ((uint64_t)tr->step * (uint64_t)data_rounds(tr) + (uint64_t)round) *
                        (uint64_t)cfg->global_batch_size;
  return step_first + ((uint64_t)tr->dp_rank * (uint64_t)cfg->grad_accum_steps + (uint64_t)mb) *
                          (uint64_t)cfg->micro_batch_size;
}

/* Micro-batch mb of this replica's share of the step, in the step's buffers. */
static const void *step_batch(const Trainer *tr, const SchedAction *a, NetBatch *b) {
  size_t at = (size_t)a->microbatch * (size_t)tr->cfg->micro_batch_size;
  const void *batch = as_batch(tr, b, tr->cfg->micro_batch_size, tr->net_x + at * sample_floats(tr), tr->net_y + at);
  b->gan.draw = sample_draw(tr, a->microbatch, data_round(tr, a));
  return batch;
}

/* The batch source of each family. Samples are numbered so that the
 * replicas' micro-batches of one step tile the global batch, as a one-rank
 * run's micro-batches do: micro-batch mb of replica r starts (r x accum +
 * mb) x B samples into the step. The MLP's samples follow from the step
 * alone; a vision network's from the image order's state (tr->train.state,
 * which checkpoints record), moved on by the global batch after each step;
 * a gan's likewise, round r of a step (data_round) r global batches on. */
static int fill_step_batch(Trainer *tr, int mb, int round, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  int B = cfg->micro_batch_size;
  uint64_t offset = ((uint64_t)tr->dp_rank * (uint64_t)cfg->grad_accum_steps + (uint64_t)mb) * (uint64_t)B +
                    (uint64_t)round * (uint64_t)cfg->global_batch_size;
  size_t at = (size_t)mb * (size_t)B;
  float *x = tr->net_x + at * sample_floats(tr);
  int *y = tr->net_y + at;
  if (is_gan(tr))
    return gan_data_train_batch(tr->pairs, &tr->train.state, offset, B, x,
                                x + (size_t)B * gan_data_image_floats(tr->pairs), err);
  if (is_vision(tr)) {
    image_set_train_batch(tr->images, &tr->train.state, offset, B, x, y);
  } else {
    MlpBatch b = {.n = B, .x = x, .y = y};
    mlp_synthetic_batch(&cfg->mlp, cfg->seed, (uint64_t)tr->step * (uint64_t)cfg->global_batch_size + offset, B, &b);
  }
  return 0;
}

/* AdamW of `group` (-1: all) after the reduction, with that gradient's global norm. */
static int update(Trainer *tr, int group, Error *err) {
  double sumsq = phases_local_sumsq(tr, group);
  int rc = tr->zero ? sum_over_replicas(tr, &sumsq, err) : 0;
  if (rc) return error_wrap(err, "global gradient norm");
  if ((rc = trainer_apply_group_update(tr, group, sumsq, err))) return rc;
  /* Every rank holds the updated values (ZeRO-1 gathers them): each runs the hooks. */
  if (!tr->step_skipped && tr->net.ops->after_update) tr->net.ops->after_update(&tr->net, group < 0 ? 0 : group);
  return 0;
}

/* ---- the program's actions (executor handlers) ---- */

/* The loss and accuracy of the last forward, added to *loss, *accuracy. */
static void add_metrics(const Trainer *tr, double weight, double *loss, double *accuracy) {
  NetMetric m[NET_MAX_METRICS];
  int n = tr->net.ops->metrics(&tr->net, m, NET_MAX_METRICS);
  if (n > 0) *loss += weight * m[0].value;
  double acc = network_metric(m, n, "accuracy");
  if (!isnan(acc)) *accuracy += weight * acc;
}

static int net_forward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  int rc = fill_step_batch(tr, a->microbatch, data_round(tr, a), err);
  if (rc) return rc;
  phases_enter(tr, a->phase, a->group);
  NetBatch b;
  rc = tr->net.ops->forward(&tr->net, a->chunk, step_batch(tr, a, &b), err);
  NetMetric m[NET_MAX_METRICS];
  int n = rc ? 0 : tr->net.ops->metrics(&tr->net, m, NET_MAX_METRICS);
  for (int i = 0; i < n && i < NET_MAX_METRICS; i++) tr->net_metric_sums[i] += m[i].value;
  return rc;
}

static int net_backward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  NetBatch b;
  return tr->net.ops->backward(&tr->net, a->chunk, step_batch(tr, a, &b), tr->grad_scale, err);
}

/* One chunk: the whole gradient (of the phase's group) is ready; its buckets start here. */
static int net_grad_reduce(void *ctx, const SchedAction *a, Error *err) {
  return phases_start_reduce(ctx, a->group, err);
}

/* Before OPTIM: the reductions of the group's GRAD_REDUCE actions waited
 * for (outside the optimizer's span) and, when traced, stamped complete,
 * as the transformer's step does. */
static int net_prepare_optim(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  int rc = phases_finish_reduce(tr, a->group, err);
  if (!rc && tr->reduce_grads && tr->trace)
    for (int i = 0; i < tr->exec.num_actions; i++) {
      const SchedAction *r = &tr->exec.actions[i];
      if (r->kind == SCHED_GRAD_REDUCE && (a->group < 0 || r->group == a->group))
        trace_session_complete(tr->trace, r);
    }
  return rc;
}

static int net_optim(void *ctx, const SchedAction *a, Error *err) { return update(ctx, a->group, err); }

/* The program of one step (schedule none: F, B per micro-batch, the
 * reduction, the update) and the executor that runs it with the handlers
 * above, as the transformer's step does with its own. */
static int create_program(Trainer *tr, Error *err) {
  SchedConfig sc = {.schedule = SCHED_SCHEDULE_NONE, .pp = 1, .vpp = 1, .microbatches = tr->cfg->grad_accum_steps,
                    .param_groups = tr->net.num_param_groups};
  for (int g = 0; g < tr->net.num_param_groups && g < NET_MAX_PARAM_GROUPS && g < SCHED_MAX_PARAM_GROUPS; g++)
    sc.phase_repeats[g] = tr->net.phase_repeats[g];
  int rc = sched_build(&sc, &tr->prog, err);
  if (!rc) rc = executor_create(&tr->exec, tr->prog, 0, tr, err);
  if (rc) return rc;
  executor_set_handler(&tr->exec, SCHED_FWD, net_forward);
  executor_set_handler(&tr->exec, SCHED_BWD, net_backward);
  executor_set_handler(&tr->exec, SCHED_GRAD_REDUCE, net_grad_reduce);
  executor_set_prepare(&tr->exec, SCHED_OPTIM, net_prepare_optim);
  executor_set_handler(&tr->exec, SCHED_OPTIM, net_optim);
  return 0;
}

/* The network of the run's family, initialised from the seed; a vision
 * network's image set opened and its order started at the seed. */
static int create_gan(Trainer *tr, const TrainConfig *cfg, Error *err) {
  tr->pairs = calloc(1, sizeof *tr->pairs);
  if (!tr->pairs) return error_set(err, ERR_NOMEM, "out of memory for the image pairs");
  int rc = gan_data_open(tr->pairs, &cfg->gan_data, err);
  if (rc) {
    free(tr->pairs);
    tr->pairs = NULL;
    return error_wrap(err, "%s: data.dir", cfg->config_path);
  }
  if (tr->pairs->channels != cfg->gan.channels)
    return error_set(err, ERR_CONFIG, "%s: model.channels %d does not fit the images of %s (%d channels)",
                     cfg->config_path, cfg->gan.channels, cfg->gan_data.dir, tr->pairs->channels);
  int size = tr->pairs->size;
  if ((rc = gan_create(&tr->net, &cfg->gan, size, size, cfg->micro_batch_size, err)))
    return error_wrap(err, "%s: model: the images of %s", cfg->config_path, cfg->gan_data.dir);
  gan_init_weights(&tr->net, cfg->seed);
  tr->train.state = (DataLoaderState){.seed = cfg->seed, .epoch = 0, .position = 0};
  return 0;
}

static int create_network(Trainer *tr, const TrainConfig *cfg, Error *err) {
  int B = cfg->micro_batch_size, rc;
  if (is_gan(tr)) return create_gan(tr, cfg, err);
  if (!is_vision(tr)) {
    if ((rc = mlp_create(&tr->net, &cfg->mlp, B, err))) return error_wrap(err, "creating the mlp");
    mlp_init_weights(&tr->net, cfg->seed);
    return 0;
  }
  if ((rc = vision_create(&tr->net, &cfg->vision, B, err)))
    return error_wrap(err, "%s: creating the vision network", cfg->config_path);
  vision_init_weights(&tr->net, cfg->seed);
  tr->images = calloc(1, sizeof *tr->images);
  if (!tr->images) return error_set(err, ERR_NOMEM, "out of memory for the image set");
  if ((rc = image_set_open(tr->images, &cfg->images, err))) {
    free(tr->images);
    tr->images = NULL;
    return error_wrap(err, "%s: data", cfg->config_path);
  }
  if (tr->images->channels != cfg->vision.in_c || tr->images->rows != cfg->vision.in_h ||
      tr->images->cols != cfg->vision.in_w || tr->images->classes != cfg->vision.classes)
    return error_set(err, ERR_CONFIG, "%s: model.input [%d, %d, %d] with %d classes does not fit the images of %s "
                     "([%d, %d, %d], %d classes)", cfg->config_path, cfg->vision.in_c, cfg->vision.in_h,
                     cfg->vision.in_w, cfg->vision.classes, cfg->images.dir, tr->images->channels, tr->images->rows,
                     tr->images->cols, tr->images->classes);
  tr->train.state = (DataLoaderState){.seed = cfg->seed, .epoch = 0, .position = 0};
  return 0;
}

int trainer_net_create(Trainer *tr, const TrainConfig *cfg, Error *err) {
  tr->tp = tr->pp = tr->vpp = tr->cp = tr->ep = tr->etp = tr->edp = 1;
  tr->dp = cfg->world_size > 0 ? cfg->world_size : 1;
  tr->world = tr->dp;
  tr->grad_scale = 1.0f / ((float)cfg->grad_accum_steps * (float)tr->dp);
  int rc = create_network(tr, cfg, err);
  if (rc) return rc;
  size_t samples = (size_t)cfg->micro_batch_size * (size_t)cfg->grad_accum_steps;
  tr->net_x = malloc(samples * sample_floats(tr) * sizeof(float));
  tr->net_y = malloc(samples * sizeof(int));
  if (!tr->net_x || !tr->net_y) return error_set(err, ERR_NOMEM, "out of memory for the network's batch");
  tr->has_val = is_gan(tr) ? tr->pairs->num_val > 0 : is_vision(tr) ? tr->images->num_val > 0 : cfg->eval_batches > 0;
  OptimizerConfig oc = trainer_optimizer_config(cfg);
  if ((rc = create_data_parallel(tr, &oc, err))) return rc;
  return create_program(tr, err);
}

void trainer_net_free(Trainer *tr) {
  network_free(&tr->net);
  free(tr->net_x);
  free(tr->net_y);
  tr->net_x = NULL;
  tr->net_y = NULL;
  if (tr->images) image_set_close(tr->images);
  free(tr->images);
  tr->images = NULL;
  if (tr->pairs) gan_data_close(tr->pairs);
  free(tr->pairs);
  tr->pairs = NULL;
}

uint64_t trainer_net_data_windows(const Trainer *tr) {
  return tr->pairs ? tr->pairs->num_train : tr->images ? tr->images->num_train : 1;
}

int trainer_net_step(Trainer *tr, TrainStepResult *res, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  double t0 = timer_now();
  memset(tr->net.grads, 0, tr->net.num_values * sizeof(float));
  tr->step_skipped = 0;
  nonfinite_test_poison(tr, "grad");
  if (tr->reduce_grads) dp_grads_begin(&tr->dp_grads);
  memset(tr->net_metric_sums, 0, sizeof tr->net_metric_sums);
  tr->phase = -1;
  trace_session_begin_iteration(tr->trace, tr->step);
  int rc = executor_run(&tr->exec, err);
  if (rc) return rc;
  /* The step's metrics: means over the micro-batches of every replica. */
  memset(res, 0, sizeof *res);
  res->num_metrics = tr->net.ops->metrics(&tr->net, res->metrics, NET_MAX_METRICS);
  if (res->num_metrics > NET_MAX_METRICS) res->num_metrics = NET_MAX_METRICS;
  for (int i = 0; i < res->num_metrics && !rc; i++) {
    double sum = tr->net_metric_sums[i];
    rc = sum_over_replicas(tr, &sum, err);
    /* every phase ran the step's forwards */
    res->metrics[i].value = sum / (cfg->grad_accum_steps * tr->dp * sched_config_num_phases(&tr->prog->config));
  }
  if (rc) return rc;
  tr->step++;
  if (tr->images) image_set_advance(tr->images, &tr->train.state, (uint64_t)cfg->global_batch_size);
  if (tr->pairs) gan_data_advance(tr->pairs, &tr->train.state, (uint64_t)data_rounds(tr) * cfg->global_batch_size);
  nonfinite_test_poison(tr, "weight");
  res->step = tr->step;
  res->skipped = tr->step_skipped;
  res->loss = res->num_metrics > 0 ? res->metrics[0].value : NAN;
  res->lr = tr->acc.info.lr;
  res->grad_norm = tr->acc.info.grad_norm;
  res->tokens = (long)cfg->global_batch_size;
  res->seconds = timer_now() - t0;
  if (tr->reduce_grads) res->reduce_exposed_seconds = tr->dp_grads.exposed_seconds;
  return 0;
}

/* Loss and accuracy over every image of a part (validation or test),
 * shared out over the replicas in batches of up to B images; the sums are
 * weighted by each batch's size, so the means are over images. */
static int evaluate_images(Trainer *tr, ImagePart part, EvalResult *res, Error *err) {
  const ImageSet *s = tr->images;
  size_t total = image_set_count(s, part), pixels = image_set_pixels(s);
  int B = tr->cfg->micro_batch_size, rc = 0;
  double loss = 0, accuracy = 0;
  vision_set_eval(&tr->net, 1);
  for (size_t first = (size_t)tr->dp_rank * B; first < total && !rc; first += (size_t)tr->dp * B) {
    int n = (int)(total - first < (size_t)B ? total - first : (size_t)B);
    for (int k = 0; k < n; k++) image_set_read(s, part, first + k, tr->net_x + (size_t)k * pixels, &tr->net_y[k]);
    NetBatch b;
    rc = tr->net.ops->forward(&tr->net, 0, as_batch(tr, &b, n, tr->net_x, tr->net_y), err);
    if (!rc) add_metrics(tr, n, &loss, &accuracy);
  }
  vision_set_eval(&tr->net, 0);
  if (!rc) rc = sum_over_replicas(tr, &loss, err);
  if (!rc) rc = sum_over_replicas(tr, &accuracy, err);
  if (rc) return rc;
  res->batches = (int)((total + B - 1) / B);
  res->loss = total ? loss / total : NAN;
  res->has_accuracy = 1;
  res->accuracy = total ? accuracy / total : NAN;
  res->tokens = (long)total; /* images; windows stay 0: they are the transformer's */
  return 0;
}

/* A gan on its fixed validation pairs, shared out over the replicas: the
 * mean absolute error of the generator's output against the sharp image as
 * the loss, and the means over images of the PSNR and SSIM of the output
 * and, as the baseline, of the blurred input (SSIM needs sides of 11 or
 * more; NaN below). */
static int evaluate_pairs(Trainer *tr, EvalResult *res, Error *err) {
  const GanData *d = tr->pairs;
  size_t img = gan_data_image_floats(d), total = d->num_val;
  int B = tr->cfg->micro_batch_size, rc = 0, ssim_ok = d->size >= SSIM_WINDOW;
  double sums[5] = {0}; /* abs error, psnr, ssim, blurred psnr, blurred ssim */
  float *out = tr->net_x;
  for (size_t first = (size_t)tr->dp_rank * B; first < total && !rc; first += (size_t)tr->dp * B) {
    int n = (int)(total - first < (size_t)B ? total - first : (size_t)B);
    rc = gan_generate(&tr->net, d->val_blur + first * img, n, out, err);
    for (int k = 0; k < n && !rc; k++) {
      const float *sharp = d->val_sharp + (first + k) * img, *blur = d->val_blur + (first + k) * img;
      const float *made = out + (size_t)k * img;
      double psnr = 0, ssim = NAN, bpsnr = 0, bssim = NAN, abs_err = 0;
      for (size_t i = 0; i < img; i++) abs_err += fabs((double)made[i] - sharp[i]);
      rc = image_psnr(made, sharp, img, 1.0, &psnr, err);
      if (!rc) rc = image_psnr(blur, sharp, img, 1.0, &bpsnr, err);
      if (!rc && ssim_ok) rc = image_ssim(made, sharp, d->channels, d->size, d->size, 1.0, &ssim, err);
      if (!rc && ssim_ok) rc = image_ssim(blur, sharp, d->channels, d->size, d->size, 1.0, &bssim, err);
      double v[5] = {abs_err / (double)img, psnr > 100 ? 100 : psnr, ssim, bpsnr > 100 ? 100 : bpsnr, bssim};
      for (int s = 0; s < 5; s++) sums[s] += v[s];
    }
  }
  for (int s = 0; s < 5 && !rc; s++) rc = sum_over_replicas(tr, &sums[s], err);
  if (rc) return rc;
  static const char *const NAMES[] = {"val_psnr", "val_ssim", "val_blurred_psnr", "val_blurred_ssim"};
  static const int DECIMALS[] = {2, 4, 2, 4};
  res->batches = (int)((total + B - 1) / B);
  res->loss = total ? sums[0] / total : NAN;
  res->tokens = (long)total;
  res->num_extra = 4;
  for (int s = 0; s < 4; s++) res->extra[s] = (NetMetric){NAMES[s], total ? sums[s + 1] / total : NAN, DECIMALS[s]};
  return 0;
}

/* The MLP: the same eval_batches micro-batches of validation samples every
 * time, shared out over the replicas. A vision network: its validation part. */
int trainer_net_evaluate(Trainer *tr, EvalResult *res, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  double t0 = timer_now();
  memset(res, 0, sizeof *res);
  int rc = 0;
  if (is_gan(tr)) {
    rc = evaluate_pairs(tr, res, err);
  } else if (is_vision(tr)) {
    rc = evaluate_images(tr, IMAGE_PART_VAL, res, err);
  } else {
    int B = cfg->micro_batch_size;
    double loss = 0, accuracy = 0;
    MlpBatch batch = {.x = tr->net_x, .y = tr->net_y};
    for (int k = tr->dp_rank; k < cfg->eval_batches && !rc; k += tr->dp) {
      mlp_synthetic_batch(&cfg->mlp, cfg->seed, MLP_VAL_FIRST_SAMPLE + (uint64_t)k * (uint64_t)B, B, &batch);
      rc = tr->net.ops->forward(&tr->net, 0, &batch, err);
      if (!rc) add_metrics(tr, 1.0, &loss, &accuracy);
    }
    if (!rc) rc = sum_over_replicas(tr, &loss, err);
    if (!rc) rc = sum_over_replicas(tr, &accuracy, err);
    res->batches = cfg->eval_batches;
    res->loss = cfg->eval_batches > 0 ? loss / cfg->eval_batches : NAN;
    res->has_accuracy = 1;
    res->accuracy = cfg->eval_batches > 0 ? accuracy / cfg->eval_batches : NAN;
    res->tokens = (long)cfg->eval_batches * B;
  }
  res->seconds = timer_now() - t0;
  return rc;
}

int trainer_net_test(Trainer *tr, FILE *out, FILE *jsonl, Error *err) {
  if (!is_vision(tr) || !tr->cfg->images.test_at_end || tr->images->num_test == 0) return 0;
  double t0 = timer_now();
  EvalResult res;
  memset(&res, 0, sizeof res);
  int rc = evaluate_images(tr, IMAGE_PART_TEST, &res, err);
  if (rc) return rc;
  res.seconds = timer_now() - t0;
  const ImageSetConfig *c = &tr->cfg->images;
  char noise[96] = "clean";
  if ((c->noise_gaussian > 0 || c->noise_salt_pepper > 0) && (c->noise_on == IMAGE_NOISE_TEST ||
                                                              c->noise_on == IMAGE_NOISE_EVAL ||
                                                              c->noise_on == IMAGE_NOISE_ALL))
    snprintf(noise, sizeof noise, "noise gaussian %g, salt-and-pepper %g", c->noise_gaussian, c->noise_salt_pepper);
  if (out) {
    fprintf(out, "test step %d/%d | test loss %.3f | test accuracy %.2f%% | %ld images (%s) | %.1f s\n", tr->step,
            tr->cfg->steps, res.loss, 100.0 * res.accuracy, res.tokens, noise, res.seconds);
    fflush(out);
  }
  if (jsonl) {
    fprintf(jsonl, "{\"type\":\"test\",\"step\":%d,\"test_loss\":%.9g,\"test_accuracy\":%.9g,\"images\":%ld,"
                   "\"noise_gaussian\":%.6g,\"noise_salt_pepper\":%.6g,\"seconds\":%.6g}\n",
            tr->step, res.loss, res.accuracy, res.tokens, strcmp(noise, "clean") ? c->noise_gaussian : 0.0,
            strcmp(noise, "clean") ? c->noise_salt_pepper : 0.0, res.seconds);
    fflush(jsonl);
  }
  return 0;
}

static void print_vision(const Trainer *tr, FILE *out) {
  const TrainConfig *cfg = tr->cfg;
  const ImageSet *s = tr->images;
  const ImageSetConfig *c = &cfg->images;
  char layers[1024], a[32], b[32], d[32];
  vision_describe(&tr->net, layers, sizeof layers);
  fprintf(out, "  model    vision: input %dx%dx%d -> %s; %d classes\n", cfg->vision.in_c, cfg->vision.in_h,
          cfg->vision.in_w, layers, cfg->vision.classes);
  fprintf(out, "  params   %s parameters; %s multiplications and %s additions/comparisons per image (forward)\n",
          fmt_thousands(a, sizeof a, (double)tr->net.num_values),
          fmt_thousands(b, sizeof b, vision_mults_per_sample(&tr->net)),
          fmt_thousands(d, sizeof d, vision_adds_per_sample(&tr->net)));
  fprintf(out, "  data     Fashion-MNIST (%s): %s train, %s validation (held out of the training file, split seed "
               "%llu), %zu test images\n", c->dir, fmt_thousands(a, sizeof a, (double)s->num_train),
          fmt_thousands(b, sizeof b, (double)s->num_val), (unsigned long long)c->split_seed, s->num_test);
  if (c->normalize) fprintf(out, "           normalised (x - %g) / %g", c->mean, c->std);
  else fprintf(out, "           pixels in [0, 1], not normalised");
  if (c->noise_gaussian > 0 || c->noise_salt_pepper > 0)
    fprintf(out, "; noise on %s: gaussian sigma %g, salt-and-pepper %g (seed %llu)\n", image_noise_on_name(c->noise_on),
            c->noise_gaussian, c->noise_salt_pepper, (unsigned long long)c->noise_seed);
  else fprintf(out, "; no noise\n");
  double epochs = (double)cfg->global_batch_size * cfg->steps / (double)s->num_train;
  fprintf(out, "  batch    %d x %d accumulation x %d replica(s) = %d images per step (%.2f epochs over %d steps)\n",
          cfg->micro_batch_size, cfg->grad_accum_steps, tr->dp, cfg->global_batch_size, epochs, cfg->steps);
}

static void print_gan(const Trainer *tr, FILE *out) {
  const TrainConfig *cfg = tr->cfg;
  const GanConfig *g = &cfg->gan;
  const GanData *d = tr->pairs;
  char layers[2048], a[32], b[32];
  gan_describe(&tr->net, layers, sizeof layers);
  size_t critic = 0;
  for (int t = 0; t < tr->net.num_tensors; t++)
    if (tr->net.params[t].param_group == GAN_GROUP_CRITIC) critic += tr->net.params[t].numel;
  int wgan = g->loss == GAN_LOSS_WGAN_GP;
  char loss[64] = "lsgan", phases[96] = "critic phase";
  if (wgan) snprintf(loss, sizeof loss, "wgan-gp, gradient penalty %g", g->gp_weight);
  if (g->critic_steps > 1) snprintf(phases, sizeof phases, "%d critic phases on fresh batches", g->critic_steps);
  fprintf(out, "  model    gan (%s): %s\n", loss, layers);
  fprintf(out, "  params   %s generator and %s critic parameters, two groups stepped in turn (%s, then "
               "generator phase); loss = %g g_adv + %g content (%g L1 + %g edge)\n",
          fmt_thousands(a, sizeof a, (double)(tr->net.num_values - critic)), fmt_thousands(b, sizeof b, (double)critic),
          phases, g->adv_weight, g->content_weight, g->l1_weight, g->edge_weight);
  fprintf(out, "  data     %s: %zu train, %zu validation images of %dx%dx%d, motion blur kernel %d (blur seed %llu, "
               "noise %g)\n", cfg->gan_data.dir, d->num_train, d->num_val, d->channels, d->size, d->size,
          cfg->gan_data.kernel_size, (unsigned long long)cfg->gan_data.blur_seed, cfg->gan_data.noise_sigma);
  char rounds[64] = "per step";
  if (data_rounds(tr) > 1) snprintf(rounds, sizeof rounds, "per batch, %d batches per step", data_rounds(tr));
  fprintf(out, "  batch    %d x %d accumulation x %d replica(s) = %d pairs %s (%.2f epochs over %d steps)\n",
          cfg->micro_batch_size, cfg->grad_accum_steps, tr->dp, cfg->global_batch_size, rounds,
          (double)cfg->global_batch_size * data_rounds(tr) * cfg->steps / (double)d->num_train, cfg->steps);
}

void trainer_net_print_model(const Trainer *tr, FILE *out) {
  const TrainConfig *cfg = tr->cfg;
  if (is_gan(tr)) {
    print_gan(tr, out);
    return;
  }
  if (is_vision(tr)) {
    print_vision(tr, out);
    return;
  }
  const MlpConfig *m = &cfg->mlp;
  fprintf(out, "  model    mlp: %d inputs, hidden [", m->inputs);
  for (int i = 0; i < m->num_hidden; i++) fprintf(out, "%s%d", i ? ", " : "", m->hidden[i]);
  fprintf(out, "] (tanh), %d classes; %zu parameters", m->classes, tr->net.num_values);
  if (tr->net.num_param_groups > 1)
    fprintf(out, " in %d parameter groups stepped in turn (one phase each)", tr->net.num_param_groups);
  fputc('\n', out);
  fprintf(out, "  data     synthetic classification from seed %llu (a random linear teacher); %d validation "
               "batches\n", (unsigned long long)cfg->seed, cfg->eval_batches);
  fprintf(out, "  batch    %d x %d accumulation x %d replica(s) = %d samples per step\n", cfg->micro_batch_size,
          cfg->grad_accum_steps, tr->dp, cfg->global_batch_size);
}
