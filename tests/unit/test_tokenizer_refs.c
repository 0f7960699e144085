/* Compares weft's tokenizer with Hugging Face `tokenizers` on thousands of generated strings
 * (tests/data/tokenizer/refs_*.jsonl, made once by tools/scripts/tokenizer_refs.py): the real
 * Qwen3 tokenizer.json from shared/, the stories260K tokenizer converted to a Llama-2-style
 * tokenizer.json, and small variants covering the other stages (Metaspace, NFKC, Lowercase,
 * Digits, added-token flags, GPT-2 ByteLevel regex, RobertaProcessing, Llama 3's Split regex with
 * ignore_merges, a Sequence post-processor). For every string: the
 * ids with special tokens parsed and added, the ids with special tokens left as text, the
 * decoded text with and without special tokens, and the streaming detokenizer's output, which
 * must equal the decoded text and arrive in pieces that are each valid UTF-8. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "text/tok_unicode.h"
#include "text/tokenizer.h"
#include "util/error.h"

static const char *shared_dir(void) {
    const char *d = getenv("WEFT_SHARED_DIR");
    return d && *d ? d : WEFT_SHARED_DIR;
}

static int ids_equal(const int32_t *ids, size_t n, const json_t *want) {
    if (!json_is_array(want) || json_array_size(want) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != ids[i]) return 0;
    return 1;
}

static void print_ids(const char *what, const int32_t *ids, size_t n, const json_t *want) {
    fprintf(stderr, "  %s want:", what);
    for (size_t i = 0; i < json_array_size(want); i++)
        fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, i)));
    fprintf(stderr, "\n  %s got: ", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Streams ids through the detokenizer; returns the concatenated text (malloc'ed). */
static char *stream(const weft_tokenizer *tok, const int32_t *ids, size_t n, int skip, size_t *len,
                    int *pieces_valid) {
    weft_detok *d = weft_detok_new(tok, skip);
    assert_non_null(d);
    size_t cap = 64, used = 0;
    char *all = malloc(cap);
    *pieces_valid = 1;
    weft_error err;
    weft_error_clear(&err);
    for (size_t i = 0; i <= n; i++) {
        char *out;
        size_t ol;
        if (i < n)
            assert_int_equal(weft_detok_push(d, ids[i], &out, &ol, &err), WEFT_OK);
        else
            assert_int_equal(weft_detok_flush(d, &out, &ol, &err), WEFT_OK);
        /* Each piece is valid UTF-8; had a piece carried a character cut in two as U+FFFD,
         * the concatenation would differ from decode(). */
        if (!weft_tok_utf8_valid(out, ol)) *pieces_valid = 0;
        while (used + ol + 1 > cap)
            all = realloc(all, cap *= 2);
        memcpy(all + used, out, ol);
        used += ol;
        free(out);
    }
    all[used] = '\0';
    *len = used;
    weft_detok_free(d);
    return all;
}

/* tok_path, when given, replaces the tokenizer the file names; lines whose text contains skip
 * are left out. */
