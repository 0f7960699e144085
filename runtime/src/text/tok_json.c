/* Builds a weft_tokenizer from Hugging Face tokenizer.json text (parsed with jansson). Every
 * field is type-checked and every error names its JSON path ("model.merges[12]",
 * "pre_tokenizer.pretokenizers[0].pattern.Regex") and says what was expected and found. Stages
 * weft does not implement are refused by name with WEFT_ERR_UNSUPPORTED rather than ignored, so
 * a tokenizer either loads and encodes as HF would or does not load. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/tok_unicode.h"
#include "util/error.h"
#include "util/file.h"

/* Ids beyond this are refused: a vocabulary index is allocated up to the highest id. */
#define TOK_MAX_ID (1 << 22)
#define TOK_MAX_DEPTH 16

typedef struct ctx {
    const char *name;
    weft_error *err;
} ctx;

static weft_status bad(ctx *c, const char *path, const char *what, const json_t *got) {
    return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name, "%s: expected %s, got %s", path, what,
                          weft_json_kind(got));
}

static weft_status oom(ctx *c, const char *path) {
    return weft_error_set(c->err, WEFT_ERR_NOMEM, c->name, "%s: out of memory", path);
}

static void sub(char *out, size_t cap, const char *path, const char *key) {
    snprintf(out, cap, "%s.%s", path, key);
}

static void idx(char *out, size_t cap, const char *path, size_t i) {
    snprintf(out, cap, "%s[%zu]", path, i);
}

/* Optional boolean: absent or null gives def. */
static weft_status get_bool(ctx *c, const json_t *obj, const char *path, const char *key, int def,
                            int *out) {
    json_t *v = json_object_get(obj, key);
    *out = def;
    if (!v || json_is_null(v)) return WEFT_OK;
    if (!json_is_boolean(v)) {
        char p[512];
        sub(p, sizeof(p), path, key);
        return bad(c, p, "a boolean", v);
    }
    *out = json_is_true(v);
    return WEFT_OK;
}

static weft_status get_int(ctx *c, const json_t *obj, const char *path, const char *key, int64_t lo,
                           int64_t hi, int required, int64_t def, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    char p[512];
    sub(p, sizeof(p), path, key);
    *out = def;
    if (!v || json_is_null(v)) {
        if (required) return bad(c, p, "an integer", v);
        return WEFT_OK;
    }
    if (!json_is_integer(v)) return bad(c, p, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                              "%s: expected an integer in [%lld, %lld], got %lld", p, (long long)lo,
                              (long long)hi, (long long)x);
    *out = x;
    return WEFT_OK;
}

