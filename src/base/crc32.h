/* CRC-32 (IEEE 802.3, the zlib / PNG / gzip polynomial, reflected 0xEDB88320)
 * of memory and of files: checkpoints record one per file so that a torn or
 * bit-flipped file is caught before its contents are trusted.
 *
 * Streaming use: crc = crc32_update(0, a, na); crc = crc32_update(crc, b, nb);
 * gives the CRC of a followed by b. crc32("123456789") = 0xCBF43926. */
#ifndef FIVEFOLD_BASE_CRC32_H
#define FIVEFOLD_BASE_CRC32_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* CRC of data[0, n) appended to a stream whose CRC so far is `crc` (0 for
 * an empty stream). */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

/* CRC and size of a whole file. */
int crc32_file(const char *path, uint32_t *crc, uint64_t *bytes, Error *err);

#endif
