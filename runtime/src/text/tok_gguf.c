/* Builds a tokenizer from the tokenizer.ggml.* metadata of a GGUF file (llama.cpp's format; a
 * vocab-only GGUF has no tensors). Only the key/value section is read, through a cursor that
 * checks every length and count against the bytes that remain. Supported: tokenizer.ggml.model
 * "llama" (sentencepiece BPE), which becomes the equivalent of a Hugging Face Llama-2
 * tokenizer.json: pieces by id, merge ranks from the scores (a pair may merge when the joined
 * piece is a normal token; a higher score merges first), byte fallback, a "▁" prefix and
 * " " -> "▁" (unless add_space_prefix is false), control tokens as special added tokens,
 * user-defined tokens as plain added tokens, and BOS/EOS from add_bos_token / add_eos_token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/tok_unicode.h"
#include "util/error.h"

enum {
    GGUF_U8 = 0,
    GGUF_I8,
    GGUF_U16,
    GGUF_I16,
    GGUF_U32,
    GGUF_I32,
    GGUF_F32,
    GGUF_BOOL,
    GGUF_STRING,
    GGUF_ARRAY,
    GGUF_U64,
    GGUF_I64,
    GGUF_F64,
};

enum {
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6
};

typedef struct cur {
    const unsigned char *p;
    size_t len, pos;
} cur;

static int rd(cur *c, void *out, size_t n) {
    if (n > c->len - c->pos) return -1;
    memcpy(out, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(cur *c, uint32_t *v) {
    return rd(c, v, 4); /* GGUF is little-endian, as every host weft targets */
}

static int rd_u64(cur *c, uint64_t *v) {
    return rd(c, v, 8);
}

static int rd_str(cur *c, const char **s, uint64_t *n) {
    if (rd_u64(c, n) || *n > c->len - c->pos) return -1;
    *s = (const char *)c->p + c->pos;
    c->pos += (size_t)*n;
    return 0;
}

static size_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_U8:
    case GGUF_I8:
    case GGUF_BOOL:
        return 1;
    case GGUF_U16:
    case GGUF_I16:
        return 2;
    case GGUF_U32:
    case GGUF_I32:
    case GGUF_F32:
        return 4;
    case GGUF_U64:
    case GGUF_I64:
    case GGUF_F64:
        return 8;
    default:
        return 0;
    }
}

static int skip_value(cur *c, uint32_t type, int depth) {
    if (depth > 4) return -1;
    if (type == GGUF_STRING) {
        const char *s;
        uint64_t n;
        return rd_str(c, &s, &n);
    }
    if (type == GGUF_ARRAY) {
        uint32_t et;
        uint64_t count;
        if (rd_u32(c, &et) || rd_u64(c, &count)) return -1;
        size_t es = scalar_size(et);
        if (es) {
            if (count > (c->len - c->pos) / es) return -1;
            c->pos += (size_t)count * es;
            return 0;
        }
        for (uint64_t i = 0; i < count; i++)
            if (skip_value(c, et, depth + 1)) return -1;
        return 0;
    }
    size_t es = scalar_size(type);
    if (!es || es > c->len - c->pos) return -1;
    c->pos += es;
    return 0;
}

/* Where one key's value lies. */
typedef struct kv {
    const char *key;
    uint32_t type, elem;
    uint64_t count;
    size_t pos; /* of the value (for arrays: of the first element) */
    int found;
} kv;

enum {
    K_MODEL,
    K_TOKENS,
    K_SCORES,
    K_TYPES,
    K_BOS,
    K_EOS,
    K_UNK,
    K_ADD_BOS,
    K_ADD_EOS,
    K_SPACE,
    K_N
};

static const char *key_names[K_N] = {
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix",
};

static weft_status fmt(weft_error *err, const char *name, const char *fmt_s, const char *a) {
    return weft_error_set(err, WEFT_ERR_FORMAT, name, fmt_s, a);
}

