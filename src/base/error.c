/* Error codes and message formatting. */
#define _GNU_SOURCE /* strerrorname_np */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *error_errno_text(int errnum) {
  enum { RING = 8 };
  static _Thread_local char ring[RING][160];
  static _Thread_local unsigned next;
  char *out = ring[next++ % RING];
  const char *name = strerrorname_np(errnum);
  char text[128];
  /* The GNU strerror_r returns its string, which may not be the buffer. */
  const char *what = strerror_r(errnum, text, sizeof text);
  if (name) snprintf(out, sizeof ring[0], "%s: %s", name, what);
  else snprintf(out, sizeof ring[0], "errno %d: %s", errnum, what);
  return out;
}

int error_set(Error *err, int code, const char *fmt, ...) {
  if (err) {
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

int error_wrap(Error *err, const char *fmt, ...) {
  if (!err) return ERR_INTERNAL;
  char prefix[512], old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  /* Truncation is acceptable here: the message is for humans. */
  size_t n = strlen(prefix);
  if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
  memcpy(err->msg, prefix, n);
  err->msg[n] = ':';
  err->msg[n + 1] = ' ';
  size_t rest = sizeof err->msg - n - 3;
  size_t m = strnlen(old, rest);
  memcpy(err->msg + n + 2, old, m);
  err->msg[n + 2 + m] = '\0';
  return err->code ? err->code : ERR_INTERNAL;
}

const char *error_code_name(int code) {
  switch (code) {
    case ERR_OK: return "ok";
    case ERR_ARG: return "bad argument";
    case ERR_CONFIG: return "configuration error";
    case ERR_IO: return "I/O error";
    case ERR_FORMAT: return "malformed file";
    case ERR_NOMEM: return "out of memory";
    case ERR_UNSUPPORTED: return "unsupported on this machine";
    default: return "internal error";
  }
}