/* Required (or optional when def_ok) string; *s points into the JSON tree. */
static weft_status get_str(ctx *c, const json_t *obj, const char *path, const char *key,
                           int required, const char **s, size_t *n) {
    json_t *v = json_object_get(obj, key);
    *s = NULL;
    *n = 0;
    if (!v || json_is_null(v)) {
        if (!required) return WEFT_OK;
    } else if (json_is_string(v)) {
        *s = json_string_value(v);
        *n = json_string_length(v);
        return WEFT_OK;
    }
    char p[512];
    sub(p, sizeof(p), path, key);
    return bad(c, p, "a string", v);
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static weft_status unsupported(ctx *c, const char *path, const char *type, const char *supported) {
    return weft_error_set(c->err, WEFT_ERR_UNSUPPORTED, c->name,
                          "%s.type: '%s' is not supported (supported: %s)", path, type, supported);
}

/* "type" of a stage object. */
static weft_status stage_type(ctx *c, const json_t *v, const char *path, const char **type) {
    if (!json_is_object(v)) return bad(c, path, "an object", v);
    size_t n;
    weft_status st = get_str(c, v, path, "type", 1, type, &n);
    return st;
}

/* {"String": "..."} or {"Regex": "..."} */
static weft_status parse_pattern(ctx *c, const json_t *obj, const char *path, tok_pattern *out) {
    char p[512];
    sub(p, sizeof(p), path, "pattern");
    json_t *v = json_object_get(obj, "pattern");
    if (!json_is_object(v)) return bad(c, p, "an object {\"String\": ...} or {\"Regex\": ...}", v);
    json_t *s = json_object_get(v, "String");
    json_t *r = json_object_get(v, "Regex");
    char q[560];
    if (s) {
        snprintf(q, sizeof(q), "%s.String", p);
        if (!json_is_string(s)) return bad(c, q, "a string", s);
        return tok_pattern_compile(out, TOK_PATTERN_STRING, json_string_value(s),
                                   json_string_length(s), q, c->name, c->err);
    }
    if (r) {
        snprintf(q, sizeof(q), "%s.Regex", p);
        if (!json_is_string(r)) return bad(c, q, "a string", r);
        return tok_pattern_compile(out, TOK_PATTERN_REGEX, json_string_value(r),
                                   json_string_length(r), q, c->name, c->err);
    }
    return bad(c, p, "an object with a \"String\" or \"Regex\" member", v);
}

/* Metaspace's replacement and prepend scheme, in either the current or the legacy form. */
static weft_status parse_metaspace(ctx *c, const json_t *v, const char *path, char *rep,
                                   size_t *rep_len, int *scheme) {
    const char *s;
    size_t n;
    weft_status st = get_str(c, v, path, "replacement", 0, &s, &n);
    if (st) return st;
    if (!s) {
        s = "\xE2\x96\x81";
        n = 3;
    }
    if (n == 0 || n > 4 || weft_tok_utf8_len(s, n) != n) {
        char p[512];
        sub(p, sizeof(p), path, "replacement");
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                              "%s: expected exactly one character, got %zu bytes", p, n);
    }
    memcpy(rep, s, n);
    *rep_len = n;
    const char *ps;
    st = get_str(c, v, path, "prepend_scheme", 0, &ps, &n);
    if (st) return st;
    if (ps) {
        if (!strcmp(ps, "always"))
            *scheme = TOK_PREPEND_ALWAYS;
        else if (!strcmp(ps, "first"))
            *scheme = TOK_PREPEND_FIRST;
        else if (!strcmp(ps, "never"))
            *scheme = TOK_PREPEND_NEVER;
        else {
            char p[512];
            sub(p, sizeof(p), path, "prepend_scheme");
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "%s: expected \"always\", \"first\" or \"never\", got \"%s\"", p,
                                  ps);
        }
        return WEFT_OK;
    }
    int add;
    st = get_bool(c, v, path, "add_prefix_space", 1, &add);
    if (st) return st;
    *scheme = add ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    return WEFT_OK;
}

/* ---- normalizer ---------------------------------------------------------------------------- */
static weft_status parse_normalizer(ctx *c, const json_t *v, const char *path, int depth,
                                    tok_normalizer *out) {
    memset(out, 0, sizeof(*out));
    if (depth > TOK_MAX_DEPTH)
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name, "%s: nested too deeply", path);
    const char *type;
    weft_status st = stage_type(c, v, path, &type);
    if (st) return st;
    const char *s;
    size_t n;
    if (!strcmp(type, "NFC"))
        out->type = TOK_NORM_NFC;
    else if (!strcmp(type, "NFD"))
        out->type = TOK_NORM_NFD;
    else if (!strcmp(type, "NFKC"))
        out->type = TOK_NORM_NFKC;
    else if (!strcmp(type, "NFKD"))
        out->type = TOK_NORM_NFKD;
    else if (!strcmp(type, "Lowercase"))
        out->type = TOK_NORM_LOWERCASE;
    else if (!strcmp(type, "Prepend")) {
        out->type = TOK_NORM_PREPEND;
        if ((st = get_str(c, v, path, "prepend", 1, &s, &n))) return st;
        if (!(out->content = dupn(s, n))) return oom(c, path);
        out->content_len = n;
    } else if (!strcmp(type, "Replace")) {
        out->type = TOK_NORM_REPLACE;
        if ((st = get_str(c, v, path, "content", 1, &s, &n))) return st;
        if (!(out->content = dupn(s, n))) return oom(c, path);
        out->content_len = n;
        if ((st = parse_pattern(c, v, path, &out->pattern))) return st;
    } else if (!strcmp(type, "Strip")) {
        out->type = TOK_NORM_STRIP;
        if ((st = get_bool(c, v, path, "strip_left", 1, &out->strip_left))) return st;
        if ((st = get_bool(c, v, path, "strip_right", 1, &out->strip_right))) return st;
    } else if (!strcmp(type, "Sequence")) {
        out->type = TOK_NORM_SEQUENCE;
        char p[512];
        sub(p, sizeof(p), path, "normalizers");
        json_t *arr = json_object_get(v, "normalizers");
        if (!json_is_array(arr)) return bad(c, p, "an array", arr);
        size_t k = json_array_size(arr);
        out->items = calloc(k ? k : 1, sizeof(*out->items));
        if (!out->items) return oom(c, p);
        for (size_t i = 0; i < k; i++) {
            char q[560];
            idx(q, sizeof(q), p, i);
            out->n_items = i + 1;
            if ((st = parse_normalizer(c, json_array_get(arr, i), q, depth + 1, &out->items[i])))
                return st;
        }
    } else {
        return unsupported(c, path, type,
                           "NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence");
    }
    return WEFT_OK;
}

