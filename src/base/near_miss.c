/* Near-miss suggestions by edit distance. */
#include "base/near_miss.h"

#include <string.h>

enum { NEAR_MISS_FAR = 1 << 20 };

int near_miss_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return NEAR_MISS_FAR;
  int row[64];
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int up = row[j];
      int sub = diag + (a[i - 1] != b[j - 1]);
      int best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
      row[j] = sub < best ? sub : best;
      diag = up;
    }
  }
  return row[m];
}

const char *near_miss(const char *word, const char *const *candidates, int n) {
  const char *best = NULL;
  int best_d = NEAR_MISS_FAR;
  for (int i = 0; i < n; i++) {
    int d = near_miss_distance(word, candidates[i]);
    if (d < best_d) best_d = d, best = candidates[i];
  }
  int limit = (int)strlen(word) / 3 + 1;
  if (limit < 2) limit = 2;
  return best && best_d <= limit ? best : NULL;
}
