/* Hugging Face tokenizer.json for byte-level BPE: writing ours and reading
 * ours or GPT-2-style ones, with every field validated.
 *
 * Token strings in model.vocab and model.merges are byte-level text (GPT-2's
 * byte <-> unicode mapping); added tokens are stored as their raw content,
 * and when an added token also appears in model.vocab its entry there may be
 * the raw content or its byte-level text. Settings that would change how
 * text is split or merged (normalizers, other pre-tokenizers, dropout,
 * subword prefixes, byte fallback, ignore_merges) are rejected rather than
 * silently ignored, so a loaded file encodes as its author meant or not at
 * all. Saving writes every token, added ones included, into model.vocab
 * (holes are simply absent), as Hugging Face's trainer does. Limitation:
 * added tokens' lstrip/rstrip/single_word flags are kept and written back
 * but not applied when matching them in text. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file_text.h"
#include "base/json_util.h"
#include "tok/tok_internal.h"

#define MAX_JSON_BYTES (1024u * 1024u * 1024u)

/* ---- saving ---- */

/* The string the file uses for an id: raw content for added tokens,
 * byte-level text otherwise. */
static char *id_text(const Tokenizer *t, int32_t id) {
  size_t n;
  const uint8_t *b = tok_token_bytes(t, id, &n);
  if (t->added[id]) {
    for (int i = 0; i < t->n_added; i++)
      if (t->added_tokens[i].id == id) return strdup(t->added_tokens[i].content);
  }
  return tok_bytes_to_text(b, n);
}

static cJSON *bytelevel_obj(int add_prefix_space, int trim_offsets) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "type", "ByteLevel");
  cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
  cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
  cJSON_AddBoolToObject(o, "use_regex", 1);
  return o;
}

static cJSON *build_json(const Tokenizer *t) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  int ok = 1;
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  for (int i = 0; ok && added && i < t->n_added; i++) {
    const TokAdded *a = &t->added_tokens[i];
    cJSON *o = cJSON_CreateObject();
    ok = o && cJSON_AddItemToArray(added, o);
    if (!ok) break;
    cJSON_AddNumberToObject(o, "id", a->id);
    cJSON_AddStringToObject(o, "content", a->content);
    cJSON_AddBoolToObject(o, "single_word", a->single_word);
    cJSON_AddBoolToObject(o, "lstrip", a->lstrip);
    cJSON_AddBoolToObject(o, "rstrip", a->rstrip);
    cJSON_AddBoolToObject(o, "normalized", a->normalized);
    cJSON_AddBoolToObject(o, "special", a->special);
  }
  cJSON_AddNullToObject(root, "normalizer");
  cJSON_AddItemToObject(root, "pre_tokenizer", bytelevel_obj(t->add_prefix_space, 1));
  if (t->has_post_processor) cJSON_AddItemToObject(root, "post_processor", bytelevel_obj(1, 0));
  else cJSON_AddNullToObject(root, "post_processor");
  cJSON_AddItemToObject(root, "decoder", bytelevel_obj(1, 1));
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  ok = ok && added && model;
  if (ok) {
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
  }
  cJSON *vocab = ok ? cJSON_AddObjectToObject(model, "vocab") : NULL;
  ok = ok && vocab;
  for (int32_t id = 0; ok && id < t->n_ids; id++) {
    if (t->tok_len[id] < 0) continue;
    char *s = id_text(t, id);
    ok = s && cJSON_AddNumberToObject(vocab, s, id);
    free(s);
  }
  cJSON *merges = ok ? cJSON_AddArrayToObject(model, "merges") : NULL;
  ok = ok && merges;
  for (int r = 0; ok && r < t->n_merges; r++) {
    char *l = id_text(t, t->merge_left[r]), *rt = id_text(t, t->merge_right[r]);
    char *m = l && rt ? malloc(strlen(l) + strlen(rt) + 2) : NULL;
    if (m) sprintf(m, "%s %s", l, rt);
    cJSON *s = m ? cJSON_CreateString(m) : NULL;
    ok = s && cJSON_AddItemToArray(merges, s);
    free(l);
    free(rt);
    free(m);
  }
  if (!ok) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

int tok_save_json(const Tokenizer *t, const char *path, Error *err) {
  cJSON *root = build_json(t);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return error_set(err, ERR_NOMEM, "%s: out of memory building the JSON", path);
  size_t tmp_len = strlen(path) + 5;
  char *tmp = malloc(tmp_len);
  if (!tmp) {
    free(text);
    return error_set(err, ERR_NOMEM, "%s: out of memory", path);
  }
  snprintf(tmp, tmp_len, "%s.tmp", path);
  int rc = 0;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
  } else {
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int saved = errno;
    if (fclose(f) != 0) bad = 1;
    if (bad) rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(saved));
    else if (rename(tmp, path) != 0)
      rc = error_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, path, error_errno_text(errno));
    if (rc) unlink(tmp);
  }
  free(tmp);
  free(text);
  return rc;
}

