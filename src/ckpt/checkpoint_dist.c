/* Distributed checkpoints (checkpoint_dist.h): the slice list of each rank,
 * the MPI datatypes that place it in the files, the collective writes and
 * reads, and the agreement after each phase that keeps every rank's status
 * identical. The files themselves, the temporary directory and state.json
 * come from checkpoint_write.c / checkpoint_read.c, shared through
 * checkpoint_internal.h, so the bytes match a one-rank checkpoint_save. */
#include "ckpt/checkpoint_dist.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crc32.h"
#include "ckpt/checkpoint_internal.h"

/* ---- agreement ---- */

/* Collective: 0 when every rank passed rc == 0; otherwise the code and
 * message of the lowest failing rank, on every rank (others prefix it with
 * that rank), so all return the same status and none waits in a collective
 * the failing rank never enters. */
static int agree(const CommGroup *g, int rc, Error *err) {
  Error local = {0};
  if (!err) err = &local;
  int64_t first = rc ? g->rank : g->size;
  Error comm_err = {0};
  if (comm_allreduce_i64(g, &first, 1, COMM_MIN, NULL, &comm_err)) {
    *err = comm_err;
    return comm_err.code ? comm_err.code : ERR_INTERNAL;
  }
  if (first == g->size) return 0;
  struct {
    int code;
    char msg[sizeof err->msg];
  } packet;
  memset(&packet, 0, sizeof packet);
  if (g->rank == first) {
    packet.code = rc;
    snprintf(packet.msg, sizeof packet.msg, "%s", err->msg);
  }
  if (comm_bcast_bytes(g, (int)first, &packet, sizeof packet, NULL, &comm_err)) {
    *err = comm_err;
    return comm_err.code ? comm_err.code : ERR_INTERNAL;
  }
  if (g->rank != first) error_set(err, packet.code, "rank %d: %s", (int)first, packet.msg);
  return packet.code ? packet.code : ERR_INTERNAL;
}

/* ---- where a local tensor sits in its logical tensor ---- */

typedef struct SliceView {
  int ndim;
  int shape[4], start[4], count[4];
} SliceView;

static size_t shape_numel(int ndim, const int *shape) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
  return n;
}

/* The view of p inside the logical tensor g (same name), checked: a tensor
 * whose view fields are unset (view_ndim 0) is the whole tensor. */
static int slice_view(const NetParam *p, const NetParam *g, SliceView *v, Error *err) {
  if (p->view_ndim == 0) {
    v->ndim = g->ndim;
    for (int d = 0; d < g->ndim; d++) {
      v->shape[d] = v->count[d] = (int)g->shape[d];
      v->start[d] = 0;
    }
  } else {
    if (p->view_ndim < 1 || p->view_ndim > 4)
      return error_set(err, ERR_INTERNAL, "tensor '%s': view_ndim %d is outside 1..4", p->name, p->view_ndim);
    v->ndim = p->view_ndim;
    for (int d = 0; d < v->ndim; d++) {
      v->shape[d] = (int)p->view_shape[d];
      v->start[d] = (int)p->view_start[d];
      v->count[d] = (int)p->view_count[d];
      if (v->shape[d] < 1 || v->start[d] < 0 || v->count[d] < 0 || v->start[d] > v->shape[d] - v->count[d])
        return error_set(err, ERR_INTERNAL,
                         "tensor '%s': view dimension %d (start %d, count %d) does not fit in extent %d", p->name, d,
                         v->start[d], v->count[d], v->shape[d]);
    }
    int set = 0;
    for (int d = 0; d < NET_MAX_DIMS; d++) set |= p->logical_shape[d] != 0;
    for (int d = 0; set && d < g->ndim; d++)
      if (p->logical_shape[d] != g->shape[d])
        return error_set(err, ERR_CONFIG,
                         "tensor '%s': its global shape differs from the model's table in dimension %d (%lld, the "
                         "table says %lld)",
                         p->name, d, (long long)p->logical_shape[d], (long long)g->shape[d]);
  }
  if (shape_numel(v->ndim, v->shape) != g->numel)
    return error_set(err, ERR_INTERNAL, "tensor '%s': view of %zu elements, but the logical tensor has %zu", p->name,
                     shape_numel(v->ndim, v->shape), g->numel);
  if (shape_numel(v->ndim, v->count) != p->numel)
    return error_set(err, ERR_INTERNAL, "tensor '%s': view selects %zu elements, but the local tensor has %zu",
                     p->name, shape_numel(v->ndim, v->count), p->numel);
  if (p->numel > (size_t)INT_MAX)
    return error_set(err, ERR_CONFIG, "tensor '%s': %zu local elements exceed MPI-IO's int count (2^31 - 1)",
                     p->name, p->numel);
  return 0;
}

