/* Hugging Face import (import_hf.h): config.json into a model config with
 * every unrepresentable field listed, the safetensors files of the
 * directory (one file, or shards through the index), the match of their
 * tensors against the table of convert/hf_layout.h, the tensor-by-tensor
 * read into the model, and the run directory. */
#include "convert/import_hf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_text.h"
#include "base/fs.h"
#include "base/safetensors.h"
#include "convert/hf_layout.h"
#include "convert/run_dir.h"
#include "tok/tokenizer.h"
#include "train/net_transformer.h"
#include "train/train_config.h"

#define PATH_CAP CHECKPOINT_NAME_MAX
#define JSON_MAX_BYTES ((size_t)256 << 20)


/* ---- a list of refusals, all named in one message ---- */

typedef struct Refusals {
  char buf[880];
  size_t used;
  int n, shown;
} Refusals;

static void refuse(Refusals *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(Refusals *r, const char *fmt, ...) {
  r->n++;
  char one[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(one, sizeof one, fmt, ap);
  va_end(ap);
  if (r->used + strlen(one) + 4 >= sizeof r->buf) return;
  r->used += (size_t)snprintf(r->buf + r->used, sizeof r->buf - r->used, "%s%s", r->shown ? "\n  " : "  ", one);
  r->shown++;
}

static int refusals_error(const Refusals *r, Error *err, const char *what) {
  if (r->shown < r->n)
    return error_set(err, ERR_CONFIG, "%s: %d thing(s) fivefold cannot represent:\n%s\n  (and %d more)", what, r->n,
                     r->buf, r->n - r->shown);
  return error_set(err, ERR_CONFIG, "%s: %d thing(s) fivefold cannot represent:\n%s", what, r->n, r->buf);
}

static int read_json(const char *path, const char *what, cJSON **out, Error *err) {
  char *text = NULL;
  size_t n = 0;
  int rc = file_read_text(path, what, JSON_MAX_BYTES, &text, &n, err);
  if (rc) return rc;
  *out = cJSON_ParseWithLength(text, n);
  free(text);
  if (!*out || !cJSON_IsObject(*out)) {
    cJSON_Delete(*out);
    *out = NULL;
    return error_set(err, ERR_FORMAT, "%s: not a JSON object", path);
  }
  return 0;
}

/* ---- config.json ---- */

static const struct {
  const char *model_type;
  HfFamily family;
  const char *architecture;
} SUPPORTED[] = {
    {"llama", HF_LLAMA, "LlamaForCausalLM"},      {"mistral", HF_LLAMA, "MistralForCausalLM"},
    {"qwen2", HF_QWEN2, "Qwen2ForCausalLM"},      {"mixtral", HF_MIXTRAL, "MixtralForCausalLM"},
    {"qwen2_moe", HF_QWEN2_MOE, "Qwen2MoeForCausalLM"}, {"gpt2", HF_GPT2, "GPT2LMHeadModel"},
};
#define NUM_SUPPORTED ((int)(sizeof SUPPORTED / sizeof SUPPORTED[0]))

/* The field a model-config error names ("... field \"X\" ..."), if any. */
static int named_field(const char *msg, char *name, size_t n) {
  const char *p = strstr(msg, "field \"");
  if (!p) return 0;
  p += 7;
  const char *q = strchr(p, '"');
  if (!q || (size_t)(q - p) >= n) return 0;
  memcpy(name, p, (size_t)(q - p));
  name[q - p] = '\0';
  return 1;
}

static int import_config_json(const char *path, const cJSON *root, ModelConfig *cfg, int *which, Error *err) {
  Refusals r = {.used = 0, .n = 0, .shown = 0};
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  *which = -1;
  for (int i = 0; cJSON_IsString(type) && i < NUM_SUPPORTED; i++)
    if (!strcmp(type->valuestring, SUPPORTED[i].model_type)) *which = i;
  if (*which < 0)
    return error_set(err, ERR_CONFIG,
                     "%s: field \"model_type\": %s%s%s is not an architecture fivefold imports (expected llama, "
                     "mistral, qwen2, mixtral, qwen2_moe or gpt2)",
                     path, cJSON_IsString(type) ? "\"" : "", cJSON_IsString(type) ? type->valuestring : "absent",
                     cJSON_IsString(type) ? "\"" : "");
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures"), *a;
  cJSON_ArrayForEach(a, arch) {
    if (!cJSON_IsString(a) || strcmp(a->valuestring, SUPPORTED[*which].architecture) != 0)
      refuse(&r, "field \"architectures\": %s%s%s (a model_type %s model is imported as %s: a causal LM with its head)",
             cJSON_IsString(a) ? "\"" : "", cJSON_IsString(a) ? a->valuestring : "not a string",
             cJSON_IsString(a) ? "\"" : "", SUPPORTED[*which].model_type, SUPPORTED[*which].architecture);
  }
  /* The parser stops at the first field it refuses: drop that field and ask
   * again, so that the refusal names every one. */
  cJSON *copy = cJSON_Duplicate(root, 1);
  if (!copy) return error_set(err, ERR_NOMEM, "out of memory reading %s", path);
  cJSON_DeleteItemFromObjectCaseSensitive(copy, "architectures");
  for (int tries = 0; tries < 64; tries++) {
    Error e = {0};
    if (!model_config_from_json(cfg, copy, path, &e)) break;
    char name[128];
    const char *msg = strncmp(e.msg, path, strlen(path)) == 0 && e.msg[strlen(path)] == ':' ? e.msg + strlen(path) + 2
                                                                                             : e.msg;
    refuse(&r, "%s", msg);
    if (!named_field(e.msg, name, sizeof name) || !cJSON_GetObjectItemCaseSensitive(copy, name)) break;
    cJSON_DeleteItemFromObjectCaseSensitive(copy, name);
  }
  cJSON_Delete(copy);
  if (r.n) return refusals_error(&r, err, path);
  /* Qwen2's q/k/v biases are part of the architecture, not a field. */
  const HfFamily fam = SUPPORTED[*which].family;
  if ((fam == HF_QWEN2 || fam == HF_QWEN2_MOE) && !cfg->o_bias) cfg->qkv_bias = 1;
  return model_config_validate(cfg, path, err);
}

int import_hf_model_config(const char *model_dir, ModelConfig *cfg, const char **architecture, Error *err) {
  char path[PATH_CAP];
  snprintf(path, sizeof path, "%s/config.json", model_dir);
  cJSON *root = NULL;
  int which = -1;
  int rc = read_json(path, "model config", &root, err);
  if (!rc) rc = import_config_json(path, root, cfg, &which, err);
  cJSON_Delete(root);
  if (!rc && architecture) *architecture = SUPPORTED[which].architecture;
  return rc;
}

/* ---- the safetensors files ---- */

typedef struct WeightFiles {
  SafetensorsReader **readers;
  char **names; /* file names inside the directory */
  int n;
} WeightFiles;

static void weight_files_close(WeightFiles *w) {
  for (int i = 0; i < w->n; i++) {
    safetensors_close(w->readers[i]);
    free(w->names[i]);
  }
  free(w->readers);
  free(w->names);
  memset(w, 0, sizeof *w);
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int open_weight_file(WeightFiles *w, const char *dir, const char *name, Error *err) {
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->names[i], name)) return 0;
  SafetensorsReader **nr = realloc(w->readers, (size_t)(w->n + 1) * sizeof *nr);
  if (nr) w->readers = nr;
  char **nn = realloc(w->names, (size_t)(w->n + 1) * sizeof *nn);
  if (nn) w->names = nn;
  if (!nr || !nn) return error_set(err, ERR_NOMEM, "out of memory opening %s/%s", dir, name);
  char path[PATH_CAP];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  w->readers[w->n] = NULL;
  w->names[w->n] = strdup(name);
  if (!w->names[w->n]) return error_set(err, ERR_NOMEM, "out of memory");
  w->n++;
  return safetensors_open(&w->readers[w->n - 1], path, err);
}

/* The shards the index names, each opened (and so validated); every
 * weight_map entry must be in the shard it names. */
static int open_sharded(WeightFiles *w, const char *dir, const char *index_path, Error *err) {
  cJSON *root = NULL;
  int rc = read_json(index_path, "safetensors index", &root, err);
  if (rc) return rc;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
  if (!cJSON_IsObject(map) || !map->child)
    rc = error_set(err, ERR_FORMAT, "%s: field \"weight_map\": expected an object of tensor name -> shard file",
                   index_path);
  cJSON_ArrayForEach(e, map) {
    if (rc) break;
    if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
      rc = error_set(err, ERR_FORMAT, "%s: weight_map entry \"%s\": expected the name of a shard in %s", index_path,
                     e->string, dir);
      break;
    }
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
    if (!file_exists(path)) {
      rc = error_set(err, ERR_IO, "%s: missing shard (%s puts tensor '%s' there)", path, index_path, e->string);
      break;
    }
    if ((rc = open_weight_file(w, dir, e->valuestring, err))) break;
    for (int i = 0; i < w->n; i++)
      if (!strcmp(w->names[i], e->valuestring) && !safetensors_find(w->readers[i], e->string))
        rc = error_set(err, ERR_FORMAT, "%s: no tensor named '%s' (%s lists it in this shard)", path, e->string,
                       index_path);
  }
  cJSON_Delete(root);
  return rc;
}

