/* The tokenizer's public API (tokenizer.h): loading (tokenizer.json, a directory holding one, or
 * a vocab GGUF), encoding, decoding and the accessors. Encoding follows Hugging Face's order of
 * work: repair the input to valid UTF-8, split out added tokens whose `normalized` flag is false
 * on the raw text (longest match, leftmost first, with lstrip / rstrip / single_word), normalize
 * each remaining stretch, split out the normalized added tokens, pre-tokenize, run BPE on every
 * piece, and finally add the post-processor's special tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text/tok_internal.h"
#include "text/tok_unicode.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

weft_tokenizer *tok_alloc(const char *name) {
    weft_tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok) return NULL;
    snprintf(tok->name, sizeof(tok->name), "%s", name ? name : "tokenizer.json");
    tok->unk_id = -1;
    for (int i = 0; i < 256; i++)
        tok->byte_ids[i] = -1;
    return tok;
}

void weft_tokenizer_free(weft_tokenizer *tok) {
    if (!tok) return;
    tok_vocab_free(&tok->vocab);
    tok_merges_free(&tok->merges);
    if (tok->normalizer) tok_normalizer_free(tok->normalizer);
    free(tok->normalizer);
    if (tok->pretok) tok_pretok_free(tok->pretok);
    free(tok->pretok);
    if (tok->decoder) tok_decoder_free(tok->decoder);
    free(tok->decoder);
    for (size_t i = 0; i < tok->n_added; i++) {
        if (tok->added[i].match != tok->added[i].content) free(tok->added[i].match);
        free(tok->added[i].content);
    }
    free(tok->added);
    free(tok->added_order);
    free(tok->is_special);
    free(tok->added_of_id);
    free(tok->post_prefix);
    free(tok->post_suffix);
    if (tok->word_re) pcre2_code_free(tok->word_re);
    free(tok);
}

typedef struct added_key {
    int first; /* first byte of the match; 256 for an empty match */
    size_t len;
    uint32_t index;
} added_key;

static int cmp_added(const void *a, const void *b) {
    const added_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->index < y->index ? -1 : 1;
}

static int decoder_bytes(const tok_decoder *d) {
    if (!d) return 0;
    if (d->type == TOK_DEC_BYTELEVEL) return 2;
    int best = d->type == TOK_DEC_BYTEFALLBACK ? 1 : 0;
    for (size_t i = 0; i < d->n_items; i++) {
        int b = decoder_bytes(&d->items[i]);
        if (b > best) best = b;
    }
    return best;
}