/* The logical tensor a local tensor stores: its own name, or the one it is
 * a copy of (embed.weight for the LM head's tied copy). */
static const char *logical_name(const NetParam *p) { return p->copy_of ? p->copy_of : p->name; }

static int find_global(const NetParam *g, int ng, const char *name) {
  for (int i = 0; i < ng; i++)
    if (!strcmp(g[i].name, name)) return i;
  return -1;
}

/* ---- slices and their datatypes ---- */

/* One contiguous local tensor and the part of the file it maps to. */
typedef struct Slice {
  MPI_Aint file_disp; /* byte offset of the logical tensor's first element */
  SliceView view;
  void *mem;
  int count; /* elements */
} Slice;

typedef struct SliceList {
  Slice *s;
  int n, cap;
} SliceList;

static int slices_add(SliceList *l, MPI_Aint file_disp, const SliceView *v, void *mem, size_t count, Error *err) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    Slice *grown = realloc(l->s, (size_t)cap * sizeof *grown);
    if (!grown) return error_set(err, ERR_NOMEM, "out of memory listing checkpoint slices");
    l->s = grown;
    l->cap = cap;
  }
  l->s[l->n++] = (Slice){.file_disp = file_disp, .view = *v, .mem = mem, .count = (int)count};
  return 0;
}

static int cmp_slice(const void *a, const void *b) {
  MPI_Aint x = ((const Slice *)a)->file_disp, y = ((const Slice *)b)->file_disp;
  return (x > y) - (x < y);
}

static int mpi_failed(int mpi_rc, const char *what, const char *path, Error *err) {
  if (mpi_rc == MPI_SUCCESS) return 0;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(mpi_rc, text, &len);
  return error_set(err, ERR_IO, "%s: %s failed: %s", path, what, text);
}

/* One collective call moves at most this much per rank: MPI-IO
 * implementations handle counts past 2 GiB unevenly, and the aggregation
 * buffers stay bounded. A single bigger slice goes alone. */
#define TRANSFER_BATCH_BYTES ((size_t)1 << 30)

static size_t transfer_batch_bytes(void) {
  const char *v = getenv(CHECKPOINT_DIST_BATCH_ENV);
  long long n = v ? atoll(v) : 0;
  return n > 0 ? (size_t)n : TRANSFER_BATCH_BYTES;
}

/* The file view of a batch of slices (a struct of subarrays, ascending in
 * the file as MPI requires) and its memory layout (absolute addresses, so
 * the parameters and both moment buffers can be one transfer). */
typedef struct SliceTypes {
  MPI_Datatype file, mem;
  long long elements;
} SliceTypes;

static void slice_types_free(SliceTypes *t) {
  if (t->file != MPI_DATATYPE_NULL) MPI_Type_free(&t->file);
  if (t->mem != MPI_DATATYPE_NULL) MPI_Type_free(&t->mem);
}

static int slice_types_build(const Slice *sl, int n, const char *path, SliceTypes *t, Error *err) {
  t->file = t->mem = MPI_DATATYPE_NULL;
  t->elements = 0;
  int rc = 0;
  MPI_Datatype *subs = malloc((size_t)n * sizeof *subs);
  MPI_Aint *fdisp = malloc((size_t)n * sizeof *fdisp), *maddr = malloc((size_t)n * sizeof *maddr);
  int *ones = malloc((size_t)n * sizeof *ones), *counts = malloc((size_t)n * sizeof *counts);
  if (!subs || !fdisp || !maddr || !ones || !counts) {
    rc = error_set(err, ERR_NOMEM, "out of memory describing the slices of %s", path);
    goto done;
  }
  int made = 0;
  for (int i = 0; i < n && !rc; i++) {
    const Slice *s = &sl[i];
    rc = mpi_failed(MPI_Type_create_subarray(s->view.ndim, s->view.shape, s->view.count, s->view.start,
                                             MPI_ORDER_C, MPI_FLOAT, &subs[i]),
                    "MPI_Type_create_subarray", path, err);
    if (rc) break;
    made++;
    fdisp[i] = s->file_disp;
    ones[i] = 1;
    counts[i] = s->count;
    t->elements += s->count;
    rc = mpi_failed(MPI_Get_address(s->mem, &maddr[i]), "MPI_Get_address", path, err);
  }
  if (!rc) rc = mpi_failed(MPI_Type_create_struct(n, ones, fdisp, subs, &t->file), "MPI_Type_create_struct", path, err);
  if (!rc) rc = mpi_failed(MPI_Type_commit(&t->file), "MPI_Type_commit", path, err);
  if (!rc)
    rc = mpi_failed(MPI_Type_create_hindexed(n, counts, maddr, MPI_FLOAT, &t->mem), "MPI_Type_create_hindexed",
                    path, err);
  if (!rc) rc = mpi_failed(MPI_Type_commit(&t->mem), "MPI_Type_commit", path, err);
  for (int i = 0; i < made; i++) MPI_Type_free(&subs[i]);
done:
  free(subs);
  free(fdisp);
  free(maddr);
  free(ones);
  free(counts);
  if (rc) slice_types_free(t);
  return rc;
}