static int open_weights(WeightFiles *w, const char *dir, Error *err) {
  char path[PATH_CAP];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  if (file_exists(path)) return open_sharded(w, dir, path, err);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (file_exists(path)) return open_weight_file(w, dir, "model.safetensors", err);
  return error_set(err, ERR_IO,
                   "%s: no model.safetensors and no model.safetensors.index.json (the weights must be safetensors: "
                   "one model.safetensors, or shards listed by the index)",
                   dir);
}

/* The file holding `name` (NULL: none). */
static const SafetensorsTensorInfo *find_tensor(const WeightFiles *w, const char *name, int *file) {
  for (int i = 0; i < w->n; i++) {
    const SafetensorsTensorInfo *t = safetensors_find(w->readers[i], name);
    if (t) {
      *file = i;
      return t;
    }
  }
  return NULL;
}

/* ---- matching the files against the table ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Tensors transformers keeps in some checkpoints that hold no parameter:
 * rotary frequency tables and GPT-2's causal-mask buffers. */
static int is_buffer(const char *name) {
  size_t n = strlen(name);
  static const char *const SUFFIXES[] = {".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias"};
  for (int i = 0; i < 3; i++) {
    size_t k = strlen(SUFFIXES[i]);
    if (n >= k && !strcmp(name + n - k, SUFFIXES[i]) && (i == 0 || !strstr(name, "self_attn"))) return 1;
  }
  return 0;
}

