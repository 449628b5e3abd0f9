/* Rank-grid arithmetic: validation of the sizes with messages that say what
 * would fit, rank <-> coordinates in both grids, and group membership. Both
 * grids are four mixed-radix dimensions (fastest first); a group is the set
 * of ranks that differ only in some of those dimensions, so one table of
 * (grid, dimensions) describes every group. No MPI here. */
#include "comm/grid_math.h"

enum { GRID_ATTENTION = 0, GRID_MOE = 1, GRID_DIMS = 4 };

typedef struct GroupSpec {
  const char *name;
  int grid;
  unsigned dims; /* bit d set: the group varies over dimension d of its grid */
} GroupSpec;

static const GroupSpec group_specs[GRID_NUM_GROUPS] = {
    [GRID_GROUP_TP] = {"tp", GRID_ATTENTION, 1u << 0},
    [GRID_GROUP_CP] = {"cp", GRID_ATTENTION, 1u << 1},
    [GRID_GROUP_DP] = {"dp", GRID_ATTENTION, 1u << 2},
    [GRID_GROUP_PP] = {"pp", GRID_ATTENTION, 1u << 3},
    [GRID_GROUP_DP_CP] = {"dp-cp", GRID_ATTENTION, (1u << 1) | (1u << 2)},
    [GRID_GROUP_TP_CP] = {"tp-cp", GRID_ATTENTION, (1u << 0) | (1u << 1)},
    [GRID_GROUP_TP_PP] = {"tp-pp", GRID_ATTENTION, (1u << 0) | (1u << 3)},
    [GRID_GROUP_ETP] = {"etp", GRID_MOE, 1u << 0},
    [GRID_GROUP_EP] = {"ep", GRID_MOE, 1u << 1},
    [GRID_GROUP_EDP] = {"edp", GRID_MOE, 1u << 2},
    [GRID_GROUP_EP_ETP] = {"ep-etp", GRID_MOE, (1u << 0) | (1u << 1)},
    [GRID_GROUP_ETP_EP_PP] = {"etp-ep-pp", GRID_MOE, (1u << 0) | (1u << 1) | (1u << 3)},
};

const char *grid_group_name(GridGroupKind kind) {
  if ((int)kind < 0 || kind >= GRID_NUM_GROUPS) return NULL;
  return group_specs[kind].name;
}

static void grid_dims(const GridSizes *s, int grid, int dims[GRID_DIMS]) {
  if (grid == GRID_ATTENTION) {
    dims[0] = s->tp, dims[1] = s->cp, dims[2] = s->dp, dims[3] = s->pp;
  } else {
    dims[0] = s->etp, dims[1] = s->ep, dims[2] = s->edp, dims[3] = s->pp;
  }
}

static void split_rank(int rank, const int dims[GRID_DIMS], int idx[GRID_DIMS]) {
  for (int d = 0; d < GRID_DIMS; d++) {
    idx[d] = rank % dims[d];
    rank /= dims[d];
  }
}

static int join_rank(const int idx[GRID_DIMS], const int dims[GRID_DIMS]) {
  int rank = 0;
  for (int d = GRID_DIMS - 1; d >= 0; d--) rank = rank * dims[d] + idx[d];
  return rank;
}

/* The divisors of n, comma separated (the first and last few when there are
 * many), for "values that fit" hints. Pairs d, n/d are found up to sqrt(n). */