/* ---- loading ---- */

typedef struct Loader {
  const char *name;
  Error *err;
  BytesMap by_text; /* vocab string -> id */
} Loader;

static int fail(Loader *L, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(Loader *L, const char *field, const char *fmt, ...) {
  char what[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return error_set(L->err, ERR_FORMAT, "%s: %s: %s", L->name, field, what);
}

/* Short, printable rendering of a string for messages. */
static const char *shown(const char *s, char *buf, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; s[i] && k + 5 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f) k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
    else buf[k++] = (char)c;
  }
  buf[k] = '\0';
  return buf;
}

static int get_id(Loader *L, const cJSON *v, const char *field, int32_t *id) {
  if (!cJSON_IsNumber(v)) return fail(L, field, "expected an integer id, got %s", json_type_name(v));
  double d = v->valuedouble;
  if (!(d >= 0 && d < TOK_MAX_ID) || d != floor(d))
    return fail(L, field, "expected an integer id in [0, %d), got %g", TOK_MAX_ID, d);
  *id = (int32_t)d;
  return 0;
}

static int get_flag(Loader *L, const cJSON *obj, const char *key, const char *where, uint8_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsBool(v)) {
    char field[128];
    snprintf(field, sizeof field, "%s.%s", where, key);
    return fail(L, field, "expected true or false, got %s", json_type_name(v));
  }
  *out = cJSON_IsTrue(v) ? 1 : 0;
  return 0;
}

