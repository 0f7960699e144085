/* Builds a tokenizer from the tokenizer.ggml.* metadata of a GGUF file (llama.cpp's format; a
 * vocab-only GGUF has no tensors). Only the key/value section is read, through a cursor that
 * checks every length and count against the bytes that remain. Two vocabulary kinds become the
 * equivalent Hugging Face tokenizer.json pipeline:
 *   "llama" (sentencepiece BPE): pieces by id, merge ranks from the scores (a pair may merge when
 *     the joined piece is a NORMAL token; a higher score merges first), byte fallback, a "▁"
 *     prefix and " " -> "▁" (unless add_space_prefix is false), the Llama-2 decoder chain;
 *   "gpt2" (byte-level BPE): pieces by id, tokenizer.ggml.merges in rank order, and the
 *     pre-tokenizer regex named by tokenizer.ggml.pre (gpt-2/default, llama-bpe/llama3 with
 *     ignore_merges, qwen2 with NFC).
 * CONTROL tokens become special added tokens, USER_DEFINED ones plain added tokens, and
 * add_bos_token / add_eos_token the post-processor. */
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
    K_MERGES,
    K_PRE,
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
    "tokenizer.ggml.merges",
    "tokenizer.ggml.pre",
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

static weft_status nomem(weft_error *err, const char *name) {
    return weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory");
}

/* Reads a string-valued key; NULL when absent or of another type. */
static const char *kv_str(const cur *c, const kv *k, uint64_t *n) {
    if (!k->found || k->type != GGUF_STRING) return NULL;
    cur r = {c->p, c->len, k->pos};
    const char *s;
    return rd_str(&r, &s, n) ? NULL : s;
}

static int str_is(const char *s, uint64_t n, const char *lit) {
    return s && n == strlen(lit) && !memcmp(s, lit, n);
}

/* A string Replace pattern: normalizer or decoder step. */
static weft_status set_replace(tok_pattern *pat, char **content, size_t *content_len,
                               const char *from, const char *to, const char *name,
                               weft_error *err) {
    if (!(*content = strdup(to))) return nomem(err, name);
    *content_len = strlen(to);
    return tok_pattern_compile(pat, TOK_PATTERN_STRING, from, strlen(from), "tokenizer.ggml", name,
                               err);
}