static int is_float(SafetensorsDtype d) { return d == ST_F32 || d == ST_BF16 || d == ST_F16; }

static void check_tensor(const WeightFiles *w, const char *dir, const HfPiece *p, Refusals *r) {
  int f = 0;
  const SafetensorsTensorInfo *t = find_tensor(w, p->hf, &f);
  if (!t) {
    refuse(r, "tensor '%s' is missing (%s/%s%s)", p->hf, dir, w->n == 1 ? w->names[0] : "model.safetensors.index.json",
           w->n == 1 ? "" : " does not list it");
    return;
  }
  if (!is_float(t->dtype))
    refuse(r, "%s/%s: tensor '%s' is %s, expected F32, F16 or BF16", dir, w->names[f], p->hf,
           safetensors_dtype_name(t->dtype));
  int same = t->ndim == p->hf_ndim;
  for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == p->hf_shape[d];
  if (!same) {
    char a[96], b[96];
    refuse(r, "%s/%s: tensor '%s' has shape %s, expected %s from config.json", dir, w->names[f], p->hf,
           safetensors_shape_str(t->ndim, t->shape, a, sizeof a),
           safetensors_shape_str(p->hf_ndim, p->hf_shape, b, sizeof b));
  }
}

static int match_tensors(const WeightFiles *w, const char *dir, const HfLayout *lay, const ModelConfig *cfg,
                         int *tied_head, Error *err) {
  Refusals r = {.used = 0, .n = 0, .shown = 0};
  const int total = lay->n + lay->n_zeros;
  const char **known = malloc((size_t)(total ? total : 1) * sizeof *known);
  if (!known) return error_set(err, ERR_NOMEM, "out of memory");
  int nk = 0;
  for (int i = 0; i < lay->n; i++)
    if (i == 0 || strcmp(lay->pieces[i].hf, lay->pieces[i - 1].hf)) {
      known[nk++] = lay->pieces[i].hf;
      check_tensor(w, dir, &lay->pieces[i], &r);
    }
  for (int i = 0; i < lay->n_zeros; i++) {
    known[nk++] = lay->zeros[i].hf;
    check_tensor(w, dir, &lay->zeros[i], &r);
  }
  qsort(known, (size_t)nk, sizeof *known, cmp_str);
  *tied_head = 0;
  for (int f = 0; f < w->n; f++) {
    for (int i = 0; i < safetensors_num_tensors(w->readers[f]); i++) {
      const char *name = safetensors_tensor_at(w->readers[f], i)->name;
      if (bsearch(&name, known, (size_t)nk, sizeof *known, cmp_str) || is_buffer(name)) continue;
      if (cfg->tie_word_embeddings && !strcmp(name, "lm_head.weight")) {
        *tied_head = 1; /* must equal the embedding: checked when read */
        continue;
      }
      refuse(&r, "%s/%s: tensor '%s' has no place in this fivefold model", dir, w->names[f], name);
    }
  }
  free(known);
  if (!r.n) return 0;
  char what[PATH_CAP];
  snprintf(what, sizeof what, "%s: the weights do not fit config.json", dir);
  return refusals_error(&r, err, what);
}

