/* The library chat templates call into: Python str/dict/list methods, Jinja2's filters and
 * tests, and the globals transformers provides (range, namespace, dict, raise_exception,
 * strftime_now). Each follows the Python or Jinja2 function it stands for, including what it
 * does with an Undefined argument, since real templates depend on those corners. Case mapping
 * covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (no Unicode database here). */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "text/jinja_rt.h"

/* ---- argument binding ------------------------------------------------------------------- */
enum { MAX_PARAMS = 8 };

typedef struct bound {
    jv v[MAX_PARAMS];
    int have[MAX_PARAMS];
} bound;

/* Binds a call's arguments to names (NULL terminated); the first nreq are required. */
static int bind(jctx *c, const jnode *n, const char *fname, const jargs *a,
                const char *const *names, size_t nreq, bound *b) {
    size_t nn = 0;
    while (names[nn])
        nn++;
    memset(b, 0, sizeof *b);
    if (a->npos > nn)
        return jx_type_error(c, n, "%s() takes at most %zu argument(s) (%zu given)", fname, nn,
                             a->npos);
    for (size_t i = 0; i < a->npos; i++) {
        b->v[i] = a->pos[i];
        b->have[i] = 1;
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < nn; i++)
            if (js_eq(a->kwn[k], names[i])) break;
        if (i == nn)
            return jx_type_error(c, n, "%s() got an unexpected keyword argument '%s'", fname,
                                 a->kwn[k]->s);
        if (b->have[i])
            return jx_type_error(c, n, "%s() got multiple values for argument '%s'", fname,
                                 names[i]);
        b->v[i] = a->kwv[k];
        b->have[i] = 1;
    }
    for (size_t i = 0; i < nreq; i++)
        if (!b->have[i])
            return jx_type_error(c, n, "%s() missing required argument '%s'", fname, names[i]);
    return 0;
}

static int want_int(jctx *c, const jnode *n, const char *what, jv v, int64_t *out) {
    if (v.t == JV_INT || v.t == JV_BOOL) {
        *out = v.u.i;
        return 0;
    }
    if (v.t == JV_UNDEF) return jx_undef_fail(c, n, v);
    return jx_type_error(c, n, "%s must be an integer, not '%s'", what, jv_typename(v));
}

static int want_str(jctx *c, const jnode *n, const char *what, jv v, const jstr **out) {
    if (v.t == JV_STR) {
        *out = v.u.s;
        return 0;
    }
    if (v.t == JV_UNDEF) return jx_undef_fail(c, n, v);
    return jx_type_error(c, n, "%s must be str, not %s", what, jv_typename(v));
}

/* ---- string helpers ------------------------------------------------------------------- */
/* Both searches take time linear in hl + nl, whatever the strings: a template can make a long
 * haystack and a long needle that almost matches everywhere, and a quadratic search there runs
 * for minutes inside one charged operation. glibc's memmem is linear (two-way); the reverse
 * search is Knuth-Morris-Pratt over the reversed strings. */
size_t js_find(const char *hay, size_t hl, const char *needle, size_t nl, size_t from) {
    if (from > hl) return (size_t)-1;
    if (nl == 0) return from;
    if (nl > hl - from) return (size_t)-1;
    const char *p = memmem(hay + from, hl - from, needle, nl);
    return p ? (size_t)(p - hay) : (size_t)-1;
}

/* last i in [lo, hl - nl] where needle occurs in hay, or (size_t)-1 */
static size_t js_rfind(const char *hay, size_t hl, const char *needle, size_t nl, size_t lo) {
    if (lo > hl || nl > hl - lo) return (size_t)-1;
    if (nl == 0) return hl;
    size_t *fail = nl > 16 ? malloc(nl * sizeof *fail) : NULL;
    if (!fail) { /* short needles: at most 16 compares a position (also the fallback) */
        for (size_t i = hl - nl + 1; i-- > lo;)
            if (hay[i] == needle[0] && memcmp(hay + i, needle, nl) == 0) return i;
        return (size_t)-1;
    }
#define RN(j) needle[nl - 1 - (j)]
    fail[0] = 0;
    for (size_t q = 1, k = 0; q < nl; q++) {
        while (k && RN(q) != RN(k))
            k = fail[k - 1];
        if (RN(q) == RN(k)) k++;
        fail[q] = k;
    }
    size_t k = 0, r = (size_t)-1;
    for (size_t j = 0; j < hl - lo; j++) { /* hay read backwards from its end down to lo */
        char ch = hay[hl - 1 - j];
        while (k && ch != RN(k))
            k = fail[k - 1];
        if (ch == RN(k)) k++;
        if (k == nl) {
            r = hl - 1 - j;
            break;
        }
    }
#undef RN
    free(fail);
    return r;
}

static uint32_t cp_upper(uint32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    if (c == 0xB5) return 0x39C;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) && (c & 1)) return c - 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && !(c & 1)) return c - 1;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

static uint32_t cp_lower(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) && !(c & 1) && c != 0x130)
        return c + 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && (c & 1)) return c + 1;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

static int cp_is_upper(uint32_t c) {
    return cp_lower(c) != c || c == 0x130;
}
static int cp_is_lower(uint32_t c) {
    return cp_upper(c) != c || c == 0xDF || c == 0x138 || c == 0x149;
}
static int cp_is_cased(uint32_t c) {
    return cp_is_upper(c) || cp_is_lower(c);
}

static void put_cp(jbuf *b, uint32_t cp) {
    char e[4];
    jb_put(b, e, ju_encode(cp, e));
}

static void put_upper(jbuf *b, uint32_t cp) {
    if (cp == 0xDF)
        jb_put(b, "SS", 2);
    else
        put_cp(b, cp_upper(cp));
}

static void put_lower(jbuf *b, uint32_t cp) {
    if (cp == 0x130) {
        put_cp(b, 'i');
        put_cp(b, 0x307);
    } else {
        put_cp(b, cp_lower(cp));
    }
}

enum { CASE_UPPER, CASE_LOWER, CASE_SWAP, CASE_CAPITALIZE, CASE_TITLE, CASE_JTITLE };

static int is_jtitle_sep(uint32_t cp) {
    return ju_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

static int change_case(jctx *c, const jnode *n, const jstr *s, int mode, jv *out) {
    if (jx_work(c, n, 1, s->len)) return -1; /* also reached per item from sort/unique keys */
    jbuf b = jx_newbuf(c);
    size_t i = 0;
    int first = 1, prev_cased = 0, prev_sep = 1;
    while (i < s->len) {
        if ((mode == CASE_UPPER || mode == CASE_LOWER) && (unsigned char)s->s[i] < 0x80) {
            char run[256]; /* a run of ASCII, mapped here and appended at once */
            size_t k = 0;
            for (; k < sizeof run && i < s->len && (unsigned char)s->s[i] < 0x80; i++, k++) {
                uint32_t ch = (unsigned char)s->s[i];
                run[k] = (char)(mode == CASE_UPPER ? cp_upper(ch) : cp_lower(ch));
            }
            jb_put(&b, run, k);
            continue;
        }
        uint32_t cp = ju_next(s->s, s->len, &i);
        switch (mode) {
        case CASE_UPPER:
            put_upper(&b, cp);
            break;
        case CASE_LOWER:
            put_lower(&b, cp);
            break;
        case CASE_SWAP:
            if (cp_is_upper(cp))
                put_lower(&b, cp);
            else if (cp_is_lower(cp))
                put_upper(&b, cp);
            else
                put_cp(&b, cp);
            break;
        case CASE_CAPITALIZE:
            if (first)
                put_upper(&b, cp);
            else
                put_lower(&b, cp);
            break;
        case CASE_TITLE: /* str.title(): a cased char after an uncased one starts a word */
            if (prev_cased)
                put_lower(&b, cp);
            else
                put_upper(&b, cp);
            prev_cased = cp_is_cased(cp);
            break;
        case CASE_JTITLE: /* Jinja2's title filter: words start after [-\s({[<]+ */
            if (is_jtitle_sep(cp)) {
                put_cp(&b, cp);
                prev_sep = 1;
            } else {
                if (prev_sep)
                    put_upper(&b, cp);
                else
                    put_lower(&b, cp);
                prev_sep = 0;
            }
            break;
        }
        first = 0;
    }
    return jx_buf_to_val(c, n, &b, out);
}

/* the code points of strip's chars argument: a bitmap for ASCII, a sorted array for the rest,
 * so that stripping costs O(len log chars) rather than O(len * chars) */
typedef struct {
    uint64_t ascii[2];
    uint32_t *wide;
    size_t nwide;
} cp_set;

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

static int cp_set_init(cp_set *set, const jstr *chars) {
    memset(set, 0, sizeof *set);
    for (size_t i = 0; i < chars->len;) {
        uint32_t cp = ju_next(chars->s, chars->len, &i);
        if (cp < 128) {
            set->ascii[cp >> 6] |= (uint64_t)1 << (cp & 63);
            continue;
        }
        /* each code point takes at least one byte, whatever ju_next makes of bad UTF-8 */
        if (!set->wide && !(set->wide = malloc(chars->len * sizeof *set->wide))) return -1;
        set->wide[set->nwide++] = cp;
    }
    if (set->nwide > 1) qsort(set->wide, set->nwide, sizeof *set->wide, cmp_u32);
    return 0;
}

static int cp_set_has(const cp_set *set, uint32_t cp) {
    if (cp < 128) return (int)((set->ascii[cp >> 6] >> (cp & 63)) & 1);
    return set->nwide && bsearch(&cp, set->wide, set->nwide, sizeof cp, cmp_u32) != NULL;
}

/* strip: which 1=left 2=right 3=both; chars NULL means whitespace */
static int do_strip(jctx *c, const jnode *n, const jstr *s, const jstr *chars, int which, jv *out) {
    size_t a = 0, e = s->len;
    cp_set set;
    if (chars) {
        if (jx_work(c, n, 1, chars->len)) return -1;
        if (cp_set_init(&set, chars)) {
            free(set.wide);
            return jx_nomem(c, n);
        }
    }
#define IN_SET(cp) (chars ? cp_set_has(&set, cp) : ju_isspace(cp))
    if (which & 1) {
        while (a < e) {
            size_t j = a;
            uint32_t cp = ju_next(s->s, e, &j);
            if (!IN_SET(cp)) break;
            a = j;
        }
    }
    if (which & 2) {
        while (e > a) {
            size_t k = e - 1;
            while (k > a && ((unsigned char)s->s[k] & 0xC0) == 0x80)
                k--;
            size_t j = k;
            uint32_t cp = ju_next(s->s, e, &j);
            if (!IN_SET(cp)) break;
            e = k;
        }
    }
#undef IN_SET
    if (chars) free(set.wide);
    return jx_mkstr(c, n, s->s + a, e - a, out);
}

/* str.split / str.rsplit */
static int do_split(jctx *c, const jnode *n, const jstr *s, const jstr *sep, int64_t maxsplit,
                    int right, jv *out) {
    jlist *l = jl_new(c->a, 0, JL_LIST);
    if (!l) return jx_nomem(c, n);
    jv piece;
    if (sep && sep->len == 0) return jx_type_error(c, n, "empty separator");
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (!sep) {
        if (!right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                while (i < s->len) { /* skip whitespace */
                    size_t j = i;
                    if (!ju_isspace(ju_next(s->s, s->len, &j))) break;
                    i = j;
                }
                if (i >= s->len) break;
                if (splits == maxsplit) {
                    if (jx_mkstr(c, n, s->s + i, s->len - i, &piece) || jx_push(c, n, l, piece))
                        return -1;
                    break;
                }
                size_t st = i;
                while (i < s->len) {
                    size_t j = i;
                    if (ju_isspace(ju_next(s->s, s->len, &j))) break;
                    i = j;
                }
                if (jx_mkstr(c, n, s->s + st, i - st, &piece) || jx_push(c, n, l, piece)) return -1;
                splits++;
            }
        } else {
            size_t e = s->len;
            int64_t splits = 0;
            for (;;) {
                while (e > 0) {
                    size_t k = e - 1;
                    while (k > 0 && ((unsigned char)s->s[k] & 0xC0) == 0x80)
                        k--;
                    size_t j = k;
                    if (!ju_isspace(ju_next(s->s, s->len, &j))) break;
                    e = k;
                }
                if (e == 0) break;
                if (splits == maxsplit) {
                    if (jx_mkstr(c, n, s->s, e, &piece) || jx_push(c, n, l, piece)) return -1;
                    break;
                }
                size_t st = e;
                while (st > 0) {
                    size_t k = st - 1;
                    while (k > 0 && ((unsigned char)s->s[k] & 0xC0) == 0x80)
                        k--;
                    size_t j = k;
                    if (ju_isspace(ju_next(s->s, s->len, &j))) break;
                    st = k;
                }
                if (jx_mkstr(c, n, s->s + st, e - st, &piece) || jx_push(c, n, l, piece)) return -1;
                e = st;
                splits++;
            }
            for (size_t i = 0, j = l->len ? l->len - 1 : 0; i < j; i++, j--) {
                jv t = l->v[i];
                l->v[i] = l->v[j];
                l->v[j] = t;
            }
        }
        *out = jv_of_list(l);
        return 0;
    }
    if (!right) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            size_t f = splits < maxsplit ? js_find(s->s, s->len, sep->s, sep->len, i) : (size_t)-1;
            if (f == (size_t)-1) {
                if (jx_mkstr(c, n, s->s + i, s->len - i, &piece) || jx_push(c, n, l, piece))
                    return -1;
                break;
            }
            if (jx_mkstr(c, n, s->s + i, f - i, &piece) || jx_push(c, n, l, piece)) return -1;
            i = f + sep->len;
            splits++;
        }
    } else {
        size_t e = s->len;
        int64_t splits = 0;
        for (;;) {
            size_t f = splits < maxsplit && e >= sep->len ? js_rfind(s->s, e, sep->s, sep->len, 0)
                                                          : (size_t)-1;
            if (f == (size_t)-1) {
                if (jx_mkstr(c, n, s->s, e, &piece) || jx_push(c, n, l, piece)) return -1;
                break;
            }
            if (jx_mkstr(c, n, s->s + f + sep->len, e - f - sep->len, &piece) ||
                jx_push(c, n, l, piece))
                return -1;
            e = f;
            splits++;
        }
        for (size_t i = 0, j = l->len - 1; i < j; i++, j--) {
            jv t = l->v[i];
            l->v[i] = l->v[j];
            l->v[j] = t;
        }
    }
    *out = jv_of_list(l);
    return 0;
}

