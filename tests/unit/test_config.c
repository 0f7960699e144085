/* config.json parsing: the four transformers-written reference configs and the published
 * configs in models/configs/ with every field asserted, the older rope_scaling spelling, the
 * per-architecture defaults, generation_config.json, and bad configs each named by field. */
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
#include "util/error.h"

static const char *shared_dir(void) {
    const char *s = getenv("WEFT_SHARED_DIR");
    return s && s[0] ? s : WEFT_SHARED_DIR;
}

static void load_ref(const char *name, weft_model_config *c) {
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/reference/%s", shared_dir(), name);
    weft_error err;
    weft_error_clear(&err);
    char *raw = NULL;
    if (weft_config_load(dir, c, &raw, &err) != WEFT_OK) fail_msg("%s: %s", dir, err.message);
    assert_non_null(raw);
    assert_non_null(strstr(raw, "\"model_type\""));
    free(raw);
}

static void load_repo(const char *file, weft_model_config *c) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/configs/%s", WEFT_SOURCE_DIR, file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    weft_error err;
    if (weft_config_parse(buf, n, path, c, &err) != WEFT_OK) fail_msg("%s", err.message);
}

static void test_stories260k(void **state) {
    weft_model_config c;
    load_ref("stories260K", &c);
    assert_int_equal(c.size, sizeof(c));
    assert_string_equal(c.model_type, "llama");
    assert_string_equal(c.architecture, ""); /* this config has no architectures list */
    assert_int_equal(c.vocab_size, 512);
    assert_int_equal(c.hidden_size, 64);
    assert_int_equal(c.intermediate_size, 172);
    assert_int_equal(c.n_layers, 5);
    assert_int_equal(c.n_heads, 8);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.max_position, 512);
    assert_float_equal(c.rms_eps, 1e-5f, 0);
    assert_float_equal(c.rope_theta, 10000.0f, 0);
    assert_int_equal(c.rope_scaling, 0);
    assert_int_equal(c.tie_embeddings, 1);
    assert_int_equal(c.attention_bias, 0);
    assert_int_equal(c.qk_norm, 0);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.n_experts, 0);
    assert_int_equal(c.dtype, WEFT_DTYPE_F32);
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 2);
}

static void test_tiny_llama3(void **state) {
    weft_model_config c;
    load_ref("tiny-llama3", &c);
    assert_string_equal(c.model_type, "llama");
    assert_int_equal(c.vocab_size, 1024);
    assert_int_equal(c.hidden_size, 256);
    assert_int_equal(c.intermediate_size, 512);
    assert_int_equal(c.n_layers, 2);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.max_position, 131072);
    assert_int_equal(c.rope_scaling, 1);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_float_equal(c.rope_factor, 32.0f, 0);
    assert_float_equal(c.rope_low_freq_factor, 1.0f, 0);
    assert_float_equal(c.rope_high_freq_factor, 4.0f, 0);
    assert_int_equal(c.rope_original_max_position, 8192);
    assert_int_equal(c.tie_embeddings, 1);
    assert_int_equal(c.attention_bias, 0);
    assert_int_equal(c.qk_norm, 0);
    assert_float_equal(c.rms_eps, 1e-5f, 0);
}

static void test_tiny_qwen2(void **state) {
    weft_model_config c;
    load_ref("tiny-qwen2", &c);
    assert_string_equal(c.model_type, "qwen2");
    assert_int_equal(c.head_dim, 64); /* no head_dim field: 256 / 4 */
    assert_int_equal(c.attention_bias, 1);
    assert_int_equal(c.qk_norm, 0);
    assert_int_equal(c.tie_embeddings, 1);
    assert_int_equal(c.sliding_window, 0); /* use_sliding_window false */
    assert_int_equal(c.max_position, 4096);
    assert_float_equal(c.rope_theta, 1000000.0f, 0);
    assert_float_equal(c.rms_eps, 1e-6f, 0);
    assert_int_equal(c.n_kv_heads, 2);
}

static void test_tiny_qwen3(void **state) {
    weft_model_config c;
    load_ref("tiny-qwen3", &c);
    assert_string_equal(c.model_type, "qwen3");
    assert_int_equal(c.head_dim, 128); /* heads x head_dim != hidden */
    assert_int_equal(c.hidden_size, 256);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.qk_norm, 1);
    assert_int_equal(c.attention_bias, 0);
    assert_int_equal(c.tie_embeddings, 0);
    assert_int_equal(c.vocab_size, 1024);
    assert_int_equal(c.rope_scaling, 0);
}

