/* The string stages of the tokenizer pipeline, each with the semantics of its Hugging Face
 * counterpart: normalizers (one string in, one out), pre-tokenizers (a list of pieces in, a finer
 * list out; Split with the five delimiter behaviours and invert, ByteLevel, Metaspace and the
 * regex-defined ones), and decoders (a list of token pieces in, text out). Offsets are not
 * tracked: weft only needs ids, so a piece is just its bytes plus whether it starts the input
 * (Metaspace's "first" scheme needs that). Regexes run in PCRE2 with UTF and UCP on text that was
 * repaired to valid UTF-8 beforehand, so they can skip PCRE2's own UTF check. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/tok_unicode.h"
#include "util/error.h"

/* ---- ByteLevel's byte <-> code point map ---------------------------------------------------
 * Printable Latin-1 bytes map to themselves; the other 68 bytes map, in order, to U+0100 on. */
static int byte_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

/* UTF-8 of each byte's code point and the reverse map, built once. */
static char byte_utf8[256][3];
static unsigned char byte_utf8_len[256];
static uint16_t byte_cp[256];
static int16_t byte_map_cp[324]; /* code point -> byte, -1 when not in the map */
static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;

static void byte_map_init(void) {
    uint32_t next = 256;
    for (unsigned cp = 0; cp < 324; cp++) byte_map_cp[cp] = -1;
    for (unsigned b = 0; b < 256; b++) {
        uint32_t cp = byte_printable(b) ? b : next++;
        byte_cp[b] = (uint16_t)cp;
        byte_map_cp[cp] = (int16_t)b;
        char tmp[4];
        size_t k = weft_tok_utf8_encode(cp, tmp);
        memcpy(byte_utf8[b], tmp, k);
        byte_utf8_len[b] = (unsigned char)k;
    }
}

uint32_t tok_byte_to_cp(unsigned char b) {
    pthread_once(&byte_map_once, byte_map_init);
    return byte_cp[b];
}

int tok_cp_to_byte(uint32_t cp) {
    pthread_once(&byte_map_once, byte_map_init);
    return cp < 324 ? byte_map_cp[cp] : -1;
}

/* ---- patterns ------------------------------------------------------------------------------ */
weft_status tok_pattern_compile(tok_pattern *p, int kind, const char *s, size_t n,
                                const char *field, const char *name, weft_error *err) {
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    if (kind == TOK_PATTERN_STRING) {
        p->literal = malloc(n + 1);
        if (!p->literal)
            return weft_error_set(err, WEFT_ERR_NOMEM, name, "%s: out of memory", field);
        memcpy(p->literal, s, n);
        p->literal[n] = '\0';
        p->literal_len = n;
        return WEFT_OK;
    }
    int code;
    PCRE2_SIZE at;
    p->re = pcre2_compile((PCRE2_SPTR)s, n, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected a regex PCRE2 accepts, got an error at offset %zu: %s",
                              field, (size_t)at, (const char *)msg);
    }
    pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    return WEFT_OK;
}

void tok_pattern_free(tok_pattern *p) {
    free(p->literal);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof(*p));
}

typedef struct span {
    size_t start, end;
    int match;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static int spans_add(spans *s, size_t start, size_t end, int match) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        span *v = realloc(s->v, cap * sizeof(*v));
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (span){start, end, match};
    return 0;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0 || nn > hn) return NULL;
    const char *end = h + (hn - nn);
    for (const char *p = h; p <= end; p++) {
        p = memchr(p, nd[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, nd, nn) == 0) return p;
    }
    return NULL;
}