/* ---- pre-tokenizer ------------------------------------------------------------------------- */
static weft_status builtin_regex(ctx *c, tok_pretok *out, const char *re, const char *path) {
    return tok_pattern_compile(&out->pattern, TOK_PATTERN_REGEX, re, strlen(re), path, c->name,
                               c->err);
}

static weft_status parse_behavior(ctx *c, const json_t *v, const char *path, int def, int *out) {
    const char *s;
    size_t n;
    weft_status st = get_str(c, v, path, "behavior", def < 0, &s, &n);
    if (st) return st;
    *out = def;
    if (!s) return WEFT_OK;
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return WEFT_OK;
        }
    char p[512];
    sub(p, sizeof(p), path, "behavior");
    return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                          "%s: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or "
                          "Contiguous, got \"%s\"",
                          p, s);
}

static weft_status parse_pretok(ctx *c, const json_t *v, const char *path, int depth,
                                tok_pretok *out) {
    memset(out, 0, sizeof(*out));
    if (depth > TOK_MAX_DEPTH)
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name, "%s: nested too deeply", path);
    const char *type;
    weft_status st = stage_type(c, v, path, &type);
    if (st) return st;
    if (!strcmp(type, "Split")) {
        out->type = TOK_PRE_SPLIT;
        if ((st = parse_pattern(c, v, path, &out->pattern))) return st;
        if ((st = parse_behavior(c, v, path, -1, &out->behavior))) return st;
        if ((st = get_bool(c, v, path, "invert", 0, &out->invert))) return st;
    } else if (!strcmp(type, "ByteLevel")) {
        out->type = TOK_PRE_BYTELEVEL;
        if ((st = get_bool(c, v, path, "add_prefix_space", 1, &out->add_prefix_space))) return st;
        if ((st = get_bool(c, v, path, "use_regex", 1, &out->use_regex))) return st;
        if (out->use_regex && (st = builtin_regex(c, out, TOK_GPT2_REGEX, path))) return st;
    } else if (!strcmp(type, "Metaspace")) {
        out->type = TOK_PRE_METASPACE;
        if ((st = parse_metaspace(c, v, path, out->replacement, &out->replacement_len,
                                  &out->prepend_scheme)))
            return st;
        if ((st = get_bool(c, v, path, "split", 1, &out->split))) return st;
    } else if (!strcmp(type, "Whitespace")) {
        out->type = TOK_PRE_WHITESPACE;
        out->behavior = TOK_SPLIT_REMOVED;
        out->invert = 1;
        if ((st = builtin_regex(c, out, "\\w+|[^\\w\\s]+", path))) return st;
    } else if (!strcmp(type, "WhitespaceSplit")) {
        out->type = TOK_PRE_WHITESPACE_SPLIT;
        out->behavior = TOK_SPLIT_REMOVED;
        if ((st = builtin_regex(c, out, "\\s+", path))) return st;
    } else if (!strcmp(type, "Digits")) {
        out->type = TOK_PRE_DIGITS;
        int individual;
        if ((st = get_bool(c, v, path, "individual_digits", 0, &individual))) return st;
        out->behavior = TOK_SPLIT_ISOLATED;
        if ((st = builtin_regex(c, out, individual ? "\\p{N}" : "\\p{N}+", path))) return st;
    } else if (!strcmp(type, "Punctuation")) {
        out->type = TOK_PRE_PUNCTUATION;
        if ((st = parse_behavior(c, v, path, TOK_SPLIT_ISOLATED, &out->behavior))) return st;
        if ((st = builtin_regex(c, out, "[\\p{P}!-/:-@\\[-`{-~]", path))) return st;
    } else if (!strcmp(type, "Sequence")) {
        out->type = TOK_PRE_SEQUENCE;
        char p[512];
        sub(p, sizeof(p), path, "pretokenizers");
        json_t *arr = json_object_get(v, "pretokenizers");
        if (!json_is_array(arr)) return bad(c, p, "an array", arr);
        size_t k = json_array_size(arr);
        out->items = calloc(k ? k : 1, sizeof(*out->items));
        if (!out->items) return oom(c, p);
        for (size_t i = 0; i < k; i++) {
            char q[560];
            idx(q, sizeof(q), p, i);
            out->n_items = i + 1;
            if ((st = parse_pretok(c, json_array_get(arr, i), q, depth + 1, &out->items[i])))
                return st;
        }
    } else {
        return unsupported(c, path, type,
                           "Split, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits, "
                           "Punctuation, Sequence");
    }
    return WEFT_OK;
}

