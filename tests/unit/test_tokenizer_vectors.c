/* llama.cpp's tokenizer test vectors (shared/models/llamacpp-tokenizer-vectors): 46 strings and
 * the ids that each family's Hugging Face tokenizer gives them, without BOS. Covered here:
 * qwen2 through the real Qwen3 tokenizer.json (same vocabulary, merges and regex), and phi-3 /
 * llama-spm (identical expected ids) through the vocab-only phi-3 GGUF, whose first 32000
 * pieces are the Llama 2 sentencepiece vocabulary. llama-bpe (Llama 3) has no vocabulary in
 * shared/ and is not covered. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_read.h"
#include "text/tokenizer.h"
#include "util/error.h"

#define SEP "\n__ggml_vocab_test__\n"

static const char *shared_dir(void) {
    const char *d = getenv("WEFT_SHARED_DIR");
    return d && *d ? d : WEFT_SHARED_DIR;
}

/* Encodes every .inp string and compares with the .out line; returns the number checked. */
static int check_vectors(const weft_tokenizer *tok, const char *family) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/llamacpp-tokenizer-vectors/ggml-vocab-%s.gguf.inp",
             shared_dir(), family);
    size_t inp_len;
    char *inp = test_read_file(path, &inp_len);
    assert_non_null(inp);
    snprintf(path, sizeof(path), "%s/models/llamacpp-tokenizer-vectors/ggml-vocab-%s.gguf.out",
             shared_dir(), family);
    char *out = test_read_file(path, NULL);
    assert_non_null(out);
    int checked = 0;
    char *p = inp, *line = out;
    for (;;) {
        char *sep = strstr(p, SEP);
        if (!sep) break;
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        int32_t want[256];
        size_t nwant = 0;
        for (char *q = line; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            assert_true(nwant < 256);
            want[nwant++] = (int32_t)v;
            q = end;
        }
        weft_error err;
        weft_error_clear(&err);
        int32_t *ids;
        size_t n;
        assert_int_equal(weft_tokenizer_encode(tok, p, (size_t)(sep - p), 0, 0, &ids, &n, &err),
                         WEFT_OK);
        int same = n == nwant && (n == 0 || !memcmp(ids, want, n * sizeof(*ids)));
        if (!same) {
            fprintf(stderr, "%s case %d \"%.*s\": expected", family, checked, (int)(sep - p), p);
            for (size_t k = 0; k < nwant; k++)
                fprintf(stderr, " %d", want[k]);
            fprintf(stderr, "\n got");
            for (size_t k = 0; k < n; k++)
                fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n");
        }
        assert_true(same);
        /* Every case decodes back to its input (no unknown characters in these strings),
         * except that sentencepiece drops the prefix space it added. */
        char *text;
        size_t tl;
        assert_int_equal(weft_tokenizer_decode(tok, ids, n, 0, &text, &tl, &err), WEFT_OK);
        assert_int_equal(tl, (size_t)(sep - p));
        assert_memory_equal(text, p, tl);
        free(text);
        free(ids);
        checked++;
        p = sep + strlen(SEP);
        line = nl + 1;
    }
    free(inp);
    free(out);
    return checked;
}

static void test_qwen2_vectors(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/qwen3-tokenizer/tokenizer.json", shared_dir());
    weft_tokenizer *tok;
    weft_error err;
    weft_error_clear(&err);
    weft_status st = weft_tokenizer_load(path, &tok, &err);
    if (st) fprintf(stderr, "%s: %s\n", err.source, err.message);
    assert_int_equal(st, WEFT_OK);
    assert_int_equal(check_vectors(tok, "qwen2"), 46);
    weft_tokenizer_free(tok);
}

static void test_spm_vectors(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/llamacpp-tokenizer-vectors/ggml-vocab-phi-3.gguf",
             shared_dir());
    weft_tokenizer *tok;
    weft_error err;
    weft_error_clear(&err);
    weft_status st = weft_tokenizer_load(path, &tok, &err);
    if (st) fprintf(stderr, "%s: %s\n", err.source, err.message);
    assert_int_equal(st, WEFT_OK);
    assert_int_equal(weft_tokenizer_vocab_size(tok), 32064);
    assert_int_equal(weft_tokenizer_bos(tok), 1);
    assert_int_equal(check_vectors(tok, "phi-3"), 46);
    assert_int_equal(check_vectors(tok, "llama-spm"), 46);
    weft_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2_vectors),
        cmocka_unit_test(test_spm_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
