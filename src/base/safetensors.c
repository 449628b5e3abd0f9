/* safetensors writer (atomic, header built by hand so offsets stay exact
 * 64-bit integers) and validating reader (cJSON for the header, pread for the
 * data). The format is little-endian; so are all hosts fivefold targets. */
#include "base/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

static const struct {
  const char *name;
  size_t size;
} dtype_table[ST_NUM_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1},    [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},     [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2}, [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},    [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4},   [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},      [ST_I64] = {"I64", 8}, [ST_U64] = {"U64", 8},
};

const char *safetensors_dtype_name(SafetensorsDtype dtype) {
  return (unsigned)dtype < ST_NUM_DTYPES ? dtype_table[dtype].name : "?";
}

size_t safetensors_dtype_size(SafetensorsDtype dtype) {
  return (unsigned)dtype < ST_NUM_DTYPES ? dtype_table[dtype].size : 0;
}

int safetensors_dtype_from_name(const char *name, SafetensorsDtype *dtype) {
  for (int i = 0; i < ST_NUM_DTYPES; i++) {
    if (strcmp(name, dtype_table[i].name) == 0) {
      *dtype = (SafetensorsDtype)i;
      return 0;
    }
  }
  return -1;
}

const char *safetensors_shape_str(int ndim, const int64_t *shape, char *buf, size_t buf_size) {
  size_t used = 0;
  if (buf_size == 0) return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, buf_size, "[");
  for (int i = 0; i < ndim && used < buf_size; i++)
    used += (size_t)snprintf(buf + used, buf_size - used, "%s%" PRId64, i ? ", " : "", shape[i]);
  if (used < buf_size) snprintf(buf + used, buf_size - used, "]");
  return buf;
}

/* numel and nbytes of a shape, or -1 on a negative dim or 64-bit overflow. */
static int shape_sizes(int ndim, const int64_t *shape, size_t esize, uint64_t *numel, uint64_t *nbytes) {
  uint64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    uint64_t d = (uint64_t)shape[i];
    if (d != 0 && n > UINT64_MAX / d) return -1;
    n *= d;
  }
  if (esize != 0 && n > UINT64_MAX / esize) return -1;
  *numel = n;
  *nbytes = n * esize;
  return 0;
}

/* ------------------------------------------------------------------ writer */

typedef struct WriterEntry {
  char *name;
  SafetensorsDtype dtype;
  int ndim;
  int64_t shape[SAFETENSORS_MAX_DIMS];
  uint64_t nbytes;
  const void *data;
} WriterEntry;

struct SafetensorsWriter {
  WriterEntry *entries;
  int num, cap;
  char **meta_keys, **meta_values;
  int num_meta, cap_meta;
};

SafetensorsWriter *safetensors_writer_new(void) { return calloc(1, sizeof(SafetensorsWriter)); }

void safetensors_writer_free(SafetensorsWriter *w) {
  if (!w) return;
  for (int i = 0; i < w->num; i++) free(w->entries[i].name);
  for (int i = 0; i < w->num_meta; i++) {
    free(w->meta_keys[i]);
    free(w->meta_values[i]);
  }
  free(w->entries);
  free(w->meta_keys);
  free(w->meta_values);
  free(w);
}