/* The sentencepiece ("llama") pipeline: score ranks, byte fallback, ▁ normalizer, decoders. */
static weft_status build_llama(weft_tokenizer *tok, const cur *c, kv *keys, const int32_t *types,
                               const float *scores, uint32_t n, const char *name, weft_error *err) {
    cand *cands = malloc(n * sizeof(*cands));
    int32_t *rank_of = malloc(n * sizeof(*rank_of));
    if (!cands || !rank_of) {
        free(cands);
        free(rank_of);
        return nomem(err, name);
    }
    size_t nc = 0;
    for (uint32_t i = 0; i < n; i++)
        if (types[i] == TT_NORMAL && scores[i] == scores[i])
            cands[nc++] = (cand){scores[i], (int32_t)i};
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
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < nc && !st; i++) {
        size_t pn;
        const char *p = tok_vocab_piece(&tok->vocab, cands[i].id, &pn);
        if (!p || tok_vocab_find(&tok->vocab, p, pn) != cands[i].id) continue;
        for (size_t cut = weft_tok_utf8_len(p, pn); cut < pn;
             cut += weft_tok_utf8_len(p + cut, pn - cut)) {
            int32_t l = tok_vocab_find(&tok->vocab, p, cut);
            int32_t r = tok_vocab_find(&tok->vocab, p + cut, pn - cut);
            if (l < 0 || r < 0) continue;
            if (tok_merges_add(&tok->merges, l, r, rank_of[cands[i].id], cands[i].id) < 0) {
                st = nomem(err, name);
                break;
            }
        }
    }
    free(cands);
    free(rank_of);
    if (st) return st;
    tok->byte_fallback = 1;
    int64_t v;
    if (keys[K_UNK].found) {
        if (kv_int(c, &keys[K_UNK], &v) || v < 0 || v >= n)
            return weft_error_set(err, WEFT_ERR_FORMAT, name, "%s: expected an id below %u",
                                  keys[K_UNK].key, n);
        tok->unk_id = (int32_t)v;
    } else {
        tok->unk_id = tok_vocab_find(&tok->vocab, "<unk>", 5);
    }
    int add_space = kv_bool(c, &keys[K_SPACE], 1);
    tok->normalizer = calloc(1, sizeof(*tok->normalizer));
    tok->decoder = calloc(1, sizeof(*tok->decoder));
    if (!tok->normalizer || !tok->decoder) return nomem(err, name);
    tok_normalizer *items = calloc(2, sizeof(*items));
    tok->normalizer->type = TOK_NORM_SEQUENCE;
    tok->normalizer->items = items;
    tok_decoder *ditems = calloc(4, sizeof(*ditems));
    tok->decoder->type = TOK_DEC_SEQUENCE;
    tok->decoder->items = ditems;
    if (!items || !ditems) return nomem(err, name);
    size_t ni = 0;
    if (add_space) {
        items[ni].type = TOK_NORM_PREPEND;
        tok->normalizer->n_items = ++ni;
        if (!(items[0].content = strdup("\xE2\x96\x81"))) return nomem(err, name);
        items[0].content_len = 3;
    }
    items[ni].type = TOK_NORM_REPLACE;
    tok->normalizer->n_items = ++ni;
    if ((st = set_replace(&items[ni - 1].pattern, &items[ni - 1].content,
                          &items[ni - 1].content_len, " ", "\xE2\x96\x81", name, err)))
        return st;
    ditems[0].type = TOK_DEC_REPLACE;
    ditems[1].type = TOK_DEC_BYTEFALLBACK;
    ditems[2].type = TOK_DEC_FUSE;
    ditems[3].type = TOK_DEC_STRIP;
    tok->decoder->n_items = 4;
    if ((st = set_replace(&ditems[0].pattern, &ditems[0].content, &ditems[0].content_len,
                          "\xE2\x96\x81", " ", name, err)))
        return st;
    if (!(ditems[3].content = strdup(" "))) return nomem(err, name);
    ditems[3].content_len = 1;
    ditems[3].start = add_space ? 1 : 0;
    return WEFT_OK;
}

