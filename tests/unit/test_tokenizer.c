/* Unit tests of the tokenizer beyond the reference comparisons: Unicode normalization against
 * Python's unicodedata (tests/data/tokenizer/normalization.jsonl), the repair of invalid UTF-8
 * (the Unicode Standard's example of maximal subparts), errors for malformed tokenizer.json
 * files that must name the field, malformed GGUF files (cut, and vocabularies written here
 * with one field wrong at a time, each refused naming the key), the accessors, and the streaming
 * detokenizer on characters split across tokens. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "text/tok_internal.h"
#include "text/tok_unicode.h"
#include "text/tokenizer.h"
#include "util/error.h"

static const char *shared_dir(void) {
    const char *d = getenv("WEFT_SHARED_DIR");
    return d && *d ? d : WEFT_SHARED_DIR;
}

static weft_tokenizer *load(const char *path) {
    weft_tokenizer *tok = NULL;
    weft_error err;
    weft_error_clear(&err);
    weft_status st = weft_tokenizer_load(path, &tok, &err);
    if (st) fprintf(stderr, "%s: %s\n", err.source, err.message);
    assert_int_equal(st, WEFT_OK);
    return tok;
}

static weft_tokenizer *load_qwen(void) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/qwen3-tokenizer", shared_dir()); /* a directory */
    return load(path);
}

static weft_tokenizer *load_stories(void) {
    return load(WEFT_SOURCE_DIR "/tests/data/tokenizer/stories260K.json");
}

static void test_normalization(void **state) {
    (void)state;
    FILE *f = fopen(WEFT_SOURCE_DIR "/tests/data/tokenizer/normalization.jsonl", "rb");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int lines = 0, bad = 0;
    const char *keys[4] = {"nfc", "nfd", "nfkc", "nfkd"};
    const weft_tok_nf forms[4] = {WEFT_TOK_NFC, WEFT_TOK_NFD, WEFT_TOK_NFKC, WEFT_TOK_NFKD};
    while ((got = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *rec = json_loadb(line, (size_t)got, 0, &je);
        assert_non_null(rec);
        json_t *t = json_object_get(rec, "t");
        for (int k = 0; k < 4; k++) {
            json_t *want = json_object_get(rec, keys[k]);
            char *out;
            size_t ol;
            assert_int_equal(weft_tok_normalize(forms[k], json_string_value(t),
                                                json_string_length(t), &out, &ol),
                             0);
            if (ol != json_string_length(want) || memcmp(out, json_string_value(want), ol)) {
                if (bad < 10)
                    fprintf(stderr, "%s of \"%s\": want \"%s\" got \"%s\"\n", keys[k],
                            json_string_value(t), json_string_value(want), out);
                bad++;
            }
            free(out);
        }
        json_decref(rec);
        lines++;
    }
    free(line);
    fclose(f);
    assert_int_equal(lines, 1500);
    assert_int_equal(bad, 0);
}

static void test_utf8_repair(void **state) {
    (void)state;
    /* The Unicode Standard (chapter 3, "U+FFFD Substitution of Maximal Subparts") example. */
    const char in[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
    const char want[] = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                        "b\xEF\xBF\xBD"
                        "c\xEF\xBF\xBD\xEF\xBF\xBD"
                        "d";
    size_t n;
    char *out = weft_tok_utf8_repair(in, sizeof(in) - 1, &n);
    assert_int_equal(n, sizeof(want) - 1);
    assert_memory_equal(out, want, n);
    free(out);
    /* Surrogates and overlongs are ill-formed byte by byte. */
    out = weft_tok_utf8_repair("\xED\xA0\x80\xC0\xAF", 5, &n);
    assert_int_equal(n, 15);
    free(out);
    assert_true(weft_tok_utf8_partial("\xF0\x9F\x98", 3));
    assert_false(weft_tok_utf8_partial("\xF0\x8F", 2)); /* can never be well-formed */
    assert_false(weft_tok_utf8_partial("a", 1));
}

/* Invalid input encodes as its repaired text, with every tokenizer and any bytes. */
static void test_invalid_utf8_input(void **state) {
    (void)state;
    weft_tokenizer *toks[2] = {load_stories(), load_qwen()};
    const char *bad[] = {"\xFF\xFE", "ab\xE4\xBD", "\xC0\xAF x", "\xED\xA0\x80!", "\x80", "ok"};
    weft_error err;
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            size_t fl;
            char *fixed = weft_tok_utf8_repair(bad[i], strlen(bad[i]), &fl);
            int32_t *a, *b;
            size_t na, nb;
            assert_int_equal(
                weft_tokenizer_encode(toks[t], bad[i], strlen(bad[i]), 1, 1, &a, &na, &err),
                WEFT_OK);
            assert_int_equal(weft_tokenizer_encode(toks[t], fixed, fl, 1, 1, &b, &nb, &err),
                             WEFT_OK);
            assert_int_equal(na, nb);
            assert_memory_equal(a, b, na * sizeof(*a));
            char *dec;
            assert_int_equal(weft_tokenizer_decode(toks[t], a, na, 1, &dec, NULL, &err), WEFT_OK);
            assert_true(weft_tok_utf8_valid(dec, strlen(dec)));
            free(dec);
            free(a);
            free(b);
            free(fixed);
        }
        weft_tokenizer_free(toks[t]);
    }
}