int safetensors_writer_add(SafetensorsWriter *w, const char *name, SafetensorsDtype dtype, int ndim,
                           const int64_t *shape, const void *data, Error *err) {
  if (!name || !name[0]) return error_set(err, ERR_ARG, "safetensors: tensor name is empty");
  if (strlen(name) >= SAFETENSORS_MAX_NAME)
    return error_set(err, ERR_ARG, "safetensors: tensor name '%.64s...' is longer than %d bytes", name,
                     SAFETENSORS_MAX_NAME - 1);
  if (strcmp(name, "__metadata__") == 0)
    return error_set(err, ERR_ARG, "safetensors: '__metadata__' is reserved and cannot name a tensor");
  if ((unsigned)dtype >= ST_NUM_DTYPES)
    return error_set(err, ERR_ARG, "safetensors: tensor '%s': unknown dtype %d", name, (int)dtype);
  if (ndim < 0 || ndim > SAFETENSORS_MAX_DIMS)
    return error_set(err, ERR_ARG, "safetensors: tensor '%s': %d dims (expected 0..%d)", name, ndim,
                     SAFETENSORS_MAX_DIMS);
  uint64_t numel, nbytes;
  if (shape_sizes(ndim, shape, safetensors_dtype_size(dtype), &numel, &nbytes) != 0) {
    char buf[160];
    return error_set(err, ERR_ARG, "safetensors: tensor '%s': shape %s has a negative dim or overflows", name,
                     safetensors_shape_str(ndim, shape, buf, sizeof buf));
  }
  for (int i = 0; i < w->num; i++)
    if (strcmp(w->entries[i].name, name) == 0)
      return error_set(err, ERR_ARG, "safetensors: tensor '%s' added twice", name);
  if (w->num == w->cap) {
    int cap = w->cap ? 2 * w->cap : 16;
    WriterEntry *e = realloc(w->entries, (size_t)cap * sizeof *e);
    if (!e) return error_set(err, ERR_NOMEM, "safetensors: out of memory adding tensor '%s'", name);
    w->entries = e;
    w->cap = cap;
  }
  WriterEntry *e = &w->entries[w->num];
  memset(e, 0, sizeof *e);
  e->name = strdup(name);
  if (!e->name) return error_set(err, ERR_NOMEM, "safetensors: out of memory adding tensor '%s'", name);
  e->dtype = dtype;
  e->ndim = ndim;
  for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
  e->nbytes = nbytes;
  e->data = data;
  w->num++;
  return 0;
}

int safetensors_writer_add_f32(SafetensorsWriter *w, const char *name, int ndim, const int *shape,
                               const float *data, Error *err) {
  int64_t s64[SAFETENSORS_MAX_DIMS];
  if (ndim < 0 || ndim > SAFETENSORS_MAX_DIMS)
    return error_set(err, ERR_ARG, "safetensors: tensor '%s': %d dims (expected 0..%d)", name ? name : "?",
                     ndim, SAFETENSORS_MAX_DIMS);
  for (int i = 0; i < ndim; i++) s64[i] = shape[i];
  return safetensors_writer_add(w, name, ST_F32, ndim, s64, data, err);
}

int safetensors_writer_set_metadata(SafetensorsWriter *w, const char *key, const char *value, Error *err) {
  if (!key || !value) return error_set(err, ERR_ARG, "safetensors: metadata key and value must be non-NULL");
  char *v = strdup(value);
  if (!v) return error_set(err, ERR_NOMEM, "safetensors: out of memory setting metadata '%s'", key);
  for (int i = 0; i < w->num_meta; i++) {
    if (strcmp(w->meta_keys[i], key) == 0) {
      free(w->meta_values[i]);
      w->meta_values[i] = v;
      return 0;
    }
  }
  if (w->num_meta == w->cap_meta) {
    int cap = w->cap_meta ? 2 * w->cap_meta : 8;
    char **k = realloc(w->meta_keys, (size_t)cap * sizeof *k);
    if (k) w->meta_keys = k;
    char **vs = realloc(w->meta_values, (size_t)cap * sizeof *vs);
    if (vs) w->meta_values = vs;
    if (!k || !vs) {
      free(v);
      return error_set(err, ERR_NOMEM, "safetensors: out of memory setting metadata '%s'", key);
    }
    w->cap_meta = cap;
  }
  w->meta_keys[w->num_meta] = strdup(key);
  if (!w->meta_keys[w->num_meta]) {
    free(v);
    return error_set(err, ERR_NOMEM, "safetensors: out of memory setting metadata '%s'", key);
  }
  w->meta_values[w->num_meta++] = v;
  return 0;
}

/* Growable string for the header. */
typedef struct StrBuf {
  char *p;
  size_t len, cap;
  int oom;
} StrBuf;