static const char *type_of(const cJSON *obj) {
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
  return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* normalizer, pre_tokenizer, post_processor, decoder. */
static int check_pipeline(Loader *L, const cJSON *root, int *add_prefix_space, int *has_post) {
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (norm && !cJSON_IsNull(norm))
    return fail(L, "normalizer", "expected null (no normalization is supported), got %s%s%s", json_type_name(norm),
                type_of(norm) ? " of type " : "", type_of(norm) ? type_of(norm) : "");
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  if (!cJSON_IsObject(pre) || !type_of(pre) || strcmp(type_of(pre), "ByteLevel") != 0)
    return fail(L, "pre_tokenizer", "expected an object with \"type\": \"ByteLevel\", got %s%s%s",
                json_type_name(pre), pre && type_of(pre) ? " of type " : "", pre && type_of(pre) ? type_of(pre) : "");
  uint8_t aps = 0, use_regex = 1;
  if (get_flag(L, pre, "add_prefix_space", "pre_tokenizer", &aps) ||
      get_flag(L, pre, "use_regex", "pre_tokenizer", &use_regex))
    return ERR_FORMAT;
  if (!use_regex)
    return fail(L, "pre_tokenizer.use_regex", "expected true (splitting words GPT-2 style), got false");
  *add_prefix_space = aps;
  const cJSON *post = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  *has_post = 0;
  if (post && !cJSON_IsNull(post)) {
    if (!cJSON_IsObject(post) || !type_of(post) || strcmp(type_of(post), "ByteLevel") != 0)
      return fail(L, "post_processor", "expected null or an object with \"type\": \"ByteLevel\", got %s%s%s",
                  json_type_name(post), type_of(post) ? " of type " : "", type_of(post) ? type_of(post) : "");
    *has_post = 1;
  }
  const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
  if (dec && !cJSON_IsNull(dec) && (!cJSON_IsObject(dec) || !type_of(dec) || strcmp(type_of(dec), "ByteLevel")))
    return fail(L, "decoder", "expected null or an object with \"type\": \"ByteLevel\", got %s%s%s",
                json_type_name(dec), type_of(dec) ? " of type " : "", type_of(dec) ? type_of(dec) : "");
  return 0;
}

/* model.* settings other than vocab and merges. */
static int check_model_options(Loader *L, const cJSON *model) {
  const char *ty = type_of(model);
  const cJSON *tyv = cJSON_GetObjectItemCaseSensitive(model, "type");
  if (tyv && (!ty || strcmp(ty, "BPE") != 0))
    return fail(L, "model.type", "expected \"BPE\", got %s%s%s", ty ? "\"" : json_type_name(tyv), ty ? ty : "",
                ty ? "\"" : "");
  const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
  if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
    return fail(L, "model.dropout", "expected null (BPE dropout is not supported), got %s", json_type_name(drop));
  static const char *const affixes[] = {"model.continuing_subword_prefix", "model.end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, affixes[i] + 6);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0'))
      return fail(L, affixes[i], "expected null (not used by byte-level BPE), got %s", json_type_name(v));
  }
  static const char *const unsupported[] = {"byte_fallback", "ignore_merges"};
  for (int i = 0; i < 2; i++) {
    uint8_t on = 0;
    if (get_flag(L, model, unsupported[i], "model", &on)) return ERR_FORMAT;
    if (on) {
      char field[64];
      snprintf(field, sizeof field, "model.%s", unsupported[i]);
      return fail(L, field, "expected false (not supported), got true");
    }
  }
  return 0;
}

/* added_tokens: fills ids, contents and flags; checks uniqueness. */
static int read_added(Loader *L, const cJSON *root, TokAdded **out, int *n_out, int32_t *max_id) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  *out = NULL;
  *n_out = 0;
  if (!arr || cJSON_IsNull(arr)) return 0;
  if (!cJSON_IsArray(arr)) return fail(L, "added_tokens", "expected an array, got %s", json_type_name(arr));
  int n = cJSON_GetArraySize(arr);
  TokAdded *a = calloc((size_t)n + 1, sizeof *a);
  if (!a) return error_set(L->err, ERR_NOMEM, "%s: out of memory", L->name);
  *out = a;
  int i = 0;
  char field[96], buf[160];
  for (const cJSON *o = arr->child; o; o = o->next, i++) {
    snprintf(field, sizeof field, "added_tokens[%d]", i);
    if (!cJSON_IsObject(o)) return fail(L, field, "expected an object, got %s", json_type_name(o));
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!cJSON_IsString(c) || !c->valuestring[0])
      return fail(L, field, "expected \"content\" to be a non-empty string, got %s",
                  cJSON_IsString(c) ? "an empty string" : json_type_name(c));
    snprintf(field, sizeof field, "added_tokens[%d].id", i);
    if (get_id(L, cJSON_GetObjectItemCaseSensitive(o, "id"), field, &a[i].id)) return ERR_FORMAT;
    snprintf(field, sizeof field, "added_tokens[%d]", i);
    if (get_flag(L, o, "special", field, &a[i].special) || get_flag(L, o, "single_word", field, &a[i].single_word) ||
        get_flag(L, o, "lstrip", field, &a[i].lstrip) || get_flag(L, o, "rstrip", field, &a[i].rstrip) ||
        get_flag(L, o, "normalized", field, &a[i].normalized))
      return ERR_FORMAT;
    for (int j = 0; j < i; j++) {
      if (a[j].id == a[i].id)
        return fail(L, field, "id %d is already used by added_tokens[%d]", (int)a[i].id, j);
      if (strcmp(a[j].content, c->valuestring) == 0)
        return fail(L, field, "content \"%s\" is already added_tokens[%d]", shown(c->valuestring, buf, sizeof buf), j);
    }
    a[i].content = strdup(c->valuestring);
    *n_out = i + 1;
    if (!a[i].content) return error_set(L->err, ERR_NOMEM, "%s: out of memory", L->name);
    if (a[i].id > *max_id) *max_id = a[i].id;
  }
  return 0;
}

static void free_added(TokAdded *a, int n) {
  for (int i = 0; i < n; i++) free(a[i].content);
  free(a);
}

static const TokAdded *added_with_id(const TokAdded *a, int n, int32_t id) {
  for (int i = 0; i < n; i++)
    if (a[i].id == id) return &a[i];
  return NULL;
}

static const char *vocab_field(const cJSON *e, char *field, size_t cap) {
  char buf[160];
  snprintf(field, cap, "model.vocab[\"%.60s\"]", shown(e->string ? e->string : "", buf, sizeof buf));
  return field;
}