static int is_line_break(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static int do_splitlines(jctx *c, const jnode *n, const jstr *s, int keepends, jlist **out) {
    jlist *l = jl_new(c->a, 0, JL_LIST);
    if (!l) return jx_nomem(c, n);
    size_t i = 0, st = 0;
    jv piece;
    while (i < s->len) {
        size_t k = i;
        uint32_t cp = ju_next(s->s, s->len, &i);
        if (!is_line_break(cp)) continue;
        if (cp == '\r' && i < s->len && s->s[i] == '\n') i++;
        if (jx_mkstr(c, n, s->s + st, (keepends ? i : k) - st, &piece) || jx_push(c, n, l, piece))
            return -1;
        st = i;
    }
    if (st < s->len && (jx_mkstr(c, n, s->s + st, s->len - st, &piece) || jx_push(c, n, l, piece)))
        return -1;
    *out = l;
    return 0;
}

/* do_replace's result: one unit of work a replacement made (each costs a search and two
 * appends, far more than the 64 bytes a unit stands for elsewhere), then b as the value */
static int replaced(jctx *c, const jnode *n, jbuf *b, int64_t done, jv *out) {
    if (jx_work(c, n, (size_t)done, 0)) {
        jb_free(b);
        return -1;
    }
    return jx_buf_to_val(c, n, b, out);
}

static int do_replace(jctx *c, const jnode *n, const jstr *s, const jstr *old, const jstr *rep,
                      int64_t count, jv *out) {
    if (count < 0) count = INT64_MAX;
    jbuf b = jx_newbuf(c);
    if (old->len == 0) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            if (done < count) {
                jb_put(&b, rep->s, rep->len);
                done++;
            }
            if (i >= s->len) break;
            size_t j = i;
            ju_next(s->s, s->len, &j);
            jb_put(&b, s->s + i, j - i);
            i = j;
            if (b.failed) break;
        }
        return replaced(c, n, &b, done, out);
    }
    size_t i = 0;
    int64_t done = 0;
    while (done < count) {
        size_t f = js_find(s->s, s->len, old->s, old->len, i);
        if (f == (size_t)-1) break;
        jb_put(&b, s->s + i, f - i);
        jb_put(&b, rep->s, rep->len);
        i = f + old->len;
        done++;
        if (b.failed) break;
    }
    jb_put(&b, s->s + i, s->len - i);
    return replaced(c, n, &b, done, out);
}

/* Python's optional [start, end] arguments of find/count/startswith as byte offsets. */
static int sub_range(jctx *c, const jnode *n, const jstr *s, const bound *b, int si, size_t *lo,
                     size_t *hi, int *empty) {
    int64_t len = (int64_t)s->ncp, st = 0, en = len;
    *empty = 0;
    if (b->have[si] && b->v[si].t != JV_NONE) {
        if (want_int(c, n, "start", b->v[si], &st)) return -1;
        if (st < 0) st = st + len < 0 ? 0 : st + len;
    }
    if (b->have[si + 1] && b->v[si + 1].t != JV_NONE) {
        if (want_int(c, n, "end", b->v[si + 1], &en)) return -1;
        if (en < 0) en = en + len < 0 ? 0 : en + len;
        if (en > len) en = len;
    }
    if (st > len) {
        *empty = 1;
        st = len;
    }
    if (en < st) {
        *empty = 1;
        en = st;
    }
    *lo = ju_offset(s, (size_t)st);
    *hi = ju_offset(s, (size_t)en);
    return 0;
}

static int do_pad(jctx *c, const jnode *n, const jstr *s, int64_t width, const jstr *fill, int mode,
                  jv *out) {
    if (width <= (int64_t)s->ncp) {
        *out = jv_of_str((jstr *)s);
        return 0;
    }
    if ((uint64_t)width > c->in->lim.max_output)
        return jx_fail(c, n, WEFT_ERR_INVALID, "width too large");
    size_t marg = (size_t)width - s->ncp, left;
    if (mode == 0)
        left = marg / 2 + (marg & (size_t)width & 1); /* center */
    else if (mode == 1)
        left = 0; /* ljust */
    else
        left = marg; /* rjust */
    jbuf b = jx_newbuf(c);
    for (size_t i = 0; i < left; i++)
        jb_put(&b, fill->s, fill->len);
    jb_put(&b, s->s, s->len);
    for (size_t i = left; i < marg; i++)
        jb_put(&b, fill->s, fill->len);
    return jx_buf_to_val(c, n, &b, out);
}

/* ---- Python methods ------------------------------------------------------------------- */
static int str_join(jctx *c, const jnode *n, const jstr *sep, jv seq, jv *out) {
    jlist *items;
    if (jx_iterate(c, n, seq, &items)) return -1;
    jbuf b = jx_newbuf(c);
    for (size_t i = 0; i < items->len; i++) {
        if (items->v[i].t != JV_STR) {
            jb_free(&b);
            return jx_type_error(c, n, "sequence item %zu: expected str instance, %s found", i,
                                 jv_typename(items->v[i]));
        }
        if (i) jb_put(&b, sep->s, sep->len);
        jb_put(&b, items->v[i].u.s->s, items->v[i].u.s->len);
    }
    return jx_buf_to_val(c, n, &b, out);
}