/* Reads an integer scalar of any integer type. */
static int kv_int(const cur *c, const kv *k, int64_t *out) {
    cur r = {c->p, c->len, k->pos};
    switch (k->type) {
    case GGUF_U8: {
        uint8_t v;
        if (rd(&r, &v, 1)) return -1;
        *out = v;
        return 0;
    }
    case GGUF_I8: {
        int8_t v;
        if (rd(&r, &v, 1)) return -1;
        *out = v;
        return 0;
    }
    case GGUF_U16: {
        uint16_t v;
        if (rd(&r, &v, 2)) return -1;
        *out = v;
        return 0;
    }
    case GGUF_I16: {
        int16_t v;
        if (rd(&r, &v, 2)) return -1;
        *out = v;
        return 0;
    }
    case GGUF_U32: {
        uint32_t v;
        if (rd(&r, &v, 4)) return -1;
        *out = v;
        return 0;
    }
    case GGUF_I32: {
        int32_t v;
        if (rd(&r, &v, 4)) return -1;
        *out = v;
        return 0;
    }
    case GGUF_U64: {
        uint64_t v;
        if (rd(&r, &v, 8) || v > INT64_MAX) return -1;
        *out = (int64_t)v;
        return 0;
    }
    case GGUF_I64: {
        int64_t v;
        if (rd(&r, &v, 8)) return -1;
        *out = v;
        return 0;
    }
    default:
        return -1;
    }
}

static int kv_bool(const cur *c, const kv *k, int def) {
    if (!k->found || k->type != GGUF_BOOL) return def;
    return c->p[k->pos] != 0;
}

typedef struct cand {
    float score;
    int32_t id;
} cand;

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

