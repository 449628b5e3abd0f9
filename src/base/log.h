/* Logging to stderr/stdout with a level and (later) the rank in front. */
#ifndef FIVEFOLD_BASE_LOG_H
#define FIVEFOLD_BASE_LOG_H

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } LogLevel;

void log_set_level(LogLevel level);
void log_set_rank(int rank); /* -1: single process, no prefix */
void log_msg(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