static void sb_append(StrBuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(StrBuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_append(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_json_string(StrBuf *b, const char *s) {
  sb_append(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') {
      char esc[2] = {'\\', (char)*c};
      sb_append(b, esc, 2);
    } else if (*c < 0x20) {
      sb_printf(b, "\\u%04x", *c);
    } else {
      sb_append(b, (const char *)c, 1);
    }
  }
  sb_append(b, "\"", 1);
}

/* Data order: larger elements first (stable), so every tensor starts at a
 * multiple of its element size and memory-mapping readers get aligned data. */
static void data_order(const SafetensorsWriter *w, int *order) {
  int k = 0;
  for (size_t es = 8; es >= 1; es /= 2)
    for (int i = 0; i < w->num; i++)
      if (safetensors_dtype_size(w->entries[i].dtype) == es) order[k++] = i;
}

int safetensors_writer_layout(const SafetensorsWriter *w, char **header, size_t *header_bytes,
                              uint64_t *file_offsets, uint64_t *total_bytes, Error *err) {
  *header = NULL;
  *header_bytes = 0;
  int *order = malloc((size_t)(w->num ? w->num : 1) * sizeof *order);
  uint64_t *begin = malloc((size_t)(w->num ? w->num : 1) * sizeof *begin);
  if (!order || !begin) {
    free(order);
    free(begin);
    return error_set(err, ERR_NOMEM, "safetensors: out of memory building the header");
  }
  data_order(w, order);
  uint64_t pos = 0;
  for (int k = 0; k < w->num; k++) {
    begin[order[k]] = pos;
    pos += w->entries[order[k]].nbytes;
  }
  uint64_t data_bytes = pos;

  StrBuf b = {0};
  sb_append(&b, "        {", 9); /* room for the length prefix */
  int first = 1;
  if (w->num_meta > 0) {
    sb_append(&b, "\"__metadata__\":{", 16);
    for (int i = 0; i < w->num_meta; i++) {
      if (i) sb_append(&b, ",", 1);
      sb_json_string(&b, w->meta_keys[i]);
      sb_append(&b, ":", 1);
      sb_json_string(&b, w->meta_values[i]);
    }
    sb_append(&b, "}", 1);
    first = 0;
  }
  for (int i = 0; i < w->num; i++) {
    const WriterEntry *e = &w->entries[i];
    if (!first) sb_append(&b, ",", 1);
    first = 0;
    sb_json_string(&b, e->name);
    sb_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", safetensors_dtype_name(e->dtype));
    for (int d = 0; d < e->ndim; d++) sb_printf(&b, "%s%" PRId64, d ? "," : "", e->shape[d]);
    sb_printf(&b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", begin[i], begin[i] + e->nbytes);
  }
  sb_append(&b, "}", 1);
  while (!b.oom && b.len % 8 != 0) sb_append(&b, " ", 1);
  if (b.oom) {
    free(b.p);
    free(order);
    free(begin);
    return error_set(err, ERR_NOMEM, "safetensors: out of memory building the header");
  }
  uint64_t json_len = b.len - 8;
  for (int i = 0; i < 8; i++) b.p[i] = (char)((json_len >> (8 * i)) & 0xff);
  if (file_offsets)
    for (int i = 0; i < w->num; i++) file_offsets[i] = b.len + begin[i];
  if (total_bytes) *total_bytes = b.len + data_bytes;
  *header = b.p;
  *header_bytes = b.len;
  free(order);
  free(begin);
  return 0;
}

static int write_all(int fd, const void *buf, uint64_t n) {
  const char *p = buf;
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
    ssize_t k = write(fd, p, chunk);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += k;
    n -= (uint64_t)k;
  }
  return 0;
}

/* Makes the rename durable: the directory entry lives in the directory. */
static int fsync_parent_dir(const char *path) {
  char *dir = strdup(path);
  if (!dir) return -1;
  char *slash = strrchr(dir, '/');
  const char *d = ".";
  if (slash == dir) {
    d = "/";
  } else if (slash) {
    *slash = '\0';
    d = dir;
  }
  int fd = open(d, O_RDONLY | O_DIRECTORY);
  int rc = -1;
  if (fd >= 0) {
    rc = fsync(fd);
    close(fd);
  }
  free(dir);
  return rc;
}

int safetensors_writer_write(const SafetensorsWriter *w, const char *path, Error *err) {
  for (int i = 0; i < w->num; i++)
    if (!w->entries[i].data && w->entries[i].nbytes > 0)
      return error_set(err, ERR_ARG, "safetensors: writing %s: tensor '%s' has no data", path,
                       w->entries[i].name);
  char *header = NULL;
  size_t header_bytes = 0;
  int rc = safetensors_writer_layout(w, &header, &header_bytes, NULL, NULL, err);
  if (rc) return error_wrap(err, "writing %s", path);
  int *order = malloc((size_t)(w->num ? w->num : 1) * sizeof *order);
  size_t tmp_len = strlen(path) + 5;
  char *tmp = malloc(tmp_len);
  if (!order || !tmp) {
    free(header);
    free(order);
    free(tmp);
    return error_set(err, ERR_NOMEM, "safetensors: out of memory writing %s", path);
  }
  snprintf(tmp, tmp_len, "%s.tmp", path);
  data_order(w, order);

  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    rc = error_set(err, ERR_IO, "safetensors: cannot create %s: %s", tmp, error_errno_text(errno));
    goto done;
  }
  if (write_all(fd, header, header_bytes) != 0) goto write_failed;
  for (int k = 0; k < w->num; k++) {
    const WriterEntry *e = &w->entries[order[k]];
    if (write_all(fd, e->data, e->nbytes) != 0) goto write_failed;
  }
  if (fsync(fd) != 0) goto write_failed;
  if (close(fd) != 0) {
    fd = -1;
    goto write_failed;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    rc = error_set(err, ERR_IO, "safetensors: cannot rename %s to %s: %s", tmp, path, error_errno_text(errno));
    unlink(tmp);
    goto done;
  }
  if (fsync_parent_dir(path) != 0) {
    rc = error_set(err, ERR_IO, "safetensors: wrote %s but could not sync its directory: %s", path,
                   error_errno_text(errno));
    goto done;
  }
  rc = 0;
  goto done;

write_failed:
  rc = error_set(err, ERR_IO, "safetensors: writing %s failed: %s (is the disk full?)", tmp, error_errno_text(errno));
  if (fd >= 0) close(fd);
  unlink(tmp);
done:
  free(header);
  free(order);
  free(tmp);
  return rc;
}

/* ------------------------------------------------------------------ reader */

struct SafetensorsReader {
  char *path;
  int fd;
  uint64_t file_size;
  uint64_t data_start; /* 8 + header length */
  uint64_t data_size;
  SafetensorsTensorInfo *tensors;
  int num_tensors;
  struct NameKey *by_name; /* sorted by name, for binary search */
  char **meta_keys, **meta_values;
  int num_meta;
};

static int read_exact_at(int fd, void *dst, uint64_t n, uint64_t offset) {
  char *p = dst;
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
    ssize_t k = pread(fd, p, chunk, (off_t)offset);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (k == 0) {
      errno = EIO; /* the file shrank under us */
      return -1;
    }
    p += k;
    n -= (uint64_t)k;
    offset += (uint64_t)k;
  }
  return 0;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item)) return -1;
  double d = item->valuedouble;
  if (!(d >= 0.0) || d > 9007199254740992.0 || floor(d) != d) return -1;
  *out = (uint64_t)d;
  return 0;
}