weft_status tok_load_gguf(const unsigned char *data, size_t len, const char *name,
                          weft_tokenizer **out, weft_error *err) {
    *out = NULL;
    cur c = {data, len, 0};
    char magic[4];
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (rd(&c, magic, 4) || memcmp(magic, "GGUF", 4) || rd_u32(&c, &version))
        return fmt(err, name, "%s: expected the GGUF magic and version", "header");
    if (version < 2 || version > 3)
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, name,
                              "header.version: expected GGUF version 2 or 3, got %u", version);
    if (rd_u64(&c, &n_tensors) || rd_u64(&c, &n_kv))
        return fmt(err, name, "%s: truncated before the key/value count", "header");
    kv keys[K_N];
    memset(keys, 0, sizeof(keys));
    for (int i = 0; i < K_N; i++)
        keys[i].key = key_names[i];
    for (uint64_t i = 0; i < n_kv; i++) {
        const char *k;
        uint64_t kn;
        uint32_t type;
        if (rd_str(&c, &k, &kn) || rd_u32(&c, &type))
            return weft_error_set(err, WEFT_ERR_FORMAT, name,
                                  "metadata[%llu]: truncated key (file is %zu bytes)",
                                  (unsigned long long)i, len);
        kv *hit = NULL;
        for (int j = 0; j < K_N; j++)
            if (strlen(key_names[j]) == kn && !memcmp(key_names[j], k, kn)) hit = &keys[j];
        if (hit) {
            hit->found = 1;
            hit->type = type;
            if (type == GGUF_ARRAY) {
                if (rd_u32(&c, &hit->elem) || rd_u64(&c, &hit->count))
                    return fmt(err, name, "%s: truncated array header", hit->key);
                hit->pos = c.pos;
                c.pos -= 12; /* let skip_value walk (and bound-check) the whole array */
            } else {
                hit->pos = c.pos;
            }
        }
        if (skip_value(&c, type, 0))
            return weft_error_set(err, WEFT_ERR_FORMAT, name,
                                  "metadata[%llu] (%.*s): value of type %u runs past the end of "
                                  "the file or is malformed",
                                  (unsigned long long)i, (int)(kn > 100 ? 100 : kn), k, type);
    }
    kv *km = &keys[K_MODEL], *kt = &keys[K_TOKENS], *ks = &keys[K_SCORES], *ky = &keys[K_TYPES];
    if (!km->found || km->type != GGUF_STRING)
        return fmt(err, name, "%s: expected a string, got none", km->key);
    cur r = {data, len, km->pos};
    const char *model;
    uint64_t model_len;
    if (rd_str(&r, &model, &model_len)) return fmt(err, name, "%s: truncated", km->key);
    if (model_len != 5 || memcmp(model, "llama", 5))
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, name,
                              "%s: only \"llama\" (sentencepiece BPE) is supported, got \"%.*s\"",
                              km->key, (int)(model_len > 40 ? 40 : model_len), model);
    if (!kt->found || kt->type != GGUF_ARRAY || kt->elem != GGUF_STRING)
        return fmt(err, name, "%s: expected an array of strings", kt->key);
    if (kt->count == 0 || kt->count > (1u << 22))
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected 1 to 4194304 tokens, got %llu", kt->key,
                              (unsigned long long)kt->count);
    uint32_t n = (uint32_t)kt->count;
    if (!ks->found || ks->type != GGUF_ARRAY || ks->elem != GGUF_F32 || ks->count != n)
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected an array of %u float32 scores", ks->key, n);
    if (ky->found && (ky->type != GGUF_ARRAY || ky->elem != GGUF_I32 || ky->count != n))
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected an array of %u int32 token types", ky->key, n);

    weft_tokenizer *tok = tok_alloc(name);
    cand *cands = malloc(n * sizeof(*cands));
    int32_t *types = malloc(n * sizeof(*types));
    int32_t *rank_of = malloc(n * sizeof(*rank_of));
    weft_status st = WEFT_OK;
    if (!tok || !cands || !types || !rank_of || tok_vocab_init(&tok->vocab, n, n) ||
        tok_merges_init(&tok->merges, n * 4) || !(tok->added = calloc(n, sizeof(*tok->added)))) {
        st = weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory for %u tokens", n);
        goto done;
    }
    r.pos = kt->pos;
    cur sr = {data, len, ks->pos}, yr = {data, len, ky->pos};
    size_t nc = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        uint64_t sn;
        float score;
        int32_t type = TT_NORMAL;
        if (rd_str(&r, &s, &sn) || rd(&sr, &score, 4) || (ky->found && rd(&yr, &type, 4))) {
            st = weft_error_set(err, WEFT_ERR_FORMAT, name, "%s[%u]: truncated", kt->key, i);
            goto done;
        }
        types[i] = type;
        /* A repeated piece keeps its first id, as a piece -> id map must. */
        if (tok_vocab_add(&tok->vocab, (int32_t)i, s, (size_t)sn) < 0) {
            st = weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory");
            goto done;
        }
        if (type == TT_NORMAL && score == score) cands[nc++] = (cand){score, (int32_t)i};
        if (type == TT_CONTROL || type == TT_USER_DEFINED) {
            tok_added *a = &tok->added[tok->n_added];
            if (sn == 0) continue;
            if (!(a->content = malloc((size_t)sn + 1))) {
                st = weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory");
                goto done;
            }
            memcpy(a->content, s, (size_t)sn);
            a->content[sn] = '\0';
            a->len = (size_t)sn;
            a->id = (int32_t)i;
            a->special = type == TT_CONTROL;
            tok->n_added++;
        }
    }
    /* Rank by score, equal scores sharing a rank so that position breaks ties, as in
     * llama.cpp's sentencepiece merge queue. */
    qsort(cands, nc, sizeof(*cands), cmp_cand);
    for (uint32_t i = 0; i < n; i++)
        rank_of[i] = -1;
    int32_t rank = -1;
    for (size_t i = 0; i < nc; i++) {
        if (i == 0 || cands[i].score != cands[i - 1].score) rank++;
        rank_of[cands[i].id] = rank;
    }
    for (size_t i = 0; i < nc; i++) {
        size_t pn;
        const char *p = tok_vocab_piece(&tok->vocab, cands[i].id, &pn);
        if (!p || tok_vocab_find(&tok->vocab, p, pn) != cands[i].id) continue;
        for (size_t cut = weft_tok_utf8_len(p, pn); cut < pn;
             cut += weft_tok_utf8_len(p + cut, pn - cut)) {
            int32_t l = tok_vocab_find(&tok->vocab, p, cut);
            int32_t rr = tok_vocab_find(&tok->vocab, p + cut, pn - cut);
            if (l < 0 || rr < 0) continue;
            if (tok_merges_add(&tok->merges, l, rr, rank_of[cands[i].id], cands[i].id) < 0) {
                st = weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory");
                goto done;
            }
        }
    }
    tok->byte_fallback = 1;
    int64_t v;
    if (keys[K_UNK].found) {
        if (kv_int(&c, &keys[K_UNK], &v) || v < 0 || v >= n) {
            st = weft_error_set(err, WEFT_ERR_FORMAT, name, "%s: expected an id below %u",
                                keys[K_UNK].key, n);
            goto done;
        }
        tok->unk_id = (int32_t)v;
    } else {
        tok->unk_id = tok_vocab_find(&tok->vocab, "<unk>", 5);
    }
    int add_space = kv_bool(&c, &keys[K_SPACE], 1);
    /* normalizer: [Prepend "▁"], Replace " " -> "▁" */
    tok->normalizer = calloc(1, sizeof(*tok->normalizer));
    tok_normalizer *items = calloc(2, sizeof(*items));
    tok->decoder = calloc(1, sizeof(*tok->decoder));
    tok_decoder *ditems = calloc(4, sizeof(*ditems));
    if (!tok->normalizer || !items || !tok->decoder || !ditems) {
        free(items);
        free(ditems);
        st = weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory");
        goto done;
    }
    tok->normalizer->type = TOK_NORM_SEQUENCE;
    tok->normalizer->items = items;
    tok->decoder->type = TOK_DEC_SEQUENCE;
    tok->decoder->items = ditems;
    size_t ni = 0;
    if (add_space) {
        items[ni].type = TOK_NORM_PREPEND;
        items[ni].content = strdup("\xE2\x96\x81");
        items[ni].content_len = 3;
        tok->normalizer->n_items = ++ni;
        if (!items[ni - 1].content) st = WEFT_ERR_NOMEM;
    }
    items[ni].type = TOK_NORM_REPLACE;
    items[ni].content = strdup("\xE2\x96\x81");
    items[ni].content_len = 3;
    tok->normalizer->n_items = ++ni;
    if (!items[ni - 1].content) st = WEFT_ERR_NOMEM;
    if (!st)
        st = tok_pattern_compile(&items[ni - 1].pattern, TOK_PATTERN_STRING, " ", 1, "normalizer",
                                 name, err);
    /* decoder: Replace "▁" -> " ", ByteFallback, Fuse, Strip one leading " " */
    ditems[0].type = TOK_DEC_REPLACE;
    ditems[0].content = strdup(" ");
    ditems[0].content_len = 1;
    tok->decoder->n_items = 1;
    if (!ditems[0].content) st = WEFT_ERR_NOMEM;
    if (!st)
        st = tok_pattern_compile(&ditems[0].pattern, TOK_PATTERN_STRING, "\xE2\x96\x81", 3,
                                 "decoder", name, err);
    ditems[1].type = TOK_DEC_BYTEFALLBACK;
    ditems[2].type = TOK_DEC_FUSE;
    ditems[3].type = TOK_DEC_STRIP;
    ditems[3].content = strdup(" ");
    ditems[3].content_len = 1;
    ditems[3].start = add_space ? 1 : 0;
    tok->decoder->n_items = 4;
    if (!ditems[3].content) st = WEFT_ERR_NOMEM;
    if (st) {
        if (st == WEFT_ERR_NOMEM) weft_error_set(err, st, name, "out of memory");
        goto done;
    }
    int32_t ids[2];
    const char *idk[2] = {key_names[K_BOS], key_names[K_EOS]};
    kv *idkv[2] = {&keys[K_BOS], &keys[K_EOS]};
    for (int j = 0; j < 2; j++) {
        ids[j] = -1;
        if (!idkv[j]->found) continue;
        if (kv_int(&c, idkv[j], &v) || v < 0 || v >= n) {
            st = weft_error_set(err, WEFT_ERR_FORMAT, name, "%s: expected an id below %u", idk[j],
                                n);
            goto done;
        }
        ids[j] = (int32_t)v;
    }
    tok->has_post_processor = 1;
    if (kv_bool(&c, &keys[K_ADD_BOS], 1) && ids[0] >= 0) {
        if (!(tok->post_prefix = malloc(sizeof(int32_t))))
            st = WEFT_ERR_NOMEM;
        else
            tok->post_prefix[tok->n_post_prefix++] = ids[0];
    }
    if (!st && kv_bool(&c, &keys[K_ADD_EOS], 0) && ids[1] >= 0) {
        if (!(tok->post_suffix = malloc(sizeof(int32_t))))
            st = WEFT_ERR_NOMEM;
        else
            tok->post_suffix[tok->n_post_suffix++] = ids[1];
    }
    if (st) {
        weft_error_set(err, st, name, "out of memory");
        goto done;
    }
    st = tok_finish(tok, err);
done:
    free(cands);
    free(types);
    free(rank_of);
    if (st) {
        weft_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return WEFT_OK;
}