/* The byte-level ("gpt2") pipeline: merges in rank order and the family's pre-tokenizer. */
static weft_status build_gpt2(weft_tokenizer *tok, const cur *c, kv *keys, const char *name,
                              weft_error *err) {
    kv *km = &keys[K_MERGES];
    if (!km->found || km->type != GGUF_ARRAY || km->elem != GGUF_STRING)
        return fmt(err, name, "%s: expected an array of strings \"left right\"", km->key);
    if (km->count >= INT32_MAX) return fmt(err, name, "%s: too many merges", km->key);
    cur r = {c->p, c->len, km->pos};
    for (uint64_t i = 0; i < km->count; i++) {
        const char *s;
        uint64_t sn;
        if (rd_str(&r, &s, &sn))
            return weft_error_set(err, WEFT_ERR_FORMAT, name, "%s[%llu]: truncated", km->key,
                                  (unsigned long long)i);
        const char *sp = memchr(s, ' ', (size_t)sn);
        int32_t a = -1, b = -1, m = -1;
        if (sp && sp != s && sp != s + sn - 1) {
            a = tok_vocab_find(&tok->vocab, s, (size_t)(sp - s));
            b = tok_vocab_find(&tok->vocab, sp + 1, (size_t)(s + sn - sp - 1));
            /* The joined piece is the two halves without the space. */
            char *joined = malloc((size_t)sn);
            if (!joined) return nomem(err, name);
            memcpy(joined, s, (size_t)(sp - s));
            memcpy(joined + (sp - s), sp + 1, (size_t)(s + sn - sp - 1));
            m = tok_vocab_find(&tok->vocab, joined, (size_t)sn - 1);
            free(joined);
        }
        if (a < 0 || b < 0 || m < 0)
            return weft_error_set(err, WEFT_ERR_FORMAT, name,
                                  "%s[%llu]: expected \"left right\" with both pieces and their "
                                  "join in tokenizer.ggml.tokens, got \"%.*s\"",
                                  km->key, (unsigned long long)i, (int)(sn > 80 ? 80 : sn), s);
        if (tok_merges_add(&tok->merges, a, b, (int32_t)i, m) < 0) return nomem(err, name);
    }
    uint64_t pn = 0;
    const char *pre = kv_str(c, &keys[K_PRE], &pn);
    const char *regex = NULL;
    int nfc = 0;
    if (!pre || str_is(pre, pn, "default") || str_is(pre, pn, "gpt-2") || str_is(pre, pn, "gpt2")) {
        regex = NULL; /* ByteLevel's own GPT-2 regex */
    } else if (str_is(pre, pn, "llama-bpe") || str_is(pre, pn, "llama3")) {
        regex = TOK_LLAMA3_REGEX;
        tok->ignore_merges = 1;
    } else if (str_is(pre, pn, "qwen2")) {
        regex = TOK_QWEN2_REGEX;
        nfc = 1;
    } else {
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, name,
                              "%s: expected default, gpt-2, llama-bpe, llama3 or qwen2, got "
                              "\"%.*s\"",
                              keys[K_PRE].key, (int)(pn > 40 ? 40 : pn), pre);
    }
    tok->pretok = calloc(1, sizeof(*tok->pretok));
    tok->decoder = calloc(1, sizeof(*tok->decoder));
    if (!tok->pretok || !tok->decoder) return nomem(err, name);
    tok->decoder->type = TOK_DEC_BYTELEVEL;
    if (nfc) {
        if (!(tok->normalizer = calloc(1, sizeof(*tok->normalizer)))) return nomem(err, name);
        tok->normalizer->type = TOK_NORM_NFC;
    }
    if (!regex) {
        tok->pretok->type = TOK_PRE_BYTELEVEL;
        tok->pretok->use_regex = 1;
        return tok_pattern_compile(&tok->pretok->pattern, TOK_PATTERN_REGEX, TOK_GPT2_REGEX,
                                   strlen(TOK_GPT2_REGEX), "tokenizer.ggml.pre", name, err);
    }
    tok_pretok *items = calloc(2, sizeof(*items));
    if (!items) return nomem(err, name);
    tok->pretok->type = TOK_PRE_SEQUENCE;
    tok->pretok->items = items;
    tok->pretok->n_items = 2;
    items[0].type = TOK_PRE_SPLIT;
    items[0].behavior = TOK_SPLIT_ISOLATED;
    items[1].type = TOK_PRE_BYTELEVEL;
    return tok_pattern_compile(&items[0].pattern, TOK_PATTERN_REGEX, regex, strlen(regex),
                               "tokenizer.ggml.pre", name, err);
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
    uint64_t model_len;
    const char *model = kv_str(&c, km, &model_len);
    if (!model) return fmt(err, name, "%s: expected a string, got none", km->key);
    int llama = str_is(model, model_len, "llama"), gpt2 = str_is(model, model_len, "gpt2");
    if (!llama && !gpt2)
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, name,
                              "%s: expected \"llama\" (sentencepiece BPE) or \"gpt2\" (byte-level "
                              "BPE), got \"%.*s\"",
                              km->key, (int)(model_len > 40 ? 40 : model_len), model);
    if (!kt->found || kt->type != GGUF_ARRAY || kt->elem != GGUF_STRING)
        return fmt(err, name, "%s: expected an array of strings", kt->key);
    if (kt->count == 0 || kt->count > (1u << 22))
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected 1 to 4194304 tokens, got %llu", kt->key,
                              (unsigned long long)kt->count);
    uint32_t n = (uint32_t)kt->count;
    if (ks->found && (ks->type != GGUF_ARRAY || ks->elem != GGUF_F32 || ks->count != n))
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected an array of %u float32 scores", ks->key, n);
    if (llama && !ks->found)
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected an array of %u float32 scores, got none", ks->key, n);
    if (ky->found && (ky->type != GGUF_ARRAY || ky->elem != GGUF_I32 || ky->count != n))
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "%s: expected an array of %u int32 token types", ky->key, n);

    weft_tokenizer *tok = tok_alloc(name);
    float *scores = calloc(n, sizeof(*scores));
    int32_t *types = malloc(n * sizeof(*types));
    weft_status st = WEFT_OK;
    size_t n_merges = gpt2 && keys[K_MERGES].found ? (size_t)keys[K_MERGES].count : (size_t)n * 4;
    if (n_merges > (size_t)1 << 24) n_merges = (size_t)1 << 24;
    if (!tok || !scores || !types || tok_vocab_init(&tok->vocab, n, n) ||
        tok_merges_init(&tok->merges, n_merges) || !(tok->added = calloc(n, sizeof(*tok->added)))) {
        st = weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory for %u tokens", n);
        goto done;
    }
    cur r = {data, len, kt->pos}, sr = {data, len, ks->pos}, yr = {data, len, ky->pos};
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        uint64_t sn;
        int32_t type = TT_NORMAL;
        if (rd_str(&r, &s, &sn) || (ks->found && rd(&sr, &scores[i], 4)) ||
            (ky->found && rd(&yr, &type, 4))) {
            st = weft_error_set(err, WEFT_ERR_FORMAT, name, "%s[%u]: truncated", kt->key, i);
            goto done;
        }
        types[i] = type;
        /* A repeated piece keeps its first id, as a piece -> id map must. */
        if (tok_vocab_add(&tok->vocab, (int32_t)i, s, (size_t)sn) < 0) {
            st = nomem(err, name);
            goto done;
        }
        if ((type == TT_CONTROL || type == TT_USER_DEFINED) && sn > 0) {
            tok_added *a = &tok->added[tok->n_added];
            if (!(a->content = malloc((size_t)sn + 1))) {
                st = nomem(err, name);
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
    st = llama ? build_llama(tok, &c, keys, types, scores, n, name, err)
               : build_gpt2(tok, &c, keys, name, err);
    if (st) goto done;
    int32_t ids[2];
    const char *idk[2] = {key_names[K_BOS], key_names[K_EOS]};
    kv *idkv[2] = {&keys[K_BOS], &keys[K_EOS]};
    for (int j = 0; j < 2; j++) {
        int64_t v;
        ids[j] = -1;
        if (!idkv[j]->found) continue;
        if (kv_int(&c, idkv[j], &v) || v < 0 || v >= n) {
            st = weft_error_set(err, WEFT_ERR_FORMAT, name, "%s: expected an id below %u", idk[j],
                                n);
            goto done;
        }
        ids[j] = (int32_t)v;
    }
    /* llama.cpp's defaults: sentencepiece vocabularies add BOS, byte-level ones do not. */
    tok->has_post_processor = 1;
    if (kv_bool(&c, &keys[K_ADD_BOS], llama) && ids[0] >= 0) {
        if (!(tok->post_prefix = malloc(sizeof(int32_t))))
            st = nomem(err, name);
        else
            tok->post_prefix[tok->n_post_prefix++] = ids[0];
    }
    if (!st && kv_bool(&c, &keys[K_ADD_EOS], 0) && ids[1] >= 0) {
        if (!(tok->post_suffix = malloc(sizeof(int32_t))))
            st = nomem(err, name);
        else
            tok->post_suffix[tok->n_post_suffix++] = ids[1];
    }
    if (!st) st = tok_finish(tok, err);
done:
    free(scores);
    free(types);
    if (st) {
        weft_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return WEFT_OK;
}