/* Sort keys carry what they compare, so no global context is needed (readers
 * may be opened from several threads). */
typedef struct NameKey {
  const char *name;
  int index;
} NameKey;
typedef struct OffsetKey {
  uint64_t begin, end;
  int index;
} OffsetKey;

static int cmp_name_key(const void *a, const void *b) {
  return strcmp(((const NameKey *)a)->name, ((const NameKey *)b)->name);
}
static int cmp_offset_key(const void *a, const void *b) {
  const OffsetKey *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int parse_metadata(SafetensorsReader *r, const cJSON *meta, Error *err) {
  if (!cJSON_IsObject(meta))
    return error_set(err, ERR_FORMAT, "%s: \"__metadata__\" must be an object of strings", r->path);
  int n = cJSON_GetArraySize(meta);
  r->meta_keys = calloc((size_t)(n ? n : 1), sizeof(char *));
  r->meta_values = calloc((size_t)(n ? n : 1), sizeof(char *));
  if (!r->meta_keys || !r->meta_values) return error_set(err, ERR_NOMEM, "%s: out of memory", r->path);
  for (const cJSON *it = meta->child; it; it = it->next) {
    if (!cJSON_IsString(it))
      return error_set(err, ERR_FORMAT, "%s: metadata entry '%s' must be a string", r->path, it->string);
    r->meta_keys[r->num_meta] = strdup(it->string);
    r->meta_values[r->num_meta] = strdup(it->valuestring);
    r->num_meta++;
    if (!r->meta_keys[r->num_meta - 1] || !r->meta_values[r->num_meta - 1])
      return error_set(err, ERR_NOMEM, "%s: out of memory", r->path);
  }
  return 0;
}

static int parse_tensor(SafetensorsReader *r, const cJSON *item, SafetensorsTensorInfo *t, Error *err) {
  const char *name = item->string;
  if (!name[0]) return error_set(err, ERR_FORMAT, "%s: a tensor has an empty name", r->path);
  if (strlen(name) >= SAFETENSORS_MAX_NAME)
    return error_set(err, ERR_FORMAT, "%s: tensor name '%.64s...' is longer than %d bytes", r->path, name,
                     SAFETENSORS_MAX_NAME - 1);
  strcpy(t->name, name);
  if (!cJSON_IsObject(item))
    return error_set(err, ERR_FORMAT,
                     "%s: tensor '%s': expected an object with dtype, shape and data_offsets", r->path, name);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dtype))
    return error_set(err, ERR_FORMAT, "%s: tensor '%s': \"dtype\" missing or not a string", r->path, name);
  if (safetensors_dtype_from_name(dtype->valuestring, &t->dtype) != 0)
    return error_set(err, ERR_FORMAT,
                     "%s: tensor '%s': unknown dtype \"%s\" (expected F32, F16, BF16, F64, I8..I64, U8..U64, "
                     "BOOL, F8_E5M2 or F8_E4M3)",
                     r->path, name, dtype->valuestring);
  if (!cJSON_IsArray(shape))
    return error_set(err, ERR_FORMAT, "%s: tensor '%s': \"shape\" missing or not an array", r->path, name);
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > SAFETENSORS_MAX_DIMS)
    return error_set(err, ERR_FORMAT, "%s: tensor '%s': %d dims (at most %d supported)", r->path, name, ndim,
                     SAFETENSORS_MAX_DIMS);
  t->ndim = ndim;
  int d = 0;
  for (const cJSON *it = shape->child; it; it = it->next, d++) {
    uint64_t v;
    if (json_uint(it, &v) != 0 || v > (uint64_t)INT64_MAX)
      return error_set(err, ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", r->path,
                       name, d);
    t->shape[d] = (int64_t)v;
  }
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
      json_uint(offsets->child, &t->data_begin) != 0 || json_uint(offsets->child->next, &t->data_end) != 0)
    return error_set(err, ERR_FORMAT,
                     "%s: tensor '%s': \"data_offsets\" must be [begin, end] with non-negative integers",
                     r->path, name);
  char sbuf[160];
  if (shape_sizes(t->ndim, t->shape, safetensors_dtype_size(t->dtype), &t->numel, &t->nbytes) != 0)
    return error_set(err, ERR_FORMAT, "%s: tensor '%s': shape %s overflows 64 bits", r->path, name,
                     safetensors_shape_str(t->ndim, t->shape, sbuf, sizeof sbuf));
  if (t->data_end < t->data_begin)
    return error_set(err, ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                     r->path, name, t->data_begin, t->data_end);
  if (t->data_end - t->data_begin != t->nbytes)
    return error_set(err, ERR_FORMAT,
                     "%s: tensor '%s': dtype %s and shape %s need %" PRIu64 " bytes but data_offsets [%" PRIu64
                     ", %" PRIu64 "] span %" PRIu64,
                     r->path, name, safetensors_dtype_name(t->dtype),
                     safetensors_shape_str(t->ndim, t->shape, sbuf, sizeof sbuf), t->nbytes, t->data_begin,
                     t->data_end, t->data_end - t->data_begin);
  if (t->data_end > r->data_size)
    return error_set(err, ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of the data section (%" PRIu64
                     " bytes): the file is truncated or its header is corrupt",
                     r->path, name, t->data_begin, t->data_end, r->data_size);
  return 0;
}