/* Sorts the slices by file position, refuses overlaps (two local tensors
 * claiming one logical tensor), and cuts them into batches: batch_start
 * (n + 1 entries, malloc'd) holds where each begins. */
static int slice_batches(SliceList *l, const char *path, int **batch_start, int *num_batches, Error *err) {
  *batch_start = NULL;
  *num_batches = 0;
  if (l->n > 1) qsort(l->s, (size_t)l->n, sizeof *l->s, cmp_slice);
  for (int i = 1; i < l->n; i++)
    if (l->s[i].file_disp == l->s[i - 1].file_disp)
      return error_set(err, ERR_INTERNAL, "%s: two local tensors map to the tensor at byte %lld", path,
                       (long long)l->s[i].file_disp);
  int *start = malloc((size_t)(l->n + 1) * sizeof *start);
  if (!start) return error_set(err, ERR_NOMEM, "out of memory describing the slices of %s", path);
  int nb = 0;
  size_t bytes = 0, limit = transfer_batch_bytes();
  for (int i = 0; i < l->n; i++) {
    size_t b = (size_t)l->s[i].count * sizeof(float);
    if (i == 0 || bytes + b > limit) {
      start[nb++] = i;
      bytes = 0;
    }
    bytes += b;
  }
  start[nb] = l->n;
  *batch_start = start;
  *num_batches = nb;
  return 0;
}

/* Collective: every rank transfers its slices of one file, batch by batch
 * (as many collective calls on every rank: a rank out of batches passes
 * nothing). The MPI calls are made on every rank even after a local failure,
 * so the collectives stay matched; the outcome is agreed on at the end. */
static int transfer_slices(const CommGroup *g, const char *path, SliceList *l, int writing, Error *err) {
  int *batch = NULL, nb = 0;
  int rc = slice_batches(l, path, &batch, &nb, err);
  rc = agree(g, rc, err);
  int64_t rounds = nb;
  if (!rc) rc = comm_allreduce_i64(g, &rounds, 1, COMM_MAX, NULL, err);
  if (rc) {
    free(batch);
    return rc;
  }
  MPI_File fh = MPI_FILE_NULL;
  int mpi_rc = MPI_File_open(g->comm, path, writing ? MPI_MODE_WRONLY : MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
  rc = mpi_failed(mpi_rc, writing ? "opening for MPI-IO writing" : "opening for MPI-IO reading", path, err);
  /* MPI_File_open is collective and fails on all ranks alike; agreeing
   * makes sure no rank goes on to the transfer alone. */
  rc = agree(g, rc, err);
  if (rc) {
    if (fh != MPI_FILE_NULL) MPI_File_close(&fh);
    free(batch);
    return rc;
  }
  MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
  for (int64_t r = 0; r < rounds; r++) {
    SliceTypes t = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL, 0};
    int mine = !rc && r < nb;
    if (mine && (rc = slice_types_build(&l->s[batch[r]], batch[r + 1] - batch[r], path, &t, err))) mine = 0;
    mpi_rc = MPI_File_set_view(fh, 0, MPI_FLOAT, mine ? t.file : MPI_FLOAT, "native", MPI_INFO_NULL);
    if (!rc) rc = mpi_failed(mpi_rc, "MPI_File_set_view", path, err);
    mine = mine && !rc;
    MPI_Datatype mem = mine ? t.mem : MPI_FLOAT;
    MPI_Status status;
    if (writing) mpi_rc = MPI_File_write_all(fh, MPI_BOTTOM, mine, mem, &status);
    else mpi_rc = MPI_File_read_all(fh, mine ? MPI_BOTTOM : NULL, mine, mem, &status);
    if (!rc) rc = mpi_failed(mpi_rc, writing ? "MPI_File_write_all" : "MPI_File_read_all", path, err);
    if (!rc && mine) {
      MPI_Count done = 0;
      MPI_Get_elements_x(&status, MPI_FLOAT, &done);
      if ((long long)done != t.elements)
        rc = error_set(err, writing ? ERR_IO : ERR_FORMAT, "%s: %s %lld of %lld floats (%s)", path,
                       writing ? "wrote" : "read", (long long)done, t.elements,
                       writing ? "is the disk full?" : "the file is shorter than its header says");
    }
    slice_types_free(&t);
  }
  if (writing) {
    mpi_rc = MPI_File_sync(fh);
    if (!rc) rc = mpi_failed(mpi_rc, "MPI_File_sync", path, err);
  }
  mpi_rc = MPI_File_close(&fh);
  if (!rc) rc = mpi_failed(mpi_rc, "MPI_File_close", path, err);
  free(batch);
  return agree(g, rc, err);
}