/* ---- reading ---- */

static size_t hf_numel(const HfPiece *p) {
  return (size_t)p->hf_shape[0] * (size_t)(p->hf_ndim == 2 ? p->hf_shape[1] : 1);
}

static int read_hf(const WeightFiles *w, const HfPiece *p, float *dst, Error *err) {
  int f = 0;
  if (!find_tensor(w, p->hf, &f)) return error_set(err, ERR_INTERNAL, "import: tensor '%s' vanished", p->hf);
  return safetensors_read_f32(w->readers[f], p->hf, p->hf_ndim, p->hf_shape, dst, err);
}

static int load_weights(const WeightFiles *w, const char *dir, const HfLayout *lay, int tied_head, Model *m,
                        char *dtypes, size_t dtypes_n, int *ntensors, Error *err) {
  size_t biggest = 0;
  for (int i = 0; i < lay->n; i++) biggest = hf_numel(&lay->pieces[i]) > biggest ? hf_numel(&lay->pieces[i]) : biggest;
  for (int i = 0; i < lay->n_zeros; i++)
    biggest = hf_numel(&lay->zeros[i]) > biggest ? hf_numel(&lay->zeros[i]) : biggest;
  float *scratch = malloc((biggest ? biggest : 1) * sizeof *scratch);
  if (!scratch) return error_set(err, ERR_NOMEM, "out of memory for a %zu-element tensor", biggest);
  int rc = 0, seen[ST_NUM_DTYPES] = {0};
  *ntensors = 0;
  for (int i = 0; i < lay->n && !rc; i++) {
    const HfPiece *p = &lay->pieces[i];
    const int first = i == 0 || strcmp(p->hf, lay->pieces[i - 1].hf);
    if (first) {
      int f = 0;
      seen[find_tensor(w, p->hf, &f)->dtype] = 1;
      if ((rc = read_hf(w, p, scratch, err))) break;
      (*ntensors)++;
    }
    const ParamTensor *t = model_find_tensor(m, p->ours);
    if (!t || p->ours_offset + hf_piece_numel(p) > t->numel) {
      rc = error_set(err, ERR_INTERNAL, "import: no room for '%s' in fivefold's '%s'", p->hf, p->ours);
      break;
    }
    hf_piece_from_hf(p, scratch, m->params + t->offset);
  }
  for (int i = 0; i < lay->n_zeros && !rc; i++) {
    if ((rc = read_hf(w, &lay->zeros[i], scratch, err))) break;
    (*ntensors)++;
    for (size_t j = 0; j < hf_numel(&lay->zeros[i]) && !rc; j++)
      if (scratch[j] != 0.0f)
        rc = error_set(err, ERR_CONFIG,
                       "%s: tensor '%s' is not zero: fivefold's shared expert is ungated (a zero gate, the factor "
                       "1/2, is the only one it represents)",
                       dir, lay->zeros[i].hf);
  }
  if (!rc && tied_head) {
    HfPiece head = {.hf = "lm_head.weight", .hf_ndim = 2, .hf_shape = {m->cfg.vocab_size, m->cfg.hidden_size}};
    const ParamTensor *e = model_find_tensor(m, "embed.weight");
    rc = read_hf(w, &head, scratch, err);
    if (!rc && memcmp(scratch, m->params + e->offset, e->numel * sizeof(float)) != 0)
      rc = error_set(err, ERR_CONFIG,
                     "%s: tensor 'lm_head.weight' differs from the embedding but config.json says "
                     "\"tie_word_embeddings\": true",
                     dir);
  }
  free(scratch);
  size_t used = 0;
  dtypes[0] = '\0';
  for (int d = 0; d < ST_NUM_DTYPES; d++)
    if (seen[d] && used + 8 < dtypes_n)
      used += (size_t)snprintf(dtypes + used, dtypes_n - used, "%s%s", used ? "+" : "",
                               safetensors_dtype_name((SafetensorsDtype)d));
  return rc;
}

