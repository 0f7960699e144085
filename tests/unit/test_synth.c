/* weft synth: for the three transformers-written tiny models, synthesised tensor names, shapes
 * and dtypes equal those of the reference checkpoints; parameter counts of the published configs
 * equal the published totals; values are reproducible, N(0, 0.02) with norms at 1; --layers
 * and --dtype rewrite config.json; sharding writes an index that the reader accepts. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "files/config.h"
#include "files/safetensors.h"
#include "files/synth.h"
#include "util/error.h"

static char tmpdir[256];

static const char *shared_dir(void) {
    const char *s = getenv("WEFT_SHARED_DIR");
    return s && s[0] ? s : WEFT_SHARED_DIR;
}

static int setup(void **state) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-synth-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void synth(const char *config, const char *sub, const weft_synth_options *o) {
    char out[512];
    snprintf(out, sizeof(out), "%s/%s", tmpdir, sub);
    weft_error err;
    weft_error_clear(&err);
    if (weft_synth_write(config, out, o, &err) != WEFT_OK) fail_msg("%s", err.message);
}

static weft_safetensors *open_sub(const char *sub) {
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", tmpdir, sub);
    weft_safetensors *st;
    weft_error err;
    if (weft_safetensors_open_dir(dir, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    return st;
}

static void test_matches_reference_layout(void **state) {
    static const char *models[] = {"tiny-qwen3", "tiny-llama3", "tiny-qwen2"};
    for (size_t m = 0; m < 3; m++) {
        char cfg[1024], dir[1024];
        snprintf(dir, sizeof(dir), "%s/reference/%s", shared_dir(), models[m]);
        snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
        weft_synth_options o = {.seed = 7, .dtype = WEFT_DTYPE_F32};
        synth(cfg, models[m], &o);
        weft_safetensors *ref, *got = open_sub(models[m]);
        weft_error err;
        assert_int_equal(weft_safetensors_open_dir(dir, &ref, &err), WEFT_OK);
        assert_int_equal(weft_safetensors_count(got), weft_safetensors_count(ref));
        for (size_t i = 0; i < weft_safetensors_count(ref); i++) {
            const weft_st_tensor *r = weft_safetensors_at(ref, i), *g = weft_safetensors_at(got, i);
            if (strcmp(r->name, g->name)) fail_msg("%s: %s vs %s", models[m], r->name, g->name);
            assert_int_equal(g->dtype, r->dtype);
            assert_int_equal(g->rank, r->rank);
            assert_memory_equal(g->shape, r->shape, sizeof(r->shape));
        }
        weft_safetensors_close(ref);
        weft_safetensors_close(got);
    }
}

static void test_values(void **state) {
    weft_safetensors *st = open_sub("tiny-qwen3"); /* made by the test above, seed 7 */
    const weft_st_tensor *e = weft_safetensors_find(st, "model.embed_tokens.weight");
    assert_non_null(e);
    const float *v = (const float *)e->data;
    size_t n = e->bytes / 4;
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        sq += (double)v[i] * v[i];
    }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
    assert_true(fabs(mean) < 0.0005); /* 262144 samples: 4 sigma ~ 0.00016 */
    assert_true(fabs(sd - 0.02) < 0.0005);
    for (size_t i = 0; i < 100; i++)
        assert_true(v[i * 997] == weft_synth_value(7, "model.embed_tokens.weight", i * 997));
    assert_true(weft_synth_value(7, "x", 5) != weft_synth_value(8, "x", 5));
    assert_true(weft_synth_value(7, "x", 5) != weft_synth_value(7, "y", 5));
    const weft_st_tensor *qn = weft_safetensors_find(st, "model.layers.1.self_attn.q_norm.weight");
    for (size_t i = 0; i < 128; i++)
        assert_true(((const float *)qn->data)[i] == 1.0f);
    weft_safetensors_close(st);
}