/* ---- the files' layout, as a one-rank save writes it ---- */

typedef struct FileLayouts {
  const NetParam *global; /* the network's logical tensors (not owned) */
  int num_global;
  SafetensorsWriter *writer[CKPT_NUM_FILES];
  char *header[CKPT_NUM_FILES];
  size_t header_bytes[CKPT_NUM_FILES];
  uint64_t *offsets[CKPT_NUM_FILES]; /* per tensor, in the order added */
  uint64_t total[CKPT_NUM_FILES];
  int64_t step; /* the optimizer's, written as its "step" tensor */
} FileLayouts;

static void layouts_free(FileLayouts *f) {
  for (int i = 0; i < CKPT_NUM_FILES; i++) {
    safetensors_writer_free(f->writer[i]);
    free(f->header[i]);
    free(f->offsets[i]);
  }
  memset(f, 0, sizeof *f);
}

static int layouts_build(const Network *net, int step, int64_t opt_step, FileLayouts *f, Error *err) {
  memset(f, 0, sizeof *f);
  f->step = opt_step;
  f->global = network_logical_params(net, &f->num_global);
  int rc = ckpt_model_writer(f->global, f->num_global, NULL, step, &f->writer[0], err);
  if (!rc) rc = ckpt_optimizer_writer(f->global, f->num_global, NULL, NULL, &f->step, &f->writer[1], err);
  for (int i = 0; i < CKPT_NUM_FILES && !rc; i++) {
    int n = i == 0 ? f->num_global : 1 + 2 * f->num_global;
    f->offsets[i] = malloc((size_t)n * sizeof *f->offsets[i]);
    if (!f->offsets[i]) rc = error_set(err, ERR_NOMEM, "out of memory laying out %s", CKPT_FILES[i]);
    if (!rc)
      rc = safetensors_writer_layout(f->writer[i], &f->header[i], &f->header_bytes[i], f->offsets[i], &f->total[i],
                                     err);
  }
  if (rc) layouts_free(f);
  return rc;
}

/* ---- saving ---- */

/* Does this rank write local tensor p? Every element once: one replica
 * (DP, or EDP for expert slices on the expert-parallel path), and of the
 * tp_copies TP ranks that hold the same slice (consecutive ranks, as
 * model_create_shard lays them out) the first; never a copy of another
 * tensor (the LM head's tied copy). */
static int writes_tensor(const NetParam *p, const CheckpointShardInfo *sh) {
  if (p->copy_of) return 0;
  /* Expert slices are distinct over EP x ETP and replicated over EDP only. */
  if (p->reduce == NET_REDUCE_EXPERT) return sh->edp_rank == 0;
  if (sh->dp_rank != 0) return 0;
  return p->tp_copies <= 1 || sh->tp_rank % p->tp_copies == 0;
}

/* A fingerprint of a set of file elements (each named by its index in the
 * file, counted in floats): how many, their sum and their sum of squares,
 * modulo 2^64. Summed over the ranks it equals the fingerprint of every
 * tensor element exactly when (barring a 2^-64 coincidence) the ranks'
 * slices cover every element once: a slice written twice and another never
 * changes the sums even when the count stays. */
typedef struct Coverage {
  uint64_t count, sum, sum_sq;
} Coverage;

/* Adds the elements base + sum_d i_d * stride_d for i_d in [start_d,
 * start_d + count_d), in closed form per dimension. */
static void coverage_add(Coverage *c, uint64_t base, const SliceView *v) {
  uint64_t stride[4], a[4], b[4], cnt[4];
  uint64_t s = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= (uint64_t)v->shape[d];
  }
  for (int d = 0; d < v->ndim; d++) {
    unsigned __int128 lo = (unsigned)v->start[d], n = (unsigned)v->count[d], hi = lo + n;
    /* sum of i and of i^2 over [lo, hi), exact before the reduction mod 2^64 */
    unsigned __int128 s1 = (hi * (hi - (hi > 0)) - lo * (lo - (lo > 0))) / 2;
    unsigned __int128 q_hi = hi ? (hi - 1) * hi * (2 * hi - 1) / 6 : 0;
    unsigned __int128 q_lo = lo ? (lo - 1) * lo * (2 * lo - 1) / 6 : 0;
    cnt[d] = (uint64_t)n;
    a[d] = stride[d] * (uint64_t)s1;
    b[d] = stride[d] * stride[d] * (uint64_t)(q_hi - q_lo);
  }
  uint64_t total = 1, s1 = 0, s2 = 0;
  for (int d = 0; d < v->ndim; d++) total *= cnt[d];
  for (int d = 0; d < v->ndim; d++) {
    uint64_t others = 1;
    for (int e = 0; e < v->ndim; e++)
      if (e != d) others *= cnt[e];
    s1 += a[d] * others;
    s2 += b[d] * others;
    for (int e = d + 1; e < v->ndim; e++) {
      uint64_t rest = 1;
      for (int f = 0; f < v->ndim; f++)
        if (f != d && f != e) rest *= cnt[f];
      s2 += 2 * a[d] * a[e] * rest;
    }
  }
  c->count += total;
  c->sum += total * base + s1;
  c->sum_sq += total * base * base + 2 * base * s1 + s2;
}

