/* Assembly of a program from per-rank action lists: fill derived fields
 * (stage, peer), derive the standard data-flow dependencies and link each
 * RECV to its SEND. Also the small text format ("F0 SA0>1 ...", one line per
 * rank) that tests and experiments use to write programs by hand. Anything
 * that cannot be linked is left unlinked on purpose: sched_check is the one
 * place that judges a program. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sched/program.h"

enum { MAP_FWD, MAP_BWD, MAP_SEND_ACT, MAP_RECV_ACT, MAP_SEND_GRAD, MAP_RECV_GRAD, NUM_MAPS };

static int map_of_kind(SchedActionKind kind) {
  switch (kind) {
    case SCHED_FWD: return MAP_FWD;
    case SCHED_BWD: return MAP_BWD;
    case SCHED_SEND_ACT: return MAP_SEND_ACT;
    case SCHED_RECV_ACT: return MAP_RECV_ACT;
    case SCHED_SEND_GRAD: return MAP_SEND_GRAD;
    case SCHED_RECV_GRAD: return MAP_RECV_GRAD;
    default: return -1;
  }
}

/* Where each (kind, rank, micro-batch, chunk) first appears: index or -1. */
typedef struct IndexMaps {
  int ranks, microbatches, chunks;
  int *slots; /* [map][rank][mb][chunk] */
} IndexMaps;

static int *map_slot(const IndexMaps *m, int map, int rank, int mb, int chunk) {
  if (map < 0 || rank < 0 || rank >= m->ranks || mb < 0 || mb >= m->microbatches || chunk < 0 || chunk >= m->chunks)
    return NULL;
  return &m->slots[(((size_t)map * m->ranks + rank) * m->microbatches + mb) * m->chunks + chunk];
}

static int map_get(const IndexMaps *m, int map, int rank, int mb, int chunk) {
  int *s = map_slot(m, map, rank, mb, chunk);
  return s ? *s : -1;
}

/* Fills stage and peer fields that the caller left at -1. */
static void derive_fields(const SchedConfig *cfg, int rank, SchedAction *a) {
  int P = cfg->pp, S = cfg->pp * cfg->vpp;
  if (a->kind == SCHED_GRAD_REDUCE) {
    if (a->bucket < 0) a->bucket = a->chunk;
    if (a->chunk < 0) a->chunk = a->bucket;
  }
  if (a->chunk >= 0 && a->stage < 0) a->stage = a->chunk * P + rank;
  int step = 0;
  if (a->kind == SCHED_SEND_ACT || a->kind == SCHED_RECV_GRAD) step = +1;
  if (a->kind == SCHED_RECV_ACT || a->kind == SCHED_SEND_GRAD) step = -1;
  if (step && a->stage >= 0 && a->peer_stage < 0) {
    int ps = a->stage + step;
    if (ps >= 0 && ps < S) a->peer_stage = ps;
  }
  if (step && a->peer_stage >= 0) {
    if (a->peer < 0) a->peer = a->peer_stage % P;
    if (a->peer_chunk < 0) a->peer_chunk = a->peer_stage / P;
  }
}