static void test_published_configs(void **state) {
    weft_model_config c;
    load_repo("Llama-3.2-1B.json", &c);
    assert_string_equal(c.architecture, "LlamaForCausalLM");
    assert_int_equal(c.hidden_size, 2048);
    assert_int_equal(c.n_layers, 16);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.intermediate_size, 8192);
    assert_int_equal(c.vocab_size, 128256);
    assert_int_equal(c.rope_scaling, 1);
    assert_float_equal(c.rope_factor, 32.0f, 0);
    assert_int_equal(c.rope_original_max_position, 8192);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_int_equal(c.tie_embeddings, 1);
    assert_int_equal(c.dtype, WEFT_DTYPE_BF16);
    assert_int_equal(c.bos_token_id, 128000);
    assert_int_equal(c.eos_token_ids[0], 128001);

    load_repo("Llama-3.1-8B.json", &c);
    assert_int_equal(c.hidden_size, 4096);
    assert_int_equal(c.n_layers, 32);
    assert_int_equal(c.intermediate_size, 14336);
    assert_int_equal(c.head_dim, 128);
    assert_float_equal(c.rope_factor, 8.0f, 0);
    assert_int_equal(c.tie_embeddings, 0);

    load_repo("Qwen3-0.6B.json", &c);
    assert_string_equal(c.architecture, "Qwen3ForCausalLM");
    assert_int_equal(c.hidden_size, 1024);
    assert_int_equal(c.n_layers, 28);
    assert_int_equal(c.n_heads, 16);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.intermediate_size, 3072);
    assert_int_equal(c.vocab_size, 151936);
    assert_int_equal(c.tie_embeddings, 1);
    assert_float_equal(c.rope_theta, 1000000.0f, 0); /* an integer in the file */
    assert_int_equal(c.qk_norm, 1);
    assert_int_equal(c.max_position, 40960);

    load_repo("Qwen3-8B.json", &c);
    assert_int_equal(c.hidden_size, 4096);
    assert_int_equal(c.n_layers, 36);
    assert_int_equal(c.intermediate_size, 12288);
    assert_int_equal(c.tie_embeddings, 0);

    load_repo("Qwen3-30B-A3B.json", &c);
    assert_string_equal(c.model_type, "qwen3_moe");
    assert_int_equal(c.n_experts, 128);
    assert_int_equal(c.n_experts_per_token, 8);
    assert_int_equal(c.moe_intermediate_size, 768);
    assert_int_equal(c.n_layers, 48);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.qk_norm, 1);
    assert_int_equal(c.eos_token_ids[0], 151645);
}

static weft_status parse(const char *json, weft_model_config *c, weft_error *err) {
    weft_error_clear(err);
    return weft_config_parse(json, strlen(json), "config.json", c, err);
}

#define REST "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4"
#define BASE "\"model_type\":\"llama\",\"vocab_size\":100,\"hidden_size\":64," REST

static void test_defaults_and_variants(void **state) {
    weft_model_config c;
    weft_error err;
    assert_int_equal(parse("{" BASE "}", &c, &err), WEFT_OK);
    assert_int_equal(c.n_kv_heads, 4); /* defaults to heads */
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.tie_embeddings, 0); /* transformers' Llama default */
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.n_eos, 0);
    assert_int_equal(c.max_position, 2048);
    assert_float_equal(c.rope_theta, 10000.0f, 0);
    /* older rope_scaling with "type" */
    assert_int_equal(parse("{" BASE ",\"rope_theta\":5e5,\"rope_scaling\":{\"type\":\"linear\","
                           "\"factor\":4}}",
                           &c, &err),
                     WEFT_OK);
    assert_int_equal(c.rope_scaling, 2);
    assert_float_equal(c.rope_factor, 4.0f, 0);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_int_equal(parse("{" BASE ",\"rope_scaling\":{\"rope_type\":\"default\"}}", &c, &err),
                     WEFT_OK);
    assert_int_equal(c.rope_scaling, 0);
    /* eos list, attention_bias on llama, torch_dtype */
    assert_int_equal(parse("{" BASE ",\"eos_token_id\":[7,8,9],\"attention_bias\":true,"
                           "\"torch_dtype\":\"float16\"}",
                           &c, &err),
                     WEFT_OK);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[2], 9);
    assert_int_equal(c.attention_bias, 1);
    assert_int_equal(c.dtype, WEFT_DTYPE_F16);
    /* sliding window only when used */
    assert_int_equal(parse("{\"model_type\":\"qwen2\",\"vocab_size\":100,\"hidden_size\":64,"
                           "\"intermediate_size\":128,\"num_hidden_layers\":2,"
                           "\"num_attention_heads\":4,\"sliding_window\":4096,"
                           "\"use_sliding_window\":true}",
                           &c, &err),
                     WEFT_OK);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(c.attention_bias, 1);
    assert_int_equal(parse("{\"model_type\":\"mistral\",\"vocab_size\":100,\"hidden_size\":64,"
                           "\"intermediate_size\":128,\"num_hidden_layers\":2,"
                           "\"num_attention_heads\":4,\"sliding_window\":4096}",
                           &c, &err),
                     WEFT_OK);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(parse("{" BASE ",\"sliding_window\":4096}", &c, &err), WEFT_OK);
    assert_int_equal(c.sliding_window, 0);
}