static int str_method(jctx *c, const jnode *n, const jstr *s, const char *m, const jargs *a,
                      jv *out) {
    if (jx_work(c, n, 1, s->len)) return -1;
    bound b;
    const jstr *x = NULL, *y = NULL;
    int64_t k = -1;
    static const char *const none_args[] = {NULL};
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        static const char *const names[] = {"prefix", "start", "end", NULL};
        if (bind(c, n, m, a, names, 1, &b)) return -1;
        size_t lo, hi;
        int empty;
        if (sub_range(c, n, s, &b, 1, &lo, &hi, &empty)) return -1;
        jv p = b.v[0];
        const jv *cands = &p;
        size_t nc = 1;
        if (p.t == JV_LIST && p.u.l->kind == JL_TUPLE) {
            cands = p.u.l->v;
            nc = p.u.l->len;
        }
        int r = 0;
        for (size_t i = 0; i < nc; i++) {
            if (cands[i].t != JV_STR)
                return jx_type_error(c, n, "%s first arg must be str or a tuple of str, not %s", m,
                                     jv_typename(cands[i]));
            const jstr *q = cands[i].u.s;
            if (empty) continue;
            if (q->len <= hi - lo &&
                memcmp(m[0] == 's' ? s->s + lo : s->s + hi - q->len, q->s, q->len) == 0)
                r = 1;
        }
        *out = jv_bool(r);
        return 0;
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const names[] = {"sep", "maxsplit", NULL};
        if (bind(c, n, m, a, names, 0, &b)) return -1;
        if (b.have[0] && b.v[0].t != JV_NONE && want_str(c, n, "sep", b.v[0], &x)) return -1;
        if (b.have[1] && want_int(c, n, "maxsplit", b.v[1], &k)) return -1;
        return do_split(c, n, s, x, k, m[0] == 'r', out);
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        static const char *const names[] = {"chars", NULL};
        if (bind(c, n, m, a, names, 0, &b)) return -1;
        if (b.have[0] && b.v[0].t != JV_NONE && want_str(c, n, "chars", b.v[0], &x)) return -1;
        return do_strip(c, n, s, x, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3, out);
    }
    int cm = !strcmp(m, "upper")                             ? CASE_UPPER
             : !strcmp(m, "lower") || !strcmp(m, "casefold") ? CASE_LOWER
             : !strcmp(m, "swapcase")                        ? CASE_SWAP
             : !strcmp(m, "capitalize")                      ? CASE_CAPITALIZE
             : !strcmp(m, "title")                           ? CASE_TITLE
                                                             : -1;
    if (cm >= 0) {
        if (bind(c, n, m, a, none_args, 0, &b)) return -1;
        return change_case(c, n, s, cm, out);
    }
    if (!strcmp(m, "replace")) {
        static const char *const names[] = {"old", "new", "count", NULL};
        if (bind(c, n, m, a, names, 2, &b)) return -1;
        if (want_str(c, n, "old", b.v[0], &x) || want_str(c, n, "new", b.v[1], &y)) return -1;
        if (b.have[2] && want_int(c, n, "count", b.v[2], &k)) return -1;
        return do_replace(c, n, s, x, y, k, out);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") ||
        !strcmp(m, "count")) {
        static const char *const names[] = {"sub", "start", "end", NULL};
        if (bind(c, n, m, a, names, 1, &b) || want_str(c, n, "sub", b.v[0], &x)) return -1;
        size_t lo, hi;
        int empty;
        if (sub_range(c, n, s, &b, 1, &lo, &hi, &empty)) return -1;
        if (!strcmp(m, "count")) {
            int64_t cnt = 0;
            if (!empty) {
                if (x->len == 0) {
                    cnt = (int64_t)ju_count(s->s + lo, hi - lo) + 1;
                } else {
                    size_t i = lo, f;
                    while ((f = js_find(s->s, hi, x->s, x->len, i)) != (size_t)-1) {
                        cnt++;
                        i = f + x->len;
                    }
                }
            }
            *out = jv_int(cnt);
            return 0;
        }
        size_t f = (size_t)-1;
        if (!empty)
            f = m[0] == 'r' ? js_rfind(s->s, hi, x->s, x->len, lo)
                            : js_find(s->s, hi, x->s, x->len, lo);
        if (f == (size_t)-1) {
            if (!strcmp(m, "index") || !strcmp(m, "rindex"))
                return jx_fail(c, n, WEFT_ERR_INVALID, "substring not found");
            *out = jv_int(-1);
            return 0;
        }
        *out = jv_int((int64_t)ju_count(s->s, f));
        return 0;
    }
    if (!strcmp(m, "join")) {
        static const char *const names[] = {"iterable", NULL};
        if (bind(c, n, m, a, names, 1, &b)) return -1;
        return str_join(c, n, s, b.v[0], out);
    }
    if (!strcmp(m, "splitlines")) {
        static const char *const names[] = {"keepends", NULL};
        if (bind(c, n, m, a, names, 0, &b)) return -1;
        jlist *l;
        if (do_splitlines(c, n, s, b.have[0] && jv_truthy(b.v[0]), &l)) return -1;
        *out = jv_of_list(l);
        return 0;
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        static const char *const names[] = {"affix", NULL};
        if (bind(c, n, m, a, names, 1, &b) || want_str(c, n, "affix", b.v[0], &x)) return -1;
        if (x->len <= s->len) {
            if (m[6] == 'p' && memcmp(s->s, x->s, x->len) == 0)
                return jx_mkstr(c, n, s->s + x->len, s->len - x->len, out);
            if (m[6] == 's' && memcmp(s->s + s->len - x->len, x->s, x->len) == 0)
                return jx_mkstr(c, n, s->s, s->len - x->len, out);
        }
        *out = jv_of_str((jstr *)s);
        return 0;
    }
    if (!strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust")) {
        static const char *const names[] = {"width", "fillchar", NULL};
        if (bind(c, n, m, a, names, 1, &b) || want_int(c, n, "width", b.v[0], &k)) return -1;
        jstr *sp = js_cstr(c->a, " ");
        if (!sp) return jx_nomem(c, n);
        y = sp;
        if (b.have[1] && want_str(c, n, "fillchar", b.v[1], &y)) return -1;
        if (y->ncp != 1)
            return jx_type_error(c, n, "The fill character must be exactly one character long");
        return do_pad(c, n, s, k, y, m[0] == 'c' ? 0 : m[0] == 'l' ? 1 : 2, out);
    }
    if (!strcmp(m, "zfill")) {
        static const char *const names[] = {"width", NULL};
        if (bind(c, n, m, a, names, 1, &b) || want_int(c, n, "width", b.v[0], &k)) return -1;
        if (k <= (int64_t)s->ncp) {
            *out = jv_of_str((jstr *)s);
            return 0;
        }
        if ((uint64_t)k > c->in->lim.max_output)
            return jx_fail(c, n, WEFT_ERR_INVALID, "width too large");
        jbuf bb = jx_newbuf(c);
        size_t sign = s->len && (s->s[0] == '+' || s->s[0] == '-');
        jb_put(&bb, s->s, sign);
        for (int64_t i = 0; i < k - (int64_t)s->ncp; i++)
            jb_putc(&bb, '0');
        jb_put(&bb, s->s + sign, s->len - sign);
        return jx_buf_to_val(c, n, &bb, out);
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        static const char *const names[] = {"sep", NULL};
        if (bind(c, n, m, a, names, 1, &b) || want_str(c, n, "sep", b.v[0], &x)) return -1;
        if (x->len == 0) return jx_type_error(c, n, "empty separator");
        size_t f = m[0] == 'r' ? js_rfind(s->s, s->len, x->s, x->len, 0)
                               : js_find(s->s, s->len, x->s, x->len, 0);
        jlist *l = jl_new(c->a, 3, JL_TUPLE);
        if (!l) return jx_nomem(c, n);
        l->len = 3;
        if (f == (size_t)-1) {
            size_t at = m[0] == 'r' ? 2 : 0;
            jv e;
            if (jx_mkstr(c, n, "", 0, &e)) return -1;
            l->v[0] = l->v[1] = l->v[2] = e;
            l->v[at] = jv_of_str((jstr *)s);
        } else if (jx_mkstr(c, n, s->s, f, &l->v[0]) || jx_mkstr(c, n, x->s, x->len, &l->v[1]) ||
                   jx_mkstr(c, n, s->s + f + x->len, s->len - f - x->len, &l->v[2])) {
            return -1;
        }
        *out = jv_of_list(l);
        return 0;
    }
    if (!strncmp(m, "is", 2)) {
        if (bind(c, n, m, a, none_args, 0, &b)) return -1;
        size_t i = 0;
        int r = s->len > 0, any_cased = 0;
        if (!strcmp(m, "isascii")) r = 1;
        while (i < s->len) {
            uint32_t cp = ju_next(s->s, s->len, &i);
            int alpha = (cp < 0x80 && ((cp | 32) >= 'a' && (cp | 32) <= 'z')) ||
                        (cp >= 0x80 && cp_is_cased(cp));
            int digit = cp >= '0' && cp <= '9';
            if (!strcmp(m, "isalpha"))
                r &= alpha;
            else if (!strcmp(m, "isalnum"))
                r &= alpha || digit;
            else if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal") || !strcmp(m, "isnumeric"))
                r &= digit;
            else if (!strcmp(m, "isspace"))
                r &= ju_isspace(cp);
            else if (!strcmp(m, "isascii"))
                r &= cp < 0x80;
            else if (!strcmp(m, "islower")) {
                if (cp_is_upper(cp)) r = 0;
                any_cased |= cp_is_cased(cp);
            } else if (!strcmp(m, "isupper")) {
                if (cp_is_lower(cp)) r = 0;
                any_cased |= cp_is_cased(cp);
            } else {
                return jx_fail(c, n, WEFT_ERR_UNSUPPORTED, "str.%s() is not supported", m);
            }
        }
        if (!strcmp(m, "islower") || !strcmp(m, "isupper")) r = r && any_cased;
        *out = jv_bool(r);
        return 0;
    }
    return jx_fail(c, n, WEFT_ERR_UNSUPPORTED, "str.%s() is not supported in chat templates", m);
}

static int dict_method(jctx *c, const jnode *n, const jdict *d, const char *m, const jargs *a,
                       jv *out) {
    bound b;
    static const char *const none_args[] = {NULL};
    if (!strcmp(m, "get")) {
        static const char *const names[] = {"key", "default", NULL};
        if (bind(c, n, m, a, names, 1, &b)) return -1;
        if (!jv_hashable(b.v[0]))
            return jx_type_error(c, n, "unhashable type: '%s'", jv_typename(b.v[0]));
        jv *v = jd_get(d, b.v[0]);
        *out = v ? *v : b.have[1] ? b.v[1] : jv_none();
        return 0;
    }
    if (bind(c, n, m, a, none_args, 0, &b)) return -1;
    if (!strcmp(m, "copy")) {
        jdict *r = jd_new(c->a);
        if (!r) return jx_nomem(c, n);
        for (size_t i = 0; i < d->len; i++)
            if (jd_set(c->a, r, d->k[i], d->v[i])) return jx_nomem(c, n);
        *out = jv_of_dict(r);
        return 0;
    }
    int kind = !strcmp(m, "items")    ? JL_ITEMS
               : !strcmp(m, "keys")   ? JL_KEYS
               : !strcmp(m, "values") ? JL_VALUES
                                      : -1;
    if (kind < 0) return jx_fail(c, n, WEFT_ERR_UNSUPPORTED, "dict.%s() is not supported", m);
    jlist *l = jl_new(c->a, d->len, kind);
    if (!l) return jx_nomem(c, n);
    for (size_t i = 0; i < d->len; i++) {
        if (kind == JL_ITEMS) {
            jlist *t = jl_new(c->a, 2, JL_TUPLE);
            if (!t) return jx_nomem(c, n);
            t->v[0] = d->k[i];
            t->v[1] = d->v[i];
            t->len = 2;
            l->v[i] = jv_of_list(t);
        } else {
            l->v[i] = kind == JL_KEYS ? d->k[i] : d->v[i];
        }
    }
    l->len = d->len;
    *out = jv_of_list(l);
    return 0;
}

static int list_method(jctx *c, const jnode *n, const jlist *l, const char *m, const jargs *a,
                       jv *out) {
    bound b;
    if (!strcmp(m, "copy")) {
        static const char *const none_args[] = {NULL};
        if (bind(c, n, m, a, none_args, 0, &b)) return -1;
        jlist *r = jl_new(c->a, l->len, l->kind);
        if (!r) return jx_nomem(c, n);
        jv_copy(r->v, l->v, l->len);
        r->len = l->len;
        *out = jv_of_list(r);
        return 0;
    }
    static const char *const names[] = {"value", NULL};
    if (bind(c, n, m, a, names, 1, &b)) return -1;
    int64_t cnt = 0;
    for (size_t i = 0; i < l->len; i++) {
        if (!jv_eq(l->v[i], b.v[0])) continue;
        if (m[0] == 'i') {
            *out = jv_int((int64_t)i);
            return 0;
        }
        cnt++;
    }
    if (m[0] == 'i') return jx_fail(c, n, WEFT_ERR_INVALID, "value is not in list");
    *out = jv_int(cnt);
    return 0;
}

int jx_method(jctx *c, const jnode *n, jv self, const char *name, const jargs *a, jv *out) {
    switch (self.t) {
    case JV_STR:
        return str_method(c, n, self.u.s, name, a, out);
    case JV_DICT:
        return dict_method(c, n, self.u.d, name, a, out);
    case JV_LIST:
        return list_method(c, n, self.u.l, name, a, out);
    case JV_LOOP:
        if (!strcmp(name, "cycle")) {
            if (a->nkw) return jx_type_error(c, n, "loop.cycle() takes no keyword arguments");
            if (a->npos == 0) return jx_type_error(c, n, "no items for cycling given");
            *out = a->pos[self.u.lp->i % a->npos];
            return 0;
        }
        return jx_fail(c, n, WEFT_ERR_UNSUPPORTED, "loop.%s() is not supported", name);
    default:
        return jx_fail(c, n, WEFT_ERR_INTERNAL, "method %s on %s", name, jv_typename(self));
    }
}

/* ---- printf-style formatting (str % args, the format filter) ------------------------------- */
static int fmt_pad(jbuf *b, const char *s, size_t len, size_t ncp, int64_t width, int left,
                   char fill) {
    int64_t pad = width > (int64_t)ncp ? width - (int64_t)ncp : 0;
    if (!left)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, fill);
    jb_put(b, s, len);
    if (left)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, ' ');
    return 0;
}

/* Python's str % args. Tuples are positional; a value Python treats as a mapping (dict, list,
 * Undefined) may be used by %(key)s and once positionally; anything else is one argument. */