weft_status tok_finish(weft_tokenizer *tok, weft_error *err) {
    tok->byte_decoding = decoder_bytes(tok->decoder);
    uint32_t size = tok->vocab.n_ids;
    for (size_t i = 0; i < tok->n_added; i++)
        if ((uint32_t)tok->added[i].id + 1 > size) size = (uint32_t)tok->added[i].id + 1;
    for (size_t i = 0; i < tok->n_post_prefix; i++)
        if ((uint32_t)tok->post_prefix[i] >= size)
            return weft_error_set(err, WEFT_ERR_FORMAT, tok->name,
                                  "post_processor: special token id %d is outside the vocabulary "
                                  "(size %u)",
                                  tok->post_prefix[i], size);
    for (size_t i = 0; i < tok->n_post_suffix; i++)
        if ((uint32_t)tok->post_suffix[i] >= size)
            return weft_error_set(err, WEFT_ERR_FORMAT, tok->name,
                                  "post_processor: special token id %d is outside the vocabulary "
                                  "(size %u)",
                                  tok->post_suffix[i], size);
    tok->vocab_size = size;
    tok->is_special = calloc(size ? size : 1, 1);
    tok->added_of_id = malloc((size ? size : 1) * sizeof(*tok->added_of_id));
    tok->added_order = malloc((tok->n_added ? tok->n_added : 1) * sizeof(*tok->added_order));
    if (!tok->is_special || !tok->added_of_id || !tok->added_order)
        return weft_error_set(err, WEFT_ERR_NOMEM, tok->name, "out of memory");
    for (uint32_t i = 0; i < size; i++)
        tok->added_of_id[i] = -1;
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added *a = &tok->added[i];
        a->match = a->content;
        a->match_len = a->len;
        if (a->normalized && tok->normalizer) {
            char *m;
            size_t ml;
            if (tok_normalize(tok->normalizer, a->content, a->len, &m, &ml))
                return weft_error_set(err, WEFT_ERR_NOMEM, tok->name, "out of memory");
            a->match = m;
            a->match_len = ml;
        }
        /* A later entry for the same id replaces the earlier, as HF's added vocabulary does. */
        tok->added_of_id[a->id] = (int32_t)i;
        tok->is_special[a->id] = a->special;
        tok->added_order[i] = (uint32_t)i;
    }
    /* By first byte, longest first. Tokens that normalize to nothing can never match: they
     * sort last, outside every first-byte range. */
    added_key *keys = malloc((tok->n_added ? tok->n_added : 1) * sizeof(*keys));
    if (!keys) return weft_error_set(err, WEFT_ERR_NOMEM, tok->name, "out of memory");
    for (size_t i = 0; i < tok->n_added; i++) {
        const tok_added *a = &tok->added[i];
        keys[i] =
            (added_key){a->match_len ? (unsigned char)a->match[0] : 256, a->match_len, (uint32_t)i};
    }
    if (tok->n_added) qsort(keys, tok->n_added, sizeof(*keys), cmp_added);
    for (size_t i = 0; i < tok->n_added; i++)
        tok->added_order[i] = keys[i].index;
    free(keys);
    size_t j = 0;
    for (unsigned b = 0; b < 257; b++) {
        while (j < tok->n_added && tok->added[tok->added_order[j]].match_len > 0 &&
               (unsigned char)tok->added[tok->added_order[j]].match[0] < b)
            j++;
        tok->added_start[b] = j;
    }
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof(piece), "<0x%02X>", b);
        tok->byte_ids[b] = tok_vocab_find(&tok->vocab, piece, 6);
    }
    int code;
    PCRE2_SIZE at;
    tok->word_re = pcre2_compile((PCRE2_SPTR) "\\w", 2, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED,
                                 &code, &at, NULL);
    if (!tok->word_re) return weft_error_set(err, WEFT_ERR_INTERNAL, tok->name, "word regex");
    return WEFT_OK;
}

/* ---- loading -------------------------------------------------------------------------------- */

weft_status weft_tokenizer_load(const char *path, weft_tokenizer **out, weft_error *err) {
    if (!path || !out)
        return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE, "path and out must be given");
    *out = NULL;
    char full[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(full, sizeof(full), "%s/tokenizer.json", path);
    else
        snprintf(full, sizeof(full), "%s", path);
    char *data = NULL;
    size_t len = 0;
    weft_status s = weft_file_read(full, 0, "a tokenizer file", NULL, &data, &len, err);
    if (s) return s;
    if (len >= 4 && memcmp(data, "GGUF", 4) == 0)
        s = tok_load_gguf((const unsigned char *)data, len, full, out, err);
    else
        s = tok_load_json(data, len, full, out, err);
    free(data);
    return s;
}

weft_status weft_tokenizer_parse(const char *json, size_t len, const char *name,
                                 weft_tokenizer **out, weft_error *err) {
    if (!out || (!json && len))
        return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE, "json and out must be given");
    return tok_load_json(json ? json : "", len, name ? name : "tokenizer.json", out, err);
}

/* ---- encoding -------------------------------------------------------------------------------- */
typedef struct enc {
    const weft_tokenizer *tok;
    int parse_special;
    int32_t *ids;
    size_t n, cap;
    pcre2_match_data *md;
} enc;

static int enc_push(enc *e, int32_t id) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        int32_t *v = realloc(e->ids, cap * sizeof(*v));
        if (!v) return -1;
        e->ids = v;
        e->cap = cap;
    }
    e->ids[e->n++] = id;
    return 0;
}

static int is_word_at(enc *e, const char *s, size_t n, size_t at) {
    if (!e->md) return 0;
    return pcre2_match(e->tok->word_re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, e->md, NULL) >= 0;
}

