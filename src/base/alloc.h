/* Large, long-lived buffers: 64-byte aligned, zeroed, backed by transparent
 * huge pages where the kernel allows (first-touch faults on 4 KiB pages are
 * expensive on virtual machines). Allocate once, reuse forever. */
#ifndef FIVEFOLD_BASE_ALLOC_H
#define FIVEFOLD_BASE_ALLOC_H

#include <stddef.h>

void *alloc_big(size_t bytes);  /* zeroed; NULL on failure */
void alloc_big_free(void *p);

/* Peak resident set size of this process in bytes (VmHWM, else getrusage). */
size_t alloc_peak_rss_bytes(void);

#endif
