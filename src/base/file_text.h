/* Reading a small text file (configs, specs, state.json) whole: a regular
 * file only (a device or FIFO would be read forever), at most max_bytes,
 * one allocation sized from the file. */
#ifndef FIVEFOLD_BASE_FILE_TEXT_H
#define FIVEFOLD_BASE_FILE_TEXT_H

#include <stddef.h>

#include "base/error.h"

/* On success *out is a NUL-terminated malloc'd buffer (free it) and *len its
 * length (len may be NULL). `what` names the file's role in messages
 * ("model config", "cluster spec"). ERR_IO when it cannot be opened or read
 * (errno is kept from the failing call), ERR_FORMAT when it is not a regular
 * file or is larger than max_bytes. */
int file_read_text(const char *path, const char *what, size_t max_bytes, char **out, size_t *len, Error *err);

#endif