static void test_bad_configs(void **state) {
    static const struct {
        const char *json, *expect;
    } cases[] = {
        {"[]", "config.json: expected a JSON object"},
        {"{" BASE ",\"num_hidden_layers\":3}", "duplicate object key"},
        {"{", "config.json: not valid JSON"},
        {"{\"vocab_size\":1}", "field model_type: expected a short string"},
        {"{\"model_type\":\"llama\",\"vocab_size\":100,\"hidden_size\":64,"
         "\"intermediate_size\":128,\"num_hidden_layers\":2}",
         "field num_attention_heads: expected a positive integer, got nothing (missing)"},
        {"{" BASE ",\"num_key_value_heads\":-1}",
         "config.json: field num_key_value_heads: expected a positive integer, got -1"},
        {"{" BASE ",\"num_key_value_heads\":3}",
         "field num_key_value_heads: expected a divisor of num_attention_heads (4), got 3"},
        {"{\"model_type\":\"llama\",\"vocab_size\":100,\"hidden_size\":\"64\"," REST "}",
         "field hidden_size: expected a positive integer, got \"64\""},
        {"{" BASE ",\"rms_norm_eps\":0}", "field rms_norm_eps: expected a positive number, got 0"},
        {"{" BASE ",\"rms_norm_eps\":1e-66}", "field rms_norm_eps: expected a positive number"},
        {"{" BASE ",\"tie_word_embeddings\":1}",
         "field tie_word_embeddings: expected true or false"},
        {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}",
         "field rope_scaling.rope_type: expected default, linear or llama3, got \"yarn\""},
        {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}",
         "field rope_scaling.low_freq_factor: expected a positive number"},
        {"{" BASE ",\"rope_parameters\":{\"rope_type\":\"linear\"}}",
         "field rope_parameters.factor: expected a positive number, got nothing"},
        {"{" BASE ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":-1}}",
         "field rope_parameters.rope_theta: expected a positive number, got -1"},
        {"{" BASE ",\"rope_parameters\":{\"full_attention\":{}}}",
         "per-layer-type RoPE parameters are not supported"},
        {"{" BASE ",\"rope_scaling\":5}", "field rope_scaling: expected an object or null"},
        {"{" BASE ",\"eos_token_id\":[1,\"x\"]}",
         "field eos_token_id: expected a token id or a list"},
        {"{" BASE ",\"eos_token_id\":100}",
         "field eos_token_id: expected ids below vocab_size 100"},
        {"{" BASE ",\"bos_token_id\":-3}", "field bos_token_id: expected a token id"},
        {"{" BASE ",\"torch_dtype\":\"int8\"}", "field torch_dtype: expected \"float32\""},
        {"{\"model_type\":\"llama\",\"vocab_size\":100,\"hidden_size\":66," REST "}",
         "field head_dim: missing, and hidden_size 66"},
        {"{" BASE ",\"architectures\":\"Llama\"}", "field architectures: expected a list"},
        {"{" BASE ",\"num_experts\":8,\"num_experts_per_tok\":9}",
         "field num_experts_per_tok: expected at most num_experts (8), got 9"},
        {"{\"model_type\":\"qwen3_moe\",\"vocab_size\":100,\"hidden_size\":64,"
         "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4}",
         "field num_experts: expected a positive integer for qwen3_moe"},
        {"{" BASE ",\"use_sliding_window\":true}",
         "field sliding_window: expected a positive integer when use_sliding_window is true"},
        {"{\"model_type\":\"llama\",\"vocab_size\":4294967296,\"hidden_size\":64," REST "}",
         "field vocab_size: expected a positive integer"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        weft_model_config c;
        weft_error err;
        weft_status rc = parse(cases[i].json, &c, &err);
        if (rc == WEFT_OK || !strstr(err.message, cases[i].expect))
            fail_msg("case %zu: expected \"%s\", got rc %d \"%s\"", i, cases[i].expect, rc,
                     err.message);
        assert_int_equal(c.vocab_size, 0); /* nothing half-filled on error */
    }
}