/* ---- decoder -------------------------------------------------------------------------------- */
static weft_status parse_decoder(ctx *c, const json_t *v, const char *path, int depth,
                                 tok_decoder *out) {
    memset(out, 0, sizeof(*out));
    if (depth > TOK_MAX_DEPTH)
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name, "%s: nested too deeply", path);
    const char *type;
    weft_status st = stage_type(c, v, path, &type);
    if (st) return st;
    const char *s;
    size_t n;
    if (!strcmp(type, "ByteLevel"))
        out->type = TOK_DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback"))
        out->type = TOK_DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse"))
        out->type = TOK_DEC_FUSE;
    else if (!strcmp(type, "Replace")) {
        out->type = TOK_DEC_REPLACE;
        if ((st = get_str(c, v, path, "content", 1, &s, &n))) return st;
        if (!(out->content = dupn(s, n))) return oom(c, path);
        out->content_len = n;
        if ((st = parse_pattern(c, v, path, &out->pattern))) return st;
    } else if (!strcmp(type, "Strip")) {
        out->type = TOK_DEC_STRIP;
        if ((st = get_str(c, v, path, "content", 1, &s, &n))) return st;
        if (n == 0 || weft_tok_utf8_len(s, n) != n) {
            char p[512];
            sub(p, sizeof(p), path, "content");
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "%s: expected exactly one character, got %zu bytes", p, n);
        }
        if (!(out->content = dupn(s, n))) return oom(c, path);
        out->content_len = n;
        int64_t x;
        if ((st = get_int(c, v, path, "start", 0, 1 << 20, 0, 0, &x))) return st;
        out->start = (int)x;
        if ((st = get_int(c, v, path, "stop", 0, 1 << 20, 0, 0, &x))) return st;
        out->stop = (int)x;
    } else if (!strcmp(type, "Metaspace")) {
        out->type = TOK_DEC_METASPACE;
        if ((st = parse_metaspace(c, v, path, out->replacement, &out->replacement_len,
                                  &out->prepend_scheme)))
            return st;
    } else if (!strcmp(type, "Sequence")) {
        out->type = TOK_DEC_SEQUENCE;
        char p[512];
        sub(p, sizeof(p), path, "decoders");
        json_t *arr = json_object_get(v, "decoders");
        if (!json_is_array(arr)) return bad(c, p, "an array", arr);
        size_t k = json_array_size(arr);
        out->items = calloc(k ? k : 1, sizeof(*out->items));
        if (!out->items) return oom(c, p);
        for (size_t i = 0; i < k; i++) {
            char q[560];
            idx(q, sizeof(q), p, i);
            out->n_items = i + 1;
            if ((st = parse_decoder(c, json_array_get(arr, i), q, depth + 1, &out->items[i])))
                return st;
        }
    } else {
        return unsupported(c, path, type,
                           "ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, Sequence");
    }
    return WEFT_OK;
}