/* Splits s into alternating non-match / match spans covering all of it (empty ones dropped). */
static int pattern_spans(const tok_pattern *p, const char *s, size_t n, spans *out) {
    out->n = 0;
    size_t prev = 0;
    if (p->kind == TOK_PATTERN_STRING) {
        if (p->literal_len == 0) return n ? spans_add(out, 0, n, 0) : 0;
        size_t i = 0;
        while (i + p->literal_len <= n) {
            const char *hit = find_bytes(s + i, n - i, p->literal, p->literal_len);
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (at > prev && spans_add(out, prev, at, 0)) return -1;
            if (spans_add(out, at, at + p->literal_len, 1)) return -1;
            prev = i = at + p->literal_len;
        }
    } else {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
        if (!md) return -1;
        size_t i = 0;
        while (i <= n) {
            int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, i, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc < 0) break; /* no match, or a matching limit: the rest is one non-match */
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me < ms || me > n) break;
            if (me > ms) {
                if (ms > prev && spans_add(out, prev, ms, 0)) {
                    pcre2_match_data_free(md);
                    return -1;
                }
                if (spans_add(out, ms, me, 1)) {
                    pcre2_match_data_free(md);
                    return -1;
                }
                prev = me;
                i = me;
            } else {
                /* An empty match: step over one character and search again. */
                if (ms >= n) break;
                i = ms + weft_tok_utf8_len(s + ms, n - ms);
            }
        }
        pcre2_match_data_free(md);
    }
    if (prev < n && spans_add(out, prev, n, 0)) return -1;
    return 0;
}

static int replace_all(const tok_pattern *p, const char *content, size_t content_len, const char *s,
                       size_t n, tok_buf *out) {
    spans sp = {0};
    int rc = pattern_spans(p, s, n, &sp);
    for (size_t i = 0; i < sp.n && !rc; i++) {
        if (sp.v[i].match)
            rc = tok_buf_put(out, content, content_len);
        else
            rc = tok_buf_put(out, s + sp.v[i].start, sp.v[i].end - sp.v[i].start);
    }
    if (!rc) rc = tok_buf_reserve(out, 0);
    free(sp.v);
    return rc;
}

/* ---- normalizers ---------------------------------------------------------------------------- */
static int take_buf(tok_buf *b, char **out, size_t *out_len) {
    if (tok_buf_reserve(b, 0)) return -1;
    *out = b->p;
    *out_len = b->len;
    return 0;
}

int tok_normalize(const tok_normalizer *nz, const char *s, size_t n, char **out, size_t *out_len) {
    tok_buf b = {0};
    switch (nz->type) {
    case TOK_NORM_NFC:
        return weft_tok_normalize(WEFT_TOK_NFC, s, n, out, out_len);
    case TOK_NORM_NFD:
        return weft_tok_normalize(WEFT_TOK_NFD, s, n, out, out_len);
    case TOK_NORM_NFKC:
        return weft_tok_normalize(WEFT_TOK_NFKC, s, n, out, out_len);
    case TOK_NORM_NFKD:
        return weft_tok_normalize(WEFT_TOK_NFKD, s, n, out, out_len);
    case TOK_NORM_LOWERCASE:
        return weft_tok_lowercase(s, n, out, out_len);
    case TOK_NORM_PREPEND:
        if (n && tok_buf_put(&b, nz->content, nz->content_len)) goto oom;
        if (tok_buf_put(&b, s, n)) goto oom;
        return take_buf(&b, out, out_len);
    case TOK_NORM_REPLACE:
        if (replace_all(&nz->pattern, nz->content, nz->content_len, s, n, &b)) goto oom;
        return take_buf(&b, out, out_len);
    case TOK_NORM_STRIP: {
        size_t a = 0, e = n;
        uint32_t cp;
        while (nz->strip_left && a < e) {
            size_t k = weft_tok_utf8_decode(s + a, e - a, &cp);
            if (!k || !weft_tok_is_whitespace(cp)) break;
            a += k;
        }
        while (nz->strip_right && e > a) {
            size_t st = e - 1;
            while (st > a && ((unsigned char)s[st] & 0xC0) == 0x80)
                st--;
            size_t k = weft_tok_utf8_decode(s + st, e - st, &cp);
            if (!k || !weft_tok_is_whitespace(cp)) break;
            e = st;
        }
        if (tok_buf_put(&b, s + a, e - a)) goto oom;
        return take_buf(&b, out, out_len);
    }
    case TOK_NORM_SEQUENCE: {
        char *cur = malloc(n + 1);
        if (!cur) return -1;
        memcpy(cur, s, n);
        cur[n] = '\0';
        size_t cur_len = n;
        for (size_t i = 0; i < nz->n_items; i++) {
            char *next;
            size_t next_len;
            if (tok_normalize(&nz->items[i], cur, cur_len, &next, &next_len)) {
                free(cur);
                return -1;
            }
            free(cur);
            cur = next;
            cur_len = next_len;
        }
        *out = cur;
        *out_len = cur_len;
        return 0;
    }
    default:
        break;
    }
    if (tok_buf_put(&b, s, n)) goto oom;
    return take_buf(&b, out, out_len);
oom:
    free(b.p);
    return -1;
}

