/* Golden parity: the CPU baseline engine against Hugging Face transformers fp32 references that
 * no one here wrote (WEFT_SHARED_DIR/reference, see its README). For each model the engine is
 * opened from the baseline candidate manifest with the model directory replaced, and
 *   - the logits of one forward pass over input_ids must match the reference at every position
 *     within 1e-4 relative (max abs diff over all positions / the reference's max magnitude);
 *   - greedy decoding from the reference's prompt must reproduce its continuation exactly,
 *     through the real step loop (serial scheduler, contiguous kv, host sampler).
 * stories260K is first converted from the llama2.c checkpoint with weft_llama2c_convert into a
 * temporary directory; the three tiny models are read where they are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "files/llama2c.h"
#include "files/safetensors.h"
#include "util/error.h"

#include "stories_fixture.h"

#define REL_TOL 1e-4

static const char *shared_dir(void) { return fixture_shared_dir(); }

static const char *baseline_manifest(void) {
    return WEFT_SOURCE_DIR "/manifests/baseline-cpu.yaml";
}

typedef struct reference {
    weft_safetensors *st;
    const int32_t *input_ids;
    size_t n_input;
    const float *logits;
    size_t vocab;
    const int32_t *greedy;
    size_t n_greedy;
} reference;

static void reference_open(const char *name, reference *r) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/reference/%s/reference.safetensors", shared_dir(), name);
    weft_error err;
    weft_error_clear(&err);
    memset(r, 0, sizeof(*r));
    if (weft_safetensors_open_file(path, &r->st, &err) != WEFT_OK)
        fail_msg("%s: %s", path, err.message);
    const weft_st_tensor *ids = weft_safetensors_find(r->st, "input_ids");
    const weft_st_tensor *lg = weft_safetensors_find(r->st, "logits");
    const weft_st_tensor *gr = weft_safetensors_find(r->st, "greedy_ids");
    assert_non_null(ids);
    assert_non_null(lg);
    assert_non_null(gr);
    assert_int_equal(ids->dtype, WEFT_DTYPE_I32);
    assert_int_equal(lg->dtype, WEFT_DTYPE_F32);
    assert_int_equal(gr->dtype, WEFT_DTYPE_I32);
    assert_int_equal(lg->rank, 2);
    assert_int_equal(lg->shape[0], ids->shape[0]);
    r->input_ids = (const int32_t *)ids->data;
    r->n_input = (size_t)ids->shape[0];
    r->logits = (const float *)lg->data;
    r->vocab = (size_t)lg->shape[1];
    r->greedy = (const int32_t *)gr->data;
    r->n_greedy = (size_t)gr->shape[0];
}

static weft_engine *open_engine(const char *model_dir) {
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = baseline_manifest();
    o.model_dir = model_dir;
    o.threads = 1;
    weft_error err;
    weft_error_clear(&err);
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK)
        fail_msg("open %s: %s: %s", model_dir, err.source, err.message);
    return e;
}

static void check_logits(weft_engine *e, const reference *r, const char *name) {
    assert_int_equal(weft_engine_config(e)->vocab_size, r->vocab);
    float *logits = malloc(sizeof(float) * r->n_input * r->vocab);
    assert_non_null(logits);
    weft_error err;
    weft_error_clear(&err);
    if (weft_engine_score(e, r->input_ids, r->n_input, logits, &err) != WEFT_OK)
        fail_msg("%s: score: %s", name, err.message);
    double max_diff = 0, max_ref = 0;
    size_t worst = 0;
    for (size_t i = 0; i < r->n_input * r->vocab; i++) {
        double d = fabs((double)logits[i] - (double)r->logits[i]);
        if (!(d <= max_diff)) { /* NaN lands here too */
            max_diff = isnan(d) ? INFINITY : d;
            worst = i;
        }
        if (fabs((double)r->logits[i]) > max_ref) max_ref = fabs((double)r->logits[i]);
    }
    double rel = max_diff / max_ref;
    printf("%s: logits over %zu positions: max |diff| %.3g, max |ref| %.3g, relative %.3g "
           "(worst at position %zu, id %zu)\n",
           name, r->n_input, max_diff, max_ref, rel, worst / r->vocab, worst % r->vocab);
    free(logits);
    if (!(rel <= REL_TOL)) fail_msg("%s: relative logit error %.3g > %.0e", name, rel, REL_TOL);
}

typedef struct collected {
    int32_t *ids;
    size_t n, cap;
    uint32_t finish;
} collected;

static void collect(void *user, const weft_token_event *ev) {
    collected *c = user;
    if (ev->token >= 0 && c->n < c->cap) c->ids[c->n++] = ev->token;
    if (ev->finish) c->finish = ev->finish;
}

static void check_greedy(weft_engine *e, const reference *r, size_t n_prompt, const char *name) {
    size_t n_gen = r->n_greedy - n_prompt;
    collected c = {.ids = calloc(n_gen, sizeof(int32_t)), .cap = n_gen};
    assert_non_null(c.ids);
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = (uint32_t)n_gen;
    rp.ignore_eos = 1;
    rp.callback = collect;
    rp.user = &c;
    weft_error err;
    weft_error_clear(&err);
    uint64_t id = 0;
    if (weft_request_submit(e, r->greedy, n_prompt, &rp, &id, &err) != WEFT_OK)
        fail_msg("%s: submit: %s", name, err.message);
    while (weft_engine_active(e)) {
        weft_status s = weft_engine_step(e, &err);
        if (s < 0) fail_msg("%s: step: %s", name, err.message);
    }
    assert_int_equal(c.finish, WEFT_FINISH_LENGTH);
    assert_int_equal(c.n, n_gen);
    for (size_t i = 0; i < n_gen; i++)
        if (c.ids[i] != r->greedy[n_prompt + i])
            fail_msg("%s: greedy token %zu (position %zu) is %d, the reference has %d", name, i,
                     n_prompt + i, c.ids[i], r->greedy[n_prompt + i]);
    printf("%s: %zu greedy tokens after a %zu-token prompt match\n", name, n_gen, n_prompt);
    free(c.ids);
}