int jx_percent(jctx *c, const jnode *n, const jstr *fmt, jv args, jv *out) {
    if (jx_work(c, n, 1, fmt->len)) return -1;
    const jv *pos = &args;
    int64_t arglen = -1, argidx = -2;
    int mapping = 0;
    if (args.t == JV_LIST && args.u.l->kind == JL_TUPLE) {
        pos = args.u.l->v;
        arglen = (int64_t)args.u.l->len;
        argidx = 0;
    } else if (args.t == JV_DICT || args.t == JV_UNDEF ||
               (args.t == JV_LIST && (args.u.l->kind == JL_LIST))) {
        mapping = 1;
    }
    jbuf b = jx_newbuf(c);
    size_t i = 0;
    const char *s = fmt->s;
    size_t len = fmt->len;
#define FMT_FAIL(...)                                                                              \
    do {                                                                                           \
        jb_free(&b);                                                                               \
        return jx_type_error(c, n, __VA_ARGS__);                                                   \
    } while (0)
    while (i < len) {
        const char *pct = memchr(s + i, '%', len - i);
        if (!pct) {
            jb_put(&b, s + i, len - i);
            break;
        }
        jb_put(&b, s + i, (size_t)(pct - (s + i)));
        i = (size_t)(pct - s) + 1;
        if (i >= len) FMT_FAIL("incomplete format");
        jv arg;
        int have_arg = 0;
        if (s[i] == '(') {
            if (!mapping || args.t != JV_DICT) FMT_FAIL("format requires a mapping");
            size_t depth = 1, k = i + 1;
            while (k < len && depth) {
                if (s[k] == '(')
                    depth++;
                else if (s[k] == ')')
                    depth--;
                k++;
            }
            if (depth) FMT_FAIL("incomplete format key");
            jv *v = jd_gets(args.u.d, s + i + 1, k - i - 2);
            if (!v) FMT_FAIL("format key '%.*s' not found", (int)(k - i - 2), s + i + 1);
            arg = *v;
            have_arg = 1;
            i = k;
        }
        int left = 0, plus = 0, space = 0, alt = 0, zero = 0;
        for (; i < len; i++) {
            if (s[i] == '-')
                left = 1;
            else if (s[i] == '+')
                plus = 1;
            else if (s[i] == ' ')
                space = 1;
            else if (s[i] == '#')
                alt = 1;
            else if (s[i] == '0')
                zero = 1;
            else
                break;
        }
        int64_t width = 0, prec = -1;
        while (i < len && s[i] >= '0' && s[i] <= '9' && width < 100000)
            width = width * 10 + (s[i++] - '0');
        if (i < len && s[i] == '*') FMT_FAIL("'*' widths are not supported");
        if (i < len && s[i] == '.') {
            i++;
            prec = 0;
            while (i < len && s[i] >= '0' && s[i] <= '9' && prec < 100000)
                prec = prec * 10 + (s[i++] - '0');
        }
        while (i < len && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L'))
            i++;
        if (i >= len) FMT_FAIL("incomplete format");
        char conv = s[i++];
        if (conv == '%') {
            jb_putc(&b, '%');
            continue;
        }
        if (width > 4096 || prec > 4096) FMT_FAIL("format width or precision too large");
        if (!have_arg) {
            if (arglen < 0) {
                if (argidx != -2) FMT_FAIL("not enough arguments for format string");
                argidx = -1;
                arg = args;
            } else {
                if (argidx >= arglen) FMT_FAIL("not enough arguments for format string");
                arg = pos[argidx++];
            }
        }
        char spec[32], tmp[4200];
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            jbuf sb = jx_newbuf(c);
            if (conv == 's')
                jv_str(&sb, arg);
            else
                jv_repr(&sb, arg);
            if (sb.failed) {
                jb_free(&sb);
                jb_free(&b);
                return jx_bufail(c, n, &sb);
            }
            const char *p = sb.p ? sb.p : "";
            size_t plen = sb.len, ncp = ju_count(p, plen);
            if (prec >= 0 && (size_t)prec < ncp) {
                size_t k = 0, cnt = 0;
                while (k < plen && cnt < (size_t)prec) {
                    ju_next(p, plen, &k);
                    cnt++;
                }
                plen = k;
                ncp = cnt;
            }
            fmt_pad(&b, p, plen, ncp, width, left, ' ');
            jb_free(&sb);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o':
        case 'c': {
            int64_t v;
            if (arg.t == JV_INT || arg.t == JV_BOOL)
                v = arg.u.i;
            else if (arg.t == JV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
                if (!(arg.u.f > -9.2e18 && arg.u.f < 9.2e18))
                    FMT_FAIL("cannot convert float to integer");
                v = (int64_t)arg.u.f;
            } else if (conv == 'c' && arg.t == JV_STR && arg.u.s->ncp == 1) {
                fmt_pad(&b, arg.u.s->s, arg.u.s->len, 1, width, left, ' ');
                break;
            } else {
                FMT_FAIL("%%%c format: %s is required, not %s", conv,
                         conv == 'c'                                 ? "an integer or a char"
                         : conv == 'd' || conv == 'i' || conv == 'u' ? "a real number"
                                                                     : "an integer",
                         jv_typename(arg));
            }
            if (conv == 'c') {
                if (v < 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                    FMT_FAIL("%%c arg not in range");
                char e[4];
                size_t el = ju_encode((uint32_t)v, e);
                fmt_pad(&b, e, el, 1, width, left, ' ');
                break;
            }
            uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
            char digits[80];
            const char *dfmt = conv == 'x'   ? "%llx"
                               : conv == 'X' ? "%llX"
                               : conv == 'o' ? "%llo"
                                             : "%llu";
            snprintf(digits, sizeof digits, dfmt, (unsigned long long)mag);
            char head[8];
            size_t hl = 0;
            if (v < 0)
                head[hl++] = '-';
            else if (plus)
                head[hl++] = '+';
            else if (space)
                head[hl++] = ' ';
            if (alt && conv != 'd' && conv != 'i' && conv != 'u') {
                head[hl++] = '0';
                head[hl++] = conv == 'o' ? 'o' : conv;
            }
            size_t dl = strlen(digits);
            size_t pz = prec > (int64_t)dl ? (size_t)prec - dl : 0;
            size_t body = hl + pz + dl;
            size_t pad = width > (int64_t)body ? (size_t)width - body : 0;
            if (!left && !zero)
                for (size_t k = 0; k < pad; k++)
                    jb_putc(&b, ' ');
            jb_put(&b, head, hl);
            if (!left && zero)
                for (size_t k = 0; k < pad; k++)
                    jb_putc(&b, '0');
            for (size_t k = 0; k < pz; k++)
                jb_putc(&b, '0');
            jb_put(&b, digits, dl);
            if (left)
                for (size_t k = 0; k < pad; k++)
                    jb_putc(&b, ' ');
            break;
        }
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G': {
            double v;
            if (jv_is_number(arg))
                v = jv_num(arg);
            else
                FMT_FAIL("must be real number, not %s", jv_typename(arg));
            snprintf(spec, sizeof spec, "%%%s%s%s%s%s%lld.%lld%c", left ? "-" : "", plus ? "+" : "",
                     space ? " " : "", alt ? "#" : "", zero ? "0" : "", (long long)width,
                     (long long)(prec < 0 ? 6 : prec), conv);
            snprintf(tmp, sizeof tmp, spec, v);
            jb_puts(&b, tmp);
            break;
        }
        default:
            FMT_FAIL("unsupported format character '%c'", conv);
        }
    }
    if (argidx < arglen && !mapping)
        FMT_FAIL("not all arguments converted during string formatting");
#undef FMT_FAIL
    return jx_buf_to_val(c, n, &b, out);
}

/* ---- globals ---------------------------------------------------------------------------- */
static int fill_mapping(jctx *c, const jnode *n, const char *fname, const jargs *a, jdict *d) {
    if (a->npos > 1)
        return jx_type_error(c, n, "%s expected at most 1 argument, got %zu", fname, a->npos);
    if (a->npos == 1) {
        jv src = a->pos[0];
        if (src.t == JV_DICT) {
            for (size_t i = 0; i < src.u.d->len; i++)
                if (jd_set(c->a, d, src.u.d->k[i], src.u.d->v[i])) return jx_nomem(c, n);
        } else {
            jlist *items;
            if (src.t == JV_UNDEF) return jx_undef_fail(c, n, src);
            if (jx_iterate(c, n, src, &items)) return -1;
            for (size_t i = 0; i < items->len; i++) {
                jlist *pair;
                jv it = items->v[i];
                if (it.t != JV_LIST && it.t != JV_STR)
                    return jx_type_error(c, n, "cannot convert %s element #%zu to a sequence",
                                         fname, i);
                if (jx_iterate(c, n, it, &pair)) return -1;
                if (pair->len != 2)
                    return jx_type_error(
                        c, n, "%s update sequence element #%zu has length %zu; 2 is required",
                        fname, i, pair->len);
                if (!jv_hashable(pair->v[0]))
                    return jx_type_error(c, n, "unhashable type: '%s'", jv_typename(pair->v[0]));
                if (jd_set(c->a, d, pair->v[0], pair->v[1])) return jx_nomem(c, n);
            }
        }
    }
    for (size_t k = 0; k < a->nkw; k++)
        if (jd_set(c->a, d, jv_of_str(a->kwn[k]), a->kwv[k])) return jx_nomem(c, n);
    return 0;
}

static const char *const WDAY_ABBR[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const WDAY_FULL[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                        "Thursday", "Friday", "Saturday"};
static const char *const MON_ABBR[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const MON_FULL[] = {"January",   "February", "March",    "April",
                                       "May",       "June",     "July",     "August",
                                       "September", "October",  "November", "December"};

/* datetime.strftime in the C locale for a naive datetime (so %z and %Z are empty). */
static int do_strftime(jctx *c, const jnode *n, const jstr *fmt, jv *out) {
    time_t t = c->in->have_now ? (time_t)c->in->now : time(NULL);
    struct tm tm;
    if (c->in->have_now ? !gmtime_r(&t, &tm) : !localtime_r(&t, &tm))
        return jx_fail(c, n, WEFT_ERR_INVALID, "strftime_now: the clock is out of range");
    jbuf b = jx_newbuf(c);
    char tmp[64];
    for (size_t i = 0; i < fmt->len; i++) {
        if (fmt->s[i] != '%' || i + 1 >= fmt->len) {
            jb_putc(&b, fmt->s[i]);
            continue;
        }
        char d = fmt->s[++i];
        int hour12 = tm.tm_hour % 12 ? tm.tm_hour % 12 : 12;
        tmp[0] = '\0';
        switch (d) {
        case 'a':
            snprintf(tmp, sizeof tmp, "%s", WDAY_ABBR[tm.tm_wday]);
            break;
        case 'A':
            snprintf(tmp, sizeof tmp, "%s", WDAY_FULL[tm.tm_wday]);
            break;
        case 'b':
        case 'h':
            snprintf(tmp, sizeof tmp, "%s", MON_ABBR[tm.tm_mon]);
            break;
        case 'B':
            snprintf(tmp, sizeof tmp, "%s", MON_FULL[tm.tm_mon]);
            break;
        case 'd':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_mday);
            break;
        case 'e':
            snprintf(tmp, sizeof tmp, "%2d", tm.tm_mday);
            break;
        case 'm':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_mon + 1);
            break;
        case 'y':
            snprintf(tmp, sizeof tmp, "%02d", (tm.tm_year + 1900) % 100);
            break;
        case 'Y':
            snprintf(tmp, sizeof tmp, "%d", tm.tm_year + 1900);
            break;
        case 'C':
            snprintf(tmp, sizeof tmp, "%02d", (tm.tm_year + 1900) / 100);
            break;
        case 'H':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_hour);
            break;
        case 'k':
            snprintf(tmp, sizeof tmp, "%2d", tm.tm_hour);
            break;
        case 'I':
            snprintf(tmp, sizeof tmp, "%02d", hour12);
            break;
        case 'l':
            snprintf(tmp, sizeof tmp, "%2d", hour12);
            break;
        case 'M':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_min);
            break;
        case 'S':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_sec);
            break;
        case 'p':
            snprintf(tmp, sizeof tmp, "%s", tm.tm_hour < 12 ? "AM" : "PM");
            break;
        case 'j':
            snprintf(tmp, sizeof tmp, "%03d", tm.tm_yday + 1);
            break;
        case 'f':
            snprintf(tmp, sizeof tmp, "000000");
            break;
        case 'w':
            snprintf(tmp, sizeof tmp, "%d", tm.tm_wday);
            break;
        case 'u':
            snprintf(tmp, sizeof tmp, "%d", tm.tm_wday ? tm.tm_wday : 7);
            break;
        case 'U':
            snprintf(tmp, sizeof tmp, "%02d", (tm.tm_yday + 7 - tm.tm_wday) / 7);
            break;
        case 'W':
            snprintf(tmp, sizeof tmp, "%02d", (tm.tm_yday + 7 - (tm.tm_wday + 6) % 7) / 7);
            break;
        case 'D':
            snprintf(tmp, sizeof tmp, "%02d/%02d/%02d", tm.tm_mon + 1, tm.tm_mday,
                     (tm.tm_year + 1900) % 100);
            break;
        case 'x':
            snprintf(tmp, sizeof tmp, "%02d/%02d/%02d", tm.tm_mon + 1, tm.tm_mday,
                     (tm.tm_year + 1900) % 100);
            break;
        case 'F':
            snprintf(tmp, sizeof tmp, "%d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
            break;
        case 'T':
        case 'X':
            snprintf(tmp, sizeof tmp, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
            break;
        case 'R':
            snprintf(tmp, sizeof tmp, "%02d:%02d", tm.tm_hour, tm.tm_min);
            break;
        case 'c':
            snprintf(tmp, sizeof tmp, "%s %s %2d %02d:%02d:%02d %d", WDAY_ABBR[tm.tm_wday],
                     MON_ABBR[tm.tm_mon], tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     tm.tm_year + 1900);
            break;
        case 'n':
            snprintf(tmp, sizeof tmp, "\n");
            break;
        case 't':
            snprintf(tmp, sizeof tmp, "\t");
            break;
        case '%':
            snprintf(tmp, sizeof tmp, "%%");
            break;
        case 'z':
        case 'Z':
            break;
        default:
            jb_free(&b);
            return jx_fail(c, n, WEFT_ERR_UNSUPPORTED, "strftime_now: unsupported directive '%%%c'",
                           d);
        }
        jb_puts(&b, tmp);
    }
    return jx_buf_to_val(c, n, &b, out);
}