/* ---- post-processor -------------------------------------------------------------------------- */
static weft_status append_ids(ctx *c, int32_t **v, size_t *n, const int32_t *ids, size_t k,
                              const char *path) {
    int32_t *g = realloc(*v, (*n + k + 1) * sizeof(*g));
    if (!g) return oom(c, path);
    if (k) memcpy(g + *n, ids, k * sizeof(*ids));
    *v = g;
    *n += k;
    return WEFT_OK;
}

/* ["<s>", 1] of RobertaProcessing / BertProcessing */
static weft_status parse_tok_pair(ctx *c, const json_t *v, const char *path, const char *key,
                                  int32_t *id) {
    char p[512];
    sub(p, sizeof(p), path, key);
    json_t *a = json_object_get(v, key);
    if (!json_is_array(a) || json_array_size(a) != 2 || !json_is_string(json_array_get(a, 0)) ||
        !json_is_integer(json_array_get(a, 1)))
        return bad(c, p, "an array [\"token\", id]", a);
    json_int_t x = json_integer_value(json_array_get(a, 1));
    if (x < 0 || x >= TOK_MAX_ID)
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                              "%s[1]: expected an id in [0, %d), got %lld", p, TOK_MAX_ID,
                              (long long)x);
    *id = (int32_t)x;
    return WEFT_OK;
}

static weft_status parse_template(ctx *c, weft_tokenizer *tok, const json_t *v, const char *path,
                                  int32_t **pre, size_t *npre, int32_t **suf, size_t *nsuf) {
    char p[512], q[600], r[700];
    sub(p, sizeof(p), path, "single");
    json_t *single = json_object_get(v, "single");
    if (!json_is_array(single)) return bad(c, p, "an array of template pieces", single);
    json_t *specials = json_object_get(v, "special_tokens");
    char sp[512];
    sub(sp, sizeof(sp), path, "special_tokens");
    if (specials && !json_is_null(specials) && !json_is_object(specials))
        return bad(c, sp, "an object", specials);
    int seen_seq = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *item = json_array_get(single, i);
        idx(q, sizeof(q), p, i);
        if (!json_is_object(item)) return bad(c, q, "an object", item);
        json_t *st = json_object_get(item, "SpecialToken");
        json_t *sq = json_object_get(item, "Sequence");
        if (sq) {
            if (seen_seq)
                return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                      "%s: expected one Sequence in the single template, got two",
                                      q);
            seen_seq = 1;
            continue;
        }
        snprintf(r, sizeof(r), "%s.SpecialToken", q);
        if (!json_is_object(st)) return bad(c, r, "an object (SpecialToken or Sequence)", st);
        const char *name;
        size_t n;
        weft_status s = get_str(c, st, r, "id", 1, &name, &n);
        if (s) return s;
        json_t *def = specials ? json_object_get(specials, name) : NULL;
        if (!json_is_object(def))
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "%s.id: \"%s\" is not defined in %s", r, name, sp);
        char d[700];
        snprintf(d, sizeof(d), "%s.%s.ids", sp, name);
        json_t *ids = json_object_get(def, "ids");
        if (!json_is_array(ids)) return bad(c, d, "an array of ids", ids);
        for (size_t j = 0; j < json_array_size(ids); j++) {
            json_t *x = json_array_get(ids, j);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) >= TOK_MAX_ID)
                return bad(c, d, "ids in [0, 4194304)", x);
            int32_t id = (int32_t)json_integer_value(x);
            s = seen_seq ? append_ids(c, suf, nsuf, &id, 1, d)
                         : append_ids(c, pre, npre, &id, 1, d);
            if (s) return s;
        }
    }
    (void)tok;
    if (!seen_seq)
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                              "%s: expected a {\"Sequence\": {\"id\": \"A\"}} piece, got none", p);
    return WEFT_OK;
}