int sched_program_assemble(const SchedConfig *config, SchedAction *const *lists, const int *counts,
                           SchedProgram **out, Error *err) {
  *out = NULL;
  const SchedConfig *cfg = config;
  if (cfg->pp < 1 || cfg->vpp < 1 || cfg->microbatches < 0)
    return error_set(err, ERR_ARG, "sched assemble: need pp >= 1, vpp >= 1, microbatches >= 0 (got %d, %d, %d)",
                     cfg->pp, cfg->vpp, cfg->microbatches);
  int P = cfg->pp, S = cfg->pp * cfg->vpp;
  /* A list holding a weight-gradient action splits its backward. */
  SchedConfig with_split = *cfg;
  for (int r = 0; r < P; r++)
    for (int i = 0; i < counts[r]; i++) with_split.split_backward |= lists[r][i].kind == SCHED_BWD_WEIGHT;
  SchedBuilder *b = sched_builder_new(&with_split, P);
  IndexMaps maps = {P, cfg->microbatches, cfg->vpp, NULL};
  size_t nslots = (size_t)NUM_MAPS * P * (size_t)cfg->microbatches * cfg->vpp;
  maps.slots = malloc((nslots ? nslots : 1) * sizeof *maps.slots);
  int rc = ERR_OK;
  if (!b || !maps.slots) {
    rc = error_set(err, ERR_NOMEM, "sched assemble: out of memory");
    goto done;
  }
  for (size_t i = 0; i < nslots; i++) maps.slots[i] = -1;

  for (int r = 0; r < P && !rc; r++) {
    for (int i = 0; i < counts[r] && !rc; i++) {
      SchedAction a = lists[r][i];
      derive_fields(cfg, r, &a);
      rc = sched_builder_append(b, r, &a, NULL, err);
      int *slot = map_slot(&maps, map_of_kind(a.kind), r, a.microbatch, a.chunk);
      if (slot && *slot < 0) *slot = i;
    }
  }

  for (int r = 0; r < P && !rc; r++) {
    int n = sched_builder_count(b, r);
    for (int i = 0; i < n && !rc; i++) {
      SchedActionRef self = {r, i};
      const SchedAction *a = sched_builder_get(b, self);
      int mb = a->microbatch, c = a->chunk, s = a->stage;
#define DEP(rank_, index_)                                                   \
  do {                                                                       \
    if ((index_) >= 0) {                                                     \
      SchedActionRef d_ = {(rank_), (index_)};                               \
      rc = sched_builder_add_dep(b, self, d_, err);                          \
    }                                                                        \
  } while (0)
      switch (a->kind) {
        case SCHED_FWD:
          if (s > 0) {
            if ((s - 1) % P == r)
              DEP(r, map_get(&maps, MAP_FWD, r, mb, (s - 1) / P));
            else
              DEP(r, map_get(&maps, MAP_RECV_ACT, r, mb, c));
          }
          break;
        case SCHED_BWD:
          DEP(r, map_get(&maps, MAP_FWD, r, mb, c));
          if (!rc && s >= 0 && s < S - 1) {
            if ((s + 1) % P == r)
              DEP(r, map_get(&maps, MAP_BWD, r, mb, (s + 1) / P));
            else
              DEP(r, map_get(&maps, MAP_RECV_GRAD, r, mb, c));
          }
          break;
        case SCHED_BWD_WEIGHT: DEP(r, map_get(&maps, MAP_BWD, r, mb, c)); break;
        case SCHED_SEND_ACT: DEP(r, map_get(&maps, MAP_FWD, r, mb, c)); break;
        case SCHED_SEND_GRAD: DEP(r, map_get(&maps, MAP_BWD, r, mb, c)); break;
        case SCHED_RECV_ACT:
        case SCHED_RECV_GRAD: {
          int send_map = a->kind == SCHED_RECV_ACT ? MAP_SEND_ACT : MAP_SEND_GRAD;
          int j = map_get(&maps, send_map, a->peer, mb, a->peer_chunk);
          if (j >= 0) {
            SchedActionRef send = {a->peer, j};
            const SchedAction *sa = sched_builder_get(b, send);
            /* Link only a send that really is addressed to this action. */
            if (sa && sa->peer == r && sa->peer_stage == s) rc = sched_builder_link(b, send, self, err);
          }
          break;
        }
        case SCHED_GRAD_REDUCE: {
          int last = -1;
          for (int k = 0; k < n; k++) {
            SchedActionRef kr = {r, k};
            const SchedAction *x = sched_builder_get(b, kr);
            if ((x->kind == SCHED_BWD || x->kind == SCHED_BWD_WEIGHT) && x->chunk == c) last = k;
          }
          DEP(r, last);
          break;
        }
        case SCHED_OPTIM:
          for (int k = 0; k < n && !rc; k++) {
            SchedActionRef kr = {r, k};
            if (sched_builder_get(b, kr)->kind == SCHED_GRAD_REDUCE) DEP(r, k);
          }
          break;
        default: break;
      }
#undef DEP
    }
  }
  if (!rc) rc = sched_builder_finish(b, out, err);
done:
  free(maps.slots);
  sched_builder_free(b);
  return rc;
}

/* ---- text format ---- */

typedef struct Prefix {
  const char *text;
  SchedActionKind kind;
} Prefix;

/* Longest prefixes first so "OPT" is not read as something shorter. */
static const Prefix kPrefixes[] = {
    {"OPT", SCHED_OPTIM},      {"SA", SCHED_SEND_ACT},  {"RA", SCHED_RECV_ACT}, {"SG", SCHED_SEND_GRAD},
    {"RG", SCHED_RECV_GRAD},   {"AR", SCHED_GRAD_REDUCE}, {"F", SCHED_FWD},      {"B", SCHED_BWD},
    {"W", SCHED_BWD_WEIGHT},
};

static int read_int(const char **p, int *value) {
  if (!isdigit((unsigned char)**p)) return -1;
  long v = 0;
  while (isdigit((unsigned char)**p)) {
    v = v * 10 + (**p - '0');
    if (v > 1000000000L) return -1;
    (*p)++;
  }
  *value = (int)v;
  return 0;
}

