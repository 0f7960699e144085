/* Error records and stderr logging shared by the whole host (see error.h). */
#include "util/error.h"
#include "weft/sdk.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void weft_error_clear(weft_error *err) {
    if (!err) return;
    err->size = sizeof(*err);
    err->code = WEFT_OK;
    err->source[0] = '\0';
    err->message[0] = '\0';
}

/* The SDK's setter, which plugins use too: formatted apart and then copied, so a caller may pass
 * err's own message or source as an argument (wrapping the error it got). */
weft_status weft_error_vset(weft_error *err, weft_status code, const char *source,
                            const char *fmt, va_list ap) {
    return weft_sdk_verror(err, code, source ? source : "runtime", fmt, ap);
}

weft_status weft_error_set(weft_error *err, weft_status code, const char *source, const char *fmt,
                           ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_error_vset(err, code, source, fmt, ap);
    va_end(ap);
    return code;
}

void weft_error_prefix(weft_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[256], old[sizeof(err->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof(old));
    snprintf(err->message, sizeof(err->message), "%s: %s", head, old);
}

const char *weft_status_name(weft_status code) {
    switch (code) {
    case WEFT_OK: return "ok";
    case WEFT_AGAIN: return "try again";
    case WEFT_ABORTED: return "aborted";
    case WEFT_FINISHED: return "finished";
    case WEFT_ERR_INVALID: return "invalid";
    case WEFT_ERR_NOMEM: return "out of memory";
    case WEFT_ERR_IO: return "i/o error";
    case WEFT_ERR_FORMAT: return "bad format";
    case WEFT_ERR_UNSUPPORTED: return "unsupported";
    case WEFT_ERR_DEVICE: return "device error";
    case WEFT_ERR_ABI: return "abi mismatch";
    case WEFT_ERR_MISMATCH: return "mismatch";
    case WEFT_ERR_NOT_FOUND: return "not found";
    default: return "internal error";
    }
}

/* WEFT_LOG read once; any thread may be first (the server logs from several), so the level is
 * an atomic and a value that is not a level is named once, by the thread that read it. */
int weft_log_threshold(void) {
    static _Atomic int level = -1;
    int l = atomic_load_explicit(&level, memory_order_relaxed);
    if (l >= 0) return l;
    const char *s = getenv("WEFT_LOG");
    int want = WEFT_LOG_WARN, bad = 0;
    if (s && *s) {
        if (!strcasecmp(s, "error"))
            want = WEFT_LOG_ERROR;
        else if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning"))
            want = WEFT_LOG_WARN;
        else if (!strcasecmp(s, "info"))
            want = WEFT_LOG_INFO;
        else if (!strcasecmp(s, "debug"))
            want = WEFT_LOG_DEBUG;
        else
            bad = 1;
    }
    int expected = -1;
    if (atomic_compare_exchange_strong(&level, &expected, want) && bad)
        fprintf(stderr,
                "weft warn [log] WEFT_LOG '%.64s': expected error, warn, info or debug; logging "
                "at warn\n",
                s);
    return atomic_load_explicit(&level, memory_order_relaxed);
}

void weft_log_v(int level, const char *source, const char *fmt, va_list ap) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (level > weft_log_threshold()) return;
    if (level < 0 || level > 3) level = 3;
    fprintf(stderr, "weft %s [%s] ", names[level], source ? source : "runtime");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void weft_log(int level, const char *source, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_log_v(level, source, fmt, ap);
    va_end(ap);
}