/* Start of the character that ends at s[end]. */
static size_t char_before(const char *s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

/* The next added token of the given normalized class in s[from..n): the leftmost position
 * where one matches, the longest one there (as HF's leftmost-longest automaton). Returns 0 when
 * none; *skip is set when the match exists but HF would drop it (an unparsed special token or a
 * failed single_word test): the caller then continues after it. */
static int find_added(enc *e, const char *s, size_t n, size_t from, int normalized, size_t *ms,
                      size_t *me, int32_t *id, int *skip) {
    const weft_tokenizer *tok = e->tok;
    for (size_t i = from; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        for (size_t k = tok->added_start[b]; k < tok->added_start[b + 1]; k++) {
            const tok_added *a = &tok->added[tok->added_order[k]];
            if (a->normalized != normalized || a->match_len > n - i) continue;
            if (memcmp(s + i, a->match, a->match_len) != 0) continue;
            *ms = i;
            *me = i + a->match_len;
            *id = a->id;
            *skip = 0;
            if (a->special && !e->parse_special) *skip = 1;
            if (!*skip && a->single_word) {
                int before = i > 0 && is_word_at(e, s, n, char_before(s, i));
                int after = *me < n && is_word_at(e, s, n, *me);
                if (before || after) *skip = 1;
            }
            if (!*skip && a->lstrip) {
                size_t st = i;
                while (st > from) {
                    size_t p = char_before(s, st);
                    uint32_t cp;
                    if (!weft_tok_utf8_decode(s + p, st - p, &cp) || !weft_tok_is_whitespace(cp))
                        break;
                    st = p;
                }
                *ms = st;
            }
            if (!*skip && a->rstrip) {
                size_t en = *me;
                uint32_t cp;
                size_t k2;
                while (en < n && (k2 = weft_tok_utf8_decode(s + en, n - en, &cp)) &&
                       weft_tok_is_whitespace(cp))
                    en += k2;
                *me = en;
            }
            return 1;
        }
    }
    return 0;
}

/* Pre-tokenizes and runs BPE on one stretch of normalized text. */
static int encode_model(enc *e, const char *s, size_t n, int first) {
    if (n == 0) return 0;
    tok_list pieces = {0};
    int rc = tok_list_add(&pieces, s, n, first);
    if (!rc && e->tok->pretok) rc = tok_pretokenize(e->tok->pretok, &pieces);
    for (size_t k = 0; k < pieces.n && !rc; k++)
        rc = tok_bpe_word(e->tok, pieces.text.p + pieces.off[k], pieces.len[k], &e->ids, &e->n,
                          &e->cap);
    tok_list_free(&pieces);
    return rc;
}

/* Normalizes a stretch between raw-matched added tokens, then splits out normalized ones. */
static int encode_normalized(enc *e, const char *s, size_t n, int first) {
    if (n == 0) return 0;
    char *ns = NULL;
    size_t nn = n;
    if (e->tok->normalizer) {
        if (tok_normalize(e->tok->normalizer, s, n, &ns, &nn)) return -1;
        s = ns;
    }
    int rc = 0;
    size_t last = 0, from = 0, ms, me;
    int32_t id;
    int skip;
    while (!rc && find_added(e, s, nn, from, 1, &ms, &me, &id, &skip)) {
        from = me;
        if (skip) continue;
        rc = encode_model(e, s + last, ms - last, first && last == 0);
        if (!rc) rc = enc_push(e, id);
        last = me;
    }
    if (!rc) rc = encode_model(e, s + last, nn - last, first && last == 0);
    free(ns);
    return rc;
}

weft_status weft_tokenizer_encode(const weft_tokenizer *tok, const char *text, size_t len,
                                  int add_special, int parse_special, int32_t **ids, size_t *n,
                                  weft_error *err) {
    if (!tok || !ids || !n || (!text && len))
        return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE,
                              "encode: tok, ids and n must be given (text may be NULL only when "
                              "len is 0)");
    *ids = NULL;
    *n = 0;
    size_t sl;
    char *s = weft_tok_utf8_repair(text ? text : "", len, &sl);
    if (!s) return weft_error_set(err, WEFT_ERR_NOMEM, tok->name, "encode: out of memory");
    enc e = {tok, parse_special, NULL, 0, 0, NULL};
    e.md = pcre2_match_data_create(4, NULL);
    int rc = e.md ? 0 : -1;
    if (!rc && add_special && tok->has_post_processor)
        for (size_t i = 0; i < tok->n_post_prefix && !rc; i++)
            rc = enc_push(&e, tok->post_prefix[i]);
    size_t last = 0, from = 0, ms, me;
    int32_t id;
    int skip;
    while (!rc && find_added(&e, s, sl, from, 0, &ms, &me, &id, &skip)) {
        from = me;
        if (skip) continue;
        rc = encode_normalized(&e, s + last, ms - last, last == 0);
        if (!rc) rc = enc_push(&e, id);
        last = me;
    }
    if (!rc) rc = encode_normalized(&e, s + last, sl - last, last == 0);
    if (!rc && add_special && tok->has_post_processor)
        for (size_t i = 0; i < tok->n_post_suffix && !rc; i++)
            rc = enc_push(&e, tok->post_suffix[i]);
    if (!rc) rc = enc_push(&e, 0) ? -1 : 0; /* room for callers that want a terminator */
    free(s);
    if (e.md) pcre2_match_data_free(e.md);
    if (rc) {
        free(e.ids);
        return weft_error_set(err, WEFT_ERR_NOMEM, tok->name, "encode: out of memory");
    }
    *ids = e.ids;
    *n = e.n - 1;
    return WEFT_OK;
}