static int plan_writes(const FileLayouts *f, const CheckpointSource *src, const CheckpointShardInfo *sh,
                       SliceList lists[CKPT_NUM_FILES], Coverage *cover, Error *err) {
  const Network *net = src->net;
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    if (!writes_tensor(p, sh)) continue;
    int gi = find_global(f->global, f->num_global, p->name);
    if (gi < 0)
      return error_set(err, ERR_INTERNAL, "local tensor '%s' is not a tensor of the model's global table", p->name);
    SliceView v;
    int rc = slice_view(p, &f->global[gi], &v, err);
    if (rc) return rc;
    coverage_add(cover, f->offsets[0][gi] / sizeof(float), &v);
    rc = slices_add(&lists[0], (MPI_Aint)f->offsets[0][gi], &v, net->values + p->offset, p->numel, err);
    if (!rc)
      rc = slices_add(&lists[1], (MPI_Aint)f->offsets[1][1 + gi], &v, src->opt.m + p->offset, p->numel, err);
    if (!rc)
      rc = slices_add(&lists[1], (MPI_Aint)f->offsets[1][1 + f->num_global + gi], &v, src->opt.v + p->offset,
                      p->numel, err);
    if (rc) return rc;
  }
  return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t offset) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = pwrite(fd, p, n, (off_t)offset);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
    offset += (uint64_t)k;
  }
  return 0;
}

/* Rank 0: each file gets its header (and the optimizer its "step") and its
 * final size, so the collective writes only fill tensor data in. */
static int write_headers(const char *tmp, const FileLayouts *f, Error *err) {
  for (int i = 0; i < CKPT_NUM_FILES; i++) {
    char path[CKPT_PATH_MAX];
    int rc = ckpt_join(path, sizeof path, tmp, CKPT_FILES[i], err);
    if (rc) return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return error_set(err, ERR_IO, "cannot create %s: %s", path, error_errno_text(errno));
    int bad = pwrite_all(fd, f->header[i], f->header_bytes[i], 0) != 0;
    if (!bad && i == 1) bad = pwrite_all(fd, &f->step, sizeof f->step, f->offsets[1][0]) != 0;
    if (!bad) bad = ftruncate(fd, (off_t)f->total[i]) != 0;
    int saved = errno;
    if (close(fd) != 0 && !bad) {
      bad = 1;
      saved = errno;
    }
    if (bad) return error_set(err, ERR_IO, "writing the header of %s failed: %s (is the disk full?)", path,
                              error_errno_text(saved));
  }
  return 0;
}

static int check_shard_args(const CheckpointShardInfo *sh, const Network *net, const CheckpointOptimizer *opt,
                            Error *err) {
  if (!sh || !sh->world || sh->world->comm == MPI_COMM_NULL)
    return error_set(err, ERR_ARG, "sharded checkpoint: the world group is not set up");
  if (sh->dp_rank < 0 || sh->tp_rank < 0)
    return error_set(err, ERR_ARG, "sharded checkpoint: dp_rank %d and tp_rank %d must be >= 0", sh->dp_rank,
                     sh->tp_rank);
  if (!net || !opt) return error_set(err, ERR_ARG, "sharded checkpoint: network and optimizer are required");
  if (opt->num_params != net->num_values)
    return error_set(err, ERR_INTERNAL, "optimizer holds %zu parameters, the local network %zu", opt->num_params,
                     net->num_values);
  return 0;
}