/* The data section must be tiled exactly: no overlaps, gaps or trailing bytes. */
static int check_tiling(SafetensorsReader *r, Error *err) {
  int n = r->num_tensors;
  OffsetKey *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  if (!order) return error_set(err, ERR_NOMEM, "%s: out of memory", r->path);
  for (int i = 0; i < n; i++) order[i] = (OffsetKey){r->tensors[i].data_begin, r->tensors[i].data_end, i};
  qsort(order, (size_t)n, sizeof *order, cmp_offset_key);
  uint64_t covered = 0;
  const char *prev = NULL;
  int rc = 0;
  for (int k = 0; k < n && rc == 0; k++) {
    const SafetensorsTensorInfo *t = &r->tensors[order[k].index];
    if (t->data_begin < covered)
      rc = error_set(err, ERR_FORMAT, "%s: tensor '%s' (bytes %" PRIu64 "..%" PRIu64 ") overlaps tensor '%s'",
                     r->path, t->name, t->data_begin, t->data_end, prev);
    else if (t->data_begin > covered)
      rc = error_set(err, ERR_FORMAT,
                     "%s: tensor '%s' starts at byte %" PRIu64 " but the previous tensor%s%s%s ends at %" PRIu64
                     " (tensors must be contiguous)",
                     r->path, t->name, t->data_begin, prev ? " '" : "", prev ? prev : "", prev ? "'" : "",
                     covered);
    if (t->data_end > covered) {
      covered = t->data_end;
      prev = t->name;
    }
  }
  if (rc == 0 && covered != r->data_size)
    rc = error_set(err, ERR_FORMAT,
                   "%s: the data section has %" PRIu64 " bytes but the tensors cover %" PRIu64
                   " (trailing garbage or a corrupt header)",
                   r->path, r->data_size, covered);
  free(order);
  return rc;
}