static weft_status parse_post(ctx *c, weft_tokenizer *tok, const json_t *v, const char *path,
                              int depth) {
    if (depth > TOK_MAX_DEPTH)
        return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name, "%s: nested too deeply", path);
    const char *type;
    weft_status st = stage_type(c, v, path, &type);
    if (st) return st;
    int32_t *pre = NULL, *suf = NULL;
    size_t npre = 0, nsuf = 0;
    if (!strcmp(type, "ByteLevel")) {
        return WEFT_OK;
    } else if (!strcmp(type, "TemplateProcessing")) {
        st = parse_template(c, tok, v, path, &pre, &npre, &suf, &nsuf);
    } else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        int32_t cls, sep;
        st = parse_tok_pair(c, v, path, "cls", &cls);
        if (!st) st = parse_tok_pair(c, v, path, "sep", &sep);
        if (!st) st = append_ids(c, &pre, &npre, &cls, 1, path);
        if (!st) st = append_ids(c, &suf, &nsuf, &sep, 1, path);
    } else if (!strcmp(type, "Sequence")) {
        char p[512];
        sub(p, sizeof(p), path, "processors");
        json_t *arr = json_object_get(v, "processors");
        if (!json_is_array(arr)) return bad(c, p, "an array", arr);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char q[560];
            idx(q, sizeof(q), p, i);
            if ((st = parse_post(c, tok, json_array_get(arr, i), q, depth + 1))) return st;
        }
        return WEFT_OK;
    } else {
        return unsupported(c, path, type,
                           "TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, "
                           "Sequence");
    }
    if (!st) {
        /* Processors in a Sequence wrap what the earlier ones produced. */
        int32_t *np = NULL, *ns = NULL;
        size_t nnp = 0, nns = 0;
        st = append_ids(c, &np, &nnp, pre, npre, path);
        if (!st) st = append_ids(c, &np, &nnp, tok->post_prefix, tok->n_post_prefix, path);
        if (!st) st = append_ids(c, &ns, &nns, tok->post_suffix, tok->n_post_suffix, path);
        if (!st) st = append_ids(c, &ns, &nns, suf, nsuf, path);
        if (!st) {
            free(tok->post_prefix);
            free(tok->post_suffix);
            tok->post_prefix = np;
            tok->n_post_prefix = nnp;
            tok->post_suffix = ns;
            tok->n_post_suffix = nns;
            tok->has_post_processor = 1;
        } else {
            free(np);
            free(ns);
        }
    }
    free(pre);
    free(suf);
    return st;
}

/* ---- model ------------------------------------------------------------------------------------
 */
static weft_status parse_added(ctx *c, weft_tokenizer *tok, const json_t *arr, int64_t *max_id) {
    const char *path = "added_tokens";
    if (!arr || json_is_null(arr)) return WEFT_OK;
    if (!json_is_array(arr)) return bad(c, path, "an array", arr);
    size_t k = json_array_size(arr);
    tok->added = calloc(k ? k : 1, sizeof(*tok->added));
    if (!tok->added) return oom(c, path);
    for (size_t i = 0; i < k; i++) {
        char p[64];
        idx(p, sizeof(p), path, i);
        json_t *v = json_array_get(arr, i);
        if (!json_is_object(v)) return bad(c, p, "an object", v);
        tok_added *a = &tok->added[i];
        int64_t id;
        weft_status st = get_int(c, v, p, "id", 0, TOK_MAX_ID - 1, 1, 0, &id);
        if (st) return st;
        const char *s;
        size_t n;
        if ((st = get_str(c, v, p, "content", 1, &s, &n))) return st;
        if (n == 0)
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "%s.content: expected a non-empty string, got \"\"", p);
        if (!(a->content = dupn(s, n))) return oom(c, p);
        a->len = n;
        a->id = (int32_t)id;
        tok->n_added = i + 1;
        int b;
        if ((st = get_bool(c, v, p, "special", 0, &b))) return st;
        a->special = (uint8_t)b;
        if ((st = get_bool(c, v, p, "lstrip", 0, &b))) return st;
        a->lstrip = (uint8_t)b;
        if ((st = get_bool(c, v, p, "rstrip", 0, &b))) return st;
        a->rstrip = (uint8_t)b;
        if ((st = get_bool(c, v, p, "single_word", 0, &b))) return st;
        a->single_word = (uint8_t)b;
        /* HF's default: normalized unless special. */
        if ((st = get_bool(c, v, p, "normalized", !a->special, &b))) return st;
        a->normalized = (uint8_t)b;
        if (id > *max_id) *max_id = id;
    }
    return WEFT_OK;
}