/* model.vocab into the tokenizer and L->by_text. */
static int read_vocab(Loader *L, const cJSON *vocab, Tokenizer *t, const TokAdded *added, int n_added) {
  char field[96], buf[160], buf2[160];
  int i = 0;
  for (const cJSON *e = vocab->child; e; e = e->next, i++) {
    const char *s = e->string ? e->string : "";
    int32_t id = -1;
    if (get_id(L, e, vocab_field(e, field, sizeof field), &id)) return ERR_FORMAT;
    if (!s[0]) return fail(L, "model.vocab", "entry %d (id %d) is an empty string", i, (int)id);
    size_t sl = strlen(s);
    int created;
    BytesEntry *be = bytesmap_upsert(&L->by_text, (const uint8_t *)s, sl, bytes_hash((const uint8_t *)s, sl), &created);
    if (!be) return error_set(L->err, ERR_NOMEM, "%s: out of memory", L->name);
    if (!created)
      return fail(L, "model.vocab", "token \"%s\" appears twice (ids %d and %d)", shown(s, buf, sizeof buf),
                  (int)be->value, (int)id);
    be->value = id;
    if (t->tok_len[id] >= 0) {
      /* Find the other token with this id for the message. */
      const char *other = "?";
      for (const cJSON *f = vocab->child; f != e; f = f->next)
        if (cJSON_IsNumber(f) && f->valuedouble == id) other = f->string;
      return fail(L, "model.vocab", "id %d is given to both \"%s\" and \"%s\"", (int)id,
                  shown(other, buf2, sizeof buf2), shown(s, buf, sizeof buf));
    }
    const TokAdded *a = added_with_id(added, n_added, id);
    uint8_t *bytes = NULL;
    size_t n = 0;
    uint32_t bad;
    int level_ok = tok_text_to_bytes(s, &bytes, &n, &bad) == 0;
    int rc;
    if (a) {
      /* An added token's vocab entry: its content, raw or as byte-level text. */
      int same = strcmp(a->content, s) == 0 ||
                 (level_ok && n == strlen(a->content) && memcmp(bytes, a->content, n) == 0);
      free(bytes);
      if (!same)
        return fail(L, "model.vocab", "id %d is the added token \"%s\" but the vocab names it \"%s\"", (int)id,
                    shown(a->content, buf2, sizeof buf2), shown(s, buf, sizeof buf));
      rc = tok_set_token(t, id, (const uint8_t *)a->content, strlen(a->content), L->err);
    } else {
      if (!level_ok) {
        if (bad == 0xFFFFFFFFu)
          return fail(L, "model.vocab", "token \"%s\" (id %d) is not valid UTF-8", shown(s, buf, sizeof buf), (int)id);
        return fail(L, "model.vocab",
                    "token \"%s\" (id %d) is not valid byte-level text: character U+%04X stands for no byte",
                    shown(s, buf, sizeof buf), (int)id, (unsigned)bad);
      }
      rc = tok_set_token(t, id, bytes, n, L->err);
      free(bytes);
    }
    if (rc) return error_wrap(L->err, "%s: model.vocab", L->name);
  }
  return 0;
}

static int32_t text_id(Loader *L, const char *s, size_t n) {
  BytesEntry *e = bytesmap_find(&L->by_text, (const uint8_t *)s, n, bytes_hash((const uint8_t *)s, n));
  return e ? (int32_t)e->value : -1;
}

/* model.merges: "a b" strings or ["a", "b"] pairs; both parts and their
 * concatenation must be vocab tokens. */
static int read_merges(Loader *L, const cJSON *merges, Tokenizer *t) {
  char field[64], b1[160];
  char *joined = NULL;
  size_t joined_cap = 0;
  int r = 0, rc = 0;
  for (const cJSON *m = merges->child; m && !rc; m = m->next, r++) {
    snprintf(field, sizeof field, "model.merges[%d]", r);
    const char *a, *b;
    size_t al, bl;
    if (cJSON_IsString(m)) {
      const char *sp = strchr(m->valuestring, ' ');
      if (!sp || strchr(sp + 1, ' ') || sp == m->valuestring || !sp[1]) {
        rc = fail(L, field, "expected \"left right\" (two tokens separated by one space), got \"%s\"",
                  shown(m->valuestring, b1, sizeof b1));
        break;
      }
      a = m->valuestring, al = (size_t)(sp - a);
      b = sp + 1, bl = strlen(b);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) {
      a = m->child->valuestring, al = strlen(a);
      b = m->child->next->valuestring, bl = strlen(b);
    } else {
      rc = fail(L, field, "expected a string \"left right\" or an array of two strings, got %s", json_type_name(m));
      break;
    }
    if (al + bl + 1 > joined_cap) {
      joined_cap = 2 * (al + bl + 1);
      char *nj = realloc(joined, joined_cap);
      if (!nj) {
        rc = error_set(L->err, ERR_NOMEM, "%s: out of memory", L->name);
        break;
      }
      joined = nj;
    }
    memcpy(joined, a, al);
    joined[al] = '\0';
    int32_t li = text_id(L, a, al), ri = text_id(L, b, bl);
    if (li < 0) rc = fail(L, field, "left part \"%s\" is not in model.vocab", shown(joined, b1, sizeof b1));
    memcpy(joined, b, bl);
    joined[bl] = '\0';
    if (!rc && ri < 0) rc = fail(L, field, "right part \"%s\" is not in model.vocab", shown(joined, b1, sizeof b1));
    if (rc) break;
    memcpy(joined, a, al);
    memcpy(joined + al, b, bl);
    joined[al + bl] = '\0';
    int32_t res = text_id(L, joined, al + bl);
    if (res < 0) {
      rc = fail(L, field, "the merged token \"%s\" is not in model.vocab", shown(joined, b1, sizeof b1));
      break;
    }
    t->merge_left[r] = li;
    t->merge_right[r] = ri;
    t->merge_result[r] = res;
  }
  free(joined);
  return rc;
}