int checkpoint_save_sharded(const char *run_dir, const CheckpointSource *src, const CheckpointShardInfo *sh,
                            int keep_last, CheckpointSaveInfo *info, Error *err) {
  /* Without a group nothing collective can run: this fails on its own. */
  if (!sh || !sh->world || sh->world->comm == MPI_COMM_NULL)
    return error_set(err, ERR_ARG, "sharded checkpoint: the world group is not set up");
  const CommGroup *g = sh->world;
  const int is_root = g->rank == 0;
  /* Every phase ends in agree(), after which rc is the same on every rank,
   * so all ranks take the same branches and meet in the same collectives. */
  int rc = check_shard_args(sh, src->net, &src->opt, err);
  if (!rc && src->step < 0) rc = error_set(err, ERR_ARG, "checkpoint step must be >= 0, got %d", src->step);
  if (!rc && !src->model_record) rc = error_set(err, ERR_ARG, "sharded checkpoint: the network's config record is required");
  FileLayouts f = {0};
  SliceList lists[CKPT_NUM_FILES] = {{0}};
  Coverage mine = {0, 0, 0}, all = {0, 0, 0};
  if (!rc) rc = layouts_build(src->net, src->step, src->opt.step, &f, err);
  if (!rc) rc = plan_writes(&f, src, sh, lists, &mine, err);
  rc = agree(g, rc, err);
  if (!rc) {
    /* Before anything is created: every rank lays the files out alike (the
     * headers only rank 0 writes give the offsets every rank writes at)... */
    int64_t crc[2] = {0, 0};
    for (int i = 0; i < CKPT_NUM_FILES; i++) crc[0] = crc32_update((uint32_t)crc[0], f.header[i], f.header_bytes[i]);
    crc[1] = -crc[0];
    rc = comm_allreduce_i64(g, crc, 2, COMM_MAX, NULL, err);
    if (!rc && crc[0] != -crc[1])
      rc = error_set(err, ERR_CONFIG,
                     "the ranks lay the checkpoint files out differently: their models' configs or step differ");
  }
  if (!rc) {
    /* ...and the slices of all ranks tile the model. */
    uint64_t in[3] = {mine.count, mine.sum, mine.sum_sq}, out[3];
    comm_set_operation("checkpoint_save_sharded");
    MPI_Allreduce(in, out, 3, MPI_UINT64_T, MPI_SUM, g->comm);
    Coverage sum = {out[0], out[1], out[2]};
    for (int i = 0; i < f.num_global; i++) {
      SliceView whole = {.ndim = f.global[i].ndim};
      for (int d = 0; d < whole.ndim; d++) {
        whole.shape[d] = whole.count[d] = f.global[i].shape[d];
        whole.start[d] = 0;
      }
      coverage_add(&all, f.offsets[0][i] / sizeof(float), &whole);
    }
    if (sum.count != all.count || sum.sum != all.sum || sum.sum_sq != all.sum_sq)
      rc = error_set(err, ERR_CONFIG,
                     "the ranks' slices do not cover the model's %llu elements exactly once (they hold %llu%s): "
                     "check dp_rank, tp_rank and the shards' views",
                     (unsigned long long)all.count, (unsigned long long)sum.count,
                     sum.count == all.count ? ", but some twice and others never" : "");
  }

  char root[CKPT_PATH_MAX] = "", final_dir[CKPT_PATH_MAX] = "", tmp[CKPT_PATH_MAX] = "";
  int made_tmp = 0;
  if (!rc) {
    if (is_root) {
      rc = ckpt_save_begin(run_dir, src->step, root, final_dir, tmp, err);
      made_tmp = !rc;
      if (!rc) rc = write_headers(tmp, &f, err);
    }
    rc = agree(g, rc, err);
  }
  if (!rc) rc = comm_bcast_bytes(g, 0, tmp, sizeof tmp, NULL, err);
  for (int i = 0; i < CKPT_NUM_FILES && !rc; i++) {
    char path[CKPT_PATH_MAX];
    rc = agree(g, ckpt_join(path, sizeof path, tmp, CKPT_FILES[i], err), err);
    if (!rc) rc = transfer_slices(g, path, &lists[i], 1, err);
  }
  if (rc) {
    /* A failure before the last phase: nothing was renamed into place. */
    if (made_tmp) {
      Error ignored = {0};
      ckpt_remove_dir_flat(tmp, &ignored);
    }
    error_wrap(err, "saving checkpoint step %d in %s/%s", src->step, run_dir, CHECKPOINT_SUBDIR);
  } else {
    if (is_root) {
      uint64_t bytes = 0;
      rc = ckpt_save_finish_contents(tmp, src, &bytes, err);
      if (rc) {
        Error ignored = {0};
        ckpt_remove_dir_flat(tmp, &ignored);
        error_wrap(err, "saving checkpoint step %d in %s", src->step, root);
      } else {
        /* Cleans up and words its errors itself. */
        rc = ckpt_save_commit(root, tmp, final_dir, src->step, keep_last, bytes, info, err);
      }
    }
    rc = agree(g, rc, err);
  }
  if (!rc && info) rc = comm_bcast_bytes(g, 0, info, sizeof *info, NULL, err);
  for (int i = 0; i < CKPT_NUM_FILES; i++) free(lists[i].s);
  layouts_free(&f);
  return rc;
}

