/* libFuzzer target for llama2.c files (files/llama2c.c), the quick start's input. The first
 * input byte picks what the rest is:
 *   0: a checkpoint, written to a file and opened: it must be refused with a message, or give
 *      tensors that lie inside the mapping (the first and last float of each are read, so an
 *      offset past the file faults);
 *   1: a tok*.bin: two bytes give the token count n (1..2048), the rest is the file; a load
 *      must be refused with a message or give n pieces of their stated lengths;
 *   2: a whole conversion: seven bytes choose a small consistent header, the checkpoint is
 *      written with weights taken from the input, and the rest is the tok*.bin; when
 *      `weft convert`'s function accepts the pair, the config.json, tokenizer.json and
 *      model.safetensors it wrote must load with weft's own readers, and the tokenizer must
 *      encode and decode the input's text.
 * Files go to a private directory under $TMPDIR (or /tmp), removed at exit. With
 * WEFT_FUZZ_VERBOSE set, each refusal's message is printed (to see what a seed reaches). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/config.h"
#include "files/llama2c.h"
#include "files/safetensors.h"
#include "fuzz_common.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[512], ckpt[600], vocab[600], out[600];

static void remove_tree(void) {
    fuzz_empty_dir(out);
    rmdir(out);
    unlink(ckpt);
    unlink(vocab);
    rmdir(dir);
}

static void setup(void) {
    if (!fuzz_private_dir(dir, sizeof(dir), "llama2c")) return;
    snprintf(ckpt, sizeof(ckpt), "%s/model.bin", dir);
    snprintf(vocab, sizeof(vocab), "%s/tok.bin", dir);
    snprintf(out, sizeof(out), "%s/hf", dir);
    atexit(remove_tree);
}

/* A reader refusing what the conversion wrote is a converter bug: say which, then stop. */
static void must(weft_status st, const weft_error *err, const char *what) {
    if (st == WEFT_OK) return;
    fprintf(stderr, "the converted %s does not load: %s\n", what, err->message);
    __builtin_trap();
}

static void check_model(const weft_llama2c_model *m) {
    const uint8_t *lo = m->map, *hi = lo + m->map_len;
    uint64_t D = (uint64_t)m->dim, H = (uint64_t)m->hidden_dim, L = (uint64_t)m->n_layers;
    uint64_t KV = (uint64_t)m->n_kv_heads * (uint64_t)m->head_size, V = (uint64_t)m->vocab_size;
    if (m->head_size * m->n_heads != m->dim || m->n_heads % m->n_kv_heads) __builtin_trap();
    const float *t[] = {m->token_embedding, m->rms_att, m->wq, m->wk, m->wv,        m->wo,
                        m->rms_ffn,         m->w1,      m->w2, m->w3, m->rms_final, m->wcls};
    uint64_t n[] = {V * D, L * D,     L * D * D, L * KV * D, L * KV * D, L * D * D,
                    L * D, L * H * D, L * D * H, L * H * D,  D,          V * D};
    volatile float sink = 0;
    for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
        const uint8_t *s = (const uint8_t *)t[i], *e = s + 4 * n[i];
        if (!t[i] || s < lo + 28 || e > hi || e < s) __builtin_trap();
        sink += t[i][0] + t[i][n[i] - 1];
    }
    (void)sink;
}

static void one_checkpoint(const uint8_t *d, size_t n) {
    fuzz_write_file(ckpt, d, n);
    weft_llama2c_model m;
    weft_error err = fuzz_error();
    if (weft_llama2c_open(ckpt, &m, &err) != WEFT_OK) {
        fuzz_refused(&err);
        return;
    }
    check_model(&m);
    weft_llama2c_close(&m);
}

static void one_vocab(const uint8_t *d, size_t n) {
    if (n < 2) return;
    uint32_t count = 1 + ((uint32_t)d[0] | (uint32_t)d[1] << 8) % 2048;
    fuzz_write_file(vocab, d + 2, n - 2);
    weft_llama2c_vocab v;
    weft_error err = fuzz_error();
    if (weft_llama2c_vocab_load(vocab, count, &v, &err) != WEFT_OK) {
        if (v.pieces) __builtin_trap();
        fuzz_refused(&err);
        return;
    }
    if (v.n != count || !v.max_token_length) __builtin_trap();
    for (uint32_t i = 0; i < v.n; i++)
        if (!v.lens[i] || v.lens[i] > v.max_token_length || strlen(v.pieces[i]) != v.lens[i])
            __builtin_trap();
    weft_llama2c_vocab_free(&v);
}