/* ---- pre-tokenizers -------------------------------------------------------------------------- */
/* Splits every piece of in by the pattern with the given behaviour, appending to out. */
static int split_pieces(const tok_pattern *p, int behavior, int invert, const tok_list *in,
                        tok_list *out) {
    spans sp = {0}, merged = {0};
    int rc = 0;
    for (size_t k = 0; k < in->n && !rc; k++) {
        const char *s = in->text.p + in->off[k];
        size_t n = in->len[k];
        rc = pattern_spans(p, s, n, &sp);
        if (rc) break;
        if (invert)
            for (size_t i = 0; i < sp.n; i++)
                sp.v[i].match = !sp.v[i].match;
        merged.n = 0;
        int prev_match = 0;
        switch (behavior) {
        case TOK_SPLIT_REMOVED:
            for (size_t i = 0; i < sp.n && !rc; i++)
                if (!sp.v[i].match) rc = spans_add(&merged, sp.v[i].start, sp.v[i].end, 0);
            break;
        case TOK_SPLIT_ISOLATED:
            for (size_t i = 0; i < sp.n && !rc; i++)
                rc = spans_add(&merged, sp.v[i].start, sp.v[i].end, 0);
            break;
        case TOK_SPLIT_MERGED_WITH_PREVIOUS:
            for (size_t i = 0; i < sp.n && !rc; i++) {
                if (sp.v[i].match && !prev_match && merged.n > 0)
                    merged.v[merged.n - 1].end = sp.v[i].end;
                else
                    rc = spans_add(&merged, sp.v[i].start, sp.v[i].end, 0);
                prev_match = sp.v[i].match;
            }
            break;
        case TOK_SPLIT_MERGED_WITH_NEXT:
            /* Built back to front as HF does, then reversed. */
            for (size_t i = sp.n; i-- > 0 && !rc;) {
                if (sp.v[i].match && !prev_match && merged.n > 0)
                    merged.v[merged.n - 1].start = sp.v[i].start;
                else
                    rc = spans_add(&merged, sp.v[i].start, sp.v[i].end, 0);
                prev_match = sp.v[i].match;
            }
            for (size_t i = 0; i < merged.n / 2; i++) {
                span t = merged.v[i];
                merged.v[i] = merged.v[merged.n - 1 - i];
                merged.v[merged.n - 1 - i] = t;
            }
            break;
        case TOK_SPLIT_CONTIGUOUS:
            for (size_t i = 0; i < sp.n && !rc; i++) {
                if (sp.v[i].match == prev_match && merged.n > 0)
                    merged.v[merged.n - 1].end = sp.v[i].end;
                else
                    rc = spans_add(&merged, sp.v[i].start, sp.v[i].end, 0);
                prev_match = sp.v[i].match;
            }
            break;
        default:
            rc = spans_add(&merged, 0, n, 0);
            break;
        }
        for (size_t i = 0; i < merged.n && !rc; i++) {
            if (merged.v[i].end <= merged.v[i].start) continue;
            /* in->text may move as out grows only if they alias, which callers avoid. */
            rc = tok_list_add(out, s + merged.v[i].start, merged.v[i].end - merged.v[i].start,
                              in->first[k] && merged.v[i].start == 0);
        }
    }
    free(sp.v);
    free(merged.v);
    return rc;
}

