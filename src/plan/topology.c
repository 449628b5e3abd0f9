/* Tiered cluster topologies (cluster.h "topology"): parsing the tiers and
 * expanding them to the nominal link between any two devices, so large
 * irregular clusters need no N x N matrix.
 *
 * The link between devices a and b (node = device / devices_per_node):
 *   same node, same island        intra_node
 *   same node, other island       cross_island (PCIe / host bridge)
 *   other node, same switch       inter_node
 *   other switch                  inter_switch, or inter_node with its
 *                                 bandwidth divided by oversubscription and
 *                                 switch_latency_us added
 * and an off-node pair that touches a slow node is capped by that node's
 * link (the lower bandwidth, the higher latency). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/cluster.h"

static PlanLink slower_of(PlanLink a, PlanLink b) {
  PlanLink l = {fmin(a.bandwidth, b.bandwidth), fmax(a.latency, b.latency)};
  return l;
}

PlanLink cluster_tiers_link(const ClusterSpec *s, int a, int b) {
  const PlanTiers *t = &s->tiers;
  int D = s->devices_per_node;
  int na = a / D, nb = b / D;
  if (na == nb) {
    if (t->devices_per_island > 0 && (a % D) / t->devices_per_island != (b % D) / t->devices_per_island)
      return t->cross_island;
    return s->link[PLAN_LEVEL_INTRA];
  }
  PlanLink l = s->link[PLAN_LEVEL_INTER];
  if (t->nodes_per_switch > 0 && na / t->nodes_per_switch != nb / t->nodes_per_switch) l = t->inter_switch;
  for (int i = 0; i < t->num_slow_nodes; i++)
    if (t->slow_node[i] == na || t->slow_node[i] == nb) l = slower_of(l, t->slow_link[i]);
  return l;
}

/* ---- parsing: every message names the file and the field ---- */

static int field_error(const ClusterSpec *s, Error *err, const char *field, const char *expected) {
  return error_set(err, ERR_CONFIG, "%s: field \"topology.%s\": expected %s", s->origin, field, expected);
}

static int check_keys(const ClusterSpec *s, const cJSON *obj, const char *path, const char *const *allowed, int n,
                      Error *err) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    int ok = 0;
    for (int i = 0; i < n && !ok; i++) ok = item->string && !strcmp(item->string, allowed[i]);
    if (!ok) {
      char list[256];
      size_t used = 0;
      list[0] = '\0';
      for (int i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", allowed[i]);
      return error_set(err, ERR_CONFIG, "%s: unknown field \"topology%s%s.%s\"; expected one of: %s", s->origin,
                       *path ? "." : "", path, item->string ? item->string : "", list);
    }
  }
  return 0;
}

/* A number in [lo, hi] (open at lo when `open`); absent leaves *out. */
static int number(const ClusterSpec *s, const cJSON *obj, const char *path, const char *key, double lo, int open,
                  double hi, int required, double *out, int *given, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  char field[160];
  snprintf(field, sizeof field, "%s%s%s", path, *path ? "." : "", key);
  if (given) *given = v != NULL;
  if (!v) return required ? error_set(err, ERR_CONFIG, "%s: missing field \"topology.%s\"", s->origin, field) : 0;
  char range[96];
  snprintf(range, sizeof range, "a number %s %g", open ? ">" : ">=", lo);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || (open && v->valuedouble == lo) ||
      v->valuedouble > hi) {
    if (hi < 1e300) snprintf(range, sizeof range, "a number in %s%g, %g]", open ? "(" : "[", lo, hi);
    return field_error(s, err, field, range);
  }
  *out = v->valuedouble;
  return 0;
}

static int integer(const ClusterSpec *s, const cJSON *obj, const char *path, const char *key, int lo, int hi,
                   int required, int *out, int *given, Error *err) {
  double d = *out;
  int rc = number(s, obj, path, key, lo, 0, hi, required, &d, given, err);
  if (rc) return rc;
  if (d != floor(d)) {
    char field[160], expected[64];
    snprintf(field, sizeof field, "%s%s%s", path, *path ? "." : "", key);
    snprintf(expected, sizeof expected, "an integer in [%d, %d]", lo, hi);
    return field_error(s, err, field, expected);
  }
  *out = (int)d;
  return 0;
}

