/* UTF-8 decoding and repair, Unicode normalization and lowercase for the tokenizer. The
 * normalization follows UAX #15: full decomposition (Hangul algorithmically, everything else from
 * the generated tables), canonical ordering of combining marks by a stable insertion sort, then
 * for the composed forms the canonical composition algorithm over primary composites. */
#include "text/tok_unicode.h"

#include <stdlib.h>
#include <string.h>

#define HANGUL_S0 0xAC00u
#define HANGUL_L0 0x1100u
#define HANGUL_V0 0x1161u
#define HANGUL_T0 0x11A7u
#define HANGUL_LN 19u
#define HANGUL_VN 21u
#define HANGUL_TN 28u
#define HANGUL_NN (HANGUL_VN * HANGUL_TN)
#define HANGUL_SN (HANGUL_LN * HANGUL_NN)

size_t weft_tok_utf8_decode(const char *str, size_t n, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    uint32_t v;
    unsigned char lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < need + 1) return 0;
    for (size_t i = 1; i <= need; i++) {
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need + 1;
}

size_t weft_tok_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t weft_tok_utf8_len(const char *s, size_t n) {
    uint32_t cp;
    size_t k = weft_tok_utf8_decode(s, n, &cp);
    return k ? k : 1;
}

int weft_tok_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        size_t k = weft_tok_utf8_decode(s + i, n - i, &cp);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* Length of the maximal subpart of an ill-formed sequence at s: the lead byte plus the
 * continuation bytes that could still have belonged to a well-formed sequence. */
static size_t maximal_subpart(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 1;
    size_t k = 1;
    while (k <= need && k < n) {
        unsigned char b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
        k++;
    }
    return k;
}

int weft_tok_utf8_partial(const char *s, size_t n) {
    if (n == 0 || n > 3) return 0;
    const unsigned char *u = (const unsigned char *)s;
    size_t need = u[0] >= 0xC2 && u[0] <= 0xDF   ? 2
                  : u[0] >= 0xE0 && u[0] <= 0xEF ? 3
                  : u[0] >= 0xF0 && u[0] <= 0xF4 ? 4
                                                 : 0;
    return need > n && maximal_subpart(u, n) == n;
}

char *weft_tok_utf8_repair(const char *s, size_t n, size_t *out_len) {
    /* Each invalid byte grows to at most 3 bytes. */
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    size_t i = 0, o = 0;
    uint32_t cp;
    while (i < n) {
        size_t k = weft_tok_utf8_decode(s + i, n - i, &cp);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            i += maximal_subpart((const unsigned char *)s + i, n - i);
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
    }
    out[o] = '\0';
    if (out_len) *out_len = o;
    return out;
}