int jx_builtin(jctx *c, const jnode *n, int id, const jargs *a, jv *out) {
    switch (id) {
    case BI_RANGE: {
        if (a->nkw) return jx_type_error(c, n, "range() takes no keyword arguments");
        if (a->npos < 1 || a->npos > 3)
            return jx_type_error(c, n, "range expected 1 to 3 arguments, got %zu", a->npos);
        int64_t v[3] = {0, 0, 1};
        for (size_t i = 0; i < a->npos; i++) {
            jv x = a->pos[i];
            if (x.t == JV_UNDEF) return jx_undef_fail(c, n, x);
            if (x.t != JV_INT && x.t != JV_BOOL)
                return jx_type_error(c, n, "'%s' object cannot be interpreted as an integer",
                                     jv_typename(x));
        }
        if (a->npos == 1)
            v[1] = a->pos[0].u.i;
        else {
            v[0] = a->pos[0].u.i;
            v[1] = a->pos[1].u.i;
            if (a->npos == 3) v[2] = a->pos[2].u.i;
        }
        if (v[2] == 0) return jx_type_error(c, n, "range() arg 3 must not be zero");
        double cnt = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
                              : ceil(((double)v[0] - (double)v[1]) / -(double)v[2]);
        if (cnt < 0) cnt = 0;
        if (cnt > RANGE_MAX)
            return jx_fail(c, n, WEFT_ERR_INVALID,
                           "range too big; the sandbox blocks ranges larger than %d", RANGE_MAX);
        jlist *l = jl_new(c->a, (size_t)cnt, JL_RANGE);
        if (!l) return jx_nomem(c, n);
        for (size_t i = 0; i < (size_t)cnt; i++)
            l->v[i] = jv_int(v[0] + (int64_t)i * v[2]);
        l->len = (size_t)cnt;
        memcpy(l->range, v, sizeof v);
        *out = jv_of_list(l);
        return 0;
    }
    case BI_NAMESPACE:
    case BI_DICT: {
        jdict *d = jd_new(c->a);
        if (!d) return jx_nomem(c, n);
        if (fill_mapping(c, n, id == BI_DICT ? "dict" : "namespace", a, d)) return -1;
        if (id == BI_NAMESPACE) {
            for (size_t i = 0; i < d->len; i++)
                if (d->k[i].t == JV_STR && d->k[i].u.s->s[0] == '_')
                    return jx_fail(c, n, WEFT_ERR_INVALID,
                                   "chat templates cannot store underscore-prefixed attributes on "
                                   "a namespace ('%s')",
                                   d->k[i].u.s->s);
            jv v = {JV_NS, 0, {0}};
            v.u.d = d;
            *out = v;
        } else {
            *out = jv_of_dict(d);
        }
        return 0;
    }
    case BI_RAISE: {
        bound b;
        static const char *const names[] = {"message", NULL};
        if (bind(c, n, "raise_exception", a, names, 1, &b)) return -1;
        jstr *msg;
        if (jx_to_str(c, n, b.v[0], &msg)) return -1;
        return jx_fail(c, n, WEFT_ERR_INVALID, "raise_exception: %s", msg->s);
    }
    case BI_STRFTIME: {
        bound b;
        static const char *const names[] = {"format", NULL};
        const jstr *f = NULL;
        if (bind(c, n, "strftime_now", a, names, 1, &b) || want_str(c, n, "format", b.v[0], &f))
            return -1;
        return do_strftime(c, n, f, out);
    }
    default:
        return jx_fail(c, n, WEFT_ERR_INTERNAL, "unknown builtin %d", id);
    }
}

/* ---- filters ---------------------------------------------------------------------------- */
enum {
    F_ABS,
    F_ATTR,
    F_CAPITALIZE,
    F_CENTER,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORMAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
};

static const struct {
    const char *name;
    int id;
} FILTERS[] = {
    {"abs", F_ABS},
    {"attr", F_ATTR},
    {"capitalize", F_CAPITALIZE},
    {"center", F_CENTER},
    {"count", F_LENGTH},
    {"d", F_DEFAULT},
    {"default", F_DEFAULT},
    {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE},
    {"escape", F_ESCAPE},
    {"first", F_FIRST},
    {"float", F_FLOAT},
    {"forceescape", F_ESCAPE},
    {"format", F_FORMAT},
    {"indent", F_INDENT},
    {"int", F_INT},
    {"items", F_ITEMS},
    {"join", F_JOIN},
    {"last", F_LAST},
    {"length", F_LENGTH},
    {"list", F_LIST},
    {"lower", F_LOWER},
    {"map", F_MAP},
    {"max", F_MAX},
    {"min", F_MIN},
    {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE},
    {"reverse", F_REVERSE},
    {"round", F_ROUND},
    {"safe", F_SAFE},
    {"select", F_SELECT},
    {"selectattr", F_SELECTATTR},
    {"sort", F_SORT},
    {"string", F_STRING},
    {"sum", F_SUM},
    {"title", F_TITLE},
    {"tojson", F_TOJSON},
    {"trim", F_TRIM},
    {"unique", F_UNIQUE},
    {"upper", F_UPPER},
    {"wordcount", F_WORDCOUNT},
};

int jfilter_id(const char *name) {
    for (size_t i = 0; i < sizeof(FILTERS) / sizeof(FILTERS[0]); i++)
        if (!strcmp(FILTERS[i].name, name)) return FILTERS[i].id;
    return -1;
}

/* Jinja2's make_attrgetter: dotted paths, digit parts as integer indexes, item lookup first. */
static int attr_path_def(jctx *c, const jnode *n, jv item, jv attribute, const jv *def, jv *out) {
    if (attribute.t != JV_STR) {
        if (jx_getitem(c, n, item, attribute, out)) return -1;
        if (def && out->t == JV_UNDEF) *out = *def;
        return 0;
    }
    const jstr *p = attribute.u.s;
    size_t i = 0;
    jv cur = item;
    for (;;) {
        size_t j = i;
        while (j < p->len && p->s[j] != '.')
            j++;
        jv key;
        int digits = j > i;
        for (size_t k = i; k < j; k++)
            digits &= p->s[k] >= '0' && p->s[k] <= '9';
        if (digits && j - i < 18) {
            key = jv_int(strtoll(p->s + i, NULL, 10));
        } else if (jx_mkstr(c, n, p->s + i, j - i, &key)) {
            return -1;
        }
        if (jx_getitem(c, n, cur, key, &cur)) return -1;
        if (def && cur.t == JV_UNDEF) cur = *def;
        if (j >= p->len) break;
        i = j + 1;
    }
    *out = cur;
    return 0;
}

static int attr_path(jctx *c, const jnode *n, jv item, jv attribute, jv *out) {
    return attr_path_def(c, n, item, attribute, NULL, out);
}

/* ignore_case: lower-cases strings for case-insensitive comparisons */
static int sort_key(jctx *c, const jnode *n, jv v, int case_sensitive, jv *out) {
    if (!case_sensitive && v.t == JV_STR) return change_case(c, n, v.u.s, CASE_LOWER, out);
    *out = v;
    return 0;
}

/* key for sort/unique/min/max: attribute (comma separated for sort) then ignore_case */
static int item_key(jctx *c, const jnode *n, jv item, jv attribute, int multi, int case_sensitive,
                    jv *out) {
    if (attribute.t == JV_NONE || attribute.t == JV_UNDEF)
        return sort_key(c, n, item, case_sensitive, out);
    if (multi && attribute.t == JV_STR && memchr(attribute.u.s->s, ',', attribute.u.s->len)) {
        jlist *parts;
        jv split;
        jstr *comma = js_cstr(c->a, ",");
        if (!comma || do_split(c, n, attribute.u.s, comma, -1, 0, &split))
            return comma ? -1 : jx_nomem(c, n);
        parts = split.u.l;
        jlist *t = jl_new(c->a, parts->len, JL_LIST);
        if (!t) return jx_nomem(c, n);
        for (size_t i = 0; i < parts->len; i++) {
            jv v;
            if (attr_path(c, n, item, parts->v[i], &v) ||
                sort_key(c, n, v, case_sensitive, &t->v[i]))
                return -1;
        }
        t->len = parts->len;
        *out = jv_of_list(t);
        return 0;
    }
    jv v;
    if (attr_path(c, n, item, attribute, &v)) return -1;
    return sort_key(c, n, v, case_sensitive, out);
}

typedef struct sorter {
    jctx *c;
    const jnode *n;
    const jv *keys;
    int bad;
} sorter;

static int less(sorter *s, size_t a, size_t b) {
    int r = jv_cmp(s->keys[a], s->keys[b]);
    if (r == 2 && !s->bad) {
        s->bad = 1;
        jx_type_error(s->c, s->n, "'<' not supported between instances of '%s' and '%s'",
                      jv_typename(s->keys[a]), jv_typename(s->keys[b]));
    }
    if (s->keys[a].t == JV_UNDEF || s->keys[b].t == JV_UNDEF) {
        if (!s->bad) {
            s->bad = 1;
            jx_undef_fail(s->c, s->n, s->keys[a].t == JV_UNDEF ? s->keys[a] : s->keys[b]);
        }
    }
    return r == -1;
}

static void msort(sorter *s, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2 || s->bad) return;
    size_t h = n / 2;
    msort(s, idx, tmp, h);
    msort(s, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (less(s, idx[j], idx[i]))
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
}

/* sorts items by keys (stable); reverse keeps Python's stable reverse semantics */
static int sort_items(jctx *c, const jnode *n, const jlist *items, const jv *keys, int reverse,
                      jlist **out) {
    size_t len = items->len;
    size_t *idx = ja_alloc(c->a, (len ? len : 1) * sizeof(size_t) * 2);
    if (!idx) return jx_nomem(c, n);
    for (size_t i = 0; i < len; i++)
        idx[i] = reverse ? len - 1 - i : i;
    sorter s = {c, n, keys, 0};
    msort(&s, idx, idx + len, len);
    if (s.bad) return -1;
    jlist *r = jl_new(c->a, len, JL_LIST);
    if (!r) return jx_nomem(c, n);
    for (size_t i = 0; i < len; i++)
        r->v[i] = items->v[reverse ? idx[len - 1 - i] : idx[i]];
    r->len = len;
    *out = r;
    return 0;
}

