/* Spec lookup by name (rules in config_paths.h). */
#include "plan/config_paths.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
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
  return error_set(err, ERR_IO, "no %s spec named '%s': not a file, and no %s.json in %s (set FIVEFOLD_CONFIGS to the "
                   "configs directory)", kind, name, base, looked);
}
