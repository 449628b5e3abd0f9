/* Spec lookup by name and model loading from a model or run config
 * (rules in config_paths.h). */
#include "plan/config_paths.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_text.h"
#include "base/json_util.h"
#include "base/near_miss.h"

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

enum { MAX_LISTED = 64 };

static int compare_names(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* The spec names (file names without .json) under each <dir>/<kind>, once
 * each, sorted; returns how many (at most MAX_LISTED). */
static int list_spec_names(char dirs[][PATH_MAX], int nd, const char *kind, char names[][64]) {
  int n = 0;
  for (int i = 0; i < nd; i++) {
    char dir[PATH_MAX + 40];
    snprintf(dir, sizeof dir, "%.*s/%.*s", PATH_MAX - 1, dirs[i], 32, kind);
    DIR *d = opendir(dir);
    if (!d) continue;
    for (struct dirent *e; (e = readdir(d)) && n < MAX_LISTED;) {
      size_t len = strlen(e->d_name);
      if (len <= 5 || len - 5 >= 64 || strcmp(e->d_name + len - 5, ".json")) continue;
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
      int seen = 0;
      for (int k = 0; k < n && !seen; k++) seen = !strcmp(names[k], name);
      if (!seen) snprintf(names[n++], 64, "%s", name);
    }
    closedir(d);
  }
  qsort(names, (size_t)n, sizeof names[0], compare_names);
  return n;
}

int plan_find_config(const char *kind, const char *name, char *path, size_t size, Error *err) {
  if (!name || !*name) return error_set(err, ERR_ARG, "no %s name given", kind);
  if (is_file(name)) {
    snprintf(path, size, "%s", name);
    return ERR_OK;
  }
  char base[256];
  size_t n = 0;
  for (const char *c = name; *c && n + 1 < sizeof base; c++) base[n++] = (char)tolower((unsigned char)*c);
  base[n] = '\0';
  if (n > 5 && !strcmp(base + n - 5, ".json")) base[n - 5] = '\0';
  if (strchr(base, '/'))
    return error_set(err, ERR_IO, "%s file %s does not exist", kind, name);

  char dirs[5][PATH_MAX];
  int nd = 0;
  const char *env = getenv("FIVEFOLD_CONFIGS");
  if (env && *env) snprintf(dirs[nd++], PATH_MAX, "%s", env);
  snprintf(dirs[nd++], PATH_MAX, "configs");
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(dirs[nd++], PATH_MAX, "%.*s/configs", PATH_MAX - 16, exe);
    snprintf(dirs[nd++], PATH_MAX, "%.*s/../configs", PATH_MAX - 16, exe);
    snprintf(dirs[nd++], PATH_MAX, "%.*s/../../configs", PATH_MAX - 16, exe);
  }
  for (int i = 0; i < nd; i++) {
    char candidate[PATH_MAX + 300];
    snprintf(candidate, sizeof candidate, "%.*s/%.*s/%.*s.json", PATH_MAX - 1, dirs[i], 32, kind, 255, base);
    if (is_file(candidate)) {
      if (strlen(candidate) >= size) return error_set(err, ERR_ARG, "path too long: %s", candidate);
      snprintf(path, size, "%s", candidate);
      return ERR_OK;
    }
  }
  char looked[1024];
  size_t used = 0;
  looked[0] = '\0';
  for (int i = 0; i < nd && used < sizeof looked; i++)
    used += (size_t)snprintf(looked + used, sizeof looked - used, "%s%s/%s", i ? ", " : "", dirs[i], kind);
  char names[MAX_LISTED][64];
  int num_names = list_spec_names(dirs, nd, kind, names);
  const char *candidates[MAX_LISTED];
  for (int i = 0; i < num_names; i++) candidates[i] = names[i];
  char hint[128] = "", known[1536] = "";
  const char *best = near_miss(base, candidates, num_names);
  if (best) snprintf(hint, sizeof hint, " (did you mean '%s'?)", best);
  used = 0;
  for (int i = 0; i < num_names && used < sizeof known; i++)
    used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "; known: ", names[i]);
  return error_set(err, ERR_IO,
                   "no %s spec named '%s'%s: not a file, and no %s.json in %s%s (set FIVEFOLD_CONFIGS to the "
                   "configs directory)",
                   kind, name, hint, base, looked, known);
}

/* The "model" member of a run config: an object to parse, or a path
 * relative to the run config's directory. */
static int load_run_config_model(const char *path, const cJSON *member, ModelConfig *model, Error *err) {
  char where[PATH_MAX + 16];
  snprintf(where, sizeof where, "%s: model", path);
  if (cJSON_IsObject(member)) {
    if (cJSON_GetObjectItemCaseSensitive(member, "family"))
      return error_set(err, ERR_CONFIG, "%s: the planner prices transformers; this run config's model has a \"family\"",
                       where);
    return model_config_from_json(model, member, where, err);
  }
  if (!cJSON_IsString(member) || !member->valuestring[0])
    return error_set(err, ERR_CONFIG, "%s must be a model config object or a path to one, got %s", where,
                     json_type_name(member));
  const char *slash = strrchr(path, '/');
  char model_path[PATH_MAX + 256];
  if (member->valuestring[0] == '/' || !slash) snprintf(model_path, sizeof model_path, "%s", member->valuestring);
  else snprintf(model_path, sizeof model_path, "%.*s/%s", (int)(slash - path), path, member->valuestring);
  if (model_config_load(model, model_path, err)) return error_wrap(err, "%s", where);
  return 0;
}

int plan_load_model(const char *path, ModelConfig *model, int *from_run_config, Error *err) {
  if (from_run_config) *from_run_config = 0;
  char *text = NULL;
  if (file_read_text(path, "model config", (size_t)64 << 20, &text, NULL, err)) return err->code;
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *member = root && cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "model") : NULL;
  int is_run_config = member && (cJSON_IsObject(member) || cJSON_IsString(member));
  int rc;
  if (is_run_config) {
    if (from_run_config) *from_run_config = 1;
    rc = load_run_config_model(path, member, model, err);
  } else {
    rc = model_config_load(model, path, err); /* its own messages, syntax errors included */
  }
  cJSON_Delete(root);
  return rc;
}