/* ---- decoding -------------------------------------------------------------------------------- */
static const char *piece_of(const weft_tokenizer *tok, int32_t id, size_t *n) {
    if (id < 0 || (uint32_t)id >= tok->vocab_size) return NULL;
    int32_t a = tok->added_of_id[id];
    if (a >= 0) {
        /* HF's id_to_token (and so decode) gives a normalized added token's normalized form. */
        *n = tok->added[a].match_len;
        return tok->added[a].match;
    }
    return tok_vocab_piece(&tok->vocab, id, n);
}

/* Decodes into buf (appending); every id must have a piece. */
static weft_status decode_into(const weft_tokenizer *tok, const int32_t *ids, size_t n,
                               int skip_special, int lossy, tok_buf *buf, weft_error *err) {
    tok_list pieces = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t len;
        const char *p = piece_of(tok, ids[i], &len);
        if (!p) {
            tok_list_free(&pieces);
            return weft_error_set(err, WEFT_ERR_INVALID, tok->name,
                                  "decode: id %d at position %zu is not in the vocabulary "
                                  "(size %u)",
                                  ids[i], i, tok->vocab_size);
        }
        if (skip_special && tok->is_special[ids[i]]) continue;
        rc = tok_list_add(&pieces, p, len, i == 0);
    }
    tok_buf raw = {0};
    if (!rc) rc = tok_decode_pieces(tok->decoder, &pieces, &raw, lossy);
    tok_list_free(&pieces);
    if (!rc) {
        /* Decoders keep text valid; pieces from a vocab GGUF need not be. */
        size_t fl;
        char *fixed = weft_tok_utf8_repair(raw.p ? raw.p : "", raw.len, &fl);
        rc = fixed ? tok_buf_put(buf, fixed, fl) : -1;
        free(fixed);
    }
    free(raw.p);
    if (rc) return weft_error_set(err, WEFT_ERR_NOMEM, tok->name, "decode: out of memory");
    return WEFT_OK;
}

weft_status weft_tokenizer_decode(const weft_tokenizer *tok, const int32_t *ids, size_t n,
                                  int skip_special, char **text, size_t *len, weft_error *err) {
    if (!tok || !text || (!ids && n))
        return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE,
                              "decode: tok and text must be given (ids may be NULL only when n "
                              "is 0)");
    *text = NULL;
    tok_buf b = {0};
    weft_status st = decode_into(tok, ids, n, skip_special, 0, &b, err);
    if (!st && tok_buf_reserve(&b, 0))
        st = weft_error_set(err, WEFT_ERR_NOMEM, tok->name, "decode: out of memory");
    if (st) {
        free(b.p);
        return st;
    }
    *text = b.p;
    if (len) *len = b.len;
    return WEFT_OK;
}

/* ---- accessors --------------------------------------------------------------------------------
 */
uint32_t weft_tokenizer_vocab_size(const weft_tokenizer *tok) {
    return tok ? tok->vocab_size : 0;
}

const char *weft_tokenizer_token(const weft_tokenizer *tok, int32_t id) {
    size_t n;
    return tok ? piece_of(tok, id, &n) : NULL;
}

int32_t weft_tokenizer_find(const weft_tokenizer *tok, const char *piece) {
    if (!tok || !piece) return -1;
    size_t n = strlen(piece);
    for (size_t i = tok->n_added; i-- > 0;)
        if (tok->added[i].len == n && !memcmp(tok->added[i].content, piece, n))
            return tok->added[i].id;
    return tok_vocab_find(&tok->vocab, piece, n);
}

int weft_tokenizer_is_special(const weft_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || (uint32_t)id >= tok->vocab_size) return 0;
    return tok->is_special[id];
}