static void format_divisors(int n, char *buf, size_t cap) {
  enum { MAX_SHOWN = 8 };
  int low[MAX_SHOWN], high[MAX_SHOWN], nlow = 0, nhigh = 0, more = 0;
  for (int d = 1; (long long)d * d <= n; d++) {
    if (n % d) continue;
    if (nlow < MAX_SHOWN)
      low[nlow++] = d;
    else
      more = 1;
    int pair = n / d;
    if (pair != d) { /* found largest first */
      if (nhigh < MAX_SHOWN)
        high[nhigh++] = pair;
      else
        more = 1;
    }
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < nlow && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%d", i ? ", " : "", low[i]);
  if (more && used < cap) used += (size_t)snprintf(buf + used, cap - used, ", ...");
  for (int i = nhigh - 1; i >= 0 && used < cap; i--)
    used += (size_t)snprintf(buf + used, cap - used, ", %d", high[i]);
}

static int check_size(const char *name, int value, int derive_zero, int world, Error *err) {
  if (value < 1 && !(derive_zero && value == 0))
    return error_set(err, ERR_CONFIG, "parallel size %s must be >= 1%s (got %d)", name,
                     derive_zero ? " or 0 to derive it" : "", value);
  if (value > world)
    return error_set(err, ERR_CONFIG, "parallel size %s %d is more than the %d ranks in the world",
                     name, value, world);
  return ERR_OK;
}

/* Derives or checks the third size of one grid: world = a * b * third * pp.
 * Divisibility is tested one factor at a time so that no product can
 * overflow; sizes are already known to be at most the world size. */
static int resolve_grid(const char *grid_name, const char *names[4], const int sizes[4], int *third,
                        int world, Error *err) {
  if (world % sizes[3] != 0)
    return error_set(err, ERR_CONFIG,
                     "%s grid: pp %d does not divide the world size %d; pp must be a divisor of %d",
                     grid_name, sizes[3], world, world);
  int per_stage = world / sizes[3];
  if (per_stage % sizes[0] != 0 || (per_stage / sizes[0]) % sizes[1] != 0) {
    char fits[256];
    format_divisors(per_stage, fits, sizeof fits);
    double known = (double)sizes[0] * sizes[1] * sizes[3];
    return error_set(err, ERR_CONFIG,
                     "%s grid: %s %d x %s %d x pp %d = %.0f does not divide the world size %d, so "
                     "%s = %d / %.0f is not whole; with pp %d, %s x %s must divide %d (one of: %s)",
                     grid_name, names[0], sizes[0], names[1], sizes[1], sizes[3], known, world,
                     names[2], world, known, sizes[3], names[0], names[1], per_stage, fits);
  }
  int fit = per_stage / sizes[0] / sizes[1];
  if (*third == 0) {
    *third = fit;
    return ERR_OK;
  }
  if (*third != fit)
    return error_set(err, ERR_CONFIG,
                     "%s grid: %s %d x %s %d x %s %d x pp %d = %.0f ranks, but the world has %d; "
                     "%s %d would make it match (or give %s 0 to derive it)",
                     grid_name, names[0], sizes[0], names[1], sizes[1], names[2], *third, sizes[3],
                     (double)sizes[0] * sizes[1] * *third * sizes[3], world, names[2], fit,
                     names[2]);
  return ERR_OK;
}

int grid_sizes_resolve(GridSizes *s, Error *err) {
  if (s->world < 1) return error_set(err, ERR_CONFIG, "world size must be >= 1 (got %d)", s->world);
  int rc;
  const int w = s->world;
  if ((rc = check_size("tp", s->tp, 0, w, err)) || (rc = check_size("cp", s->cp, 0, w, err)) ||
      (rc = check_size("dp", s->dp, 1, w, err)) || (rc = check_size("pp", s->pp, 0, w, err)) ||
      (rc = check_size("etp", s->etp, 0, w, err)) || (rc = check_size("ep", s->ep, 0, w, err)) ||
      (rc = check_size("edp", s->edp, 1, w, err)))
    return rc;
  static const char *attn_names[4] = {"tp", "cp", "dp", "pp"};
  static const char *moe_names[4] = {"etp", "ep", "edp", "pp"};
  int attn[4] = {s->tp, s->cp, s->dp, s->pp};
  int moe[4] = {s->etp, s->ep, s->edp, s->pp};
  if ((rc = resolve_grid("attention (tp-cp-dp-pp)", attn_names, attn, &s->dp, s->world, err)))
    return rc;
  if ((rc = resolve_grid("MoE (etp-ep-edp-pp)", moe_names, moe, &s->edp, s->world, err))) return rc;
  /* Holds by construction (pp is the slowest dimension of both grids); checked
   * because a pipeline stage that meant different ranks in the two grids
   * would silently send activations to the wrong place. */
  int a_dims[GRID_DIMS], m_dims[GRID_DIMS], a_idx[GRID_DIMS], m_idx[GRID_DIMS];
  grid_dims(s, GRID_ATTENTION, a_dims);
  grid_dims(s, GRID_MOE, m_dims);
  for (int r = 0; r < s->world; r++) {
    split_rank(r, a_dims, a_idx);
    split_rank(r, m_dims, m_idx);
    if (a_idx[3] != m_idx[3])
      return error_set(err, ERR_INTERNAL,
                       "rank %d is in pipeline stage %d of the attention grid but stage %d of the "
                       "MoE grid; pipeline groups must be identical in both grids",
                       r, a_idx[3], m_idx[3]);
  }
  return ERR_OK;
}

void grid_coords_of_rank(const GridSizes *s, int rank, GridCoords *c) {
  int dims[GRID_DIMS], idx[GRID_DIMS];
  grid_dims(s, GRID_ATTENTION, dims);
  split_rank(rank, dims, idx);
  c->tp = idx[0], c->cp = idx[1], c->dp = idx[2], c->pp = idx[3];
  grid_dims(s, GRID_MOE, dims);
  split_rank(rank, dims, idx);
  c->etp = idx[0], c->ep = idx[1], c->edp = idx[2];
}

int grid_attention_rank(const GridSizes *s, int tp, int cp, int dp, int pp) {
  int dims[GRID_DIMS], idx[GRID_DIMS] = {tp, cp, dp, pp};
  grid_dims(s, GRID_ATTENTION, dims);
  return join_rank(idx, dims);
}

int grid_moe_rank(const GridSizes *s, int etp, int ep, int edp, int pp) {
  int dims[GRID_DIMS], idx[GRID_DIMS] = {etp, ep, edp, pp};
  grid_dims(s, GRID_MOE, dims);
  return join_rank(idx, dims);
}

int grid_group_size(const GridSizes *s, GridGroupKind kind) {
  const GroupSpec *g = &group_specs[kind];
  int dims[GRID_DIMS], size = 1;
  grid_dims(s, g->grid, dims);
  for (int d = 0; d < GRID_DIMS; d++)
    if (g->dims & (1u << d)) size *= dims[d];
  return size;
}

int grid_group_index(const GridSizes *s, GridGroupKind kind, int rank) {
  const GroupSpec *g = &group_specs[kind];
  int dims[GRID_DIMS], idx[GRID_DIMS], index = 0;
  grid_dims(s, g->grid, dims);
  split_rank(rank, dims, idx);
  for (int d = GRID_DIMS - 1; d >= 0; d--)
    if (g->dims & (1u << d)) index = index * dims[d] + idx[d];
  return index;
}

int grid_group_first_rank(const GridSizes *s, GridGroupKind kind, int rank) {
  const GroupSpec *g = &group_specs[kind];
  int dims[GRID_DIMS], idx[GRID_DIMS];
  grid_dims(s, g->grid, dims);
  split_rank(rank, dims, idx);
  for (int d = 0; d < GRID_DIMS; d++)
    if (g->dims & (1u << d)) idx[d] = 0;
  return join_rank(idx, dims);
}

int grid_group_members(const GridSizes *s, GridGroupKind kind, int rank, int *members) {
  const GroupSpec *g = &group_specs[kind];
  int dims[GRID_DIMS], base[GRID_DIMS], idx[GRID_DIMS];
  grid_dims(s, g->grid, dims);
  split_rank(rank, dims, base);
  int count = grid_group_size(s, kind);
  for (int i = 0; i < count; i++) {
    /* Member i: i written in the mixed radix of the varying dimensions,
     * fastest first, over the fixed coordinates of rank. */
    int rest = i;
    for (int d = 0; d < GRID_DIMS; d++) {
      if (g->dims & (1u << d)) {
        idx[d] = rest % dims[d];
        rest /= dims[d];
      } else {
        idx[d] = base[d];
      }
    }
    members[i] = join_rank(idx, dims);
  }
  return count;
}

void grid_print_summary(FILE *out, const GridSizes *s, int max_ranks) {
  fprintf(out,
          "grid: %d ranks = tp %d x cp %d x dp %d x pp %d (attention, tp-cp-dp-pp) "
          "= etp %d x ep %d x edp %d x pp %d (MoE, etp-ep-edp-pp)\n",
          s->world, s->tp, s->cp, s->dp, s->pp, s->etp, s->ep, s->edp, s->pp);
  int shown = max_ranks > 0 && max_ranks < s->world ? max_ranks : s->world;
  for (int r = 0; r < shown; r++) {
    GridCoords c;
    grid_coords_of_rank(s, r, &c);
    fprintf(out, "  rank %d: tp %d cp %d dp %d pp %d | etp %d ep %d edp %d pp %d\n", r, c.tp, c.cp,
            c.dp, c.pp, c.etp, c.ep, c.edp, c.pp);
  }
  if (shown < s->world) fprintf(out, "  ... %d more ranks\n", s->world - shown);
}