static int ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = weft_tok_ccc_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (weft_tok_ccc[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < weft_tok_ccc_count && weft_tok_ccc[lo].cp == cp ? weft_tok_ccc[lo].ccc : 0;
}

/* The full decomposition of cp for the form, or NULL when cp decomposes to itself. */
static const weft_tok_decomp_entry *decomp_of(uint32_t cp, int compat) {
    if (cp < 0xA0) return NULL;
    size_t lo = 0, hi = weft_tok_decomp_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (weft_tok_decomp[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    const weft_tok_decomp_entry *canon = NULL;
    for (size_t i = lo; i < weft_tok_decomp_count && weft_tok_decomp[i].cp == cp; i++) {
        if (weft_tok_decomp[i].compat) {
            if (compat) return &weft_tok_decomp[i];
        } else {
            canon = &weft_tok_decomp[i];
        }
    }
    return canon;
}

static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L0 && a < HANGUL_L0 + HANGUL_LN && b >= HANGUL_V0 && b < HANGUL_V0 + HANGUL_VN)
        return HANGUL_S0 + ((a - HANGUL_L0) * HANGUL_VN + (b - HANGUL_V0)) * HANGUL_TN;
    if (a >= HANGUL_S0 && a < HANGUL_S0 + HANGUL_SN && (a - HANGUL_S0) % HANGUL_TN == 0 &&
        b > HANGUL_T0 && b < HANGUL_T0 + HANGUL_TN)
        return a + (b - HANGUL_T0);
    size_t lo = 0, hi = weft_tok_comp_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const weft_tok_comp_entry *e = &weft_tok_comp[mid];
        if (e->first < a || (e->first == a && e->second < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < weft_tok_comp_count && weft_tok_comp[lo].first == a && weft_tok_comp[lo].second == b)
        return weft_tok_comp[lo].composite;
    return 0;
}

typedef struct cpbuf {
    uint32_t *v;
    size_t n, cap;
} cpbuf;

static int cp_push(cpbuf *b, uint32_t cp) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        uint32_t *v = realloc(b->v, cap * sizeof(*v));
        if (!v) return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = cp;
    return 0;
}

static int cps_to_utf8(const uint32_t *v, size_t n, char **out, size_t *out_len) {
    char *s = malloc(n * 4 + 1);
    if (!s) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += weft_tok_utf8_encode(v[i], s + o);
    s[o] = '\0';
    *out = s;
    *out_len = o;
    return 0;
}

/* Whether s is entirely ASCII: every form leaves ASCII unchanged, the common fast path. */
static int all_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

static int dup_out(const char *s, size_t n, char **out, size_t *out_len) {
    char *d = malloc(n + 1);
    if (!d) return -1;
    memcpy(d, s, n);
    d[n] = '\0';
    *out = d;
    *out_len = n;
    return 0;
}

int weft_tok_normalize(weft_tok_nf form, const char *s, size_t n, char **out, size_t *out_len) {
    if (all_ascii(s, n)) return dup_out(s, n, out, out_len);
    int compat = form == WEFT_TOK_NFKC || form == WEFT_TOK_NFKD;
    int compose = form == WEFT_TOK_NFC || form == WEFT_TOK_NFKC;
    cpbuf b = {0};
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = weft_tok_utf8_decode(s + i, n - i, &cp);
        if (!k) { /* callers pass repaired text; keep going rather than loop */
            cp = 0xFFFD;
            k = 1;
        }
        i += k;
        int rc = 0;
        if (cp >= HANGUL_S0 && cp < HANGUL_S0 + HANGUL_SN) {
            uint32_t si = cp - HANGUL_S0;
            rc |= cp_push(&b, HANGUL_L0 + si / HANGUL_NN);
            rc |= cp_push(&b, HANGUL_V0 + (si % HANGUL_NN) / HANGUL_TN);
            if (si % HANGUL_TN) rc |= cp_push(&b, HANGUL_T0 + si % HANGUL_TN);
        } else {
            const weft_tok_decomp_entry *e = decomp_of(cp, compat);
            if (e) {
                for (size_t j = 0; j < e->len; j++)
                    rc |= cp_push(&b, weft_tok_decomp_data[e->offset + j]);
            } else {
                rc |= cp_push(&b, cp);
            }
        }
        if (rc) {
            free(b.v);
            return -1;
        }
    }
    /* Canonical ordering: stable sort of each run of non-starters by combining class. */
    for (size_t j = 1; j < b.n; j++) {
        int cj = ccc_of(b.v[j]);
        if (cj == 0) continue;
        size_t k = j;
        while (k > 0) {
            int ck = ccc_of(b.v[k - 1]);
            if (ck <= cj) break;
            uint32_t t = b.v[k];
            b.v[k] = b.v[k - 1];
            b.v[k - 1] = t;
            k--;
        }
    }
    if (compose && b.n > 0) {
        size_t starter = 0, o = 1;
        int last = ccc_of(b.v[0]);
        int have_starter = last == 0;
        if (!have_starter) last = 256;
        for (size_t j = 1; j < b.n; j++) {
            uint32_t c = b.v[j];
            int cc = ccc_of(c);
            if (have_starter && (last < cc || last == 0)) {
                uint32_t comp = compose_pair(b.v[starter], c);
                if (comp) {
                    b.v[starter] = comp;
                    continue;
                }
            }
            if (cc == 0) {
                starter = o;
                have_starter = 1;
            }
            last = cc;
            b.v[o++] = c;
        }
        b.n = o;
    }
    int rc = cps_to_utf8(b.v, b.n, out, out_len);
    free(b.v);
    return rc;
}

static const weft_tok_lower_entry *lower_of(uint32_t cp) {
    size_t lo = 0, hi = weft_tok_lower_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (weft_tok_lower[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < weft_tok_lower_count && weft_tok_lower[lo].cp == cp ? &weft_tok_lower[lo] : NULL;
}

int weft_tok_lowercase(const char *s, size_t n, char **out, size_t *out_len) {
    /* Two passes: size the output exactly, then write it. */
    size_t need = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *d = NULL;
        if (pass == 1) {
            d = malloc(need + 1);
            if (!d) return -1;
        }
        size_t i = 0, o = 0;
        char tmp[4];
        while (i < n) {
            uint32_t cp;
            size_t k = weft_tok_utf8_decode(s + i, n - i, &cp);
            if (!k) { /* not UTF-8 here: the byte is kept as it is */
                if (d) d[o] = s[i];
                o++;
                i++;
                continue;
            }
            i += k;
            const weft_tok_lower_entry *e = NULL;
            if (cp < 0x80) {
                if (cp >= 'A' && cp <= 'Z') cp += 32;
            } else {
                e = lower_of(cp);
            }
            size_t m = e ? e->len : 1;
            for (size_t j = 0; j < m; j++) {
                size_t w = weft_tok_utf8_encode(e ? e->to[j] : cp, tmp);
                if (d) memcpy(d + o, tmp, w);
                o += w;
            }
        }
        if (pass == 0) {
            need = o;
        } else {
            d[o] = '\0';
            *out = d;
            *out_len = o;
        }
    }
    return 0;
}

int weft_tok_is_whitespace(uint32_t cp) {
    /* The White_Space property (PropList.txt), which Rust's char::is_whitespace follows. */
    if (cp >= 0x09 && cp <= 0x0D) return 1;
    switch (cp) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}