static void test_reproducible_bf16_layers(void **state) {
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "%s/reference/tiny-llama3/config.json", shared_dir());
    weft_synth_options o = {.seed = 3, .dtype = WEFT_DTYPE_BF16, .layers = 1, .threads = 2};
    synth(cfg, "a", &o);
    o.threads = 1;
    synth(cfg, "b", &o);
    weft_safetensors *a = open_sub("a"), *b = open_sub("b");
    assert_int_equal(weft_safetensors_count(a), 2 + 9); /* tied, one layer */
    assert_null(weft_safetensors_find(a, "model.layers.1.mlp.up_proj.weight"));
    for (size_t i = 0; i < weft_safetensors_count(a); i++) {
        const weft_st_tensor *x = weft_safetensors_at(a, i), *y = weft_safetensors_at(b, i);
        assert_int_equal(x->dtype, WEFT_DTYPE_BF16);
        assert_int_equal(x->bytes, y->bytes);
        assert_memory_equal(x->data, y->data, x->bytes);
    }
    const weft_st_tensor *up = weft_safetensors_find(a, "model.layers.0.mlp.up_proj.weight");
    uint16_t h;
    memcpy(&h, up->data + 2 * 12345, 2);
    assert_int_equal(h, weft_f32_to_bf16(weft_synth_value(3, up->name, 12345)));
    weft_safetensors_close(a);
    weft_safetensors_close(b);
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/a", tmpdir);
    weft_model_config c;
    weft_error err;
    assert_int_equal(weft_config_load(dir, &c, NULL, &err), WEFT_OK);
    assert_int_equal(c.n_layers, 1);
    assert_int_equal(c.dtype, WEFT_DTYPE_BF16);
    assert_int_equal(c.rope_scaling, 1); /* the rest of the config is kept */
    weft_generation_config g;
    assert_int_equal(weft_generation_config_load(dir, &g, &err), WEFT_OK);
    assert_int_equal(g.bos_token_id, 1);
    assert_int_equal(g.eos_token_ids[0], 2);
}

static void test_sharded_output(void **state) {
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "%s/reference/tiny-qwen2/config.json", shared_dir());
    weft_synth_options o = {.seed = 1, .dtype = WEFT_DTYPE_F16, .shard_bytes = 1000000};
    synth(cfg, "sharded", &o);
    char path[512];
    snprintf(path, sizeof(path), "%s/sharded/model.safetensors.index.json", tmpdir);
    assert_int_equal(access(path, R_OK), 0);
    snprintf(path, sizeof(path), "%s/sharded/model.safetensors", tmpdir);
    assert_int_equal(access(path, F_OK), -1);
    weft_safetensors *st = open_sub("sharded");
    assert_true(weft_safetensors_file_count(st) >= 3);
    assert_non_null(strstr(weft_safetensors_file_path(st, 0), "model-00001-of-"));
    const weft_st_tensor *b = weft_safetensors_find(st, "model.layers.1.self_attn.k_proj.bias");
    assert_non_null(b);
    assert_int_equal(b->dtype, WEFT_DTYPE_F16);
    uint16_t h;
    memcpy(&h, b->data + 2 * 3, 2);
    assert_int_equal(h, weft_f32_to_f16(weft_synth_value(1, b->name, 3)));
    weft_safetensors_close(st);
    /* a single-file run into the same directory drops the old index */
    o.shard_bytes = 0;
    synth(cfg, "sharded", &o);
    st = open_sub("sharded");
    assert_int_equal(weft_safetensors_file_count(st), 1);
    weft_safetensors_close(st);
    o.layers = 3; /* the config has 2 */
    char out[512];
    snprintf(out, sizeof(out), "%s/more", tmpdir);
    weft_error err;
    assert_int_equal(weft_synth_write(cfg, out, &o, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "expected at most the config's num_hidden_layers (2)"));
}

static uint64_t params_of(const char *file, weft_model_config *c, size_t *n_tensors) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/configs/%s", WEFT_SOURCE_DIR, file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    weft_error err;
    if (weft_config_parse(buf, n, path, c, &err)) fail_msg("%s", err.message);
    weft_synth_tensor *t;
    assert_int_equal(weft_synth_tensors(c, buf, &t, n_tensors, &err), WEFT_OK);
    uint64_t total = 0;
    for (size_t i = 0; i < *n_tensors; i++)
        total += (uint64_t)t[i].shape[0] * (uint64_t)(t[i].rank == 2 ? t[i].shape[1] : 1);
    free(t);
    return total;
}

/* Published parameter totals (model cards and transformers' num_parameters()). */
static void test_published_sizes(void **state) {
    weft_model_config c;
    size_t n;
    assert_int_equal(params_of("Llama-3.2-1B.json", &c, &n), 1235814400ull);
    assert_int_equal(params_of("Llama-3.1-8B.json", &c, &n), 8030261248ull);
    assert_int_equal(n, 2 + 1 + 32 * 9);
    uint64_t q06 = params_of("Qwen3-0.6B.json", &c, &n);
    assert_int_equal(q06, 596049920ull); /* "0.6B", 0.44B of it outside the embedding */
    uint64_t q8 = params_of("Qwen3-8B.json", &c, &n);
    assert_int_equal(q8, 8190735360ull); /* "8.2B" */
    uint64_t moe = params_of("Qwen3-30B-A3B.json", &c, &n);
    assert_int_equal(moe, 30532122624ull); /* "30.5B in total" */
    assert_int_equal(n, 3 + 48 * (2 + 4 + 2 + 1 + 128 * 3));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference_layout), cmocka_unit_test(test_values),
        cmocka_unit_test(test_reproducible_bf16_layers), cmocka_unit_test(test_sharded_output),
        cmocka_unit_test(test_published_sizes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