/* ---- loading ---- */

/* What rank 0 learns from state.json and passes to every rank. */
typedef struct LoadedState {
  ModelConfig model;
  int step;
  DataLoaderState data_loader;
  uint64_t data_windows, seed;
} LoadedState;

static const char *const FILE_PREFIXES[CKPT_NUM_FILES][2] = {{"", NULL}, {"m.", "v."}};

/* The file holds prefix + name of every logical tensor with its global shape
 * (ERR_CONFIG naming file and tensor otherwise), as F32, and nothing else
 * but, in the optimizer file, the "step" scalar. */
static int check_file_tensors(const SafetensorsReader *r, int file, const NetParam *g, int ng, Error *err) {
  const char *path = safetensors_path(r);
  for (int k = 0; k < 2 && FILE_PREFIXES[file][k]; k++) {
    for (int i = 0; i < ng; i++) {
      char name[SAFETENSORS_MAX_NAME], ws[96], fs[96];
      snprintf(name, sizeof name, "%s%s", FILE_PREFIXES[file][k], g[i].name);
      int64_t want[4];
      for (int d = 0; d < g[i].ndim; d++) want[d] = g[i].shape[d];
      safetensors_shape_str(g[i].ndim, want, ws, sizeof ws);
      const SafetensorsTensorInfo *info = safetensors_find(r, name);
      if (!info)
        return error_set(err, ERR_CONFIG, "%s: tensor '%s' is missing (the model has it, global shape %s)", path,
                         name, ws);
      int same = info->ndim == g[i].ndim;
      for (int d = 0; same && d < g[i].ndim; d++) same = info->shape[d] == want[d];
      if (!same)
        return error_set(err, ERR_CONFIG, "%s: tensor '%s' has global shape %s but the model expects %s", path, name,
                         safetensors_shape_str(info->ndim, info->shape, fs, sizeof fs), ws);
      if (info->dtype != ST_F32)
        return error_set(err, ERR_FORMAT, "%s: tensor '%s' is %s (expected F32)", path, name,
                         safetensors_dtype_name(info->dtype));
    }
  }
  int count = safetensors_num_tensors(r);
  for (int i = 0; i < count; i++) {
    const char *name = safetensors_tensor_at(r, i)->name;
    int known = file == 1 && !strcmp(name, "step");
    for (int k = 0; k < 2 && FILE_PREFIXES[file][k] && !known; k++) {
      size_t plen = strlen(FILE_PREFIXES[file][k]);
      known = !strncmp(name, FILE_PREFIXES[file][k], plen) && find_global(g, ng, name + plen) >= 0;
    }
    if (!known)
      return error_set(err, ERR_FORMAT, "%s: tensor '%s' is not %s of this model", path, name,
                       file ? "optimizer state of a parameter" : "a parameter");
  }
  return 0;
}

/* Rank 0: the whole checkpoint is intact (sizes, CRC-32s, structure), holds
 * exactly this model's tensors, and its optimizer step matches. */
static int root_verify(const char *dir, const Network *net, const cJSON *model_record, LoadedState *out, Error *err) {
  CkptState st;
  int rc = ckpt_state_read(dir, &st, err);
  if (rc) return rc;
  int ng = 0;
  const NetParam *g = network_logical_params(net, &ng);
  for (int i = 0; i < CKPT_NUM_FILES && !rc; i++) rc = ckpt_verify_file(&st, i, err);
  if (!rc)
    rc = ckpt_check_model_record(&st.model, cJSON_GetObjectItemCaseSensitive(st.root, "model_config"), model_record,
                                 dir, err);
  for (int i = 0; i < CKPT_NUM_FILES && !rc; i++) {
    char path[CKPT_PATH_MAX];
    SafetensorsReader *r = NULL;
    rc = ckpt_join(path, sizeof path, dir, CKPT_FILES[i], err);
    if (!rc) rc = safetensors_open(&r, path, err);
    if (!rc) rc = check_file_tensors(r, i, g, ng, err);
    if (!rc && i == 1) rc = ckpt_check_optimizer_step(r, path, st.step, err);
    safetensors_close(r);
  }
  if (!rc) {
    memset(out, 0, sizeof *out);
    out->model = st.model;
    out->step = st.step;
    out->data_loader = st.data_loader;
    out->data_windows = st.data_windows;
    out->seed = st.seed;
  }
  ckpt_state_free(&st);
  return rc;
}

/* Byte offset of a safetensors file's data section: after the u64 length
 * and the header. */
