/* CRC-32, slicing-by-8: eight 256-entry tables let the inner loop consume
 * eight bytes per iteration, so checksumming a checkpoint costs about as much
 * as reading it from the page cache. See crc32.h. */
#include "base/crc32.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CRC32_POLY 0xEDB88320u
#define CRC32_FILE_CHUNK (1u << 20)

static uint32_t g_table[8][256];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC32_POLY : c >> 1;
    g_table[0][i] = c;
  }
  /* Table k advances a byte's contribution past k further zero bytes. */
  for (uint32_t i = 0; i < 256; i++)
    for (int k = 1; k < 8; k++) g_table[k][i] = (g_table[k - 1][i] >> 8) ^ g_table[0][g_table[k - 1][i] & 0xFF];
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
  pthread_once(&g_table_once, build_tables);
  const unsigned char *p = data;
  uint32_t c = ~crc;
  while (n && ((uintptr_t)p & 7)) {
    c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xFF];
    n--;
  }
  while (n >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4); /* little-endian hosts only, like the rest of the I/O code */
    memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = g_table[7][lo & 0xFF] ^ g_table[6][(lo >> 8) & 0xFF] ^ g_table[5][(lo >> 16) & 0xFF] ^ g_table[4][lo >> 24] ^
        g_table[3][hi & 0xFF] ^ g_table[2][(hi >> 8) & 0xFF] ^ g_table[1][(hi >> 16) & 0xFF] ^ g_table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xFF];
  return ~c;
}

int crc32_file(const char *path, uint32_t *crc, uint64_t *bytes, Error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error_set(err, ERR_IO, "cannot open %s: %s", path, error_errno_text(errno));
  unsigned char *buf = malloc(CRC32_FILE_CHUNK);
  if (!buf) {
    close(fd);
    return error_set(err, ERR_NOMEM, "%s: out of memory for a read buffer", path);
  }
  uint32_t c = 0;
  uint64_t total = 0;
  int rc = 0;
  for (;;) {
    ssize_t got = read(fd, buf, CRC32_FILE_CHUNK);
    if (got < 0) {
      if (errno == EINTR) continue;
      rc = error_set(err, ERR_IO, "cannot read %s: %s", path, error_errno_text(errno));
      break;
    }
    if (got == 0) break;
    c = crc32_update(c, buf, (size_t)got);
    total += (uint64_t)got;
  }
  free(buf);
  close(fd);
  if (rc) return rc;
  *crc = c;
  if (bytes) *bytes = total;
  return 0;
}
