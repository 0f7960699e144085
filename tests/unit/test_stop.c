/* Tests of stop strings over streamed text: fixed cases, and randomized texts cut at random
 * byte offsets (inside UTF-8 characters and inside stop strings) whose streamed output must
 * equal a straightforward search of the whole text, with nothing held back beyond the longest
 * suffix that could still start a stop string (plus an incomplete trailing character). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "text/stop.h"
#include "util/error.h"

typedef struct sink {
    char buf[8192];
    size_t len;
} sink;

static void take(sink *k, char *s, size_t n) {
    assert_non_null(s);
    assert_true(k->len + n < sizeof(k->buf));
    memcpy(k->buf + k->len, s, n);
    k->len += n;
    k->buf[k->len] = '\0';
    free(s);
}

static int feed(weft_stopper *st, sink *k, const char *t, size_t n) {
    char *e;
    size_t el;
    int stopped = -1;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_stopper_feed(st, t, n, &e, &el, &stopped, &err), WEFT_OK);
    take(k, e, el);
    return stopped;
}

static void flush(weft_stopper *st, sink *k) {
    char *e;
    size_t el;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_stopper_flush(st, &e, &el, &err), WEFT_OK);
    take(k, e, el);
}

static void test_basic(void **state) {
    (void)state;
    const char *stops[] = {"\n\nUser:", "</s>"};
    weft_stopper *st = weft_stopper_new(stops, 2);
    assert_non_null(st);
    sink k = {0};
    assert_int_equal(feed(st, &k, "Hello", 5), 0);
    assert_string_equal(k.buf, "Hello");
    assert_int_equal(feed(st, &k, " there\n", 7), 0);
    assert_string_equal(k.buf, "Hello there"); /* "\n" could begin "\n\nUser:" */
    assert_int_equal(feed(st, &k, "\nUs", 3), 0);
    assert_string_equal(k.buf, "Hello there");
    assert_int_equal(feed(st, &k, "x", 1), 0); /* "\n\nUsx" can no longer match */
    assert_string_equal(k.buf, "Hello there\n\nUsx");
    assert_int_equal(feed(st, &k, "</", 2), 0);
    assert_int_equal(feed(st, &k, "s>tail", 6), 1);
    assert_string_equal(k.buf, "Hello there\n\nUsx");
    assert_int_equal(weft_stopper_which(st), 1);
    assert_int_equal(feed(st, &k, "more", 4), 1); /* ignored after the stop */
    flush(st, &k);
    assert_string_equal(k.buf, "Hello there\n\nUsx");
    weft_stopper_free(st);

    /* Without a match, flush releases the held suffix. */
    st = weft_stopper_new(stops, 2);
    sink k2 = {0};
    assert_int_equal(feed(st, &k2, "end\n\nUser", 9), 0);
    assert_string_equal(k2.buf, "end");
    flush(st, &k2);
    assert_string_equal(k2.buf, "end\n\nUser");
    assert_int_equal(weft_stopper_which(st), -1);
    weft_stopper_free(st);
}

static void test_ties_and_utf8(void **state) {
    (void)state;
    /* The match that completes first wins even if a longer one started earlier. */
    const char *stops[] = {"xabc", "ab", "", "b"};
    weft_stopper *st = weft_stopper_new(stops, 4);
    sink k = {0};
    assert_int_equal(feed(st, &k, "1xab", 4), 1);
    assert_string_equal(k.buf, "1x");
    assert_int_equal(weft_stopper_which(st), 1); /* "ab" and "b" end together: longer wins */
    weft_stopper_free(st);

    /* A piece that ends inside a character holds the partial character back. */
    st = weft_stopper_new(NULL, 0);
    sink k2 = {0};
    const char *t = "caf\xc3\xa9 \xe6\x97\xa5";
    assert_int_equal(feed(st, &k2, t, 4), 0);
    assert_string_equal(k2.buf, "caf");
    assert_int_equal(feed(st, &k2, t + 4, 3), 0);
    assert_string_equal(k2.buf, "caf\xc3\xa9 ");
    assert_int_equal(feed(st, &k2, t + 7, 1), 0);
    assert_string_equal(k2.buf, "caf\xc3\xa9 ");
    assert_int_equal(feed(st, &k2, t + 8, 1), 0);
    assert_string_equal(k2.buf, t);
    weft_stopper_free(st);

    /* A stop string split inside its own multibyte character. */
    const char *jp[] = {"\xe6\x97\xa5\xe6\x9c\xac"}; /* 日本 */
    st = weft_stopper_new(jp, 1);
    sink k3 = {0};
    assert_int_equal(feed(st, &k3, "a\xe6\x97", 3), 0);
    assert_string_equal(k3.buf, "a");
    assert_int_equal(feed(st, &k3, "\xa5\xe6", 2), 0);
    assert_int_equal(feed(st, &k3, "\x9c\xac!", 3), 1);
    assert_string_equal(k3.buf, "a");
    weft_stopper_free(st);

    assert_null(weft_stopper_new(NULL, 2));
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_stopper_feed(NULL, "a", 1, NULL, NULL, NULL, &err), WEFT_ERR_INVALID);
}