static void test_accessors(void **state) {
    (void)state;
    weft_tokenizer *q = load_qwen();
    assert_int_equal(weft_tokenizer_vocab_size(q), 151669);
    assert_int_equal(weft_tokenizer_find(q, "<|im_end|>"), 151645);
    assert_int_equal(weft_tokenizer_find(q, "<think>"), 151667);
    assert_int_equal(weft_tokenizer_find(q, "Hello"), 9707);
    assert_int_equal(weft_tokenizer_find(q, "no such piece \x01"), -1);
    assert_string_equal(weft_tokenizer_token(q, 151644), "<|im_start|>");
    assert_string_equal(weft_tokenizer_token(q, 9707), "Hello");
    assert_null(weft_tokenizer_token(q, 151669));
    assert_null(weft_tokenizer_token(q, -1));
    assert_true(weft_tokenizer_is_special(q, 151645));
    assert_false(weft_tokenizer_is_special(q, 151667)); /* <think> is added, not special */
    assert_false(weft_tokenizer_is_special(q, 9707));
    assert_int_equal(weft_tokenizer_bos(q), -1);
    weft_error err;
    weft_error_clear(&err);
    int32_t ids[2] = {9707, 151669};
    char *text;
    assert_int_equal(weft_tokenizer_decode(q, ids, 2, 0, &text, NULL, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "151669"));
    /* parse_special = 0 leaves special tokens as text but still splits added ones. */
    int32_t *out;
    size_t n;
    assert_int_equal(weft_tokenizer_encode(q, "<|im_end|><think>", 17, 0, 0, &out, &n, &err),
                     WEFT_OK);
    assert_true(n > 2);
    assert_int_equal(out[n - 1], 151667);
    free(out);
    weft_tokenizer_free(q);

    weft_tokenizer *s = load_stories();
    assert_int_equal(weft_tokenizer_bos(s), 1);
    assert_int_equal(weft_tokenizer_vocab_size(s), 512);
    assert_int_equal(weft_tokenizer_encode(s, "", 0, 1, 1, &out, &n, &err), WEFT_OK);
    assert_int_equal(n, 1); /* BOS only */
    assert_int_equal(out[0], 1);
    free(out);
    weft_tokenizer_free(s);

    weft_tokenizer *tok;
    assert_int_equal(weft_tokenizer_load("/nonexistent/tokenizer.json", &tok, &err),
                     WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.source, "/nonexistent/tokenizer.json"));
}

