/* Errors: every public function that can fail returns an int code (0 = ok)
 * and fills an Error with a message that says what was wrong and what to do.
 * Messages name the file and field involved when there is one. */
#ifndef FIVEFOLD_BASE_ERROR_H
#define FIVEFOLD_BASE_ERROR_H

enum {
  ERR_OK = 0,
  ERR_ARG,       /* bad argument or command-line flag */
  ERR_CONFIG,    /* malformed or inconsistent configuration */
  ERR_IO,        /* file could not be read or written */
  ERR_FORMAT,    /* file exists but its contents are malformed */
  ERR_NOMEM,     /* allocation failed */
  ERR_INTERNAL,  /* a bug: an invariant did not hold */
  ERR_UNSUPPORTED, /* this CPU or build cannot do what was asked (e.g. bf16 without AVX-512 BF16) */
};

typedef struct Error {
  int code;
  char msg[1024];
} Error;

/* Sets err (if non-NULL) and returns code, so callers can write
 * `return error_set(err, ERR_IO, "cannot open %s: %s", path, error_errno_text(errno));` */
int error_set(Error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the existing message with more context ("loading config X: ..."). */
int error_wrap(Error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *error_code_name(int code);

/* An errno value as its symbolic name and text, "ENOSPC: No space left on
 * device", for messages (the name is what one searches for, the text what
 * one reads). The string lives until the 8th later call on the same thread,
 * so several may appear in one message. */
const char *error_errno_text(int errnum);

#endif
