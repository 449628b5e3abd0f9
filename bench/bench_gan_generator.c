/* Images/s of the deblurring GAN's generator alone (nets/gan.h): forward
 * on a micro-batch of blurred images, the content loss, backward into the
 * generator's gradients (gan_generator_pass), the same pass that
 * bench/deblur/torch_gan_step.py times in PyTorch as "generator
 * forward+backward" (same layers, shapes and threads). The figure is the
 * mean over the timed passes after two warm-up passes, as the PyTorch
 * script takes it, by the wall clock and by the process's CPU time (images
 * per CPU-second: on a machine shared with other jobs the wall clock
 * measures the load, while at one thread the CPU time measures the work).
 * Prints figures, never pass/fail.
 *
 * Usage: bench_gan_generator [--threads 2] [--size 32] [--micro 8]
 *        [--filters 16] [--blocks 4] [--downsamples 2] [--steps 20]
 *        [--rounds 1] (one line per round) [--norm instance|none] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "base/timer.h"
#include "nets/gan.h"

static void check(int rc, const Error *err) {
  if (rc) {
    fprintf(stderr, "bench_gan_generator: %s\n", err->msg);
    exit(1);
  }
}

int main(int argc, char **argv) {
  const char *names[] = {"--threads", "--size", "--micro", "--filters", "--blocks", "--downsamples", "--steps",
                         "--rounds"};
  int values[] = {2, 32, 8, 16, 4, 2, 20, 1};
  const int count = (int)(sizeof values / sizeof values[0]);
  int norm = GAN_NORM_INSTANCE;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--norm") && a + 1 < argc && (!strcmp(argv[a + 1], "instance") || !strcmp(argv[a + 1], "none"))) {
      norm = strcmp(argv[++a], "none") ? GAN_NORM_INSTANCE : GAN_NORM_NONE;
      continue;
    }
    int k = 0;
    while (k < count && strcmp(argv[a], names[k])) k++;
    /* --downsamples 0 is the full-resolution generator; every other value is positive */
    if (k == count || a + 1 >= argc || atoi(argv[a + 1]) < (k == 5 ? 0 : 1)) {
      fprintf(stderr, "usage: bench_gan_generator [--threads N] [--size S] [--micro B] [--filters F] [--blocks N] "
                      "[--downsamples N] [--steps N] [--rounds N] (positive integers, --downsamples 0 allowed) "
                      "[--norm instance|none]\n");
      return 2;
    }
    values[k] = atoi(argv[++a]);
  }
  int threads = values[0], size = values[1], micro = values[2], steps = values[6], rounds = values[7];
  omp_set_num_threads(threads);
  GanConfig cfg = {.channels = 1, .gen_filters = values[3], .gen_blocks = values[4], .gen_downsamples = values[5], .gen_norm = norm,
                   .critic_filters = 16, .critic_layers = 3, .adv_weight = 0, .content_weight = 100,
                   .l1_weight = 1, .edge_weight = 1};
  Network net;
  Error err = {0};
  check(gan_create(&net, &cfg, size, size, micro, &err), &err);
  gan_init_weights(&net, 1);
  size_t n = (size_t)micro * size * size;
  float *blurred = malloc(n * sizeof(float)), *sharp = malloc(n * sizeof(float));
  if (!blurred || !sharp) return 1;
  for (size_t i = 0; i < n; i++) blurred[i] = (float)rng_uniform(3, 0, i), sharp[i] = (float)rng_uniform(3, 1, i);
  printf("fivefold, %d threads, %dx%d grey, micro-batch %d, generator %d filters %d blocks %d downsamples, norm %s\n",
         threads, size, size, micro, cfg.gen_filters, cfg.gen_blocks, cfg.gen_downsamples,
         norm == GAN_NORM_NONE ? "none" : "instance");
  double content = 0;
  for (int r = 0; r < rounds; r++) {
    for (int w = 0; w < 2; w++) check(gan_generator_pass(&net, blurred, sharp, micro, &content, &err), &err);
    double start = timer_now();
    clock_t cpu_start = clock();
    for (int s = 0; s < steps; s++) check(gan_generator_pass(&net, blurred, sharp, micro, &content, &err), &err);
    double secs = timer_now() - start, cpu = (double)(clock() - cpu_start) / CLOCKS_PER_SEC;
    printf("generator forward+backward: %.1f images/s, %.1f images per CPU-second\n", (double)micro * steps / secs,
           (double)micro * steps / cpu);
    fflush(stdout);
  }
  network_free(&net);
  free(blurred);
  free(sharp);
  return 0;
}
