/* Stop strings over streamed text. Detokenized text arrives in arbitrary pieces (a piece may
 * end inside a UTF-8 character or inside a stop string), so the stopper keeps back only what
 * could still turn into a match: the longest suffix of the text so far that is a proper prefix
 * of some stop string, plus the bytes of a trailing incomplete UTF-8 character so a client
 * never sees half a character. Everything else is released at once. The match that completes
 * first wins (smallest end offset; at equal ends the longer, earlier-starting one; identical
 * stop strings by list order), which is the only rule a stream can apply without waiting,
 * and the text before that match is the final output. Matching is on bytes; for valid UTF-8 a
 * byte match of a valid UTF-8 stop string always starts on a character boundary. */
#include "text/stop.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#define SRC "stop"

struct weft_stopper {
    char **stops;
    size_t *lens;
    size_t n;
    char *held; /* bytes not yet released, held_len of them */
    size_t held_len;
    int stopped;
    int which;      /* index into the caller's list of the stop string that matched, or -1 */
    size_t *origin; /* caller index of each kept stop string */
};

weft_stopper *weft_stopper_new(const char *const *stops, size_t n) {
    if (n && !stops) return NULL;
    weft_stopper *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->which = -1;
    if (n) {
        s->stops = calloc(n, sizeof(char *));
        s->lens = calloc(n, sizeof(size_t));
        s->origin = calloc(n, sizeof(size_t));
        if (!s->stops || !s->lens || !s->origin) goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        /* An empty stop string would match before any text: it is ignored, not an error. */
        if (!stops[i] || !stops[i][0]) continue;
        size_t len = strlen(stops[i]);
        s->stops[s->n] = malloc(len + 1);
        if (!s->stops[s->n]) goto fail;
        memcpy(s->stops[s->n], stops[i], len + 1);
        s->lens[s->n] = len;
        s->origin[s->n] = i;
        s->n++;
    }
    return s;
fail:
    weft_stopper_free(s);
    return NULL;
}

void weft_stopper_free(weft_stopper *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->origin);
    free(s->held);
    free(s);
}

int weft_stopper_which(const weft_stopper *s) {
    return s ? s->which : -1;
}

/* First occurrence of needle in hay, or NULL (memmem is not in C11/POSIX). */
static const char *find_bytes(const char *hay, size_t hay_len, const char *needle, size_t n) {
    if (n == 0 || n > hay_len) return NULL;
    const char *end = hay + (hay_len - n);
    for (const char *p = hay; p <= end; p++) {
        p = memchr(p, (unsigned char)needle[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (!memcmp(p, needle, n)) return p;
    }
    return NULL;
}

/* Bytes at the end of buf[0..len) that start a UTF-8 character not yet complete. */
static size_t incomplete_utf8_tail(const unsigned char *buf, size_t len) {
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        unsigned char c = buf[len - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: keep looking for the lead */
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? back : 0;
    }
    return 0; /* no lead byte within reach: not a character we could complete */
}

static weft_status give(char **emit, size_t *emit_len, const char *src, size_t len,
                        weft_error *err) {
    char *out = malloc(len + 1);
    if (!out) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%zu bytes of output text", len);
    if (len) memcpy(out, src, len);
    out[len] = '\0';
    *emit = out;
    *emit_len = len;
    return WEFT_OK;
}

weft_status weft_stopper_feed(weft_stopper *s, const char *text, size_t len, char **emit,
                              size_t *emit_len, int *stopped, weft_error *err) {
    if (!s || !emit || !emit_len || !stopped || (len && !text))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "weft_stopper_feed: stopper, emit, emit_len and stopped are "
                              "required (and text when len > 0)");
    *emit = NULL;
    *emit_len = 0;
    *stopped = s->stopped;
    if (s->stopped) return give(emit, emit_len, "", 0, err);

    size_t blen = s->held_len + len;
    if (blen < len)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "text length %zu overflows", len);
    char *buf = malloc(blen + 1);
    if (!buf) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%zu bytes of pending text", blen);
    if (s->held_len) memcpy(buf, s->held, s->held_len);
    if (len) memcpy(buf + s->held_len, text, len);

    /* No match can start before buf: held was the longest suffix that could begin one. */
    size_t best_end = (size_t)-1, best_start = 0;
    int best = -1;
    for (size_t i = 0; i < s->n; i++) {
        const char *hit = find_bytes(buf, blen, s->stops[i], s->lens[i]);
        if (!hit) continue;
        size_t start = (size_t)(hit - buf), end = start + s->lens[i];
        if (end < best_end || (end == best_end && start < best_start)) {
            best_end = end;
            best_start = start;
            best = (int)i;
        }
    }
    weft_status st;
    if (best >= 0) {
        st = give(emit, emit_len, buf, best_start, err);
        if (st == WEFT_OK) {
            s->stopped = 1;
            s->which = (int)s->origin[best];
            *stopped = 1;
            free(s->held);
            s->held = NULL;
            s->held_len = 0;
        }
        free(buf);
        return st;
    }

    size_t hold = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t max = s->lens[i] - 1 < blen ? s->lens[i] - 1 : blen;
        for (size_t h = max; h > hold; h--)
            if (!memcmp(buf + blen - h, s->stops[i], h)) {
                hold = h;
                break;
            }
    }
    hold += incomplete_utf8_tail((const unsigned char *)buf, blen - hold);

    st = give(emit, emit_len, buf, blen - hold, err);
    if (st == WEFT_OK) {
        memmove(buf, buf + blen - hold, hold);
        free(s->held);
        s->held = buf;
        s->held_len = hold;
    } else {
        free(buf);
    }
    return st;
}

weft_status weft_stopper_flush(weft_stopper *s, char **emit, size_t *emit_len, weft_error *err) {
    if (!s || !emit || !emit_len)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "weft_stopper_flush: stopper, emit and emit_len are required");
    weft_status st = give(emit, emit_len, s->held ? s->held : "", s->held_len, err);
    if (st == WEFT_OK) {
        free(s->held);
        s->held = NULL;
        s->held_len = 0;
    }
    return st;
}