/* ---- randomized splitting against a whole-text search ---------------------------------------- */

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* Whole-text rule: smallest end offset; at equal ends the smallest start. Returns the length of
 * the output and sets *which (caller index) or -1. */
static size_t whole_text(const char *t, size_t n, const char *const *stops, size_t ns, int *which) {
    for (size_t end = 1; end <= n; end++) {
        size_t best_len = 0;
        int best = -1;
        for (size_t i = 0; i < ns; i++) {
            size_t l = strlen(stops[i]);
            if (l && l <= end && l > best_len && !memcmp(t + end - l, stops[i], l)) {
                best_len = l;
                best = (int)i;
            }
        }
        if (best >= 0) {
            *which = best;
            return end - best_len;
        }
    }
    *which = -1;
    return n;
}

/* What may be held after the prefix t[0..n): the longest proper stop prefix at the end, then
 * an incomplete character before it. */
static size_t expected_hold(const char *t, size_t n, const char *const *stops, size_t ns) {
    size_t hold = 0;
    for (size_t i = 0; i < ns; i++) {
        size_t l = strlen(stops[i]);
        for (size_t h = 1; h < l && h <= n; h++)
            if (h > hold && !memcmp(t + n - h, stops[i], h)) hold = h;
    }
    size_t e = n - hold;
    /* find the lead byte of the last character of t[0..e) */
    size_t b = e;
    while (b > 0 && e - b < 4 && ((unsigned char)t[b - 1] & 0xC0) == 0x80)
        b--;
    if (b > 0 && e - b < 4) {
        unsigned char c = (unsigned char)t[b - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > e - (b - 1)) hold += e - (b - 1);
    }
    return hold;
}

static void test_random_splits(void **state) {
    (void)state;
    static const char *alphabet[] = {"a",
                                     "b",
                                     "c",
                                     "x",
                                     " ",
                                     "\n",
                                     "\xc3\xa9",
                                     "\xe6\x97\xa5",
                                     "\xe6\x9c\xac",
                                     "\xf0\x9f\x98\x80"};
    static const char *pool[] = {"abc",
                                 "ab",
                                 "bca",
                                 "aaa",
                                 "\n\n",
                                 "\xe6\x97\xa5\xe6\x9c\xac",
                                 "\xf0\x9f\x98\x80x",
                                 "c\xc3\xa9",
                                 "xx b",
                                 "abcabcab"};
    rng_state = 20240601;
    int matched = 0;
    for (int iter = 0; iter < 3000; iter++) {
        char text[600];
        size_t n = 0;
        size_t target = 1 + rnd(120);
        while (n < target) {
            const char *a = alphabet[rnd(10)];
            size_t l = strlen(a);
            memcpy(text + n, a, l);
            n += l;
        }
        text[n] = '\0';
        size_t ns = rnd(4); /* 0..3 stop strings */
        const char *stops[3];
        for (size_t i = 0; i < ns; i++)
            stops[i] = pool[rnd(10)];
        int want_which;
        size_t want_len = whole_text(text, n, stops, ns, &want_which);
        matched += want_which >= 0;

        for (int split = 0; split < 4; split++) {
            weft_stopper *st = weft_stopper_new(stops, ns);
            assert_non_null(st);
            sink k = {0};
            size_t pos = 0;
            int stopped = 0;
            while (pos < n && !stopped) {
                size_t piece = 1 + rnd(split == 0 ? 1 : split == 1 ? 3 : 12);
                if (piece > n - pos) piece = n - pos;
                stopped = feed(st, &k, text + pos, piece);
                pos += piece;
                if (!stopped) {
                    /* exactly the minimal hold is kept back */
                    size_t hold = expected_hold(text, pos, stops, ns);
                    assert_int_equal(k.len, pos - hold);
                    assert_memory_equal(k.buf, text, k.len);
                }
            }
            if (!stopped) flush(st, &k);
            assert_int_equal(stopped, want_which >= 0);
            assert_int_equal(k.len, want_len);
            assert_memory_equal(k.buf, text, want_len);
            if (want_which >= 0) {
                /* identical stop strings in the list: the first listed one is reported */
                int w = weft_stopper_which(st);
                assert_string_equal(stops[w], stops[want_which]);
                assert_int_equal(w, want_which);
            }
            weft_stopper_free(st);
        }
    }
    assert_true(matched > 500); /* the generator exercises matches, not just pass-through */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_ties_and_utf8),
        cmocka_unit_test(test_random_splits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