/* select/reject/selectattr/rejectattr */
static int select_reject(jctx *c, const jnode *n, jv seq, const jargs *a, int with_attr, int want,
                         jv *out) {
    jlist *items;
    if (!jv_truthy(seq)) { /* Jinja2 checks `if value:` before iterating */
        jlist *r = jl_new(c->a, 0, JL_ITER);
        if (!r) return jx_nomem(c, n);
        *out = jv_of_list(r);
        return 0;
    }
    if (jx_iterate(c, n, seq, &items)) return -1;
    size_t off = 0;
    jv attribute = jv_none();
    if (with_attr) {
        if (a->npos < 1) return jx_type_error(c, n, "missing parameter for attribute name");
        attribute = a->pos[0];
        off = 1;
    }
    int tid = -1;
    jargs targs = {NULL, 0, a->kwn, a->kwv, a->nkw};
    if (a->npos > off) {
        const jstr *tname = NULL;
        if (want_str(c, n, "test name", a->pos[off], &tname)) return -1;
        tid = jtest_id(tname->s);
        if (tid < 0) return jx_fail(c, n, WEFT_ERR_INVALID, "no test named '%s'", tname->s);
        targs.pos = a->pos + off + 1;
        targs.npos = a->npos - off - 1;
    }
    jlist *r = jl_new(c->a, 0, JL_ITER);
    if (!r) return jx_nomem(c, n);
    for (size_t i = 0; i < items->len; i++) {
        if (jx_count_iter(c, n)) return -1;
        jv v = items->v[i];
        if (with_attr && attr_path(c, n, v, attribute, &v)) return -1;
        int ok;
        if (tid >= 0) {
            if (jx_test(c, n, tid, v, &targs, &ok)) return -1;
        } else {
            ok = jv_truthy(v);
        }
        if (!!ok == want && jx_push(c, n, r, items->v[i])) return -1;
    }
    *out = jv_of_list(r);
    return 0;
}