/* {bandwidth_GBps | bandwidth_Gbps, latency_us} */
static int link(const ClusterSpec *s, const cJSON *obj, const char *path, PlanLink *out, Error *err) {
  static const char *const keys[] = {"bandwidth_GBps", "bandwidth_Gbps", "latency_us"};
  static const char *const keys_node[] = {"node", "bandwidth_GBps", "bandwidth_Gbps", "latency_us"};
  int with_node = strstr(path, "slow_nodes") != NULL;
  if (!cJSON_IsObject(obj)) return field_error(s, err, path, "an object {bandwidth_GBps | bandwidth_Gbps, latency_us}");
  int rc = with_node ? check_keys(s, obj, path, keys_node, 4, err) : check_keys(s, obj, path, keys, 3, err);
  if (rc) return rc;
  double gbytes = 0, gbits = 0, lat = 0;
  int has_bytes = 0, has_bits = 0;
  if ((rc = number(s, obj, path, "bandwidth_GBps", 0, 1, 1e300, 0, &gbytes, &has_bytes, err))) return rc;
  if ((rc = number(s, obj, path, "bandwidth_Gbps", 0, 1, 1e300, 0, &gbits, &has_bits, err))) return rc;
  if (has_bytes == has_bits) {
    char field[160];
    snprintf(field, sizeof field, "%s.bandwidth_GBps", path);
    return field_error(s, err, field, "exactly one of bandwidth_GBps (bytes) and bandwidth_Gbps (bits)");
  }
  if ((rc = number(s, obj, path, "latency_us", 0, 0, 1e300, 1, &lat, NULL, err))) return rc;
  out->bandwidth = has_bytes ? gbytes * 1e9 : gbits * 1e9 / 8.0;
  out->latency = lat * 1e-6;
  return 0;
}

int cluster_tiers_from_json(ClusterSpec *s, const cJSON *o, Error *err) {
  static const char *const keys[] = {"nodes_per_switch", "oversubscription", "switch_latency_us", "inter_switch",
                                     "devices_per_island", "cross_island", "slow_nodes", "devices_per_nic"};
  PlanTiers *t = &s->tiers;
  memset(t, 0, sizeof *t);
  int rc = check_keys(s, o, "", keys, (int)(sizeof keys / sizeof keys[0]), err);
  if (rc) return rc;
  int has_nps = 0, has_over = 0, has_sw_lat = 0;
  if ((rc = integer(s, o, "", "nodes_per_switch", 1, s->nodes, 0, &t->nodes_per_switch, &has_nps, err))) return rc;
  double over = 1, sw_lat = 0;
  if ((rc = number(s, o, "", "oversubscription", 1, 0, 1e6, 0, &over, &has_over, err))) return rc;
  if ((rc = number(s, o, "", "switch_latency_us", 0, 0, 1e300, 0, &sw_lat, &has_sw_lat, err))) return rc;
  const cJSON *isw = cJSON_GetObjectItemCaseSensitive(o, "inter_switch");
  if ((has_over || has_sw_lat || isw) && !has_nps)
    return field_error(s, err, "nodes_per_switch", "an integer >= 1 when switches are described");
  if (has_nps && !has_over && !isw)
    return field_error(s, err, "oversubscription", "a number >= 1 (or an inter_switch link) with nodes_per_switch");
  if (isw && (has_over || has_sw_lat))
    return field_error(s, err, "inter_switch", "either inter_switch or oversubscription / switch_latency_us, not both");
  if (isw) {
    if ((rc = link(s, isw, "inter_switch", &t->inter_switch, err))) return rc;
  } else if (has_nps) {
    t->inter_switch = s->link[PLAN_LEVEL_INTER];
    t->inter_switch.bandwidth /= over;
    t->inter_switch.latency += sw_lat * 1e-6;
  }
  int has_isl = 0;
  if ((rc = integer(s, o, "", "devices_per_island", 1, s->devices_per_node, 0, &t->devices_per_island, &has_isl, err)))
    return rc;
  const cJSON *ci = cJSON_GetObjectItemCaseSensitive(o, "cross_island");
  if (has_isl && s->devices_per_node % t->devices_per_island)
    return field_error(s, err, "devices_per_island", "a divisor of devices_per_node");
  if (has_isl != (ci != NULL))
    return field_error(s, err, has_isl ? "cross_island" : "devices_per_island",
                       "devices_per_island and cross_island together");
  if (ci && (rc = link(s, ci, "cross_island", &t->cross_island, err))) return rc;
  const cJSON *slow = cJSON_GetObjectItemCaseSensitive(o, "slow_nodes");
  if (slow) {
    if (!cJSON_IsArray(slow)) return field_error(s, err, "slow_nodes", "an array of {node, bandwidth_GBps, latency_us}");
    int n = cJSON_GetArraySize(slow);
    if (n > PLAN_MAX_SLOW_NODES) return field_error(s, err, "slow_nodes", "at most 64 entries");
    for (int i = 0; i < n; i++) {
      const cJSON *e = cJSON_GetArrayItem(slow, i);
      char path[64];
      snprintf(path, sizeof path, "slow_nodes[%d]", i);
      if ((rc = link(s, e, path, &t->slow_link[i], err))) return rc;
      if ((rc = integer(s, e, path, "node", 0, s->nodes - 1, 1, &t->slow_node[i], NULL, err))) return rc;
    }
    t->num_slow_nodes = n;
  }
  int has_nic = 0;
  if ((rc = integer(s, o, "", "devices_per_nic", 1, s->devices_per_node, 0, &t->devices_per_nic, &has_nic, err)))
    return rc;
  if (has_nic && s->devices_per_node % t->devices_per_nic)
    return field_error(s, err, "devices_per_nic", "a divisor of devices_per_node (devices sharing one network port)");
  t->given = 1;
  return 0;
}