/* ---- the tokenizer ---- */

/* Decides the tokenizer and checks that fivefold can use it with the model. */
static int choose_tokenizer(const char *dir, const char *given, int vocab_size, char *out, size_t n, Error *err) {
  char path[PATH_CAP];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  if (given) snprintf(out, n, "%s", given);
  else if (file_exists(path)) snprintf(out, n, "%s", path);
  else snprintf(out, n, "%s", CHECKPOINT_BYTE_LEVEL);
  if (!strcmp(out, CHECKPOINT_BYTE_LEVEL)) {
    if (vocab_size < 256)
      return error_set(err, ERR_CONFIG,
                       "%s: no tokenizer.json and vocab_size %d is below the 256 byte tokens; give --tokenizer FILE",
                       dir, vocab_size);
    return 0;
  }
  Tokenizer *tok = NULL;
  int rc = tok_load_json(&tok, out, err);
  if (rc)
    return error_wrap(err, "%s cannot be used by fivefold (its tokenizer is byte-level BPE); give --tokenizer FILE "
                           "or --tokenizer byte-level", out);
  if (tok_vocab_size(tok) > vocab_size)
    rc = error_set(err, ERR_CONFIG, "tokenizer %s has ids up to %d but config.json's vocab_size is %d", out,
                   tok_vocab_size(tok) - 1, vocab_size);
  tok_free(tok);
  return rc;
}

/* ---- the run directory ---- */

static int copy_file(const char *from, const char *to, Error *err) {
  char *text = NULL;
  size_t n = 0;
  int rc = file_read_text(from, "tokenizer", (size_t)1 << 30, &text, &n, err);
  if (!rc) rc = fs_write_atomic(to, text, n, err);
  free(text);
  return rc;
}

/* run.json: the model, the tokenizer and the output directory, everything
 * else at its default, and no data (the user brings it). The checkpoint
 * records the same document as the run's config. */
static int write_run_config(const char *dir, const ModelConfig *mc, const char *tokenizer, const char *out_abs,
                            const char *path, cJSON **recorded, Error *err) {
  cJSON *doc = cJSON_CreateObject();
  char desc[PATH_CAP + 128];
  char *abs = realpath(dir, NULL); /* the run names where it came from */
  snprintf(desc, sizeof desc, "written by fivefold import from the Hugging Face model %s", abs ? abs : dir);
  free(abs);
  cJSON_AddStringToObject(doc, "description", desc);
  cJSON_AddItemToObject(doc, "model", model_config_to_json(mc));
  cJSON_AddObjectToObject(doc, "training");
  cJSON *data = cJSON_AddObjectToObject(doc, "data");
  cJSON_AddStringToObject(data, "tokenizer", tokenizer);
  cJSON_AddStringToObject(doc, "out", out_abs);
  char *text = cJSON_Print(doc);
  if (!text) {
    cJSON_Delete(doc);
    return error_set(err, ERR_NOMEM, "out of memory rendering %s", path);
  }
  int rc = fs_write_text_atomic(path, text, err);
  TrainConfig back; /* what a resume will read must parse */
  train_config_defaults(&back);
  if (!rc) rc = train_config_parse(&back, text, path, err);
  train_config_free(&back);
  free(text);
  if (rc) cJSON_Delete(doc);
  else *recorded = doc;
  return rc;
}