static void test_generation_config(void **state) {
    char dir[] = "/tmp/weft-test-gen-XXXXXX";
    assert_non_null(mkdtemp(dir));
    weft_generation_config g;
    weft_error err;
    assert_int_equal(weft_generation_config_load(dir, &g, &err), WEFT_OK); /* missing file */
    assert_int_equal(g.has_temperature, 0);
    assert_int_equal(g.bos_token_id, -1);
    char path[256];
    snprintf(path, sizeof(path), "%s/generation_config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"do_sample\":true,\"temperature\":0.6,\"top_p\":0.95,\"top_k\":20,\"min_p\":0,"
          "\"bos_token_id\":151643,\"eos_token_id\":[151645,151643],\"max_new_tokens\":64}",
          f);
    fclose(f);
    assert_int_equal(weft_generation_config_load(dir, &g, &err), WEFT_OK);
    assert_true(g.has_temperature && g.has_top_p && g.has_top_k && g.has_min_p);
    assert_float_equal(g.temperature, 0.6f, 0);
    assert_float_equal(g.top_p, 0.95f, 0);
    assert_int_equal(g.top_k, 20);
    assert_float_equal(g.min_p, 0.0f, 0);
    assert_int_equal(g.bos_token_id, 151643);
    assert_int_equal(g.n_eos, 2);
    assert_int_equal(g.eos_token_ids[1], 151643);
    assert_int_equal(g.max_new_tokens, 64);
    f = fopen(path, "w");
    fputs("{\"temperature\":0.7,\"eos_token_id\":2}", f); /* no do_sample: greedy */
    fclose(f);
    assert_int_equal(weft_generation_config_load(dir, &g, &err), WEFT_OK);
    assert_int_equal(g.has_temperature, 1);
    assert_float_equal(g.temperature, 0.0f, 0);
    f = fopen(path, "w");
    fputs("{\"do_sample\":true,\"top_p\":\"high\"}", f);
    fclose(f);
    assert_int_equal(weft_generation_config_load(dir, &g, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "generation_config.json: field top_p: expected a "
                                        "number in (0, 1], got \"high\""));
    /* values the sampler would refuse in every request are refused here, naming the file (the
     * first found by fuzz_modeldir: top_p 1.95) */
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"top_p\":1.95}", "field top_p: expected a number in (0, 1], got 1.95"},
        {"{\"top_p\":0}", "field top_p: expected a number in (0, 1], got 0"},
        {"{\"min_p\":1.5}", "field min_p: expected a number in [0, 1], got 1.5"},
        {"{\"temperature\":1e300}", "field temperature: expected a finite number >= 0"},
        {"{\"temperature\":-0.5}", "field temperature: expected a finite number >= 0, got -0.5"},
        {"{\"repetition_penalty\":0}", "field repetition_penalty: expected a finite number > 0, "
                                       "got 0"},
        /* positive, but 0 as the float the sampler gets */
        {"{\"repetition_penalty\":1e-300}", "field repetition_penalty: expected a finite number "
                                            "> 0, got 1e-300"},
        {"{\"top_p\":1e-50}", "field top_p: expected a number in (0, 1], got 1e-50"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        f = fopen(path, "w");
        fputs(bad[i].json, f);
        fclose(f);
        assert_int_equal(weft_generation_config_load(dir, &g, &err), WEFT_ERR_FORMAT);
        if (!strstr(err.message, "generation_config.json: ") || !strstr(err.message, bad[i].want))
            fail_msg("%s: %s", bad[i].json, err.message);
    }
    f = fopen(path, "w");
    fputs("{\"do_sample\":true,\"top_p\":1,\"min_p\":1,\"temperature\":0}", f); /* the edges */
    fclose(f);
    assert_int_equal(weft_generation_config_load(dir, &g, &err), WEFT_OK);
    remove(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k),       cmocka_unit_test(test_tiny_llama3),
        cmocka_unit_test(test_tiny_qwen2),        cmocka_unit_test(test_tiny_qwen3),
        cmocka_unit_test(test_published_configs), cmocka_unit_test(test_defaults_and_variants),
        cmocka_unit_test(test_bad_configs),       cmocka_unit_test(test_generation_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