static int data_section_start(const char *path, uint64_t *start, Error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error_set(err, ERR_IO, "cannot open %s: %s", path, error_errno_text(errno));
  unsigned char b[8];
  ssize_t k = pread(fd, b, sizeof b, 0);
  close(fd);
  if (k != (ssize_t)sizeof b) return error_set(err, ERR_FORMAT, "%s: shorter than a safetensors header", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
  *start = 8 + n;
  return 0;
}

/* The slices of one file this rank reads: every local tensor (replicas and
 * tied copies included), at the offsets the file's own header gives. */
static int plan_reads(const char *dir, int file, const Network *net, CheckpointOptimizer *opt, const NetParam *g,
                      int ng, SliceList *list, Error *err) {
  char path[CKPT_PATH_MAX];
  int rc = ckpt_join(path, sizeof path, dir, CKPT_FILES[file], err);
  uint64_t start = 0;
  if (!rc) rc = data_section_start(path, &start, err);
  SafetensorsReader *r = NULL;
  if (!rc) rc = safetensors_open(&r, path, err);
  for (int i = 0; i < net->num_tensors && !rc; i++) {
    const NetParam *p = &net->params[i];
    const char *lname = logical_name(p);
    int gi = find_global(g, ng, lname);
    if (gi < 0) {
      rc = error_set(err, ERR_INTERNAL, "local tensor '%s' is not a tensor of the model's global table", p->name);
      break;
    }
    SliceView v;
    if ((rc = slice_view(p, &g[gi], &v, err))) break;
    for (int k = 0; k < 2 && FILE_PREFIXES[file][k] && !rc; k++) {
      char name[SAFETENSORS_MAX_NAME];
      snprintf(name, sizeof name, "%s%s", FILE_PREFIXES[file][k], lname);
      const SafetensorsTensorInfo *info = safetensors_find(r, name);
      int same = info && info->ndim == g[gi].ndim && info->dtype == ST_F32;
      for (int d = 0; same && d < g[gi].ndim; d++) same = info->shape[d] == g[gi].shape[d];
      if (!same) {
        rc = error_set(err, ERR_CONFIG, "%s: tensor '%s' is %s", path, name,
                       info ? "not the F32 tensor of the model's global shape" : "missing");
        break;
      }
      float *base = file == 0 ? net->values : k == 0 ? opt->m : opt->v;
      rc = slices_add(list, (MPI_Aint)(start + info->data_begin), &v, base + p->offset, p->numel, err);
    }
  }
  safetensors_close(r);
  return rc;
}

int checkpoint_load_training_sharded(const char *ckpt_dir, Network *net, const cJSON *model_record,
                                     CheckpointOptimizer *opt, CheckpointTrainState *st,
                                     const CheckpointShardInfo *sh, Error *err) {
  if (!sh || !sh->world || sh->world->comm == MPI_COMM_NULL)
    return error_set(err, ERR_ARG, "sharded checkpoint: the world group is not set up");
  const CommGroup *g = sh->world;
  int rc = check_shard_args(sh, net, opt, err);
  LoadedState ls;
  memset(&ls, 0, sizeof ls);
  if (!rc && g->rank == 0) rc = root_verify(ckpt_dir, net, model_record, &ls, err);
  rc = agree(g, rc, err);
  if (!rc) rc = comm_bcast_bytes(g, 0, &ls, sizeof ls, NULL, err);
  if (!rc) {
    /* Every rank's own record against the checkpoint's (rank 0 compared
     * the saved JSON; the others see the parsed transformer config). */
    int local = ckpt_check_model_record(&ls.model, NULL, model_record, ckpt_dir, err);
    rc = agree(g, local, err);
  }
  int ng = 0;
  const NetParam *global = network_logical_params(net, &ng);
  SliceList lists[CKPT_NUM_FILES] = {{0}};
  if (!rc) {
    int local = 0;
    for (int i = 0; i < CKPT_NUM_FILES && !local; i++)
      local = plan_reads(ckpt_dir, i, net, opt, global, ng, &lists[i], err);
    rc = agree(g, local, err);
  }
  for (int i = 0; i < CKPT_NUM_FILES && !rc; i++) {
    char path[CKPT_PATH_MAX];
    rc = agree(g, ckpt_join(path, sizeof path, ckpt_dir, CKPT_FILES[i], err), err);
    if (!rc) rc = transfer_slices(g, path, &lists[i], 0, err);
  }
  network_weights_changed(net, -1); /* bf16 copies of the old values are stale (kern/bf16_weights.h) */
  if (!rc) {
    opt->step = ls.step;
    memset(st, 0, sizeof *st);
    st->step = ls.step;
    st->data_loader = ls.data_loader;
    st->data_windows = ls.data_windows;
    st->seed = ls.seed;
  }
  for (int i = 0; i < CKPT_NUM_FILES; i++) free(lists[i].s);
  return rc;
}