int32_t weft_tokenizer_bos(const weft_tokenizer *tok) {
    if (!tok || !tok->has_post_processor || tok->n_post_prefix == 0) return -1;
    return tok->post_prefix[0];
}

/* ---- streaming detokenizer ------------------------------------------------------------------
 * Each push decodes a short window: the ids behind the last emitted text (the context that
 * makes the decoders treat the new ids as "not first", so sentencepiece's leading-space strip
 * happens only at the very start) plus the ids not yet emitted. The new text is what the window
 * decodes to beyond the context's own text. It is held back while the bytes of the last pieces
 * (byte-level chars or <0xNN> byte-fallback pieces) end inside a character that later ids could
 * complete, so no push ever returns part of a character. */
struct weft_detok {
    const weft_tokenizer *tok;
    int skip_special;
    int32_t *ids;
    size_t n, cap;
    size_t n_context; /* ids[0..n_context) were emitted already */
    char *context;    /* their decoded text */
    size_t context_len;
};

weft_detok *weft_detok_new(const weft_tokenizer *tok, int skip_special) {
    if (!tok) return NULL;
    weft_detok *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->tok = tok;
    d->skip_special = skip_special;
    return d;
}

void weft_detok_free(weft_detok *d) {
    if (!d) return;
    free(d->ids);
    free(d->context);
    free(d);
}

/* "<0xNN>" -> NN, else -1. */
static int byte_piece_value(const char *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) || p[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int h = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Whether the window's text may still change when more ids arrive: the bytes its last pieces
 * stand for (ByteLevel-mapped chars, or <0xNN> byte-fallback pieces) end in a character that is
 * incomplete but could still be completed. A real U+FFFD in the text is no reason to wait. */
static int window_pending(const weft_detok *d) {
    const weft_tokenizer *tok = d->tok;
    if (!tok->byte_decoding) return 0;
    unsigned char tail[8];
    size_t nt = 0; /* bytes collected backwards into tail[8 - nt ..] */
    for (size_t i = d->n; i-- > 0 && nt < 4;) {
        if (d->skip_special && tok->is_special[d->ids[i]]) continue;
        /* every id in the window has a piece (push and prime check); 0 keeps the analyzer
         * from assuming a NULL piece with an unset length */
        size_t pn = 0;
        const char *p = piece_of(tok, d->ids[i], &pn);
        if (tok->byte_decoding == 1) {
            int v = byte_piece_value(p, pn);
            if (v < 0) break;
            tail[sizeof(tail) - ++nt] = (unsigned char)v;
            continue;
        }
        /* ByteLevel: the piece's chars back to bytes, unless one is outside the map (then the
         * piece stands for its own, complete, UTF-8). */
        unsigned char bytes[4];
        size_t nb = 0, j = pn;
        int mapped = 1;
        while (j > 0 && nb < 4 && nt + nb < 4) {
            size_t st = j - 1;
            while (st > 0 && ((unsigned char)p[st] & 0xC0) == 0x80)
                st--;
            uint32_t cp;
            size_t k = weft_tok_utf8_decode(p + st, j - st, &cp);
            int b = k == j - st ? tok_cp_to_byte(cp) : -1;
            if (b < 0) {
                mapped = 0;
                break;
            }
            bytes[nb++] = (unsigned char)b;
            j = st;
        }
        if (!mapped) break;
        for (size_t k = 0; k < nb; k++)
            tail[sizeof(tail) - ++nt] = bytes[k];
        if (j > 0) break; /* the piece has more bytes before these: the tail is complete */
    }
    if (nt == 0) return 0;
    const unsigned char *t = tail + sizeof(tail) - nt;
    size_t start = nt;
    for (size_t k = 1; k <= 3 && k <= nt; k++) {
        if ((t[nt - k] & 0xC0) != 0x80) {
            start = nt - k;
            break;
        }
    }
    return start < nt && weft_tok_utf8_partial((const char *)t + start, nt - start);
}

static weft_status emit(char **out, size_t *len, const char *s, size_t n, weft_error *err) {
    char *o = malloc(n + 1);
    if (!o) return weft_error_set(err, WEFT_ERR_NOMEM, TOK_SOURCE, "detok: out of memory");
    memcpy(o, s, n);
    o[n] = '\0';
    *out = o;
    if (len) *len = n;
    return WEFT_OK;
}

/* Decodes the window; *start is where its text goes beyond the context's text. */
static weft_status window_text(weft_detok *d, tok_buf *b, size_t *start, weft_error *err) {
    weft_status st = decode_into(d->tok, d->ids, d->n, d->skip_special, 1, b, err);
    if (st) return st;
    size_t common = 0;
    while (common < d->context_len && common < b->len && b->p[common] == d->context[common])
        common++;
    /* Never cut a character in two when the texts diverge inside one. */
    while (common > 0 && common < b->len && ((unsigned char)b->p[common] & 0xC0) == 0x80)
        common--;
    *start = common;
    return WEFT_OK;
}

weft_status weft_detok_prime(weft_detok *d, const int32_t *ids, size_t n, weft_error *err) {
    if (!d || (n && !ids))
        return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE, "detok: bad argument");
    if (d->n) return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE, "detok: already started");
    if (n > 4) { /* a few ids of context are enough for every decoder's "not first" rules */
        ids += n - 4;
        n = 4;
    }
    for (size_t i = 0; i < n; i++) {
        size_t pn;
        if (!piece_of(d->tok, ids[i], &pn))
            return weft_error_set(err, WEFT_ERR_INVALID, d->tok->name,
                                  "detok: id %d is not in the vocabulary (size %u)", ids[i],
                                  d->tok->vocab_size);
    }
    if (!n) return WEFT_OK;
    int32_t *v = malloc(16 * sizeof(*v));
    if (!v) return weft_error_set(err, WEFT_ERR_NOMEM, TOK_SOURCE, "detok: out of memory");
    memcpy(v, ids, n * sizeof(*v));
    tok_buf b = {0};
    weft_status st = decode_into(d->tok, v, n, d->skip_special, 1, &b, err);
    if (st) {
        free(v);
        free(b.p);
        return st;
    }
    free(d->ids);
    free(d->context);
    d->ids = v;
    d->cap = 16;
    d->n = d->n_context = n;
    d->context = b.p;
    d->context_len = b.len;
    return WEFT_OK;
}

