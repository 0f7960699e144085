/* libFuzzer target for the tokenizer. The first input byte picks what the rest is:
 *   0: a tokenizer.json: parse it, and when it loads, encode and decode with it;
 *   1: text for a fixed byte-level BPE (Qwen-style regex, NFC, added tokens with every flag);
 *   2: text for a fixed sentencepiece-style BPE (byte fallback, Metaspace, Lowercase);
 *   3: a GGUF file for the vocab loader;
 *   4: little-endian int32 ids (any value) to decode and stream through the detokenizer.
 * Build with clang: CC=clang cmake -S . -B build-fuzz -DWEFT_FUZZ=ON -DWEFT_CUDA=OFF
 * -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link,address,undefined (so libweft is instrumented too),
 * then run build-fuzz/fuzz/fuzz_tokenizer tests/fuzz/corpus/tokenizer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/tok_unicode.h"
#include "text/tokenizer.h"

static weft_tokenizer *byte_tok, *spm_tok;

static void put(char **p, size_t *n, size_t *cap, const char *s) {
    size_t k = strlen(s);
    while (*n + k + 1 > *cap)
        *p = realloc(*p, *cap *= 2);
    memcpy(*p + *n, s, k + 1);
    *n += k;
}

/* A JSON string literal of piece (escaped). */
static void put_str(char **p, size_t *n, size_t *cap, const char *s) {
    put(p, n, cap, "\"");
    for (; *s; s++) {
        char esc[8];
        if (*s == '"' || *s == '\\')
            snprintf(esc, sizeof(esc), "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            snprintf(esc, sizeof(esc), "\\u%04x", *s);
        else
            snprintf(esc, sizeof(esc), "%c", *s);
        put(p, n, cap, esc);
    }
    put(p, n, cap, "\"");
}

/* Vocabulary: the 256 byte pieces (byte-level) or <0xNN> pieces plus letters (sentencepiece),
 * then a few merges so that the merge loop runs. */
static weft_tokenizer *make(int bytelevel) {
    size_t cap = 1 << 16, n = 0;
    char *j = malloc(cap);
    j[0] = '\0';
    put(&j, &n, &cap, "{\"added_tokens\":[");
    put(&j, &n, &cap,
        "{\"id\":600,\"content\":\"<|im_start|>\",\"special\":true,\"normalized\":false},"
        "{\"id\":601,\"content\":\"<think>\",\"special\":false,\"normalized\":false},"
        "{\"id\":602,\"content\":\"[M]\",\"special\":true,\"lstrip\":true,\"rstrip\":true},"
        "{\"id\":603,\"content\":\"cat\",\"special\":false,\"single_word\":true,\"normalized\":"
        "true},"
        "{\"id\":604,\"content\":\"\\u00e9t\\u00e9\",\"special\":false,\"normalized\":true}],");
    put(&j, &n, &cap, "\"model\":{\"type\":\"BPE\",");
    put(&j, &n, &cap,
        bytelevel ? "\"byte_fallback\":false,"
                  : "\"byte_fallback\":true,\"unk_token\":\"<unk>\",\"fuse_unk\":true,");
    put(&j, &n, &cap, "\"vocab\":{");
    int id = 0;
    char piece[16];
    const char *letters = "abcdefghijklmnopqrstuvwxyz";
    if (bytelevel) {
        for (int b = 0; b < 256; b++) {
            size_t k = weft_tok_utf8_encode(tok_byte_to_cp((unsigned char)b), piece);
            piece[k] = '\0';
            if (b) put(&j, &n, &cap, ",");
            put_str(&j, &n, &cap, piece);
            snprintf(piece, sizeof(piece), ":%d", id++);
            put(&j, &n, &cap, piece);
        }
    } else {
        put(&j, &n, &cap, "\"<unk>\":0");
        id = 1;
        for (int b = 0; b < 256; b++) {
            snprintf(piece, sizeof(piece), ",\"<0x%02X>\":%d", b, id++);
            put(&j, &n, &cap, piece);
        }
        for (int c = 0; letters[c]; c++) {
            snprintf(piece, sizeof(piece), ",\"%c\":%d", letters[c], id++);
            put(&j, &n, &cap, piece);
        }
        snprintf(piece, sizeof(piece), ",\"\\u2581\":%d", id++);
        put(&j, &n, &cap, piece);
    }
    const char *pairs[][2] = {{"t", "h"}, {"th", "e"}, {"a", "n"}, {"an", "d"}, {"e", "r"},
                              {"i", "n"}, {"in", "g"}, {"o", "n"}, {"e", "e"},  {"ee", "ee"}};
    const char *sp = bytelevel ? "\xC4\xA0" : "\xE2\x96\x81"; /* "Ġ" or "▁" */
    char merged[32];
    for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
        snprintf(merged, sizeof(merged), "%s%s", pairs[k][0], pairs[k][1]);
        put(&j, &n, &cap, ",");
        put_str(&j, &n, &cap, merged);
        snprintf(piece, sizeof(piece), ":%d", id++);
        put(&j, &n, &cap, piece);
    }
    snprintf(merged, sizeof(merged), "%sthe", sp);
    put(&j, &n, &cap, ",");
    put_str(&j, &n, &cap, merged);
    snprintf(piece, sizeof(piece), ":%d", id++);
    put(&j, &n, &cap, piece);
    put(&j, &n, &cap, "},\"merges\":[");
    for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
        put(&j, &n, &cap, k ? ",[" : "[");
        put_str(&j, &n, &cap, pairs[k][0]);
        put(&j, &n, &cap, ",");
        put_str(&j, &n, &cap, pairs[k][1]);
        put(&j, &n, &cap, "]");
    }
    put(&j, &n, &cap, ",[");
    put_str(&j, &n, &cap, sp);
    put(&j, &n, &cap, ",\"the\"]]},");
    if (bytelevel)
        put(&j, &n, &cap,
            "\"normalizer\":{\"type\":\"NFC\"},"
            "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
            "\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
            "\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
            "\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
            "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
            "\"decoder\":{\"type\":\"ByteLevel\"}}");
    else
        put(&j, &n, &cap,
            "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKD\"},"
            "{\"type\":\"Lowercase\"},{\"type\":\"Strip\",\"strip_left\":false,\"strip_right\":"
            "true}]},"
            "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\","
            "\"individual_digits\":true},{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
            "\"prepend_scheme\":\"first\"},{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"}]}"
            ","
            "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
            "{\"id\":\"<unk>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<unk>\":"
            "{\"id\":\"<unk>\",\"ids\":[0]}}},"
            "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},"
            "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\"},"
            "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":1}]}}");
    weft_tokenizer *tok = NULL;
    weft_error err;
    if (weft_tokenizer_parse(j, n, "fuzz.json", &tok, &err) != WEFT_OK) {
        fprintf(stderr, "fuzz tokenizer: %s\n", err.message);
        abort();
    }
    free(j);
    return tok;
}