static void run_model(const char *model_dir, const char *name, size_t n_prompt) {
    reference r;
    reference_open(name, &r);
    weft_engine *e = open_engine(model_dir);
    check_logits(e, &r, name);
    check_greedy(e, &r, n_prompt, name);
    /* Once more on the same engine: the kv slot and the graphs are reused, not rebuilt. */
    check_greedy(e, &r, n_prompt, name);
    weft_engine_close(e);
    weft_safetensors_close(r.st);
}

static void test_tiny(void **state, const char *name) {
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/reference/%s", shared_dir(), name);
    run_model(dir, name, 16);
}

static void test_tiny_qwen3(void **state) {
    test_tiny(state, "tiny-qwen3");
}
static void test_tiny_llama3(void **state) {
    test_tiny(state, "tiny-llama3");
}
static void test_tiny_qwen2(void **state) {
    test_tiny(state, "tiny-qwen2");
}

static void rm_dir(const char *dir) {
    stories_remove(dir, NULL);
}

/* bf16 weights: tiny-qwen2's checkpoint rounded to bf16 (norms and biases too) runs through the
 * same graph with bf16 weight tensors; its logits stay near the fp32 reference (the rounding of
 * the weights is the only difference, about 2^-9 relative per weight). */
static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ok = a && b;
    char buf[4096];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof(buf), a)) > 0)
        ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b)) ok = 0;
    return ok ? 0 : -1;
}

static void test_bf16_weights(void **state) {
    (void)state;
    char src[1024], dir[64], path[1200];
    snprintf(src, sizeof(src), "%s/reference/tiny-qwen2", shared_dir());
    snprintf(dir, sizeof(dir), "/tmp/weft-bf16-XXXXXX");
    assert_non_null(mkdtemp(dir));
    weft_error err;
    weft_error_clear(&err);
    snprintf(path, sizeof(path), "%s/model.safetensors", src);
    weft_safetensors *st = NULL;
    if (weft_safetensors_open_file(path, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    weft_st_writer *w = weft_st_writer_new();
    assert_non_null(w);
    for (size_t i = 0; i < weft_safetensors_count(st); i++) {
        const weft_st_tensor *t = weft_safetensors_at(st, i);
        assert_int_equal(t->dtype, WEFT_DTYPE_F32);
        size_t n = t->bytes / 4;
        uint16_t *h = malloc(n * 2);
        assert_non_null(h);
        for (size_t k = 0; k < n; k++) {
            float f;
            memcpy(&f, t->data + 4 * k, 4);
            h[k] = weft_f32_to_bf16(f);
        }
        assert_int_equal(
            weft_st_writer_add(w, t->name, WEFT_DTYPE_BF16, t->rank, t->shape, h, n * 2, &err),
            WEFT_OK);
        free(h);
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    assert_int_equal(weft_st_writer_write(w, path, NULL, &err), WEFT_OK);
    weft_st_writer_free(w);
    weft_safetensors_close(st);
    char from[1200];
    snprintf(from, sizeof(from), "%s/config.json", src);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    assert_int_equal(copy_file(from, path), 0);

    reference r;
    reference_open("tiny-qwen2", &r);
    weft_engine *e = open_engine(dir);
    char buf[65536] = {0};
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    assert_int_equal(weft_engine_print_graph(e, 1, f, NULL, &err), WEFT_OK);
    fclose(f);
    assert_non_null(strstr(buf, "layers.0.attn.q:bf16[256,256]"));
    assert_non_null(strstr(buf, "layers.0.attn.q_bias:bf16[256]"));
    float *logits = malloc(sizeof(float) * r.n_input * r.vocab);
    assert_int_equal(weft_engine_score(e, r.input_ids, r.n_input, logits, &err), WEFT_OK);
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < r.n_input * r.vocab; i++) {
        double d = fabs((double)logits[i] - (double)r.logits[i]);
        if (!(d <= max_diff)) max_diff = d;
        if (fabs((double)r.logits[i]) > max_ref) max_ref = fabs((double)r.logits[i]);
    }
    printf("tiny-qwen2 bf16 weights: relative logit error %.3g\n", max_diff / max_ref);
    assert_true(max_diff / max_ref < 3e-2);
    assert_true(max_diff / max_ref > 1e-5); /* the weights really were rounded */
    free(logits);
    weft_engine_close(e);
    weft_safetensors_close(r.st);
    unlink(path);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

/* The converted stories260K lives in a temporary directory for the test's duration; teardown
 * removes it even when an assertion failed. */
static char stories_dir[64];

static int stories_setup(void **state) {
    (void)state;
    return stories_convert(stories_dir, "weft-golden");
}

static int stories_teardown(void **state) {
    (void)state;
    rm_dir(stories_dir);
    return 0;
}

static void test_stories260k(void **state) {
    (void)state;
    run_model(stories_dir, "stories260K", 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stories260k, stories_setup, stories_teardown),
        cmocka_unit_test(test_tiny_qwen3),
        cmocka_unit_test(test_tiny_llama3),
        cmocka_unit_test(test_tiny_qwen2),
        cmocka_unit_test(test_bf16_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