static void run_refs_with(const char *file, const char *tok_path, const char *skip_text) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/data/tokenizer/%s", WEFT_SOURCE_DIR, file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got = getline(&line, &cap, f);
    assert_true(got > 0);
    json_error_t je;
    json_t *head = json_loads(line, 0, &je);
    assert_non_null(head);
    const char *where = json_string_value(json_object_get(head, "tokenizer"));
    assert_non_null(where);
    char tpath[1024];
    if (tok_path)
        snprintf(tpath, sizeof(tpath), "%s", tok_path);
    else if (!strncmp(where, "shared:", 7))
        snprintf(tpath, sizeof(tpath), "%s/%s", shared_dir(), where + 7);
    else
        snprintf(tpath, sizeof(tpath), "%s/tests/data/tokenizer/%s", WEFT_SOURCE_DIR, where + 5);
    json_decref(head);
    weft_tokenizer *tok;
    weft_error err;
    weft_error_clear(&err);
    weft_status st = weft_tokenizer_load(tpath, &tok, &err);
    if (st) fprintf(stderr, "%s: %s\n", err.source, err.message);
    assert_int_equal(st, WEFT_OK);

    int lines = 0, bad = 0;
    while ((got = getline(&line, &cap, f)) > 0) {
        json_t *rec = json_loadb(line, (size_t)got, JSON_ALLOW_NUL, &je);
        assert_non_null(rec);
        json_t *t = json_object_get(rec, "t");
        const char *text = json_string_value(t);
        size_t tl = json_string_length(t);
        if (skip_text && strstr(text, skip_text)) {
            json_decref(rec);
            continue;
        }
        int ok = 1;
        int32_t *ids;
        size_t n;
        assert_int_equal(weft_tokenizer_encode(tok, text, tl, 1, 1, &ids, &n, &err), WEFT_OK);
        json_t *want = json_object_get(rec, "ids");
        if (!ids_equal(ids, n, want)) {
            fprintf(stderr, "%s line %d: ids differ for \"%s\"\n", file, lines + 2, text);
            print_ids("ids", ids, n, want);
            ok = 0;
        }
        json_t *raw = json_object_get(rec, "raw");
        int32_t *rids;
        size_t rn;
        assert_int_equal(weft_tokenizer_encode(tok, text, tl, 1, 0, &rids, &rn, &err), WEFT_OK);
        if (!ids_equal(rids, rn, raw ? raw : want)) {
            fprintf(stderr, "%s line %d: ids without special parsing differ for \"%s\"\n", file,
                    lines + 2, text);
            print_ids("raw", rids, rn, raw ? raw : want);
            ok = 0;
        }
        free(rids);
        json_t *d = json_object_get(rec, "d");
        json_t *ds = json_object_get(rec, "ds");
        const char *dw = d ? json_string_value(d) : text;
        size_t dwl = d ? json_string_length(d) : tl;
        const char *dsw = ds ? json_string_value(ds) : dw;
        size_t dswl = ds ? json_string_length(ds) : dwl;
        for (int skip = 0; skip < 2; skip++) {
            const char *w = skip ? dsw : dw;
            size_t wl = skip ? dswl : dwl;
            char *dec;
            size_t dl;
            assert_int_equal(weft_tokenizer_decode(tok, ids, n, skip, &dec, &dl, &err), WEFT_OK);
            if (dl != wl || memcmp(dec, w, wl)) {
                fprintf(
                    stderr,
                    "%s line %d: decode(skip_special=%d) differs:\n  want \"%s\"\n  got  \"%s\"\n",
                    file, lines + 2, skip, w, dec);
                ok = 0;
            }
            size_t sl;
            int valid;
            char *streamed = stream(tok, ids, n, skip, &sl, &valid);
            if (sl != dl || memcmp(streamed, dec, dl) || !valid) {
                fprintf(stderr,
                        "%s line %d: streaming (skip_special=%d) differs or split a character:\n  "
                        "want \"%s\"\n  got  \"%s\"\n",
                        file, lines + 2, skip, dec, streamed);
                ok = 0;
            }
            free(streamed);
            free(dec);
        }
        free(ids);
        json_decref(rec);
        lines++;
        if (!ok && ++bad > 20) break;
    }
    free(line);
    fclose(f);
    weft_tokenizer_free(tok);
    fprintf(stderr, "%s: %d strings, %d mismatching\n", file, lines, bad);
    assert_int_equal(bad, 0);
    assert_true(lines >= 700);
}

static void run_refs(const char *file) {
    run_refs_with(file, NULL, NULL);
}

static void test_qwen3(void **state) {
    (void)state;
    run_refs("refs_qwen3.jsonl");
}

static void test_stories260k(void **state) {
    (void)state;
    run_refs("refs_stories260K.jsonl");
}

static void test_spm_legacy(void **state) {
    (void)state;
    run_refs("refs_spm_legacy.jsonl");
}

static void test_bytelevel_small(void **state) {
    (void)state;
    run_refs("refs_bytelevel_small.jsonl");
}

static void test_bytelevel_llama3(void **state) {
    (void)state;
    run_refs("refs_bytelevel_llama3.jsonl");
}

/* The same vocabulary as a llama.cpp vocab GGUF (tokenizer.ggml.model "gpt2", pre "llama-bpe"):
 * the GGUF loader must build the same pipeline. GGUF has no added-token flags, so strings with
 * the rstrip token <|user|> are left out. */
static void test_bytelevel_llama3_gguf(void **state) {
    (void)state;
    run_refs_with("refs_bytelevel_llama3.jsonl",
                  WEFT_SOURCE_DIR "/tests/data/tokenizer/bytelevel_llama3.gguf", "<|user|>");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_spm_legacy),
        cmocka_unit_test(test_bytelevel_small),
        cmocka_unit_test(test_bytelevel_llama3),
        cmocka_unit_test(test_bytelevel_llama3_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