static int parse_header(SafetensorsReader *r, const char *json, size_t len, Error *err) {
  if (len < 2 || json[0] != '{')
    return error_set(err, ERR_FORMAT, "%s: the header does not start with '{': not a safetensors file?", r->path);
  if (memchr(json, '\0', len))
    return error_set(err, ERR_FORMAT, "%s: the header contains a NUL byte: corrupt file", r->path);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long pos = (at && at >= json && at <= json + len) ? (long)(at - json) : -1;
    return error_set(err, ERR_FORMAT, "%s: the JSON header (%zu bytes) does not parse (near byte %ld)", r->path,
                     len, pos);
  }
  int rc = 0;
  for (const char *p = end; p < json + len; p++) {
    if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
      rc = error_set(err, ERR_FORMAT, "%s: unexpected bytes after the JSON header at byte %ld", r->path,
                     (long)(p - json));
      goto out;
    }
  }
  if (!cJSON_IsObject(root)) {
    rc = error_set(err, ERR_FORMAT, "%s: the JSON header is not an object", r->path);
    goto out;
  }
  int n = cJSON_GetArraySize(root);
  r->tensors = calloc((size_t)(n ? n : 1), sizeof *r->tensors);
  if (!r->tensors) {
    rc = error_set(err, ERR_NOMEM, "%s: out of memory for %d tensors", r->path, n);
    goto out;
  }
  int seen_meta = 0;
  for (const cJSON *it = root->child; it && rc == 0; it = it->next) {
    if (strcmp(it->string, "__metadata__") == 0) {
      if (seen_meta++) rc = error_set(err, ERR_FORMAT, "%s: \"__metadata__\" appears twice", r->path);
      else rc = parse_metadata(r, it, err);
    } else {
      rc = parse_tensor(r, it, &r->tensors[r->num_tensors], err);
      if (rc == 0) r->num_tensors++;
    }
  }
  if (rc) goto out;
  r->by_name = malloc((size_t)(r->num_tensors ? r->num_tensors : 1) * sizeof *r->by_name);
  if (!r->by_name) {
    rc = error_set(err, ERR_NOMEM, "%s: out of memory", r->path);
    goto out;
  }
  for (int i = 0; i < r->num_tensors; i++) r->by_name[i] = (NameKey){r->tensors[i].name, i};
  qsort(r->by_name, (size_t)r->num_tensors, sizeof *r->by_name, cmp_name_key);
  for (int i = 1; i < r->num_tensors; i++) {
    const char *a = r->by_name[i - 1].name, *b = r->by_name[i].name;
    if (strcmp(a, b) == 0) {
      rc = error_set(err, ERR_FORMAT, "%s: tensor '%s' appears twice in the header", r->path, a);
      goto out;
    }
  }
  rc = check_tiling(r, err);
out:
  cJSON_Delete(root);
  return rc;
}