static int json_filter(jctx *c, const jnode *n, jv v, const jargs *a, jv *out) {
    bound b;
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (bind(c, n, "tojson", a, names, 0, &b)) return -1;
    jjson_opts o;
    memset(&o, 0, sizeof o);
    o.ensure_ascii = b.have[0] && jv_truthy(b.v[0]);
    o.sort_keys = b.have[3] && jv_truthy(b.v[3]);
    char spaces[64];
    if (b.have[1] && b.v[1].t != JV_NONE) {
        jv ind = b.v[1];
        o.has_indent = 1;
        if (ind.t == JV_INT || ind.t == JV_BOOL) {
            int64_t k = ind.u.i < 0 ? 0 : ind.u.i;
            if (k >= (int64_t)sizeof spaces)
                return jx_fail(c, n, WEFT_ERR_INVALID, "tojson indent too large");
            memset(spaces, ' ', (size_t)k);
            o.indent = spaces;
            o.indent_len = (size_t)k;
        } else if (ind.t == JV_STR) {
            o.indent = ind.u.s->s;
            o.indent_len = ind.u.s->len;
        } else {
            return jx_type_error(c, n, "tojson indent must be an int or a str, not %s",
                                 jv_typename(ind));
        }
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.item_sep_len = strlen(o.item_sep);
    o.key_sep = ": ";
    o.key_sep_len = 2;
    if (b.have[2] && b.v[2].t != JV_NONE) {
        jv s = b.v[2];
        if (s.t != JV_LIST || s.u.l->len != 2 || s.u.l->v[0].t != JV_STR || s.u.l->v[1].t != JV_STR)
            return jx_type_error(c, n, "tojson separators must be a pair of strings");
        o.item_sep = s.u.l->v[0].u.s->s;
        o.item_sep_len = s.u.l->v[0].u.s->len;
        o.key_sep = s.u.l->v[1].u.s->s;
        o.key_sep_len = s.u.l->v[1].u.s->len;
    }
    jbuf buf = jx_newbuf(c);
    const char *why = NULL;
    int r = jv_json(&buf, v, &o, 0, &why);
    if (r == 1) {
        jb_free(&buf);
        if (v.t == JV_UNDEF && v.u.why) return jx_undef_fail(c, n, v);
        return jx_type_error(c, n, "%s", why);
    }
    return jx_buf_to_val(c, n, &buf, out);
}

/* Python int(str) / float(str) parsing for the int and float filters. */
static int parse_number(const jstr *s, int want_int, int64_t base, int64_t *iv, double *fv) {
    char tmp[128];
    size_t a = 0, e = s->len, k = 0;
    while (a < e && ju_isspace((unsigned char)s->s[a]))
        a++;
    while (e > a && ju_isspace((unsigned char)s->s[e - 1]))
        e--;
    if (e == a || e - a >= sizeof tmp) return 0;
    for (size_t i = a; i < e; i++) {
        char ch = s->s[i];
        if (ch == '_') {
            if (i == a || i + 1 == e || s->s[i + 1] == '_' ||
                !((s->s[i - 1] >= '0' && s->s[i - 1] <= '9') ||
                  (base == 16 && ((s->s[i - 1] | 32) >= 'a' && (s->s[i - 1] | 32) <= 'f'))))
                return 0;
            continue;
        }
        if ((unsigned char)ch >= 0x80) return 0;
        tmp[k++] = ch;
    }
    tmp[k] = '\0';
    char *end;
    if (want_int) {
        if (base < 2 || base > 36) return 0;
        const char *p = tmp;
        if (*p == '+' || *p == '-') p++;
        if (!*p) return 0;
        errno = 0;
        long long v = strtoll(tmp, &end, (int)base);
        if (*end || errno) return 0;
        *iv = v;
        return 1;
    }
    const char *p = tmp;
    if (*p == '+' || *p == '-') p++;
    if (!strcasecmp(p, "inf") || !strcasecmp(p, "infinity") || !strcasecmp(p, "nan")) {
        *fv = p[0] == 'n' || p[0] == 'N' ? NAN : (tmp[0] == '-' ? -INFINITY : INFINITY);
        return 1;
    }
    for (const char *q = p; *q; q++)
        if (!((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' ||
              *q == '-'))
            return 0;
    *fv = strtod(tmp, &end);
    return *end == '\0' && end != tmp;
}

/* round(x, ndigits) the way CPython does it: correctly rounded, ties to even. */
static double py_round(double x, int64_t nd) {
    if (!isfinite(x) || nd > 300) return x;
    if (nd < -308) return 0.0 * x;
    char buf[512];
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-nd);
    double y = x / p;
    double r = nearbyint(y);
    return r * p;
}

int jx_filter(jctx *c, const jnode *n, int fid, jv v, const jargs *a, jv *out) {
    bound b;
    jstr *s;
    static const char *const none_args[] = {NULL};
    if (jx_work_of(c, n, v)) return -1;
    switch (fid) {
    case F_ABS:
        if (bind(c, n, "abs", a, none_args, 0, &b)) return -1;
        if (v.t == JV_FLOAT)
            *out = jv_float(fabs(v.u.f));
        else if (v.t == JV_INT || v.t == JV_BOOL) {
            if (v.u.i == INT64_MIN)
                return jx_fail(c, n, WEFT_ERR_INVALID, "integer result does not fit in 64 bits");
            *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        } else if (v.t == JV_UNDEF)
            return jx_undef_fail(c, n, v);
        else
            return jx_type_error(c, n, "bad operand type for abs(): '%s'", jv_typename(v));
        return 0;
    case F_ATTR: {
        static const char *const names[] = {"name", NULL};
        const jstr *nm = NULL;
        if (bind(c, n, "attr", a, names, 1, &b) || want_str(c, n, "name", b.v[0], &nm)) return -1;
        if (v.t == JV_UNDEF) return jx_undef_fail(c, n, v);
        int found;
        if (jx_attr_only(c, n, v, nm, out, &found)) return -1;
        if (!found)
            *out = jv_undef(jx_why(c, "'%s object' has no attribute '%s'", jv_typename(v), nm->s));
        return 0;
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TITLE:
        if (bind(c, n, "filter", a, none_args, 0, &b) || jx_to_str(c, n, v, &s)) return -1;
        return change_case(c, n, s,
                           fid == F_CAPITALIZE ? CASE_CAPITALIZE
                           : fid == F_LOWER    ? CASE_LOWER
                           : fid == F_UPPER    ? CASE_UPPER
                                               : CASE_JTITLE,
                           out);
    case F_CENTER: {
        static const char *const names[] = {"width", NULL};
        int64_t w = 80;
        if (bind(c, n, "center", a, names, 0, &b)) return -1;
        if (b.have[0] && want_int(c, n, "width", b.v[0], &w)) return -1;
        jstr *sp = js_cstr(c->a, " ");
        if (!sp || jx_to_str(c, n, v, &s)) return sp ? -1 : jx_nomem(c, n);
        return do_pad(c, n, s, w, sp, 0, out);
    }
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean", NULL};
        if (bind(c, n, "default", a, names, 0, &b)) return -1;
        int use = v.t == JV_UNDEF || (b.have[1] && jv_truthy(b.v[1]) && !jv_truthy(v));
        if (!use) {
            *out = v;
            return 0;
        }
        if (b.have[0])
            *out = b.v[0];
        else
            return jx_mkstr(c, n, "", 0, out);
        return 0;
    }
    case F_DICTSORT: {
        static const char *const names[] = {"case_sensitive", "by", "reverse", NULL};
        if (bind(c, n, "dictsort", a, names, 0, &b)) return -1;
        if (v.t == JV_UNDEF) return jx_undef_fail(c, n, v);
        if (v.t != JV_DICT)
            return jx_type_error(c, n, "dictsort expects a mapping, got %s", jv_typename(v));
        int cs = b.have[0] && jv_truthy(b.v[0]);
        int by_value = 0;
        if (b.have[1]) {
            const jstr *by = NULL;
            if (want_str(c, n, "by", b.v[1], &by)) return -1;
            if (js_eq(by, "value"))
                by_value = 1;
            else if (!js_eq(by, "key"))
                return jx_type_error(c, n, "You can only sort by either \"key\" or \"value\"");
        }
        jargs none = {0};
        jv items;
        if (dict_method(c, n, v.u.d, "items", &none, &items)) return -1;
        jlist *l = items.u.l;
        jv *keys = ja_alloc(c->a, (l->len ? l->len : 1) * sizeof(jv));
        if (!keys) return jx_nomem(c, n);
        for (size_t i = 0; i < l->len; i++)
            if (sort_key(c, n, l->v[i].u.l->v[by_value], cs, &keys[i])) return -1;
        jlist *r;
        if (sort_items(c, n, l, keys, b.have[2] && jv_truthy(b.v[2]), &r)) return -1;
        *out = jv_of_list(r);
        return 0;
    }
    case F_ESCAPE: {
        if (bind(c, n, "escape", a, none_args, 0, &b) || jx_to_str(c, n, v, &s)) return -1;
        jbuf buf = jx_newbuf(c);
        for (size_t i = 0; i < s->len; i++) {
            switch (s->s[i]) {
            case '&':
                jb_puts(&buf, "&amp;");
                break;
            case '<':
                jb_puts(&buf, "&lt;");
                break;
            case '>':
                jb_puts(&buf, "&gt;");
                break;
            case '"':
                jb_puts(&buf, "&#34;");
                break;
            case '\'':
                jb_puts(&buf, "&#39;");
                break;
            default:
                jb_putc(&buf, s->s[i]);
            }
        }
        return jx_buf_to_val(c, n, &buf, out);
    }
    case F_FIRST:
    case F_LAST: {
        jlist *items;
        if (bind(c, n, fid == F_FIRST ? "first" : "last", a, none_args, 0, &b)) return -1;
        if (fid == F_LAST && v.t == JV_LIST && v.u.l->kind == JL_ITER)
            return jx_type_error(c, n, "'generator' object is not reversible");
        if (jx_iterate(c, n, v, &items)) return -1;
        if (items->len == 0) {
            *out = jv_undef(fid == F_FIRST ? "No first item, sequence was empty."
                                           : "No last item, sequence was empty.");
            return 0;
        }
        *out = items->v[fid == F_FIRST ? 0 : items->len - 1];
        return 0;
    }
    case F_FLOAT: {
        static const char *const names[] = {"default", NULL};
        if (bind(c, n, "float", a, names, 0, &b)) return -1;
        jv def = b.have[0] ? b.v[0] : jv_float(0.0);
        double f;
        int64_t dummy;
        if (v.t == JV_FLOAT)
            *out = v;
        else if (v.t == JV_INT || v.t == JV_BOOL)
            *out = jv_float((double)v.u.i);
        else if (v.t == JV_STR && parse_number(v.u.s, 0, 10, &dummy, &f))
            *out = jv_float(f);
        else
            *out = def;
        return 0;
    }
    case F_FORMAT: {
        if (a->npos && a->nkw)
            return jx_type_error(c, n,
                                 "can't handle positional and keyword arguments at the same time");
        if (jx_to_str(c, n, v, &s)) return -1;
        jv args;
        if (a->nkw) {
            jdict *d = jd_new(c->a);
            if (!d) return jx_nomem(c, n);
            for (size_t k = 0; k < a->nkw; k++)
                if (jd_set(c->a, d, jv_of_str(a->kwn[k]), a->kwv[k])) return jx_nomem(c, n);
            args = jv_of_dict(d);
        } else {
            jlist *t = jl_new(c->a, a->npos, JL_TUPLE);
            if (!t) return jx_nomem(c, n);
            jv_copy(t->v, a->pos, a->npos);
            t->len = a->npos;
            args = jv_of_list(t);
        }
        return jx_percent(c, n, s, args, out);
    }
    case F_INDENT: {
        static const char *const names[] = {"width", "first", "blank", NULL};
        if (bind(c, n, "indent", a, names, 0, &b)) return -1;
        if (v.t == JV_UNDEF) return jx_undef_fail(c, n, v);
        /* Jinja2 appends "\n" to the value and calls .splitlines(): only strings survive */
        if (v.t != JV_STR)
            return jx_type_error(c, n, "indent expects a string, got %s", jv_typename(v));
        s = v.u.s;
        const char *ind = "    ";
        size_t ind_len = 4;
        char spaces[256];
        if (b.have[0]) {
            if (b.v[0].t == JV_STR) {
                ind = b.v[0].u.s->s;
                ind_len = b.v[0].u.s->len;
            } else {
                int64_t w = 0;
                if (want_int(c, n, "width", b.v[0], &w)) return -1;
                if (w < 0) w = 0;
                if (w > (int64_t)sizeof spaces)
                    return jx_fail(c, n, WEFT_ERR_INVALID, "indent width too large");
                memset(spaces, ' ', (size_t)w);
                ind = spaces;
                ind_len = (size_t)w;
            }
        }
        int first = b.have[1] && jv_truthy(b.v[1]), blank = b.have[2] && jv_truthy(b.v[2]);
        jstr *nl = js_cstr(c->a, "\n");
        jstr *s2 = nl ? js_cat(c->a, s, nl) : NULL;
        jlist *lines;
        if (!s2) return jx_nomem(c, n);
        if (do_splitlines(c, n, s2, 0, &lines)) return -1;
        jbuf buf = jx_newbuf(c);
        if (first) jb_put(&buf, ind, ind_len);
        for (size_t i = 0; i < lines->len; i++) {
            const jstr *ln = lines->v[i].u.s;
            if (i) {
                jb_putc(&buf, '\n');
                if (blank || ln->len) jb_put(&buf, ind, ind_len);
            }
            jb_put(&buf, ln->s, ln->len);
        }
        return jx_buf_to_val(c, n, &buf, out);
    }
    case F_INT: {
        static const char *const names[] = {"default", "base", NULL};
        if (bind(c, n, "int", a, names, 0, &b)) return -1;
        jv def = b.have[0] ? b.v[0] : jv_int(0);
        int64_t base = 10, iv;
        double f;
        if (b.have[1] && want_int(c, n, "base", b.v[1], &base)) return -1;
        if (v.t == JV_INT || v.t == JV_BOOL)
            *out = jv_int(v.u.i);
        else if (v.t == JV_FLOAT || (v.t == JV_STR && !parse_number(v.u.s, 1, base, &iv, &f) &&
                                     parse_number(v.u.s, 0, 10, &iv, &f))) {
            double x = v.t == JV_FLOAT ? v.u.f : f;
            if (x != x)
                *out = def;
            else if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0))
                return jx_fail(c, n, WEFT_ERR_INVALID, "cannot convert %g to a 64-bit integer", x);
            else
                *out = jv_int((int64_t)x);
        } else if (v.t == JV_STR && parse_number(v.u.s, 1, base, &iv, &f))
            *out = jv_int(iv);
        else
            *out = def;
        return 0;
    }
    case F_ITEMS: {
        if (bind(c, n, "items", a, none_args, 0, &b)) return -1;
        if (v.t == JV_UNDEF) {
            jlist *l = jl_new(c->a, 0, JL_ITER);
            if (!l) return jx_nomem(c, n);
            *out = jv_of_list(l);
            return 0;
        }
        if (v.t != JV_DICT) return jx_type_error(c, n, "Can only get item pairs from a mapping.");
        jargs none = {0};
        if (dict_method(c, n, v.u.d, "items", &none, out)) return -1;
        out->u.l->kind = JL_ITER;
        return 0;
    }
    case F_JOIN: {
        static const char *const names[] = {"d", "attribute", NULL};
        if (bind(c, n, "join", a, names, 0, &b)) return -1;
        jlist *items;
        if (jx_iterate(c, n, v, &items)) return -1;
        jstr *sep = NULL;
        if (b.have[0]) {
            if (jx_to_str(c, n, b.v[0], &sep)) return -1;
        }
        jbuf buf = jx_newbuf(c);
        for (size_t i = 0; i < items->len; i++) {
            jv it = items->v[i];
            if (b.have[1] && b.v[1].t != JV_NONE && attr_path(c, n, it, b.v[1], &it)) {
                jb_free(&buf);
                return -1;
            }
            if (i && sep) jb_put(&buf, sep->s, sep->len);
            jv_str(&buf, it);
        }
        return jx_buf_to_val(c, n, &buf, out);
    }
    case F_LENGTH: {
        if (bind(c, n, "length", a, none_args, 0, &b)) return -1;
        switch (v.t) {
        case JV_UNDEF:
            *out = jv_int(0);
            return 0;
        case JV_STR:
            *out = jv_int((int64_t)v.u.s->ncp);
            return 0;
        case JV_DICT:
            *out = jv_int((int64_t)v.u.d->len);
            return 0;
        case JV_LIST:
            if (v.u.l->kind != JL_ITER) {
                *out = jv_int((int64_t)v.u.l->len);
                return 0;
            }
            /* fallthrough */
        default:
            return jx_type_error(c, n, "object of type '%s' has no len()", jv_typename(v));
        }
    }
    case F_LIST: {
        jlist *items;
        if (bind(c, n, "list", a, none_args, 0, &b) || jx_iterate(c, n, v, &items)) return -1;
        jlist *r = jl_new(c->a, items->len, JL_LIST);
        if (!r) return jx_nomem(c, n);
        jv_copy(r->v, items->v, items->len);
        r->len = items->len;
        *out = jv_of_list(r);
        return 0;
    }
    case F_MAP: {
        jlist *items;
        if (!jv_truthy(v)) { /* Jinja2 checks `if value:` before iterating */
            jlist *r = jl_new(c->a, 0, JL_ITER);
            if (!r) return jx_nomem(c, n);
            *out = jv_of_list(r);
            return 0;
        }
        if (jx_iterate(c, n, v, &items)) return -1;
        jlist *r = jl_new(c->a, items->len, JL_ITER);
        if (!r) return jx_nomem(c, n);
        if (a->npos == 0) {
            jv attribute = jv_none(), def = jv_none();
            int have_attr = 0;
            for (size_t k = 0; k < a->nkw; k++) {
                if (js_eq(a->kwn[k], "attribute")) {
                    attribute = a->kwv[k];
                    have_attr = 1;
                } else if (js_eq(a->kwn[k], "default")) {
                    def = a->kwv[k];
                } else {
                    return jx_type_error(c, n, "Unexpected keyword argument '%s'", a->kwn[k]->s);
                }
            }
            if (!have_attr) return jx_type_error(c, n, "map requires a filter argument");
            for (size_t i = 0; i < items->len; i++) {
                jv x;
                if (jx_count_iter(c, n) ||
                    attr_path_def(c, n, items->v[i], attribute, def.t != JV_NONE ? &def : NULL, &x))
                    return -1;
                r->v[i] = x;
            }
        } else {
            const jstr *fname = NULL;
            if (want_str(c, n, "filter name", a->pos[0], &fname)) return -1;
            int f2 = jfilter_id(fname->s);
            if (f2 < 0) return jx_fail(c, n, WEFT_ERR_INVALID, "no filter named '%s'", fname->s);
            jargs rest = {a->pos + 1, a->npos - 1, a->kwn, a->kwv, a->nkw};
            for (size_t i = 0; i < items->len; i++)
                if (jx_count_iter(c, n) || jx_filter(c, n, f2, items->v[i], &rest, &r->v[i]))
                    return -1;
        }
        r->len = items->len;
        *out = jv_of_list(r);
        return 0;
    }
    case F_MAX:
    case F_MIN: {
        static const char *const names[] = {"case_sensitive", "attribute", NULL};
        jlist *items;
        if (bind(c, n, fid == F_MAX ? "max" : "min", a, names, 0, &b) ||
            jx_iterate(c, n, v, &items))
            return -1;
        if (items->len == 0) {
            *out = jv_undef("No aggregated item, sequence was empty.");
            return 0;
        }
        int cs = b.have[0] && jv_truthy(b.v[0]);
        jv attribute = b.have[1] ? b.v[1] : jv_none();
        size_t best = 0;
        jv bk;
        if (item_key(c, n, items->v[0], attribute, 0, cs, &bk)) return -1;
        for (size_t i = 1; i < items->len; i++) {
            jv k;
            if (item_key(c, n, items->v[i], attribute, 0, cs, &k)) return -1;
            int r = jv_cmp(k, bk);
            if (r == 2)
                return jx_type_error(c, n, "'<' not supported between instances of '%s' and '%s'",
                                     jv_typename(k), jv_typename(bk));
            if (fid == F_MAX ? r > 0 && r != 3 : r < 0) {
                best = i;
                bk = k;
            }
        }
        *out = items->v[best];
        return 0;
    }
    case F_REJECT:
        return select_reject(c, n, v, a, 0, 0, out);
    case F_SELECT:
        return select_reject(c, n, v, a, 0, 1, out);
    case F_REJECTATTR:
        return select_reject(c, n, v, a, 1, 0, out);
    case F_SELECTATTR:
        return select_reject(c, n, v, a, 1, 1, out);
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count", NULL};
        jstr *old, *rep;
        int64_t cnt = -1;
        if (bind(c, n, "replace", a, names, 2, &b)) return -1;
        if (jx_to_str(c, n, v, &s) || jx_to_str(c, n, b.v[0], &old) ||
            jx_to_str(c, n, b.v[1], &rep))
            return -1;
        if (b.have[2] && b.v[2].t != JV_NONE && want_int(c, n, "count", b.v[2], &cnt)) return -1;
        return do_replace(c, n, s, old, rep, cnt, out);
    }
    case F_REVERSE: {
        if (bind(c, n, "reverse", a, none_args, 0, &b)) return -1;
        if (v.t == JV_STR) {
            jbuf buf = jx_newbuf(c);
            size_t e = v.u.s->len;
            while (e > 0) {
                size_t k = e - 1;
                while (k > 0 && ((unsigned char)v.u.s->s[k] & 0xC0) == 0x80)
                    k--;
                jb_put(&buf, v.u.s->s + k, e - k);
                e = k;
            }
            return jx_buf_to_val(c, n, &buf, out);
        }
        jlist *items;
        if (jx_iterate(c, n, v, &items)) return -1;
        int kind = v.t == JV_LIST && v.u.l->kind == JL_ITER ? JL_LIST : JL_ITER;
        jlist *r = jl_new(c->a, items->len, kind);
        if (!r) return jx_nomem(c, n);
        for (size_t i = 0; i < items->len; i++)
            r->v[i] = items->v[items->len - 1 - i];
        r->len = items->len;
        *out = jv_of_list(r);
        return 0;
    }
    case F_ROUND: {
        static const char *const names[] = {"precision", "method", NULL};
        int64_t prec = 0;
        if (bind(c, n, "round", a, names, 0, &b)) return -1;
        if (b.have[0] && want_int(c, n, "precision", b.v[0], &prec)) return -1;
        int method = 0;
        if (b.have[1]) {
            const jstr *m = NULL;
            if (want_str(c, n, "method", b.v[1], &m)) return -1;
            if (js_eq(m, "ceil"))
                method = 1;
            else if (js_eq(m, "floor"))
                method = 2;
            else if (!js_eq(m, "common"))
                return jx_type_error(c, n, "method must be common, ceil or floor");
        }
        if (v.t == JV_UNDEF) return jx_undef_fail(c, n, v);
        if (!jv_is_number(v))
            return jx_type_error(c, n, "type %s doesn't define __round__ method", jv_typename(v));
        if (method == 0 && v.t != JV_FLOAT) {
            if (prec >= 0) {
                *out = jv_int(v.u.i);
                return 0;
            }
            double r = py_round((double)v.u.i, prec);
            *out = jv_int((int64_t)r);
            return 0;
        }
        double x = jv_num(v);
        if (method == 0) {
            *out = jv_float(py_round(x, prec));
        } else {
            double p = pow(10.0, (double)prec);
            *out = jv_float((method == 1 ? ceil(x * p) : floor(x * p)) / p);
        }
        return 0;
    }
    case F_SAFE:
    case F_STRING:
        if (bind(c, n, "string", a, none_args, 0, &b) || jx_to_str(c, n, v, &s)) return -1;
        *out = jv_of_str(s);
        return 0;
    case F_SORT:
    case F_UNIQUE: {
        static const char *const sort_names[] = {"reverse", "case_sensitive", "attribute", NULL};
        static const char *const uniq_names[] = {"case_sensitive", "attribute", NULL};
        jlist *items;
        int is_sort = fid == F_SORT;
        if (bind(c, n, is_sort ? "sort" : "unique", a, is_sort ? sort_names : uniq_names, 0, &b))
            return -1;
        if (jx_iterate(c, n, v, &items)) return -1;
        int o = is_sort ? 1 : 0;
        int cs = b.have[o] && jv_truthy(b.v[o]);
        jv attribute = b.have[o + 1] ? b.v[o + 1] : jv_none();
        jv *keys = ja_alloc(c->a, (items->len ? items->len : 1) * sizeof(jv));
        if (!keys) return jx_nomem(c, n);
        for (size_t i = 0; i < items->len; i++)
            if (jx_count_iter(c, n) ||
                item_key(c, n, items->v[i], attribute, is_sort, cs, &keys[i]))
                return -1;
        if (is_sort) {
            jlist *r;
            if (sort_items(c, n, items, keys, b.have[0] && jv_truthy(b.v[0]), &r)) return -1;
            *out = jv_of_list(r);
            return 0;
        }
        jlist *r = jl_new(c->a, 0, JL_ITER);
        if (!r) return jx_nomem(c, n);
        for (size_t i = 0; i < items->len; i++) {
            if (!jv_hashable(keys[i]))
                return jx_type_error(c, n, "unhashable type: '%s'", jv_typename(keys[i]));
            size_t k;
            for (k = 0; k < i; k++)
                if (jv_eq(keys[k], keys[i])) break;
            if (k == i && jx_push(c, n, r, items->v[i])) return -1;
        }
        *out = jv_of_list(r);
        return 0;
    }
    case F_SUM: {
        static const char *const names[] = {"attribute", "start", NULL};
        jlist *items;
        if (bind(c, n, "sum", a, names, 0, &b) || jx_iterate(c, n, v, &items)) return -1;
        jv acc = b.have[1] ? b.v[1] : jv_int(0);
        if (acc.t == JV_STR)
            return jx_type_error(c, n, "sum() can't sum strings [use ''.join(seq) instead]");
        for (size_t i = 0; i < items->len; i++) {
            jv x = items->v[i];
            if (b.have[0] && b.v[0].t != JV_NONE && attr_path(c, n, x, b.v[0], &x)) return -1;
            if (jx_binop(c, n, OP_ADD, acc, x, &acc)) return -1;
        }
        *out = acc;
        return 0;
    }
    case F_TOJSON:
        return json_filter(c, n, v, a, out);
    case F_TRIM: {
        static const char *const names[] = {"chars", NULL};
        jstr *chars = NULL;
        if (bind(c, n, "trim", a, names, 0, &b) || jx_to_str(c, n, v, &s)) return -1;
        if (b.have[0] && b.v[0].t != JV_NONE) {
            const jstr *cs = NULL;
            if (want_str(c, n, "chars", b.v[0], &cs)) return -1;
            chars = (jstr *)cs;
        }
        return do_strip(c, n, s, chars, 3, out);
    }
    case F_WORDCOUNT: {
        if (bind(c, n, "wordcount", a, none_args, 0, &b) || jx_to_str(c, n, v, &s)) return -1;
        int64_t words = 0;
        int in_word = 0;
        size_t i = 0;
        while (i < s->len) {
            uint32_t cp = ju_next(s->s, s->len, &i);
            int w = (cp < 0x80 && ((cp | 32) >= 'a' && (cp | 32) <= 'z')) ||
                    (cp >= '0' && cp <= '9') || cp == '_' ||
                    (cp >= 0x80 && !ju_isspace(cp) && cp != 0x85);
            if (w && !in_word) words++;
            in_word = w;
        }
        *out = jv_int(words);
        return 0;
    }
    default:
        return jx_fail(c, n, WEFT_ERR_INTERNAL, "unknown filter %d", fid);
    }
}