/* Counts the tokens a tok*.bin holds (stopping where a record does not fit), so that mode 2
 * writes a header whose vocab_size matches more often than chance would. */
static uint32_t count_tokens(const uint8_t *d, size_t n) {
    if (n < 4) return 1;
    size_t at = 4;
    uint32_t k = 0;
    while (at + 8 <= n && k < 512) {
        int32_t len;
        memcpy(&len, d + at + 4, 4);
        if (len <= 0 || (size_t)len > n - at - 8) break;
        at += 8 + (size_t)len;
        k++;
    }
    return k ? k : 1;
}

static void one_conversion(const uint8_t *d, size_t n) {
    if (n < 7) return;
    int32_t heads = 1 + d[0] % 2, head = 2 * (1 + d[1] % 2), kv = d[2] % 2 ? 1 : heads;
    int32_t dim = heads * head, hidden = 1 + d[3] % 6, layers = 1 + d[4] % 2;
    int32_t seq = 1 + d[5] % 16, shared = d[6] % 2;
    const uint8_t *rest = d + 7;
    size_t nrest = n - 7;
    int32_t V = (int32_t)count_tokens(rest, nrest);
    uint64_t D = (uint64_t)dim, H = (uint64_t)hidden, L = (uint64_t)layers;
    uint64_t KVD = (uint64_t)kv * (uint64_t)head;
    uint64_t floats = (uint64_t)V * D + 2 * L * D + 2 * L * D * D + 2 * L * KVD * D +
                      3 * L * H * D + D + (uint64_t)seq * (uint64_t)head +
                      (shared ? 0 : (uint64_t)V * D);
    /* the 7-int32 header, then weights from the input's bytes, finite and small (the converter
     * copies them as given) */
    int32_t hdr[7] = {dim, hidden, layers, heads, kv, shared ? V : -V, seq};
    uint8_t *file = malloc(sizeof(hdr) + floats * sizeof(float));
    if (!file) return;
    memcpy(file, hdr, sizeof(hdr));
    for (uint64_t i = 0; i < floats; i++) {
        float w = ((float)(nrest ? rest[i % nrest] : 1) - 128.0f) / 64.0f;
        memcpy(file + sizeof(hdr) + i * sizeof(float), &w, sizeof(w));
    }
    fuzz_write_file(ckpt, file, sizeof(hdr) + floats * sizeof(float));
    free(file);
    fuzz_write_file(vocab, rest, nrest);
    weft_error err = fuzz_error();
    if (weft_llama2c_convert(ckpt, vocab, out, &err) != WEFT_OK) {
        fuzz_refused(&err);
        return;
    }
    if (getenv("WEFT_FUZZ_VERBOSE")) fprintf(stderr, "converted: %d tokens\n", V);
    /* what the conversion wrote must load with weft's own readers */
    weft_model_config cfg;
    char *raw = NULL;
    err = fuzz_error();
    must(weft_config_load(out, &cfg, &raw, &err), &err, "config.json");
    free(raw);
    if (cfg.hidden_size != (uint32_t)dim || cfg.n_layers != (uint32_t)layers ||
        cfg.vocab_size != (uint32_t)V)
        __builtin_trap();
    weft_safetensors *st = NULL;
    err = fuzz_error();
    must(weft_safetensors_open_dir(out, &st, &err), &err, "model.safetensors");
    weft_safetensors_close(st);
    char tpath[700];
    snprintf(tpath, sizeof(tpath), "%s/tokenizer.json", out);
    weft_tokenizer *tok = NULL;
    err = fuzz_error();
    must(weft_tokenizer_load(tpath, &tok, &err), &err, "tokenizer.json");
    int32_t *ids = NULL;
    size_t nids = 0;
    err = fuzz_error();
    if (weft_tokenizer_encode(tok, (const char *)rest, nrest < 256 ? nrest : 256, 0, 1, &ids, &nids,
                              &err) == WEFT_OK) {
        char *text = NULL;
        size_t len = 0;
        for (size_t i = 0; i < nids; i++)
            if (ids[i] < 0 || ids[i] >= V) __builtin_trap();
        err = fuzz_error();
        if (weft_tokenizer_decode(tok, ids, nids, 0, &text, &len, &err) == WEFT_OK)
            free(text);
        else
            fuzz_refused(&err);
        free(ids);
    } else {
        fuzz_refused(&err);
    }
    weft_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    setup();
    switch (data[0] % 3) {
    case 0:
        one_checkpoint(data + 1, size - 1);
        break;
    case 1:
        one_vocab(data + 1, size - 1);
        break;
    default:
        one_conversion(data + 1, size - 1);
        break;
    }
    return 0;
}