/* Pushes ids one by one; checks each output against want[i]. */
static void expect_stream(const weft_tokenizer *tok, const int32_t *ids, size_t n,
                          const char *const *want, const char *flush_want) {
    weft_detok *d = weft_detok_new(tok, 0);
    weft_error err;
    for (size_t i = 0; i < n; i++) {
        char *out;
        size_t ol;
        assert_int_equal(weft_detok_push(d, ids[i], &out, &ol, &err), WEFT_OK);
        assert_string_equal(out, want[i]);
        free(out);
    }
    char *out;
    assert_int_equal(weft_detok_flush(d, &out, NULL, &err), WEFT_OK);
    assert_string_equal(out, flush_want);
    free(out);
    weft_detok_free(d);
}

static void test_detok(void **state) {
    (void)state;
    weft_tokenizer *s = load_stories();
    int32_t bos = 1;
    int32_t *ids;
    size_t n;
    weft_error err;
    /* "你" is not in the 512-piece vocabulary: three byte-fallback pieces. */
    assert_int_equal(weft_tokenizer_encode(s, "\xE4\xBD\xA0!", 4, 0, 1, &ids, &n, &err), WEFT_OK);
    assert_int_equal(n, 5); /* ▁ <0xE4> <0xBD> <0xA0> ! */
    assert_int_equal(ids[1], 3 + 0xE4);
    const char *w1[] = {"", "", "", "\xE4\xBD\xA0", "!"};
    expect_stream(s, ids, n, w1, "");
    /* Cut after two of the three bytes: the flush gives up with one U+FFFD for the incomplete
     * character (its maximal subpart), where decode() would give HF's one per byte. */
    const char *w2[] = {"", "", ""};
    expect_stream(s, ids, 3, w2, "\xEF\xBF\xBD");
    free(ids);
    /* The sentencepiece leading space goes only at the start, also after a BOS. */
    assert_int_equal(weft_tokenizer_encode(s, "Lily ran", 8, 1, 1, &ids, &n, &err), WEFT_OK);
    assert_int_equal(ids[0], bos);
    weft_detok *d = weft_detok_new(s, 1);
    char text[64] = "";
    for (size_t i = 0; i < n; i++) {
        char *out;
        assert_int_equal(weft_detok_push(d, ids[i], &out, NULL, &err), WEFT_OK);
        if (i == 1) assert_int_equal(out[0], 'L');
        strcat(text, out);
        free(out);
    }
    assert_string_equal(text, "Lily ran");
    char *none;
    assert_int_equal(weft_detok_push(d, 512, &none, NULL, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "512")); /* names the id outside the vocabulary */
    weft_detok_free(d);
    free(ids);
    weft_tokenizer_free(s);

    /* Byte-level: an emoji split over two tokens. */
    weft_tokenizer *q = load_qwen();
    assert_int_equal(weft_tokenizer_encode(q, "a \xF0\x9F\xAB\xA0", 6, 0, 1, &ids, &n, &err),
                     WEFT_OK);
    assert_int_equal(n, 4); /* a, " \xF0\x9F", "\xAB", "\xA0" */
    const char *w3[] = {"a", "", "", " \xF0\x9F\xAB\xA0"};
    expect_stream(q, ids, n, w3, "");
    /* Cut inside the emoji, the flush gives one U+FFFD. */
    expect_stream(q, ids, 3, w3, " \xEF\xBF\xBD");
    free(ids);
    /* A real U+FFFD is emitted at once. */
    assert_int_equal(weft_tokenizer_encode(q, "\xEF\xBF\xBD", 3, 0, 1, &ids, &n, &err), WEFT_OK);
    d = weft_detok_new(q, 0);
    char *all = calloc(1, 64);
    for (size_t i = 0; i < n; i++) {
        char *out;
        assert_int_equal(weft_detok_push(d, ids[i], &out, NULL, &err), WEFT_OK);
        strcat(all, out);
        free(out);
    }
    assert_string_equal(all, "\xEF\xBF\xBD");
    free(all);
    weft_detok_free(d);
    free(ids);
    weft_tokenizer_free(q);
}