static int bytelevel_pieces(const tok_pretok *p, const tok_list *in, tok_list *out) {
    pthread_once(&byte_map_once, byte_map_init);
    tok_list tmp = {0};
    tok_buf b = {0};
    int rc = 0;
    for (size_t k = 0; k < in->n && !rc; k++) {
        const char *s = in->text.p + in->off[k];
        size_t n = in->len[k];
        if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
            b.len = 0;
            rc = tok_buf_putc(&b, ' ');
            if (!rc) rc = tok_buf_put(&b, s, n);
            if (!rc) rc = tok_list_add(&tmp, b.p, b.len, in->first[k]);
        } else {
            rc = tok_list_add(&tmp, s, n, in->first[k]);
        }
    }
    tok_list split = {0};
    const tok_list *src = &tmp;
    if (!rc && p->use_regex) {
        rc = split_pieces(&p->pattern, TOK_SPLIT_ISOLATED, 0, &tmp, &split);
        src = &split;
    }
    for (size_t k = 0; k < src->n && !rc; k++) {
        const unsigned char *s = (const unsigned char *)src->text.p + src->off[k];
        b.len = 0;
        for (size_t i = 0; i < src->len[k] && !rc; i++)
            rc = tok_buf_put(&b, byte_utf8[s[i]], byte_utf8_len[s[i]]);
        if (!rc) rc = tok_list_add(out, b.p ? b.p : "", b.len, src->first[k]);
    }
    tok_list_free(&tmp);
    tok_list_free(&split);
    free(b.p);
    return rc;
}

static int metaspace_pieces(const tok_pretok *p, const tok_list *in, tok_list *out) {
    tok_list tmp = {0};
    tok_buf b = {0};
    int rc = 0;
    tok_pattern space = {TOK_PATTERN_STRING, (char *)" ", 1, NULL};
    for (size_t k = 0; k < in->n && !rc; k++) {
        const char *s = in->text.p + in->off[k];
        size_t n = in->len[k];
        b.len = 0;
        rc = replace_all(&space, p->replacement, p->replacement_len, s, n, &b);
        if (rc) break;
        int starts =
            b.len >= p->replacement_len && memcmp(b.p, p->replacement, p->replacement_len) == 0;
        int prepend = !starts && (p->prepend_scheme == TOK_PREPEND_ALWAYS ||
                                  (p->prepend_scheme == TOK_PREPEND_FIRST && in->first[k]));
        tok_buf c = {0};
        if (prepend) rc = tok_buf_put(&c, p->replacement, p->replacement_len);
        if (!rc) rc = tok_buf_put(&c, b.p ? b.p : "", b.len);
        if (!rc) rc = tok_list_add(&tmp, c.p, c.len, in->first[k]);
        free(c.p);
    }
    if (!rc) {
        if (p->split) {
            tok_pattern rep = {TOK_PATTERN_STRING, (char *)p->replacement, p->replacement_len,
                               NULL};
            rc = split_pieces(&rep, TOK_SPLIT_MERGED_WITH_NEXT, 0, &tmp, out);
        } else {
            for (size_t k = 0; k < tmp.n && !rc; k++)
                rc = tok_list_add(out, tmp.text.p + tmp.off[k], tmp.len[k], tmp.first[k]);
        }
    }
    tok_list_free(&tmp);
    free(b.p);
    return rc;
}

int tok_pretokenize(const tok_pretok *p, tok_list *pieces) {
    tok_list out = {0};
    int rc = 0;
    switch (p->type) {
    case TOK_PRE_SPLIT:
    case TOK_PRE_WHITESPACE:
    case TOK_PRE_WHITESPACE_SPLIT:
    case TOK_PRE_DIGITS:
    case TOK_PRE_PUNCTUATION:
        rc = split_pieces(&p->pattern, p->behavior, p->invert, pieces, &out);
        break;
    case TOK_PRE_BYTELEVEL:
        rc = bytelevel_pieces(p, pieces, &out);
        break;
    case TOK_PRE_METASPACE:
        rc = metaspace_pieces(p, pieces, &out);
        break;
    case TOK_PRE_SEQUENCE:
        for (size_t i = 0; i < p->n_items && !rc; i++)
            rc = tok_pretokenize(&p->items[i], pieces);
        return rc;
    default:
        return 0;
    }
    if (rc) {
        tok_list_free(&out);
        return -1;
    }
    tok_list_free(pieces);
    *pieces = out;
    return 0;
}