static void exercise(const weft_tokenizer *tok, const char *text, size_t len) {
    weft_error err;
    for (int mode = 0; mode < 2; mode++) {
        int32_t *ids;
        size_t n;
        if (weft_tokenizer_encode(tok, text, len, mode, mode, &ids, &n, &err) != WEFT_OK) abort();
        char *out;
        size_t ol;
        if (weft_tokenizer_decode(tok, ids, n, mode, &out, &ol, &err) != WEFT_OK) abort();
        if (!weft_tok_utf8_valid(out, ol)) abort();
        free(out);
        weft_detok *d = weft_detok_new(tok, mode);
        for (size_t i = 0; i <= n; i++) {
            if (i < n ? weft_detok_push(d, ids[i], &out, &ol, &err)
                      : weft_detok_flush(d, &out, &ol, &err))
                abort();
            if (!weft_tok_utf8_valid(out, ol)) abort();
            free(out);
        }
        weft_detok_free(d);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!byte_tok) {
        byte_tok = make(1);
        spm_tok = make(0);
    }
    if (size < 1) return 0;
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    weft_tokenizer *tok = NULL;
    weft_error err;
    switch (data[0] % 5) {
    case 0:
        if (weft_tokenizer_parse(rest, n, "fuzz.json", &tok, &err) == WEFT_OK) {
            exercise(tok, "Hello w\xC3\xB6rld <|im_start|> 123 \xF0\x9F\x98\x80  \n x", 31);
            exercise(tok, rest, n > 64 ? 64 : n);
            weft_tokenizer_free(tok);
        }
        break;
    case 1:
        exercise(byte_tok, rest, n);
        break;
    case 2:
        exercise(spm_tok, rest, n);
        break;
    case 3:
        if (tok_load_gguf((const unsigned char *)rest, n, "fuzz.gguf", &tok, &err) == WEFT_OK) {
            exercise(tok, "Hello w\xC3\xB6rld 123", 15);
            weft_tokenizer_free(tok);
        }
        break;
    default: {
        size_t k = n / 4;
        int32_t *ids = malloc((k ? k : 1) * sizeof(*ids));
        memcpy(ids, rest, k * 4);
        const weft_tokenizer *t = data[0] & 8 ? byte_tok : spm_tok;
        char *out;
        size_t ol;
        if (weft_tokenizer_decode(t, ids, k, data[0] & 16, &out, &ol, &err) == WEFT_OK) {
            if (!weft_tok_utf8_valid(out, ol)) abort();
            free(out);
        }
        weft_detok *d = weft_detok_new(t, data[0] & 16);
        for (size_t i = 0; i < k; i++)
            if (weft_detok_push(d, ids[i], &out, &ol, &err) == WEFT_OK) {
                if (!weft_tok_utf8_valid(out, ol)) abort();
                free(out);
            }
        if (weft_detok_flush(d, &out, &ol, &err) == WEFT_OK) free(out);
        weft_detok_free(d);
        free(ids);
    }
    }
    return 0;
}
