/* Error records and logging for the host. Every failing function fills a caller-owned
 * weft_error (weft/plugin.h) whose message names the file, field or plugin and says what was
 * expected and what was found; only main() decides to exit. */
#ifndef WEFT_UTIL_ERROR_H
#define WEFT_UTIL_ERROR_H

#include <stdarg.h>

#include "weft/plugin.h"

#if defined(__GNUC__)
#define WEFT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define WEFT_PRINTF(a, b)
#endif

/* Clears err (size kept or set). Safe with err == NULL. */
void weft_error_clear(weft_error *err);
/* Fills err and returns code, so callers can `return weft_error_set(...)`. err may be NULL. */
weft_status weft_error_set(weft_error *err, weft_status code, const char *source, const char *fmt,
                           ...) WEFT_PRINTF(4, 5);
weft_status weft_error_vset(weft_error *err, weft_status code, const char *source,
                            const char *fmt, va_list ap);
/* Prepends "context: " to an existing message (keeps code and source). */
void weft_error_prefix(weft_error *err, const char *fmt, ...) WEFT_PRINTF(2, 3);
/* A short name for a status code ("invalid", "no memory", ...). */
const char *weft_status_name(weft_status code);

/* Logging to stderr; level from WEFT_LOG (error|warn|info|debug, default warn). */
void weft_log(int level, const char *source, const char *fmt, ...) WEFT_PRINTF(3, 4);
void weft_log_v(int level, const char *source, const char *fmt, va_list ap);
int weft_log_threshold(void);

#endif