/* Splits a merge entry into its two pieces: "a b" (first space) or ["a", "b"]. */
static weft_status merge_parts(ctx *c, const json_t *m, const char *path, const char **a,
                               size_t *an, const char **b, size_t *bn) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "%s: expected \"left right\" (two pieces split by one space), "
                                  "got \"%.80s\"",
                                  path, s);
        *a = s;
        *an = (size_t)(sp - s);
        *b = sp + 1;
        *bn = (size_t)(s + n - sp - 1);
        return WEFT_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *an = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bn = json_string_length(json_array_get(m, 1));
        return WEFT_OK;
    }
    return bad(c, path, "a string \"left right\" or an array [\"left\", \"right\"]", m);
}

static weft_status parse_model(ctx *c, weft_tokenizer *tok, const json_t *model,
                               int64_t max_added) {
    const char *path = "model";
    if (!json_is_object(model)) return bad(c, path, "an object", model);
    const char *type;
    size_t n;
    weft_status st = get_str(c, model, path, "type", 0, &type, &n);
    if (st) return st;
    if (type && strcmp(type, "BPE")) return unsupported(c, path, type, "BPE");
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return bad(c, "model.vocab", "an object {piece: id}", vocab);
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) return bad(c, "model.merges", "an array", merges);
    const char *s;
    if ((st = get_str(c, model, path, "continuing_subword_prefix", 0, &s, &n))) return st;
    if (s && n)
        return weft_error_set(c->err, WEFT_ERR_UNSUPPORTED, c->name,
                              "model.continuing_subword_prefix: only \"\" or null is supported, "
                              "got \"%s\"",
                              s);
    if ((st = get_str(c, model, path, "end_of_word_suffix", 0, &s, &n))) return st;
    if (s && n)
        return weft_error_set(c->err, WEFT_ERR_UNSUPPORTED, c->name,
                              "model.end_of_word_suffix: only \"\" or null is supported, got "
                              "\"%s\"",
                              s);
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout)) {
        if (!json_is_number(dropout)) return bad(c, "model.dropout", "a number or null", dropout);
        if (json_number_value(dropout) != 0.0)
            return weft_error_set(c->err, WEFT_ERR_UNSUPPORTED, c->name,
                                  "model.dropout: only null or 0 is supported (encoding is "
                                  "deterministic), got %g",
                                  json_number_value(dropout));
    }
    if ((st = get_bool(c, model, path, "byte_fallback", 0, &tok->byte_fallback))) return st;
    if ((st = get_bool(c, model, path, "fuse_unk", 0, &tok->fuse_unk))) return st;
    if ((st = get_bool(c, model, path, "ignore_merges", 0, &tok->ignore_merges))) return st;

    /* Ids first, to size the index. */
    int64_t max_id = max_added;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= TOK_MAX_ID) {
            char p[600];
            snprintf(p, sizeof(p), "model.vocab[\"%.200s\"]", key);
            if (!json_is_integer(val)) return bad(c, p, "an integer id", val);
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "%s: expected an id in [0, %d), got %lld", p, TOK_MAX_ID,
                                  (long long)json_integer_value(val));
        }
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    if (tok_vocab_init(&tok->vocab, (uint32_t)(max_id + 1), json_object_size(vocab)))
        return oom(c, "model.vocab");
    /* jansson's iteration order is the hash order; insert through the sized key API so pieces
     * with NUL bytes keep their length. */
    void *it = json_object_iter(vocab);
    while (it) {
        size_t klen = json_object_iter_key_len(it);
        key = json_object_iter_key(it);
        val = json_object_iter_value(it);
        int rc = tok_vocab_add(&tok->vocab, (int32_t)json_integer_value(val), key, klen);
        if (rc < 0) return oom(c, "model.vocab");
        if (rc > 0)
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "model.vocab[\"%.200s\"]: id %lld is used by two pieces", key,
                                  (long long)json_integer_value(val));
        it = json_object_iter_next((json_t *)vocab, it);
    }
    size_t nm = json_array_size(merges);
    if (nm >= INT32_MAX) return bad(c, "model.merges", "fewer than 2^31 merges", merges);
    if (tok_merges_init(&tok->merges, nm)) return oom(c, "model.merges");
    tok_buf joined = {0};
    for (size_t i = 0; i < nm; i++) {
        char p[64];
        idx(p, sizeof(p), "model.merges", i);
        const char *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        if ((st = merge_parts(c, json_array_get(merges, i), p, &a, &an, &b, &bn))) break;
        int32_t la = tok_vocab_find(&tok->vocab, a, an);
        int32_t lb = tok_vocab_find(&tok->vocab, b, bn);
        joined.len = 0;
        if (tok_buf_put(&joined, a, an) || tok_buf_put(&joined, b, bn)) {
            st = oom(c, p);
            break;
        }
        int32_t lm = tok_vocab_find(&tok->vocab, joined.p, joined.len);
        if (la < 0 || lb < 0 || lm < 0) {
            const char *which = la < 0 ? a : lb < 0 ? b : joined.p;
            int wl = (int)(la < 0 ? an : lb < 0 ? bn : joined.len);
            st = weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                "%s: piece \"%.*s\" is not in model.vocab", p, wl > 200 ? 200 : wl,
                                which);
            break;
        }
        if (tok_merges_add(&tok->merges, la, lb, (int32_t)i, lm) < 0) {
            st = oom(c, p);
            break;
        }
    }
    free(joined.p);
    if (st) return st;
    if ((st = get_str(c, model, path, "unk_token", 0, &s, &n))) return st;
    tok->unk_id = -1;
    if (s) {
        tok->unk_id = tok_vocab_find(&tok->vocab, s, n);
        if (tok->unk_id < 0)
            return weft_error_set(c->err, WEFT_ERR_FORMAT, c->name,
                                  "model.unk_token: \"%.200s\" is not in model.vocab", s);
    }
    return WEFT_OK;
}