int safetensors_open(SafetensorsReader **out, const char *path, Error *err) {
  *out = NULL;
  SafetensorsReader *r = calloc(1, sizeof *r);
  if (!r) return error_set(err, ERR_NOMEM, "safetensors: out of memory opening %s", path);
  r->fd = -1;
  r->path = strdup(path);
  char *json = NULL;
  int rc = 0;
  if (!r->path) {
    rc = error_set(err, ERR_NOMEM, "safetensors: out of memory opening %s", path);
    goto fail;
  }
  r->fd = open(path, O_RDONLY);
  if (r->fd < 0) {
    rc = error_set(err, ERR_IO, "cannot open %s: %s", path, error_errno_text(errno));
    goto fail;
  }
  struct stat st;
  if (fstat(r->fd, &st) != 0) {
    rc = error_set(err, ERR_IO, "cannot stat %s: %s", path, error_errno_text(errno));
    goto fail;
  }
  r->file_size = (uint64_t)st.st_size;
  if (r->file_size < 8) {
    rc = error_set(err, ERR_FORMAT, "%s: %" PRIu64 " bytes, too short for the 8-byte header length: truncated?",
                   path, r->file_size);
    goto fail;
  }
  unsigned char lenbuf[8];
  if (read_exact_at(r->fd, lenbuf, 8, 0) != 0) {
    rc = error_set(err, ERR_IO, "cannot read %s: %s", path, error_errno_text(errno));
    goto fail;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenbuf[i];
  if (hlen > SAFETENSORS_MAX_HEADER_BYTES) {
    rc = error_set(err, ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the %u-byte limit: corrupt file", path,
                   hlen, SAFETENSORS_MAX_HEADER_BYTES);
    goto fail;
  }
  if (hlen > r->file_size - 8) {
    rc = error_set(err, ERR_FORMAT,
                   "%s: header length says %" PRIu64 " bytes but only %" PRIu64
                   " follow the length prefix: truncated or corrupt",
                   path, hlen, r->file_size - 8);
    goto fail;
  }
  r->data_start = 8 + hlen;
  r->data_size = r->file_size - r->data_start;
  json = malloc(hlen ? hlen : 1);
  if (!json) {
    rc = error_set(err, ERR_NOMEM, "%s: out of memory for a %" PRIu64 "-byte header", path, hlen);
    goto fail;
  }
  if (read_exact_at(r->fd, json, hlen, 8) != 0) {
    rc = error_set(err, ERR_IO, "cannot read the header of %s: %s", path, error_errno_text(errno));
    goto fail;
  }
  rc = parse_header(r, json, hlen, err);
  if (rc) goto fail;
  free(json);
  *out = r;
  return 0;
fail:
  free(json);
  safetensors_close(r);
  return rc;
}

void safetensors_close(SafetensorsReader *r) {
  if (!r) return;
  if (r->fd >= 0) close(r->fd);
  for (int i = 0; i < r->num_meta; i++) {
    free(r->meta_keys[i]);
    free(r->meta_values[i]);
  }
  free(r->meta_keys);
  free(r->meta_values);
  free(r->tensors);
  free(r->by_name);
  free(r->path);
  free(r);
}

const char *safetensors_path(const SafetensorsReader *r) { return r->path; }
int safetensors_num_tensors(const SafetensorsReader *r) { return r->num_tensors; }

const SafetensorsTensorInfo *safetensors_tensor_at(const SafetensorsReader *r, int i) {
  return (i >= 0 && i < r->num_tensors) ? &r->tensors[i] : NULL;
}

const SafetensorsTensorInfo *safetensors_find(const SafetensorsReader *r, const char *name) {
  int lo = 0, hi = r->num_tensors - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    const SafetensorsTensorInfo *t = &r->tensors[r->by_name[mid].index];
    int c = strcmp(name, t->name);
    if (c == 0) return t;
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return NULL;
}

int safetensors_num_metadata(const SafetensorsReader *r) { return r->num_meta; }

void safetensors_metadata_at(const SafetensorsReader *r, int i, const char **key, const char **value) {
  int ok = i >= 0 && i < r->num_meta;
  if (key) *key = ok ? r->meta_keys[i] : NULL;
  if (value) *value = ok ? r->meta_values[i] : NULL;
}

const char *safetensors_metadata_get(const SafetensorsReader *r, const char *key) {
  for (int i = 0; i < r->num_meta; i++)
    if (strcmp(r->meta_keys[i], key) == 0) return r->meta_values[i];
  return NULL;
}

static int lookup(const SafetensorsReader *r, const char *name, SafetensorsDtype expect_dtype,
                  const SafetensorsTensorInfo **out, Error *err) {
  const SafetensorsTensorInfo *t = safetensors_find(r, name);
  if (!t) return error_set(err, ERR_FORMAT, "%s: no tensor named '%s'", r->path, name);
  if (t->dtype != expect_dtype)
    return error_set(err, ERR_FORMAT, "%s: tensor '%s' is %s, expected %s", r->path, name,
                     safetensors_dtype_name(t->dtype), safetensors_dtype_name(expect_dtype));
  *out = t;
  return 0;
}

int safetensors_read_range(const SafetensorsReader *r, const char *name, SafetensorsDtype expect_dtype,
                           uint64_t first, uint64_t count, void *dst, size_t dst_bytes, Error *err) {
  const SafetensorsTensorInfo *t = NULL;
  int rc = lookup(r, name, expect_dtype, &t, err);
  if (rc) return rc;
  if (first > t->numel || count > t->numel - first)
    return error_set(err, ERR_ARG,
                     "%s: tensor '%s': elements [%" PRIu64 ", %" PRIu64 ") requested but it has %" PRIu64,
                     r->path, name, first, first + count, t->numel);
  size_t es = safetensors_dtype_size(t->dtype);
  if (dst_bytes < count * es)
    return error_set(err, ERR_ARG, "%s: tensor '%s': %" PRIu64 " bytes to read into a %zu-byte buffer", r->path,
                     name, count * es, dst_bytes);
  if (read_exact_at(r->fd, dst, count * es, r->data_start + t->data_begin + first * es) != 0)
    return error_set(err, ERR_IO, "%s: reading tensor '%s': %s", r->path, name, error_errno_text(errno));
  return 0;
}

int safetensors_read(const SafetensorsReader *r, const char *name, SafetensorsDtype expect_dtype, void *dst,
                     size_t dst_bytes, Error *err) {
  const SafetensorsTensorInfo *t = NULL;
  int rc = lookup(r, name, expect_dtype, &t, err);
  if (rc) return rc;
  return safetensors_read_range(r, name, expect_dtype, 0, t->numel, dst, dst_bytes, err);
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24); /* zero or subnormal */
    return sign ? -f : f;
  }
  uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
  memcpy(&f, &bits, 4);
  return f;
}