static int parse_token(const SchedConfig *cfg, int rank, const char *tok, SchedAction *out, Error *err) {
  const char *p = tok;
  const Prefix *pre = NULL;
  for (size_t i = 0; i < sizeof kPrefixes / sizeof kPrefixes[0]; i++)
    if (!strncmp(p, kPrefixes[i].text, strlen(kPrefixes[i].text))) {
      pre = &kPrefixes[i];
      break;
    }
  if (!pre) return error_set(err, ERR_FORMAT, "sched text: rank %d: unknown action '%s' (expected F, B, W, SA, RA, SG, RG, AR or OPT)", rank, tok);
  p += strlen(pre->text);
  SchedAction a = sched_action_make(pre->kind);
  int number = -1, chunk = 0, peer = -1;
  if (pre->kind != SCHED_OPTIM && read_int(&p, &number))
    return error_set(err, ERR_FORMAT, "sched text: rank %d: '%s' needs a number after '%s'", rank, tok, pre->text);
  if (*p == '.') {
    p++;
    if (read_int(&p, &chunk)) return error_set(err, ERR_FORMAT, "sched text: rank %d: '%s': chunk expected after '.'", rank, tok);
  }
  if (*p == '>' || *p == '<') {
    char dir = *p++;
    int want = dir == '>' ? sched_kind_is_send(pre->kind) : sched_kind_is_recv(pre->kind);
    if (!want || read_int(&p, &peer))
      return error_set(err, ERR_FORMAT, "sched text: rank %d: '%s': '%c' must follow a %s and name a rank", rank, tok, dir,
                       dir == '>' ? "send" : "receive");
  }
  if (*p) return error_set(err, ERR_FORMAT, "sched text: rank %d: trailing characters in '%s'", rank, tok);
  if (pre->kind == SCHED_GRAD_REDUCE) {
    a.bucket = number;
    a.chunk = number;
  } else if (pre->kind != SCHED_OPTIM) {
    a.microbatch = number;
    a.chunk = chunk;
  }
  derive_fields(cfg, rank, &a);
  if (peer >= 0 && peer != a.peer)
    return error_set(err, ERR_FORMAT, "sched text: rank %d: '%s' names peer rank %d but its stage's neighbour is on rank %d", rank,
                     tok, peer, a.peer);
  *out = a;
  return ERR_OK;
}

int sched_program_parse_text(const SchedConfig *config, const char *text, SchedProgram **out, Error *err) {
  *out = NULL;
  int P = config->pp;
  if (P < 1 || config->vpp < 1) return error_set(err, ERR_ARG, "sched text: need pp >= 1 and vpp >= 1");
  SchedAction **lists = calloc((size_t)P, sizeof *lists);
  int *counts = calloc((size_t)P, sizeof *counts);
  int *caps = calloc((size_t)P, sizeof *caps);
  char *copy = strdup(text);
  int rc = ERR_OK;
  if (!lists || !counts || !caps || !copy) {
    rc = error_set(err, ERR_NOMEM, "sched text: out of memory");
    goto done;
  }
  int rank = 0;
  char *save_line = NULL;
  for (char *line = strtok_r(copy, ";\n", &save_line); line && !rc; line = strtok_r(NULL, ";\n", &save_line)) {
    char *save_tok = NULL;
    char *tok = strtok_r(line, " \t\r", &save_tok);
    if (!tok) continue; /* blank line */
    if (rank >= P) {
      rc = error_set(err, ERR_FORMAT, "sched text: more lines than the %d ranks of pp", P);
      break;
    }
    for (; tok && !rc; tok = strtok_r(NULL, " \t\r", &save_tok)) {
      if (!strcmp(tok, "-")) continue; /* an explicitly empty rank */
      SchedAction a;
      rc = parse_token(config, rank, tok, &a, err);
      if (rc) break;
      if (counts[rank] == caps[rank]) {
        int cap = caps[rank] ? caps[rank] * 2 : 16;
        SchedAction *q = realloc(lists[rank], (size_t)cap * sizeof *q);
        if (!q) {
          rc = error_set(err, ERR_NOMEM, "sched text: out of memory");
          break;
        }
        lists[rank] = q;
        caps[rank] = cap;
      }
      lists[rank][counts[rank]++] = a;
    }
    rank++;
  }
  if (!rc && rank != P) rc = error_set(err, ERR_FORMAT, "sched text: %d lines for %d ranks (write '-' for a rank with no actions)", rank, P);
  if (!rc) rc = sched_program_assemble(config, lists, counts, out, err);
done:
  if (lists)
    for (int r = 0; r < P; r++) free(lists[r]);
  free(lists);
  free(counts);
  free(caps);
  free(copy);
  return rc;
}
