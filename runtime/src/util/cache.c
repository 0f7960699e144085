/* The cache root rule in one place (see cache.h). */
#include "util/cache.h"

#include <stdio.h>
#include <stdlib.h>

#include "util/error.h"

weft_status weft_cache_root(char *out, size_t cap, weft_error *err) {
    const char *w = getenv("WEFT_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;
    if (w && *w)
        n = snprintf(out, cap, "%s", w);
    else if (x && *x)
        n = snprintf(out, cap, "%s/weft", x);
    else if (h && *h)
        n = snprintf(out, cap, "%s/.cache/weft", h);
    else
        return weft_error_set(err, WEFT_ERR_NOT_FOUND, "cache",
                              "no cache directory: none of WEFT_CACHE, XDG_CACHE_HOME and HOME "
                              "is set");
    if (n < 0 || (size_t)n >= cap)
        return weft_error_set(err, WEFT_ERR_INVALID, "cache", "cache path is too long");
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    return WEFT_OK;
}

weft_status weft_cache_path(const char *sub, char *out, size_t cap, weft_error *err) {
    weft_status s = weft_cache_root(out, cap, err);
    if (s) return s;
    size_t n = 0;
    while (out[n]) n++;
    int m = snprintf(out + n, cap - n, "/%s", sub);
    if (m < 0 || (size_t)m >= cap - n)
        return weft_error_set(err, WEFT_ERR_INVALID, "cache", "cache path is too long");
    return WEFT_OK;
}