static weft_status build(ctx *c, weft_tokenizer *tok, const json_t *root) {
    if (!json_is_object(root)) return bad(c, "(top level)", "an object", root);
    int64_t max_added = -1;
    weft_status st = parse_added(c, tok, json_object_get(root, "added_tokens"), &max_added);
    if (st) return st;
    if ((st = parse_model(c, tok, json_object_get(root, "model"), max_added))) return st;
    json_t *v = json_object_get(root, "normalizer");
    if (v && !json_is_null(v)) {
        if (!(tok->normalizer = calloc(1, sizeof(*tok->normalizer)))) return oom(c, "normalizer");
        if ((st = parse_normalizer(c, v, "normalizer", 0, tok->normalizer))) return st;
    }
    v = json_object_get(root, "pre_tokenizer");
    if (v && !json_is_null(v)) {
        if (!(tok->pretok = calloc(1, sizeof(*tok->pretok)))) return oom(c, "pre_tokenizer");
        if ((st = parse_pretok(c, v, "pre_tokenizer", 0, tok->pretok))) return st;
    }
    v = json_object_get(root, "decoder");
    if (v && !json_is_null(v)) {
        if (!(tok->decoder = calloc(1, sizeof(*tok->decoder)))) return oom(c, "decoder");
        if ((st = parse_decoder(c, v, "decoder", 0, tok->decoder))) return st;
    }
    v = json_object_get(root, "post_processor");
    if (v && !json_is_null(v) && (st = parse_post(c, tok, v, "post_processor", 0))) return st;
    return tok_finish(tok, c->err);
}

weft_status tok_load_json(const char *json, size_t len, const char *name, weft_tokenizer **out,
                          weft_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    if (!root)
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "expected valid JSON, got an error at line %d column %d: %s", je.line,
                              je.column, je.text);
    weft_tokenizer *tok = tok_alloc(name);
    if (!tok) {
        json_decref(root);
        return weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory");
    }
    ctx c = {tok->name, err};
    weft_status st = build(&c, tok, root);
    json_decref(root);
    if (st) {
        weft_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return WEFT_OK;
}