int tok_load_json_buffer(Tokenizer **out, const char *json, size_t len, const char *name, Error *err) {
  *out = NULL;
  Loader L = {name, err, {0}};
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
  if (!root) {
    size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
    return error_set(err, ERR_FORMAT, "%s: not valid JSON (parsing stopped near byte %zu of %zu)", name, at, len);
  }
  while (end < json + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
  if (end < json + len && *end != '\0') {
    cJSON_Delete(root);
    return error_set(err, ERR_FORMAT, "%s: unexpected data after the JSON value at byte %zu", name,
                     (size_t)(end - json));
  }
  Tokenizer *t = NULL;
  TokAdded *added = NULL;
  int n_added = 0, rc = 0;
  int aps = 0, has_post = 0;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
  if (!cJSON_IsObject(root)) rc = fail(&L, "top level", "expected an object, got %s", json_type_name(root));
  else if (version && !cJSON_IsString(version)) rc = fail(&L, "version", "expected a string, got %s", json_type_name(version));
  else if (!cJSON_IsObject(model)) rc = fail(&L, "model", "expected an object, got %s", json_type_name(model));
  else if (!cJSON_IsObject(vocab)) rc = fail(&L, "model.vocab", "expected an object {token: id}, got %s", json_type_name(vocab));
  else if (!cJSON_IsArray(merges)) rc = fail(&L, "model.merges", "expected an array, got %s", json_type_name(merges));
  if (!rc) rc = check_model_options(&L, model);
  if (!rc) rc = check_pipeline(&L, root, &aps, &has_post);
  int32_t max_id = -1;
  if (!rc) rc = read_added(&L, root, &added, &n_added, &max_id);
  int n_vocab = 0;
  if (!rc) {
    for (const cJSON *e = vocab->child; e; e = e->next, n_vocab++) {
      int32_t id = -1;
      char field[96];
      if ((rc = get_id(&L, e, vocab_field(e, field, sizeof field), &id))) break;
      if (id > max_id) max_id = id;
    }
  }
  if (!rc && n_vocab == 0) rc = fail(&L, "model.vocab", "is empty");
  if (!rc && tok_alloc(&t, max_id + 1, cJSON_GetArraySize(merges), err)) rc = error_wrap(err, "%s", name);
  if (!rc && bytesmap_init(&L.by_text, (size_t)n_vocab)) rc = error_set(err, ERR_NOMEM, "%s: out of memory", name);
  if (!rc) rc = read_vocab(&L, vocab, t, added, n_added);
  for (int i = 0; !rc && i < n_added; i++) {
    const TokAdded *a = &added[i];
    /* An added token missing from model.vocab still owns its id. */
    if (t->tok_len[a->id] < 0) rc = tok_set_token(t, a->id, (const uint8_t *)a->content, strlen(a->content), err);
    if (!rc) rc = tok_add_added(t, a->id, a->content, a->special, err);
    if (!rc) {
      TokAdded *x = &t->added_tokens[t->n_added - 1];
      x->single_word = a->single_word, x->lstrip = a->lstrip, x->rstrip = a->rstrip, x->normalized = a->normalized;
    }
  }
  if (!rc) rc = read_merges(&L, merges, t);
  if (!rc) {
    t->add_prefix_space = aps;
    t->has_post_processor = has_post;
    char where[300];
    snprintf(where, sizeof where, "%s: model.merges", name);
    rc = tok_finish(t, where, err);
  }
  bytesmap_free(&L.by_text);
  free_added(added, n_added);
  cJSON_Delete(root);
  if (rc) {
    tok_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

int tok_load_json(Tokenizer **out, const char *path, Error *err) {
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  int rc = file_read_text(path, "tokenizer", MAX_JSON_BYTES, &buf, &len, err);
  if (!rc) rc = tok_load_json_buffer(out, buf, len, path, err);
  free(buf);
  return rc;
}