int import_hf_directory(const char *model_dir, const char *out_dir, const char *tokenizer, ImportHfInfo *info,
                        Error *err) {
  ImportHfInfo local;
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  ModelConfig *cfg = &info->model;
  int rc = import_hf_model_config(model_dir, cfg, &info->architecture, err);
  if (rc) return rc;
  HfFamily family;
  if ((rc = hf_family_for_model(cfg, &family, err))) return error_wrap(err, "%s/config.json", model_dir);
  WeightFiles w = {0};
  HfLayout lay = {0};
  Model m;
  memset(&m, 0, sizeof m);
  float *moments = NULL;
  char *out_abs = NULL;
  cJSON *recorded = NULL;
  Network net = {0};
  cJSON *record = NULL;
  int tied_head = 0;
  if ((rc = open_weights(&w, model_dir, err))) goto done;
  int f = 0;
  const char *gpt2_prefix = find_tensor(&w, "transformer.wte.weight", &f) ? "transformer." : "";
  if ((rc = hf_layout_build(&lay, cfg, family, gpt2_prefix, err))) goto done;
  if ((rc = match_tensors(&w, model_dir, &lay, cfg, &tied_head, err))) goto done;
  if ((rc = choose_tokenizer(model_dir, tokenizer, cfg->vocab_size, info->tokenizer, sizeof info->tokenizer, err)))
    goto done;
  if ((rc = hf_table_model_create(&m, cfg, err))) goto done;
  if ((rc = load_weights(&w, model_dir, &lay, tied_head, &m, info->dtypes, sizeof info->dtypes, &info->num_tensors,
                         err)))
    goto done;
  if ((rc = convert_new_run_dir(out_dir, "import", &out_abs, err))) goto done;
  if (strcmp(info->tokenizer, CHECKPOINT_BYTE_LEVEL) != 0) {
    /* The run keeps its own copy: the Hugging Face directory may go away. */
    char copy[PATH_CAP];
    snprintf(copy, sizeof copy, "%s/%s", out_abs, CHECKPOINT_TOKENIZER_FILE);
    if (strcmp(info->tokenizer, copy) != 0 && (rc = copy_file(info->tokenizer, copy, err))) goto done;
    snprintf(info->tokenizer, sizeof info->tokenizer, "%s", copy);
  }
  snprintf(info->run_config, sizeof info->run_config, "%s/%s", out_abs, IMPORT_RUN_CONFIG);
  if ((rc = write_run_config(model_dir, cfg, info->tokenizer, out_abs, info->run_config, &recorded, err))) goto done;
  /* Zero moments from calloc are untouched pages: no memory until written. */
  if (!(moments = calloc(2 * m.num_params + 1, sizeof *moments))) {
    rc = error_set(err, ERR_NOMEM, "out of memory for the optimizer state of %zu parameters", m.num_params);
    goto done;
  }
  TrainConfig defaults; /* run.json leaves the seed at its default */
  train_config_defaults(&defaults);
  const uint64_t seed = defaults.seed;
  train_config_free(&defaults);
  if ((rc = net_transformer_checkpoint_view(&net, &record, &m, err))) goto done;
  CheckpointSource src = {
      .step = 0,
      .net = &net,
      .model_record = record,
      .opt = {.m = moments, .v = moments + m.num_params, .num_params = m.num_params, .step = 0},
      /* No data yet: one window keeps the record valid; the resume on the
       * user's data starts that data's order from its beginning. */
      .data_loader = {.seed = seed, .epoch = 0, .position = 0},
      .data_windows = 1,
      .train_config = recorded,
      .tokenizer = info->tokenizer,
      .seed = seed,
  };
  CheckpointSaveInfo saved;
  if ((rc = checkpoint_save(out_abs, &src, 0, &saved, err))) goto done;
  snprintf(info->checkpoint, sizeof info->checkpoint, "%s", saved.dir);
  info->num_files = w.n;
  info->num_params = m.num_params;
done:
  cJSON_Delete(record);
  network_free(&net);
  free(moments);
  cJSON_Delete(recorded);
  free(out_abs);
  hf_table_model_free(&m);
  hf_layout_free(&lay);
  weight_files_close(&w);
  return rc;
}
