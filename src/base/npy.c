/* .npy reader (base/npy.h): the header is a Python dict literal; only the
 * small subset NumPy itself writes is accepted (quoted keys, a quoted
 * descr, True/False, a tuple of non-negative integers), so a damaged
 * header is an error rather than a guess. */
#include "base/npy.h"

#include <stdlib.h>
#include <string.h>

#include "base/file_text.h"

/* Largest file read: a bound on what a corrupt header can make us
 * allocate (lfw_subset.npy is 1 MB). */
#define NPY_MAX_FILE_BYTES ((size_t)1 << 32)

typedef struct HeaderCursor {
  const char *p, *end;
} HeaderCursor;

static void skip_blanks(HeaderCursor *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static int accept(HeaderCursor *c, char ch) {
  skip_blanks(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

/* A quoted string ('...' or "...") into buf. */
static int quoted(HeaderCursor *c, char *buf, size_t cap) {
  skip_blanks(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
  const char q = *c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != q) {
    if (n + 1 >= cap) return -1;
    buf[n++] = *c->p++;
  }
  if (c->p >= c->end) return -1;
  c->p++;
  buf[n] = '\0';
  return 0;
}

static int parse_header(const char *name, const char *text, size_t len, NpyArray *out, Error *err) {
  HeaderCursor c = {text, text + len};
  int have_descr = 0, have_order = 0, have_shape = 0;
  if (!accept(&c, '{')) return error_set(err, ERR_FORMAT, "%s: header does not start with '{' (a dict)", name);
  while (!accept(&c, '}')) {
    char key[32];
    if (quoted(&c, key, sizeof key) || !accept(&c, ':'))
      return error_set(err, ERR_FORMAT, "%s: header: expected a quoted key and ':' at offset %td", name, c.p - text);
    if (!strcmp(key, "descr")) {
      if (quoted(&c, out->descr, sizeof out->descr))
        return error_set(err, ERR_FORMAT, "%s: header 'descr': expected a quoted type such as '<f8'", name);
      have_descr = 1;
    } else if (!strcmp(key, "fortran_order")) {
      skip_blanks(&c);
      if ((size_t)(c.end - c.p) >= 5 && !strncmp(c.p, "False", 5)) c.p += 5;
      else if ((size_t)(c.end - c.p) >= 4 && !strncmp(c.p, "True", 4))
        return error_set(err, ERR_FORMAT, "%s: header 'fortran_order' is True, expected False (C order)", name);
      else return error_set(err, ERR_FORMAT, "%s: header 'fortran_order': expected True or False", name);
      have_order = 1;
    } else if (!strcmp(key, "shape")) {
      if (!accept(&c, '(')) return error_set(err, ERR_FORMAT, "%s: header 'shape': expected a tuple", name);
      out->ndim = 0;
      while (!accept(&c, ')')) {
        skip_blanks(&c);
        if (c.p >= c.end || *c.p < '0' || *c.p > '9')
          return error_set(err, ERR_FORMAT, "%s: header 'shape': expected non-negative integers", name);
        if (out->ndim == NPY_MAX_DIMS)
          return error_set(err, ERR_FORMAT, "%s: header 'shape': more than %d dimensions", name, NPY_MAX_DIMS);
        int64_t v = 0;
        while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
          v = v * 10 + (*c.p++ - '0');
          if (v > ((int64_t)1 << 40))
            return error_set(err, ERR_FORMAT, "%s: header 'shape': dimension too large", name);
        }
        out->dims[out->ndim++] = v;
        if (!accept(&c, ',') && !(skip_blanks(&c), c.p < c.end && *c.p == ')'))
          return error_set(err, ERR_FORMAT, "%s: header 'shape': expected ',' or ')'", name);
      }
      have_shape = 1;
    } else {
      return error_set(err, ERR_FORMAT, "%s: header key '%s', expected only descr, fortran_order and shape", name, key);
    }
    if (!accept(&c, ',') && !(skip_blanks(&c), c.p < c.end && *c.p == '}'))
      return error_set(err, ERR_FORMAT, "%s: header: expected ',' or '}' after '%s'", name, key);
  }
  if (!have_descr || !have_order || !have_shape)
    return error_set(err, ERR_FORMAT, "%s: header lacks '%s'", name,
                     !have_descr   ? "descr"
                     : !have_order ? "fortran_order"
                                   : "shape");
  /* What follows the dict is padding: spaces and the closing newline. */
  while (c.p < c.end && (*c.p == ' ' || *c.p == '\n' || *c.p == '\0')) c.p++;
  if (c.p != c.end) return error_set(err, ERR_FORMAT, "%s: header: unexpected text after the dict", name);
  return 0;
}

int npy_decode_f32(const char *name, const unsigned char *bytes, size_t size, NpyArray *out, Error *err) {
  memset(out, 0, sizeof *out);
  static const unsigned char MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || memcmp(bytes, MAGIC, 6))
    return error_set(err, ERR_FORMAT, "%s: bad magic: expected \\x93NUMPY and a version (a .npy file)", name);
  const int major = bytes[6];
  if (major < 1 || major > 3)
    return error_set(err, ERR_FORMAT, "%s: format version %d.%d, expected 1.0, 2.0 or 3.0", name, bytes[6], bytes[7]);
  size_t header_len, data_at;
  if (major == 1) {
    header_len = (size_t)bytes[8] | (size_t)bytes[9] << 8, data_at = 10;
  } else {
    if (size < 12) return error_set(err, ERR_FORMAT, "%s: truncated: the file ends inside the header length", name);
    header_len = (size_t)bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 | (size_t)bytes[11] << 24;
    data_at = 12;
  }
  if (header_len > size - data_at)
    return error_set(err, ERR_FORMAT, "%s: truncated: the header needs %zu bytes, the file has %zu after the length",
                     name, header_len, size - data_at);
  int rc = parse_header(name, (const char *)bytes + data_at, header_len, out, err);
  if (rc) return rc;
  data_at += header_len;
  size_t item;
  if (!strcmp(out->descr, "<f8")) item = 8;
  else if (!strcmp(out->descr, "<f4")) item = 4;
  else if (!strcmp(out->descr, "|u1") || !strcmp(out->descr, "<u1")) item = 1;
  else
    return error_set(err, ERR_FORMAT, "%s: unsupported element type '%s', expected '<f8', '<f4' or '|u1'", name,
                     out->descr);
  size_t count = 1;
  for (int d = 0; d < out->ndim; d++) {
    if (out->dims[d] && count > NPY_MAX_FILE_BYTES / (size_t)out->dims[d])
      return error_set(err, ERR_FORMAT, "%s: shape has more than %zu elements", name, NPY_MAX_FILE_BYTES);
    count *= (size_t)out->dims[d];
  }
  if (size - data_at < count * item)
    return error_set(err, ERR_FORMAT, "%s: truncated: %zu data bytes, the shape and '%s' need %zu", name,
                     size - data_at, out->descr, count * item);
  if (size - data_at > count * item)
    return error_set(err, ERR_FORMAT, "%s: %zu trailing bytes after the data the shape describes", name,
                     size - data_at - count * item);
  out->count = count;
  out->data = malloc((count ? count : 1) * sizeof(float));
  if (!out->data) return error_set(err, ERR_NOMEM, "%s: out of memory for %zu values", name, count);
  const unsigned char *src = bytes + data_at;
  for (size_t i = 0; i < count; i++) {
    if (item == 8) {
      double v;
      memcpy(&v, src + 8 * i, 8); /* little-endian host (x86-64, aarch64) */
      out->data[i] = (float)v;
    } else if (item == 4) {
      memcpy(&out->data[i], src + 4 * i, 4);
    } else {
      out->data[i] = (float)src[i];
    }
  }
  return 0;
}

int npy_read_f32(const char *path, NpyArray *out, Error *err) {
  memset(out, 0, sizeof *out);
  char *bytes;
  size_t size;
  int rc = file_read_text(path, "npy file", NPY_MAX_FILE_BYTES, &bytes, &size, err);
  if (rc) return rc;
  rc = npy_decode_f32(path, (const unsigned char *)bytes, size, out, err);
  free(bytes);
  if (rc) npy_free(out);
  return rc;
}

void npy_free(NpyArray *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}