/* ---- decoders -------------------------------------------------------------------------------- */
static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xNN>" -> NN, else -1. */
static int byte_piece(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int h = hex_digit(s[3]), l = hex_digit(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static int decode_step(const tok_decoder *d, const tok_list *in, tok_list *out, int lossy) {
    int rc = 0;
    tok_buf b = {0};
    switch (d->type) {
    case TOK_DEC_BYTELEVEL: {
        pthread_once(&byte_map_once, byte_map_init);
        /* Every piece back to bytes (a piece with a char outside the map keeps its own UTF-8
         * bytes), all joined, then repaired to valid UTF-8 as one string. */
        for (size_t k = 0; k < in->n && !rc; k++) {
            const char *s = in->text.p + in->off[k];
            size_t n = in->len[k], i = 0, mark = b.len;
            int ok = 1;
            while (i < n && !rc) {
                uint32_t cp;
                size_t c = weft_tok_utf8_decode(s + i, n - i, &cp);
                if (!c || cp >= 324 || byte_map_cp[cp] < 0) {
                    ok = 0;
                    break;
                }
                rc = tok_buf_putc(&b, (char)byte_map_cp[cp]);
                i += c;
            }
            if (!rc && !ok) {
                b.len = mark;
                rc = tok_buf_put(&b, s, n);
            }
        }
        if (rc) break;
        size_t fixed_len;
        char *fixed = weft_tok_utf8_repair(b.p ? b.p : "", b.len, &fixed_len);
        if (!fixed) {
            rc = -1;
            break;
        }
        rc = tok_list_add(out, fixed, fixed_len, 1);
        free(fixed);
        break;
    }
    case TOK_DEC_REPLACE:
        for (size_t k = 0; k < in->n && !rc; k++) {
            b.len = 0;
            rc = replace_all(&d->pattern, d->content, d->content_len, in->text.p + in->off[k],
                             in->len[k], &b);
            if (!rc) rc = tok_list_add(out, b.p ? b.p : "", b.len, in->first[k]);
        }
        break;
    case TOK_DEC_BYTEFALLBACK: {
        /* Runs of <0xNN> pieces become their bytes when those are valid UTF-8, else one U+FFFD
         * per byte. */
        size_t k = 0;
        while (k < in->n && !rc) {
            const char *s = in->text.p + in->off[k];
            if (byte_piece(s, in->len[k]) < 0) {
                rc = tok_list_add(out, s, in->len[k], in->first[k]);
                k++;
                continue;
            }
            b.len = 0;
            size_t j = k;
            int v;
            while (j < in->n && (v = byte_piece(in->text.p + in->off[j], in->len[j])) >= 0 && !rc) {
                rc = tok_buf_putc(&b, (char)v);
                j++;
            }
            if (rc) break;
            if (weft_tok_utf8_valid(b.p, b.len)) {
                rc = tok_list_add(out, b.p, b.len, in->first[k]);
            } else if (lossy) {
                size_t fl;
                char *fixed = weft_tok_utf8_repair(b.p, b.len, &fl);
                rc = fixed ? tok_list_add(out, fixed, fl, in->first[k]) : -1;
                free(fixed);
            } else {
                for (size_t i = 0; i < b.len && !rc; i++)
                    rc = tok_list_add(out, "\xEF\xBF\xBD", 3, in->first[k] && i == 0);
            }
            k = j;
        }
        break;
    }
    case TOK_DEC_FUSE:
        for (size_t k = 0; k < in->n && !rc; k++)
            rc = tok_buf_put(&b, in->text.p + in->off[k], in->len[k]);
        if (!rc) rc = tok_list_add(out, b.p ? b.p : "", b.len, 1);
        break;
    case TOK_DEC_STRIP:
        for (size_t k = 0; k < in->n && !rc; k++) {
            const char *s = in->text.p + in->off[k];
            size_t n = in->len[k], a = 0, e = n, cl = d->content_len;
            for (int i = 0; i < d->start && a + cl <= e && !memcmp(s + a, d->content, cl); i++)
                a += cl;
            for (int i = 0; i < d->stop && e >= a + cl && !memcmp(s + e - cl, d->content, cl); i++)
                e -= cl;
            rc = tok_list_add(out, s + a, e - a, in->first[k]);
        }
        break;
    case TOK_DEC_METASPACE:
        /* As HF: in the first piece every replacement char is dropped (not only a leading
         * one) unless the scheme is "never"; elsewhere each becomes a space. */
        for (size_t k = 0; k < in->n && !rc; k++) {
            const char *s = in->text.p + in->off[k];
            size_t n = in->len[k], i = 0, rl = d->replacement_len;
            int drop = k == 0 && d->prepend_scheme != TOK_PREPEND_NEVER;
            b.len = 0;
            rc = tok_buf_reserve(&b, 0);
            while (i < n && !rc) {
                if (n - i >= rl && !memcmp(s + i, d->replacement, rl)) {
                    if (!drop) rc = tok_buf_putc(&b, ' ');
                    i += rl;
                } else {
                    rc = tok_buf_putc(&b, s[i]);
                    i++;
                }
            }
            if (!rc) rc = tok_list_add(out, b.p, b.len, in->first[k]);
        }
        break;
    case TOK_DEC_SEQUENCE: {
        tok_list cur = {0}, next = {0};
        for (size_t k = 0; k < in->n && !rc; k++)
            rc = tok_list_add(&cur, in->text.p + in->off[k], in->len[k], in->first[k]);
        for (size_t i = 0; i < d->n_items && !rc; i++) {
            rc = decode_step(&d->items[i], &cur, &next, lossy);
            tok_list_free(&cur);
            cur = next;
            memset(&next, 0, sizeof(next));
        }
        for (size_t k = 0; k < cur.n && !rc; k++)
            rc = tok_list_add(out, cur.text.p + cur.off[k], cur.len[k], cur.first[k]);
        tok_list_free(&cur);
        tok_list_free(&next);
        break;
    }
    default:
        for (size_t k = 0; k < in->n && !rc; k++)
            rc = tok_list_add(out, in->text.p + in->off[k], in->len[k], in->first[k]);
        break;
    }
    free(b.p);
    return rc;
}

int tok_decode_pieces(const tok_decoder *d, tok_list *pieces, tok_buf *out, int lossy) {
    int rc = 0;
    if (!d) {
        /* No decoder: HF joins the pieces with spaces. */
        for (size_t k = 0; k < pieces->n && !rc; k++) {
            if (k) rc = tok_buf_putc(out, ' ');
            if (!rc) rc = tok_buf_put(out, pieces->text.p + pieces->off[k], pieces->len[k]);
        }
        return rc ? rc : tok_buf_reserve(out, 0);
    }
    tok_list done = {0};
    rc = decode_step(d, pieces, &done, lossy);
    for (size_t k = 0; k < done.n && !rc; k++)
        rc = tok_buf_put(out, done.text.p + done.off[k], done.len[k]);
    if (!rc) rc = tok_buf_reserve(out, 0);
    tok_list_free(&done);
    return rc;
}

void tok_normalizer_free(tok_normalizer *n) {
    if (!n) return;
    tok_pattern_free(&n->pattern);
    free(n->content);
    for (size_t i = 0; i < n->n_items; i++)
        tok_normalizer_free(&n->items[i]);
    free(n->items);
}

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    tok_pattern_free(&p->pattern);
    for (size_t i = 0; i < p->n_items; i++)
        tok_pretok_free(&p->items[i]);
    free(p->items);
}

void tok_decoder_free(tok_decoder *d) {
    if (!d) return;
    tok_pattern_free(&d->pattern);
    free(d->content);
    for (size_t i = 0; i < d->n_items; i++)
        tok_decoder_free(&d->items[i]);
    free(d->items);
}
