/* safetensors files: the tensor container used for checkpoints, reference
 * dumps and exported models.
 *
 * Layout: u64 little-endian N | N bytes of JSON header | data section.
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (byte offsets into the data section) and may carry
 * "__metadata__": {string: string}. The header is padded with spaces so the
 * data section starts at a multiple of 8 bytes.
 *
 * Writer: collect tensors (name, dtype, shape, pointer to host data) and
 * metadata, then write the whole file atomically (PATH.tmp, fsync, rename,
 * fsync of the directory) so a crash never leaves a half-written file under
 * the final name. safetensors_writer_layout exposes the header bytes and each
 * tensor's absolute file offset without writing anything, so that several
 * processes can later write their own slices of one file (MPI-IO).
 *
 * Reader: opening validates everything that can be checked without reading
 * the data (sizes, JSON, dtypes, shapes against offsets, offsets inside the
 * data section, no overlaps or gaps), so later reads can trust the index.
 * Reads go straight from the file into a caller buffer, whole tensors or a
 * contiguous element range (a row block of a sharded tensor). */
#ifndef FIVEFOLD_BASE_SAFETENSORS_H
#define FIVEFOLD_BASE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_NAME 256
/* Same cap as the reference implementation: a bigger header is corruption. */
#define SAFETENSORS_MAX_HEADER_BYTES (100u * 1000u * 1000u)

typedef enum {
  ST_BOOL = 0,
  ST_U8,
  ST_I8,
  ST_F8_E5M2,
  ST_F8_E4M3,
  ST_I16,
  ST_U16,
  ST_F16,
  ST_BF16,
  ST_I32,
  ST_U32,
  ST_F32,
  ST_F64,
  ST_I64,
  ST_U64,
  ST_NUM_DTYPES
} SafetensorsDtype;

const char *safetensors_dtype_name(SafetensorsDtype dtype); /* "F32", ... */
size_t safetensors_dtype_size(SafetensorsDtype dtype);      /* bytes per element */
/* Returns 0 and sets *dtype, or -1 for an unknown name. */
int safetensors_dtype_from_name(const char *name, SafetensorsDtype *dtype);

typedef struct SafetensorsTensorInfo {
  char name[SAFETENSORS_MAX_NAME];
  SafetensorsDtype dtype;
  int ndim; /* 0 for a scalar */
  int64_t shape[SAFETENSORS_MAX_DIMS];
  uint64_t numel;
  uint64_t nbytes;
  uint64_t data_begin; /* byte offsets into the data section, as in the header */
  uint64_t data_end;
} SafetensorsTensorInfo;

/* ---- writer ---- */

typedef struct SafetensorsWriter SafetensorsWriter;

SafetensorsWriter *safetensors_writer_new(void); /* NULL when out of memory */
void safetensors_writer_free(SafetensorsWriter *w);

/* Registers a tensor. `data` must stay valid until the file is written and
 * hold numel * dtype_size bytes (it may be NULL for a layout-only writer).
 * Names must be unique, non-empty, shorter than SAFETENSORS_MAX_NAME and not
 * "__metadata__". */
int safetensors_writer_add(SafetensorsWriter *w, const char *name, SafetensorsDtype dtype, int ndim,
                           const int64_t *shape, const void *data, Error *err);

/* Convenience for the common case of float32 tensors with int shapes. */
int safetensors_writer_add_f32(SafetensorsWriter *w, const char *name, int ndim, const int *shape,
                               const float *data, Error *err);

/* Adds or replaces one "__metadata__" entry (strings are copied). */
int safetensors_writer_set_metadata(SafetensorsWriter *w, const char *key, const char *value, Error *err);

/* Builds the header (padding included) and the absolute file offset of each
 * tensor's first byte, in the order tensors were added. *header (malloc'd,
 * caller frees) receives the 8-byte length prefix followed by the JSON, so
 * its length is also where the data section starts. file_offsets may be
 * NULL; *total_bytes (may be NULL) receives the size of the whole file. */
int safetensors_writer_layout(const SafetensorsWriter *w, char **header, size_t *header_bytes,
                              uint64_t *file_offsets, uint64_t *total_bytes, Error *err);

/* Writes the file atomically; every tensor must have data. */
int safetensors_writer_write(const SafetensorsWriter *w, const char *path, Error *err);

/* ---- reader ---- */

typedef struct SafetensorsReader SafetensorsReader;

int safetensors_open(SafetensorsReader **r, const char *path, Error *err);
void safetensors_close(SafetensorsReader *r);

const char *safetensors_path(const SafetensorsReader *r);
int safetensors_num_tensors(const SafetensorsReader *r);
/* Tensors in header order (the order of the JSON object). */
const SafetensorsTensorInfo *safetensors_tensor_at(const SafetensorsReader *r, int i);
/* NULL when absent. */
const SafetensorsTensorInfo *safetensors_find(const SafetensorsReader *r, const char *name);

int safetensors_num_metadata(const SafetensorsReader *r);
/* Key and value of entry i (pointers live as long as the reader). */
void safetensors_metadata_at(const SafetensorsReader *r, int i, const char **key, const char **value);
/* NULL when absent. */
const char *safetensors_metadata_get(const SafetensorsReader *r, const char *key);

/* Reads a whole tensor in its stored dtype into dst (dst_bytes must be at
 * least its nbytes). Fails with a message naming the file and tensor when the
 * tensor is absent, the dtype differs from `expect_dtype`, or the buffer is
 * too small. */
int safetensors_read(const SafetensorsReader *r, const char *name, SafetensorsDtype expect_dtype, void *dst,
                     size_t dst_bytes, Error *err);

/* Reads elements [first, first + count) of the flattened tensor. */
int safetensors_read_range(const SafetensorsReader *r, const char *name, SafetensorsDtype expect_dtype,
                           uint64_t first, uint64_t count, void *dst, size_t dst_bytes, Error *err);

/* Reads a whole floating-point tensor (F32, F64, F16 or BF16) converted to
 * float32, checking that its shape is exactly `shape` (ndim dims). */
int safetensors_read_f32(const SafetensorsReader *r, const char *name, int ndim, const int64_t *shape,
                         float *dst, Error *err);

/* "[2, 3, 4]" into buf, for messages. */
const char *safetensors_shape_str(int ndim, const int64_t *shape, char *buf, size_t buf_size);

#endif
