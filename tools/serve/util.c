/* Small helpers of the server: growable byte buffers, clocks, non-secret random numbers for
 * seeds and ids, and a UTF-8 check for the text the server itself produces. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/serve.h"

int serve_buf_append(serve_buf *b, const void *data, size_t n) {
    if (n == 0) return 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) return -1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int serve_buf_printf(serve_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof(small)) return serve_buf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = serve_buf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

void serve_buf_free(serve_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int64_t serve_unix_time(void) {
    return (int64_t)time(NULL);
}

/* splitmix64 over a counter mixed with the clock: distinct values for seeds and response ids;
 * nothing here is a secret, so no entropy source (and no file) is involved. */
uint64_t serve_random_u64(void) {
    static atomic_ullong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull ^
                 ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int serve_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + k >= n) return 0; /* truncated sequence */
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

int serve_buf_append_utf8(serve_buf *b, const char *t, size_t n) {
    if (serve_utf8_valid(t, n) && !memchr(t, 0, n)) return serve_buf_append(b, t, n);
    /* Replace what is not UTF-8 (a cut multi-byte character) and NUL with U+FFFD. */
    size_t i = 0;
    while (i < n) {
        size_t k = 1;
        unsigned c = (unsigned char)t[i];
        if (c >= 0xF0)
            k = 4;
        else if (c >= 0xE0)
            k = 3;
        else if (c >= 0xC0)
            k = 2;
        int rc;
        if (c && i + k <= n && serve_utf8_valid(t + i, k)) {
            rc = serve_buf_append(b, t + i, k);
        } else {
            rc = serve_buf_append(b, "\xEF\xBF\xBD", 3);
            k = 1;
        }
        if (rc) return rc;
        i += k;
    }
    return 0;
}