/* Each malformed document must fail with a message naming the field. */
static void test_malformed_json(void **state) {
    (void)state;
    const char *base_model = "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},"
                             "\"merges\":[\"a b\"]}";
    struct {
        const char *json;
        weft_status code;
        const char *field;
    } cases[] = {
        {"{", WEFT_ERR_FORMAT, "expected valid JSON"},
        {"[]", WEFT_ERR_FORMAT, "(top level)"},
        {"{}", WEFT_ERR_FORMAT, "model"},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", WEFT_ERR_UNSUPPORTED, "model.type"},
        {"{\"model\":{\"vocab\":{\"a\":\"0\"},\"merges\":[]}}", WEFT_ERR_FORMAT,
         "model.vocab[\"a\"]"},
        {"{\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]}}", WEFT_ERR_FORMAT, "model.vocab[\"a\"]"},
        {"{\"model\":{\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", WEFT_ERR_FORMAT,
         "id 0 is used"},
        {"{\"model\":{\"vocab\":{\"a\":0},\"merges\":{}}}", WEFT_ERR_FORMAT, "model.merges"},
        {"{\"model\":{\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}", WEFT_ERR_FORMAT,
         "model.merges[0]: piece \"ab\""},
        {"{\"model\":{\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\",\"ab\"]}}",
         WEFT_ERR_FORMAT, "model.merges[1]"},
        {"{\"model\":{\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\",2]]}}",
         WEFT_ERR_FORMAT, "model.merges[0]"},
        {"{\"model\":{\"vocab\":{},\"merges\":[],\"unk_token\":\"<unk>\"}}", WEFT_ERR_FORMAT,
         "model.unk_token"},
        {"{\"model\":{\"vocab\":{},\"merges\":[],\"byte_fallback\":1}}", WEFT_ERR_FORMAT,
         "model.byte_fallback"},
        {"{\"model\":{\"vocab\":{},\"merges\":[],\"dropout\":0.1}}", WEFT_ERR_UNSUPPORTED,
         "model.dropout"},
        {"{\"model\":{\"vocab\":{},\"merges\":[],\"continuing_subword_prefix\":\"##\"}}",
         WEFT_ERR_UNSUPPORTED, "model.continuing_subword_prefix"},
        {"{\"added_tokens\":[{\"content\":\"x\"}],%s}", WEFT_ERR_FORMAT, "added_tokens[0].id"},
        {"{\"added_tokens\":[{\"id\":5,\"content\":\"\"}],%s}", WEFT_ERR_FORMAT,
         "added_tokens[0].content"},
        {"{\"added_tokens\":[{\"id\":5,\"content\":\"x\",\"special\":\"yes\"}],%s}",
         WEFT_ERR_FORMAT, "added_tokens[0].special"},
        {"{\"normalizer\":{\"type\":\"Precompiled\"},%s}", WEFT_ERR_UNSUPPORTED, "normalizer.type"},
        {"{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":"
         "\"Replace\",\"pattern\":{\"String\":\" \"}}]},%s}",
         WEFT_ERR_FORMAT, "normalizer.normalizers[1].content"},
        {"{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(\"},\"content\":\"\"},%"
         "s}",
         WEFT_ERR_FORMAT, "normalizer.pattern.Regex"},
        {"{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
         "\"pattern\":{\"Regex\":\"\\\\p{Nope}\"},\"behavior\":\"Isolated\"}]},%s}",
         WEFT_ERR_FORMAT, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
        {"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},\"behavior\":"
         "\"Sideways\"},%s}",
         WEFT_ERR_FORMAT, "pre_tokenizer.behavior"},
        {"{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"prepend_scheme\":\"sometimes\"},%s}",
         WEFT_ERR_FORMAT, "pre_tokenizer.prepend_scheme"},
        {"{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},%s}", WEFT_ERR_UNSUPPORTED,
         "pre_tokenizer.type"},
        {"{\"pre_tokenizer\":{\"nope\":1},%s}", WEFT_ERR_FORMAT, "pre_tokenizer.type"},
        {"{\"decoder\":{\"type\":\"Strip\",\"content\":\"ab\",\"start\":1,\"stop\":0},%s}",
         WEFT_ERR_FORMAT, "decoder.content"},
        {"{\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"WordPiece\"}]},%s}",
         WEFT_ERR_UNSUPPORTED, "decoder.decoders[0].type"},
        {"{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
         "{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{}},%s}",
         WEFT_ERR_FORMAT, "post_processor.single[0].SpecialToken.id"},
        {"{\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
         "{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"ids\":"
         "[99]}}},%s}",
         WEFT_ERR_FORMAT, "post_processor: special token id 99"},
        {"{\"post_processor\":{\"type\":\"RobertaProcessing\",\"cls\":[\"<s>\"],\"sep\":"
         "[\"</s>\",2]},%s}",
         WEFT_ERR_FORMAT, "post_processor.cls"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char doc[2048];
        snprintf(doc, sizeof(doc), cases[i].json, base_model);
        weft_tokenizer *tok = NULL;
        weft_error err;
        weft_error_clear(&err);
        weft_status st = weft_tokenizer_parse(doc, strlen(doc), "t.json", &tok, &err);
        if (st != cases[i].code || !strstr(err.message, cases[i].field))
            fprintf(stderr, "case %zu: status %d, message \"%s\"; expected %d and \"%s\"\n", i, st,
                    err.message, cases[i].code, cases[i].field);
        assert_int_equal(st, cases[i].code);
        assert_non_null(strstr(err.message, cases[i].field));
        assert_string_equal(err.source, "t.json");
        assert_null(tok);
    }
    /* The base document itself loads and merges. */
    char doc[512];
    snprintf(doc, sizeof(doc), "{%s}", base_model);
    weft_tokenizer *tok;
    weft_error err;
    assert_int_equal(weft_tokenizer_parse(doc, strlen(doc), "t.json", &tok, &err), WEFT_OK);
    int32_t *ids;
    size_t n;
    assert_int_equal(weft_tokenizer_encode(tok, "abba", 4, 1, 1, &ids, &n, &err), WEFT_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], 0);
    free(ids);
    char *text;
    assert_int_equal(weft_tokenizer_decode(tok, (int32_t[]){2, 1}, 2, 0, &text, NULL, &err),
                     WEFT_OK);
    assert_string_equal(text, "ab b"); /* no decoder: pieces joined by spaces, as HF */
    free(text);
    weft_tokenizer_free(tok);
}

static void test_malformed_gguf(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/llamacpp-tokenizer-vectors/ggml-vocab-phi-3.gguf",
             shared_dir());
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *data = malloc(800000);
    size_t len = fread(data, 1, 800000, f);
    fclose(f);
    assert_int_equal(len, 726019);
    weft_error err;
    weft_tokenizer *tok;
    /* Every truncation fails cleanly (sampled: each of the first 4096 bytes, then strides). */
    for (size_t cut = 0; cut < len; cut += cut < 4096 ? 1 : 997) {
        weft_error_clear(&err);
        weft_status st = tok_load_gguf(data, cut, "phi3.gguf", &tok, &err);
        assert_int_not_equal(st, WEFT_OK);
        assert_null(tok);
        assert_true(err.message[0] != '\0');
    }
    /* A corrupted array count is caught by the bounds checks. */
    unsigned char *copy = malloc(len);
    memcpy(copy, data, len);
    const unsigned char key[] = "tokenizer.ggml.tokens";
    unsigned char *at = NULL;
    for (size_t i = 0; i + sizeof(key) - 1 <= len && !at; i++)
        if (!memcmp(copy + i, key, sizeof(key) - 1)) at = copy + i;
    assert_non_null(at);
    memset(at + sizeof(key) - 1 + 4 + 4, 0x7f, 8); /* the element count */
    assert_int_equal(tok_load_gguf(copy, len, "phi3.gguf", &tok, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "tokenizer.ggml.tokens"));
    /* Version 1 is refused by name. */
    memcpy(copy, data, len);
    copy[4] = 1;
    assert_int_equal(tok_load_gguf(copy, len, "phi3.gguf", &tok, &err), WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "version"));
    free(copy);
    assert_int_equal(tok_load_gguf(data, len, "phi3.gguf", &tok, &err), WEFT_OK);
    weft_tokenizer_free(tok);
    free(data);
}

