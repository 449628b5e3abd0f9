/* Rotary position embeddings, Hugging Face "rotate_half" pairing: element i
 * of a head pairs with i + D/2. */
#include "kern/rope.h"

#include <math.h>

#include "kern/kern_util.h"

/* The table follows Hugging Face's float32 recipe step by step
 * (inv_freq = 1 / theta^(float(2i)/D) in float32, angle = float32(pos *
 * inv_freq), then cos/sin of that float angle), so rotations agree with a
 * PyTorch reference to float rounding even at long context, where a
 * float32 angle differs from the exact one by up to pos * 2^-24 rad. */
void rope_table_init(float *cos_table, float *sin_table, int max_pos, int D, float theta) {
  int half = D / 2;
  for (int i = 0; i < half; i++) {
    float exponent = (float)(2 * i) / (float)D;
    float inv_freq = 1.0f / (float)pow((double)theta, (double)exponent);
    for (int p = 0; p < max_pos; p++) {
      float angle = (float)p * inv_freq;
      cos_table[(long)p * half + i] = (float)cos((double)angle);
      sin_table[(long)p * half + i] = (float)sin((double)angle);
    }
  }
}

/* sign = +1 rotates by +angle (forward), -1 by -angle (the transpose). */
static void rope_rotate(float *x, const int *pos, int N, int H, int D, const float *cos_table,
                        const float *sin_table, float sign) {
  int half = D / 2;
#pragma omp parallel for schedule(static) if ((long)N * H * D >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *cs = cos_table + (long)pos[n] * half;
    const float *sn = sin_table + (long)pos[n] * half;
    for (int h = 0; h < H; h++) {
      float *lo = x + ((long)n * H + h) * D;
      float *hi = lo + half;
      for (int i = 0; i < half; i++) {
        float a = lo[i], b = hi[i], c = cs[i], s = sign * sn[i];
        lo[i] = a * c - b * s;
        hi[i] = b * c + a * s;
      }
    }
  }
}

void rope_forward(float *x, const int *pos, int N, int H, int D, const float *cos_table,
                  const float *sin_table) {
  rope_rotate(x, pos, N, H, D, cos_table, sin_table, 1.0f);
}

void rope_backward(float *dx, const int *pos, int N, int H, int D, const float *cos_table,
                   const float *sin_table) {
  rope_rotate(dx, pos, N, H, D, cos_table, sin_table, -1.0f);
}