int safetensors_read_f32(const SafetensorsReader *r, const char *name, int ndim, const int64_t *shape,
                         float *dst, Error *err) {
  const SafetensorsTensorInfo *t = safetensors_find(r, name);
  if (!t) return error_set(err, ERR_FORMAT, "%s: no tensor named '%s'", r->path, name);
  int same = t->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char a[160], b[160];
    return error_set(err, ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", r->path, name,
                     safetensors_shape_str(t->ndim, t->shape, a, sizeof a),
                     safetensors_shape_str(ndim, shape, b, sizeof b));
  }
  if (t->dtype == ST_F32) return safetensors_read(r, name, ST_F32, dst, t->nbytes, err);
  if (t->dtype != ST_F64 && t->dtype != ST_F16 && t->dtype != ST_BF16)
    return error_set(err, ERR_FORMAT, "%s: tensor '%s' is %s, expected a floating-point dtype", r->path, name,
                     safetensors_dtype_name(t->dtype));
  void *tmp = malloc(t->nbytes ? t->nbytes : 1);
  if (!tmp) return error_set(err, ERR_NOMEM, "%s: out of memory reading tensor '%s'", r->path, name);
  int rc = safetensors_read(r, name, t->dtype, tmp, t->nbytes, err);
  if (rc == 0) {
    for (uint64_t i = 0; i < t->numel; i++) {
      if (t->dtype == ST_F64) {
        dst[i] = (float)((const double *)tmp)[i];
      } else if (t->dtype == ST_F16) {
        dst[i] = half_to_float(((const uint16_t *)tmp)[i]);
      } else {
        uint32_t bits = (uint32_t)((const uint16_t *)tmp)[i] << 16;
        memcpy(&dst[i], &bits, 4);
      }
    }
  }
  free(tmp);
  return rc;
}