/* ---- GGUF vocabularies written here, one field wrong at a time ------------------------------ */

typedef struct gbuf {
    unsigned char p[4096];
    size_t n;
} gbuf;

static void g_put(gbuf *b, const void *d, size_t n) {
    assert_true(b->n + n <= sizeof(b->p));
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void g_u32(gbuf *b, uint32_t v) {
    g_put(b, &v, 4);
}
static void g_u64(gbuf *b, uint64_t v) {
    g_put(b, &v, 8);
}
static void g_str(gbuf *b, const char *s) {
    g_u64(b, strlen(s));
    g_put(b, s, strlen(s));
}
enum { G_U32 = 4, G_I32 = 5, G_F32 = 6, G_STRING = 8, G_ARRAY = 9 };
static void kv_str(gbuf *b, const char *key, const char *v) {
    g_str(b, key);
    g_u32(b, G_STRING);
    g_str(b, v);
}
static void kv_u32(gbuf *b, const char *key, uint32_t v) {
    g_str(b, key);
    g_u32(b, G_U32);
    g_u32(b, v);
}
/* an array's key and header: element type, then count; the elements follow */
static void kv_array(gbuf *b, const char *key, uint32_t elem, uint64_t n) {
    g_str(b, key);
    g_u32(b, G_ARRAY);
    g_u32(b, elem);
    g_u64(b, n);
}
static void kv_strs(gbuf *b, const char *key, const char *const *v, uint32_t n) {
    kv_array(b, key, G_STRING, n);
    for (uint32_t i = 0; i < n; i++)
        g_str(b, v[i]);
}
static void kv_u32s(gbuf *b, const char *key, uint32_t elem, const uint32_t *v, uint32_t n) {
    kv_array(b, key, elem, n);
    for (uint32_t i = 0; i < n; i++)
        g_u32(b, v[i]);
}

/* A byte-level ("gpt2") or sentencepiece ("llama") vocabulary of a, b and ab with one field set
 * to `bad` (0: none): 1 model "bert", 2 tokens as u32, 3 a merge whose piece is not in the
 * vocabulary, 4 no merges, 5 pre "foo", 6 bos id 3, 7 llama without scores, 8 three scores for
 * a vocabulary read as two tokens, 9 llama unk id 7, 10 no tokens. */
static size_t gguf_vocab(gbuf *b, int llama, int bad) {
    static const char *const toks[] = {"a", "b", "ab"};
    static const char *const merges[] = {"a b"}, *const bad_merges[] = {"a c"};
    const uint32_t scores[3] = {0x3f800000u, 0x3f800000u, 0x40000000u}; /* 1, 1, 2 as f32 bits */
    const uint32_t ids[3] = {1, 2, 3};
    b->n = 0;
    g_put(b, "GGUF", 4);
    g_u32(b, 3);
    g_u64(b, 0); /* tensors */
    uint64_t n_kv = 0;
    size_t count_at = b->n;
    g_u64(b, 0);
    kv_str(b, "tokenizer.ggml.model", bad == 1 ? "bert" : llama ? "llama" : "gpt2"), n_kv++;
    if (bad == 2)
        kv_u32s(b, "tokenizer.ggml.tokens", G_U32, ids, 3), n_kv++;
    else if (bad != 10)
        kv_strs(b, "tokenizer.ggml.tokens", toks, bad == 8 ? 2 : 3), n_kv++;
    else
        kv_strs(b, "tokenizer.ggml.tokens", toks, 0), n_kv++;
    if (llama && bad != 7) kv_u32s(b, "tokenizer.ggml.scores", G_F32, scores, 3), n_kv++;
    if (!llama && bad != 4)
        kv_strs(b, "tokenizer.ggml.merges", bad == 3 ? bad_merges : merges, 1), n_kv++;
    if (!llama) kv_str(b, "tokenizer.ggml.pre", bad == 5 ? "foo" : "default"), n_kv++;
    kv_u32(b, "tokenizer.ggml.bos_token_id", bad == 6 ? 3 : 0), n_kv++;
    if (llama) kv_u32(b, "tokenizer.ggml.unknown_token_id", bad == 9 ? 7 : 0), n_kv++;
    memcpy(b->p + count_at, &n_kv, 8);
    return b->n;
}

static void test_gguf_fields(void **state) {
    (void)state;
    static const struct {
        int llama, bad;
        weft_status want;
        const char *msg;
    } cases[] = {
        {0, 0, WEFT_OK, NULL},
        {1, 0, WEFT_OK, NULL},
        {0, 1, WEFT_ERR_UNSUPPORTED, "tokenizer.ggml.model: expected \"llama\""},
        {0, 2, WEFT_ERR_FORMAT, "tokenizer.ggml.tokens: expected an array of strings"},
        {0, 3, WEFT_ERR_FORMAT, "tokenizer.ggml.merges[0]: expected \"left right\""},
        {0, 4, WEFT_ERR_FORMAT, "tokenizer.ggml.merges: expected an array of strings"},
        {0, 5, WEFT_ERR_UNSUPPORTED, "tokenizer.ggml.pre: expected default, gpt-2"},
        {0, 6, WEFT_ERR_FORMAT, "tokenizer.ggml.bos_token_id: expected an id below 3"},
        {1, 7, WEFT_ERR_FORMAT,
         "tokenizer.ggml.scores: expected an array of 3 float32 scores, "
         "got none"},
        {1, 8, WEFT_ERR_FORMAT, "tokenizer.ggml.scores: expected an array of 2 float32 scores"},
        {1, 9, WEFT_ERR_FORMAT, "tokenizer.ggml.unknown_token_id: expected an id below 3"},
        {0, 10, WEFT_ERR_FORMAT, "tokenizer.ggml.tokens: expected 1 to 4194304 tokens, got 0"},
    };
    static gbuf b;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = gguf_vocab(&b, cases[i].llama, cases[i].bad);
        weft_tokenizer *tok = NULL;
        weft_error err;
        weft_error_clear(&err);
        weft_status st = tok_load_gguf(b.p, n, "vocab.gguf", &tok, &err);
        if (st != cases[i].want || (cases[i].msg && !strstr(err.message, cases[i].msg)))
            fail_msg("case %zu (llama %d, bad %d): status %d, message '%s'", i, cases[i].llama,
                     cases[i].bad, (int)st, err.message);
        if (st == WEFT_OK) {
            int32_t *ids = NULL;
            size_t nid = 0;
            assert_int_equal(weft_tokenizer_encode(tok, "ab", 2, 0, 0, &ids, &nid, &err), WEFT_OK);
            /* the merge (gpt2) or the score (llama) makes "ab" one token */
            assert_int_equal(nid, cases[i].llama ? 2 : 1);
            assert_int_equal(ids[nid - 1], 2);
            free(ids);
            weft_tokenizer_free(tok);
        } else {
            assert_null(tok);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalization),
        cmocka_unit_test(test_utf8_repair),
        cmocka_unit_test(test_invalid_utf8_input),
        cmocka_unit_test(test_accessors),
        cmocka_unit_test(test_detok),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_malformed_gguf),
        cmocka_unit_test(test_gguf_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