/* ---- tests ------------------------------------------------------------------------------ */
enum {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_ESCAPED,
    T_EVEN,
    T_FALSE,
    T_FILTER,
    T_FLOATT,
    T_GE,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRINGT,
    T_TEST,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
};

static const struct {
    const char *name;
    int id;
} TESTS[] = {
    {"!=", T_NE},
    {"<", T_LT},
    {"<=", T_LE},
    {"==", T_EQ},
    {">", T_GT},
    {">=", T_GE},
    {"boolean", T_BOOLEAN},
    {"callable", T_CALLABLE},
    {"defined", T_DEFINED},
    {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"escaped", T_ESCAPED},
    {"even", T_EVEN},
    {"false", T_FALSE},
    {"filter", T_FILTER},
    {"float", T_FLOATT},
    {"ge", T_GE},
    {"greaterthan", T_GT},
    {"gt", T_GT},
    {"in", T_IN},
    {"integer", T_INTEGER},
    {"iterable", T_ITERABLE},
    {"le", T_LE},
    {"lessthan", T_LT},
    {"lower", T_LOWER},
    {"lt", T_LT},
    {"mapping", T_MAPPING},
    {"ne", T_NE},
    {"none", T_NONE},
    {"number", T_NUMBER},
    {"odd", T_ODD},
    {"sameas", T_SAMEAS},
    {"sequence", T_SEQUENCE},
    {"string", T_STRINGT},
    {"test", T_TEST},
    {"true", T_TRUE},
    {"undefined", T_UNDEFINED},
    {"upper", T_UPPER},
};

int jtest_id(const char *name) {
    for (size_t i = 0; i < sizeof(TESTS) / sizeof(TESTS[0]); i++)
        if (!strcmp(TESTS[i].name, name)) return TESTS[i].id;
    return -1;
}

int jx_test(jctx *c, const jnode *n, int tid, jv v, const jargs *a, int *res) {
    bound b;
    static const char *const none_args[] = {NULL};
    static const char *const one_arg[] = {"other", NULL};
    int need_arg = tid == T_DIVISIBLEBY || tid == T_EQ || tid == T_GE || tid == T_GT ||
                   tid == T_IN || tid == T_LE || tid == T_LT || tid == T_NE || tid == T_SAMEAS;
    if (bind(c, n, "test", a, need_arg ? one_arg : none_args, need_arg, &b)) return -1;
    jv o = b.v[0];
    switch (tid) {
    case T_BOOLEAN:
        *res = v.t == JV_BOOL;
        return 0;
    case T_CALLABLE:
        *res = v.t == JV_FUNC || v.t == JV_LOOP;
        return 0;
    case T_DEFINED:
        *res = v.t != JV_UNDEF;
        return 0;
    case T_UNDEFINED:
        *res = v.t == JV_UNDEF;
        return 0;
    case T_DIVISIBLEBY: {
        jv r;
        if (jx_binop(c, n, OP_MOD, v, o, &r)) return -1;
        *res = jv_eq(r, jv_int(0));
        return 0;
    }
    case T_ODD:
    case T_EVEN: {
        jv r;
        if (jx_binop(c, n, OP_MOD, v, jv_int(2), &r)) return -1;
        *res = jv_eq(r, jv_int(tid == T_ODD ? 1 : 0));
        return 0;
    }
    case T_EQ:
        return jx_compare(c, n, OP_EQ, v, o, res);
    case T_NE:
        return jx_compare(c, n, OP_NE, v, o, res);
    case T_GE:
        return jx_compare(c, n, OP_GE, v, o, res);
    case T_GT:
        return jx_compare(c, n, OP_GT, v, o, res);
    case T_LE:
        return jx_compare(c, n, OP_LE, v, o, res);
    case T_LT:
        return jx_compare(c, n, OP_LT, v, o, res);
    case T_IN:
        return jx_contains(c, n, v, o, res);
    case T_ESCAPED:
        *res = 0;
        return 0;
    case T_FALSE:
        *res = v.t == JV_BOOL && !v.u.i;
        return 0;
    case T_TRUE:
        *res = v.t == JV_BOOL && v.u.i;
        return 0;
    case T_FILTER:
    case T_TEST:
        *res = v.t == JV_STR && (tid == T_FILTER ? jfilter_id(v.u.s->s) : jtest_id(v.u.s->s)) >= 0;
        return 0;
    case T_FLOATT:
        *res = v.t == JV_FLOAT;
        return 0;
    case T_INTEGER:
        *res = v.t == JV_INT;
        return 0;
    case T_NUMBER:
        *res = jv_is_number(v);
        return 0;
    case T_NONE:
        *res = v.t == JV_NONE;
        return 0;
    case T_STRINGT:
        *res = v.t == JV_STR;
        return 0;
    case T_MAPPING:
        *res = v.t == JV_DICT;
        return 0;
    case T_ITERABLE:
        *res = v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT;
        return 0;
    case T_SEQUENCE:
        *res = v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_DICT ||
               (v.t == JV_LIST &&
                (v.u.l->kind == JL_LIST || v.u.l->kind == JL_TUPLE || v.u.l->kind == JL_RANGE));
        return 0;
    case T_LOWER:
    case T_UPPER: {
        jstr *s;
        jv r;
        jargs none = {0};
        if (jx_to_str(c, n, v, &s) ||
            str_method(c, n, s, tid == T_LOWER ? "islower" : "isupper", &none, &r))
            return -1;
        *res = (int)r.u.i;
        return 0;
    }
    case T_SAMEAS:
        if (v.t != o.t)
            *res = 0;
        else if (v.t == JV_NONE || v.t == JV_UNDEF)
            *res = 1;
        else if (v.t == JV_BOOL)
            *res = v.u.i == o.u.i;
        else if (v.t == JV_INT)
            *res = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;
        else if (v.t == JV_FLOAT)
            *res = 0;
        else
            *res = v.u.d == o.u.d;
        return 0;
    default:
        return jx_fail(c, n, WEFT_ERR_INTERNAL, "unknown test %d", tid);
    }
}
