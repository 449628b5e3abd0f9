/* Aligned, huge-page-advised allocation for parameter, gradient, optimizer
 * and activation buffers. */
#include "base/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#define HUGE_ALIGN ((size_t)2 << 20)

void *alloc_big(size_t bytes) {
  if (bytes == 0) bytes = 64;
  size_t align = bytes >= HUGE_ALIGN ? HUGE_ALIGN : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  void *p = NULL;
  if (posix_memalign(&p, align, rounded) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  if (align == HUGE_ALIGN) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  memset(p, 0, rounded);
  return p;
}

void alloc_big_free(void *p) { free(p); }

size_t alloc_peak_rss_bytes(void) {
  /* VmHWM first: ru_maxrss survives exec, so a process started by a large
   * parent (a Python test harness) would report the parent's size. */
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %lu kB", &kib) == 1) break;
  if (f) fclose(f);
  if (kib > 0) return (size_t)kib * 1024;
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
