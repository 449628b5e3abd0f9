/* Logging: info goes to stdout (it is the run's output), warnings and errors
 * to stderr. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

static LogLevel g_level = LOG_INFO;
static int g_rank = -1;

void log_set_level(LogLevel level) { g_level = level; }
void log_set_rank(int rank) { g_rank = rank; }

void log_msg(LogLevel level, const char *fmt, ...) {
  if (level < g_level) return;
  FILE *f = level >= LOG_WARN ? stderr : stdout;
  static const char *tags[] = {"debug: ", "", "warning: ", "error: "};
  if (g_rank >= 0) fprintf(f, "[rank %d] ", g_rank);
  fputs(tags[level], f);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fflush(f);
}
