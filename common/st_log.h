/*
 * st_log: one-line logs to stderr, "ts level prog: message".
 * Thread-safe (one fprintf per line).  Never blocks on anything but stderr.
 */
#ifndef ST_LOG_H
#define ST_LOG_H

enum st_log_level { ST_LOG_ERROR = 0, ST_LOG_WARN, ST_LOG_INFO, ST_LOG_DEBUG };

void st_log_init(const char *prog); /* level from STUDIO_LOG_LEVEL (error|warn|info|debug) */
void st_log_set_level(enum st_log_level lvl);
void st_log(enum st_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define st_error(...) st_log(ST_LOG_ERROR, __VA_ARGS__)
#define st_warn(...) st_log(ST_LOG_WARN, __VA_ARGS__)
#define st_info(...) st_log(ST_LOG_INFO, __VA_ARGS__)
#define st_debug(...) st_log(ST_LOG_DEBUG, __VA_ARGS__)

#endif