weft_status weft_detok_push(weft_detok *d, int32_t id, char **out, size_t *len, weft_error *err) {
    if (!d || !out) return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE, "detok: bad argument");
    *out = NULL;
    if (len) *len = 0;
    size_t pn;
    if (!piece_of(d->tok, id, &pn))
        return weft_error_set(err, WEFT_ERR_INVALID, d->tok->name,
                              "detok: id %d is not in the vocabulary (size %u)", id,
                              d->tok->vocab_size);
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        int32_t *v = realloc(d->ids, cap * sizeof(*v));
        if (!v) return weft_error_set(err, WEFT_ERR_NOMEM, TOK_SOURCE, "detok: out of memory");
        d->ids = v;
        d->cap = cap;
    }
    d->ids[d->n++] = id;
    tok_buf b = {0};
    size_t start;
    weft_status st = window_text(d, &b, &start, err);
    if (st) {
        d->n--;
        free(b.p);
        return st;
    }
    if (b.len <= start || window_pending(d)) {
        free(b.p);
        return emit(out, len, "", 0, err);
    }
    st = emit(out, len, b.p + start, b.len - start, err);
    if (st) {
        free(b.p);
        return st;
    }
    /* The ids just emitted become the context of the next push. */
    memmove(d->ids, d->ids + d->n_context, (d->n - d->n_context) * sizeof(*d->ids));
    d->n -= d->n_context;
    d->n_context = d->n;
    free(b.p);
    b = (tok_buf){0};
    st = decode_into(d->tok, d->ids, d->n, d->skip_special, 1, &b, err);
    if (st) {
        free(b.p);
        free(*out);
        *out = NULL;
        return st;
    }
    free(d->context);
    d->context = b.p;
    d->context_len = b.len;
    return WEFT_OK;
}

weft_status weft_detok_flush(weft_detok *d, char **out, size_t *len, weft_error *err) {
    if (!d || !out) return weft_error_set(err, WEFT_ERR_INVALID, TOK_SOURCE, "detok: bad argument");
    *out = NULL;
    if (len) *len = 0;
    tok_buf b = {0};
    size_t start = 0;
    weft_status st = d->n > d->n_context ? window_text(d, &b, &start, err) : WEFT_OK;
    if (!st)
        st = emit(out, len, b.len > start ? b.p + start : "", b.len > start ? b.len - start : 0,
                  err);
    free(b.p);
    if (st) return st;
    d->n = d->n_context = 0;
    free(d->context);
    d->context = NULL;
    d->context_len = 0;
    return WEFT_OK;
}
