/* `weft convert llama2c` on the real stories260K checkpoint: the written config.json, the
 * tensor names and shapes, q/k rows compared with the raw .bin through an independent index
 * formula, the tokenizer files, and refusals of damaged inputs. The HF-BPE equivalence of the
 * derived merges is checked against encodings made by Hugging Face `tokenizers`
 * (tests/data/files/tok512_hf_encodings.json, tools/scripts/llama2c_tokenizer_parity.py). */
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
#include <jansson.h>

#include "files/config.h"
#include "files/llama2c.h"
#include "files/safetensors.h"
#include "util/error.h"

static char outdir[256];
static char model_path[1024], tok_path[1024];

static int setup(void **state) {
    const char *s = getenv("WEFT_SHARED_DIR");
    if (!s || !s[0]) s = WEFT_SHARED_DIR;
    snprintf(model_path, sizeof(model_path), "%s/models/stories260K/stories260K.bin", s);
    snprintf(tok_path, sizeof(tok_path), "%s/models/stories260K/tok512.bin", s);
    snprintf(outdir, sizeof(outdir), "/tmp/weft-test-convert-XXXXXX");
    if (!mkdtemp(outdir)) return -1;
    weft_error err;
    weft_error_clear(&err);
    /* a nested directory that does not exist yet */
    char sub[300];
    snprintf(sub, sizeof(sub), "%s/hf/stories260K", outdir);
    if (weft_llama2c_convert(model_path, tok_path, sub, &err) != WEFT_OK) {
        fprintf(stderr, "convert failed: %s\n", err.message);
        return -1;
    }
    snprintf(outdir + strlen(outdir), sizeof(outdir) - strlen(outdir), "/hf/stories260K");
    return 0;
}

static int teardown(void **state) {
    char cmd[600];
    char *cut = strstr(outdir, "/hf/stories260K");
    if (cut) *cut = '\0';
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", outdir);
    return system(cmd) == 0 ? 0 : -1;
}

static float *read_bin(size_t *n_floats) {
    FILE *f = fopen(model_path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 28, SEEK_SET);
    *n_floats = (size_t)(len - 28) / 4;
    float *w = malloc(*n_floats * 4);
    assert_int_equal(fread(w, 4, *n_floats, f), *n_floats);
    fclose(f);
    return w;
}

static void test_config_written(void **state) {
    weft_model_config c;
    weft_error err;
    if (weft_config_load(outdir, &c, NULL, &err)) fail_msg("%s", err.message);
    assert_string_equal(c.model_type, "llama");
    assert_string_equal(c.architecture, "LlamaForCausalLM");
    assert_int_equal(c.hidden_size, 64);
    assert_int_equal(c.intermediate_size, 172);
    assert_int_equal(c.n_layers, 5);
    assert_int_equal(c.n_heads, 8);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.vocab_size, 512);
    assert_int_equal(c.max_position, 512);
    assert_float_equal(c.rope_theta, 10000.0f, 0);
    assert_float_equal(c.rms_eps, 1e-5f, 0);
    assert_int_equal(c.tie_embeddings, 1);
    assert_int_equal(c.dtype, WEFT_DTYPE_F32);
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.eos_token_ids[0], 2);
    /* the same values as the config transformers wrote for its reference */
    const char *s = getenv("WEFT_SHARED_DIR");
    char ref[1024];
    snprintf(ref, sizeof(ref), "%s/reference/stories260K", s && s[0] ? s : WEFT_SHARED_DIR);
    weft_model_config r;
    if (weft_config_load(ref, &r, NULL, &err)) fail_msg("%s", err.message);
    memset(r.architecture, 0, sizeof(r.architecture));
    memset(c.architecture, 0, sizeof(c.architecture));
    assert_memory_equal(&c, &r, sizeof(c));
    weft_generation_config g;
    assert_int_equal(weft_generation_config_load(outdir, &g, &err), WEFT_OK);
    assert_int_equal(g.bos_token_id, 1);
    assert_int_equal(g.eos_token_ids[0], 2);
}

static void test_tensors(void **state) {
    weft_safetensors *st;
    weft_error err;
    if (weft_safetensors_open_dir(outdir, &st, &err)) fail_msg("%s", err.message);
    assert_int_equal(weft_safetensors_count(st), 2 + 9 * 5); /* tied: no lm_head */
    assert_null(weft_safetensors_find(st, "lm_head.weight"));
    static const struct {
        const char *name;
        int64_t s0, s1;
    } shapes[] = {
        {"model.embed_tokens.weight", 512, 64},
        {"model.norm.weight", 64, 0},
        {"model.layers.0.input_layernorm.weight", 64, 0},
        {"model.layers.4.post_attention_layernorm.weight", 64, 0},
        {"model.layers.2.self_attn.q_proj.weight", 64, 64},
        {"model.layers.2.self_attn.k_proj.weight", 32, 64},
        {"model.layers.2.self_attn.v_proj.weight", 32, 64},
        {"model.layers.2.self_attn.o_proj.weight", 64, 64},
        {"model.layers.3.mlp.gate_proj.weight", 172, 64},
        {"model.layers.3.mlp.up_proj.weight", 172, 64},
        {"model.layers.3.mlp.down_proj.weight", 64, 172},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const weft_st_tensor *t = weft_safetensors_find(st, shapes[i].name);
        if (!t) fail_msg("missing %s", shapes[i].name);
        assert_int_equal(t->dtype, WEFT_DTYPE_F32);
        assert_int_equal(t->rank, shapes[i].s1 ? 2 : 1);
        assert_int_equal(t->shape[0], shapes[i].s0);
        if (shapes[i].s1) assert_int_equal(t->shape[1], shapes[i].s1);
    }

    size_t nf;
    float *w = read_bin(&nf);
    const size_t D = 64, L = 5, V = 512, KV = 32, H = 172, HS = 8;
    const float *emb = w, *rms_att = emb + V * D, *wq = rms_att + L * D, *wk = wq + L * D * D;
    const float *wv = wk + L * KV * D, *wo = wv + L * KV * D, *rms_ffn = wo + L * D * D;
    const float *w1 = rms_ffn + L * D, *w2 = w1 + L * H * D, *w3 = w2 + L * D * H;
    const float *rms_final = w3 + L * H * D;
    assert_int_equal(nf, (size_t)(rms_final + D - w) + 2 * 512 * 4); /* + freq_cis */

    /* q and k: HF row h*HS + half*HS/2 + j holds llama2.c row h*HS + 2j + half */
    for (size_t l = 0; l < L; l++) {
        char name[96];
        snprintf(name, sizeof(name), "model.layers.%zu.self_attn.q_proj.weight", l);
        const float *q = (const float *)weft_safetensors_find(st, name)->data;
        snprintf(name, sizeof(name), "model.layers.%zu.self_attn.k_proj.weight", l);
        const float *k = (const float *)weft_safetensors_find(st, name)->data;
        for (size_t h = 0; h < 8; h++)
            for (size_t half = 0; half < 2; half++)
                for (size_t j = 0; j < HS / 2; j++) {
                    size_t hf = h * HS + half * HS / 2 + j, src = h * HS + 2 * j + half;
                    assert_memory_equal(q + hf * D, wq + l * D * D + src * D, D * 4);
                    if (h < 4) assert_memory_equal(k + hf * D, wk + l * KV * D + src * D, D * 4);
                }
    }
    /* a hand-picked value: layer 0, HF q row 4 (head 0, second half, j 0) = llama2.c row 1 */
    assert_true(((const float *)weft_safetensors_find(st, "model.layers.0.self_attn.q_proj.weight")
                     ->data)[4 * D + 5] == wq[1 * D + 5]);
    /* q is genuinely reordered: row 1 differs from llama2.c row 1 */
    assert_memory_not_equal(
        weft_safetensors_find(st, "model.layers.0.self_attn.q_proj.weight")->data + D * 4, wq + D,
        D * 4);
    /* everything else is copied as is, w1 = gate, w3 = up, w2 = down */
    assert_memory_equal(weft_safetensors_find(st, "model.embed_tokens.weight")->data, emb,
                        V * D * 4);
    assert_memory_equal(weft_safetensors_find(st, "model.layers.1.self_attn.v_proj.weight")->data,
                        wv + KV * D, KV * D * 4);
    assert_memory_equal(weft_safetensors_find(st, "model.layers.4.self_attn.o_proj.weight")->data,
                        wo + 4 * D * D, D * D * 4);
    assert_memory_equal(weft_safetensors_find(st, "model.layers.2.mlp.gate_proj.weight")->data,
                        w1 + 2 * H * D, H * D * 4);
    assert_memory_equal(weft_safetensors_find(st, "model.layers.2.mlp.down_proj.weight")->data,
                        w2 + 2 * D * H, D * H * 4);
    assert_memory_equal(weft_safetensors_find(st, "model.layers.2.mlp.up_proj.weight")->data,
                        w3 + 2 * H * D, H * D * 4);
    assert_memory_equal(weft_safetensors_find(st, "model.layers.3.input_layernorm.weight")->data,
                        rms_att + 3 * D, D * 4);
    assert_memory_equal(
        weft_safetensors_find(st, "model.layers.3.post_attention_layernorm.weight")->data,
        rms_ffn + 3 * D, D * 4);
    assert_memory_equal(weft_safetensors_find(st, "model.norm.weight")->data, rms_final, D * 4);
    assert_string_equal(weft_safetensors_metadata(st, "format"), "pt");
    free(w);
    weft_safetensors_close(st);
}

static void test_permutation_helper(void **state) {
    float src[8 * 2], dst[8 * 2];
    for (int i = 0; i < 16; i++)
        src[i] = (float)i;
    weft_llama2c_permute_rows(src, dst, 2, 4, 2); /* 2 heads of 4 rows, 2 columns */
    /* head 0 rows 0,2,1,3 then head 1 rows 4,6,5,7 */
    static const float want[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
    assert_memory_equal(dst, want, sizeof(want));
    assert_int_equal(weft_llama2c_permuted_source_row(5, 8), 3);
}

static json_t *load_json(const char *name) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", outdir, name);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) fail_msg("%s: %s", path, e.text);
    return j;
}

static void test_tokenizer_files(void **state) {
    json_t *t = load_json("tokenizer.json");
    json_t *model = json_object_get(t, "model");
    assert_string_equal(json_string_value(json_object_get(model, "type")), "BPE");
    assert_true(json_is_true(json_object_get(model, "byte_fallback")));
    assert_true(json_is_true(json_object_get(model, "fuse_unk")));
    assert_string_equal(json_string_value(json_object_get(model, "unk_token")), "<unk>");
    json_t *vocab = json_object_get(model, "vocab");
    assert_int_equal(json_object_size(vocab), 512);
    assert_int_equal(json_integer_value(json_object_get(vocab, "<unk>")), 0);
    assert_int_equal(json_integer_value(json_object_get(vocab, "<s>")), 1);
    assert_int_equal(json_integer_value(json_object_get(vocab, "</s>")), 2);
    assert_int_equal(json_integer_value(json_object_get(vocab, "<0x00>")), 3);
    assert_int_equal(json_integer_value(json_object_get(vocab, "<0x0A>")), 13);
    assert_int_equal(json_integer_value(json_object_get(vocab, "<0xFF>")), 258);
    assert_int_equal(json_integer_value(json_object_get(vocab, "\xe2\x96\x81t")), 259);
    assert_int_equal(json_integer_value(json_object_get(vocab, "\xe2\x96\x81Lily")), 317);
    assert_int_equal(json_integer_value(json_object_get(vocab, "\xe2\x96\x81")), 410);
    json_t *merges = json_object_get(model, "merges");
    assert_true(json_array_size(merges) > 150);
    json_t *m0 = json_array_get(merges, 0); /* ' t' has the highest score of all merges */
    assert_string_equal(json_string_value(json_array_get(m0, 0)), "\xe2\x96\x81");
    assert_string_equal(json_string_value(json_array_get(m0, 1)), "t");
    json_t *added = json_object_get(t, "added_tokens");
    assert_int_equal(json_array_size(added), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(added, 2), "content")),
                        "</s>");
    assert_true(json_is_true(json_object_get(json_array_get(added, 1), "special")));
    assert_true(json_is_null(json_object_get(t, "pre_tokenizer")));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(t, "post_processor"), "type")),
        "TemplateProcessing");
    json_decref(t);
    json_t *tc = load_json("tokenizer_config.json");
    assert_true(json_is_true(json_object_get(tc, "add_bos_token")));
    assert_string_equal(json_string_value(json_object_get(tc, "bos_token")), "<s>");
    assert_string_equal(json_string_value(json_object_get(tc, "eos_token")), "</s>");
    assert_int_equal(json_integer_value(json_object_get(tc, "model_max_length")), 512);
    json_decref(tc);
}

/* llama2.c's encoder (highest-score merge first, leftmost on ties), written from its
 * description, run over texts whose HF `tokenizers` encodings with our tokenizer.json are
 * stored in tests/data: equal ids show the derived merge ranks reproduce llama2.c. */
static int find_piece(const weft_llama2c_vocab *v, const char *s, size_t n) {
    for (uint32_t i = 0; i < v->n; i++)
        if (v->lens[i] == n && !memcmp(v->pieces[i], s, n)) return (int)i;
    return -1;
}

static size_t llama2c_encode(const weft_llama2c_vocab *v, const char *text, int *ids) {
    size_t n = 0, len = strlen(text);
    if (len) ids[n++] = find_piece(v, " ", 1);
    for (size_t i = 0; i < len;) {
        size_t cl = 1;
        while (i + cl < len && ((unsigned char)text[i + cl] & 0xc0) == 0x80 && cl < 4)
            cl++;
        int id = find_piece(v, text + i, cl);
        if (id >= 0)
            ids[n++] = id;
        else
            for (size_t b = 0; b < cl; b++)
                ids[n++] = (unsigned char)text[i + b] + 3;
        i += cl;
    }
    for (;;) {
        float best = -1e30f;
        int best_id = -1;
        size_t at = 0;
        char buf[64];
        for (size_t i = 0; i + 1 < n; i++) {
            size_t a = v->lens[ids[i]], b = v->lens[ids[i + 1]];
            if (a + b >= sizeof(buf)) continue;
            memcpy(buf, v->pieces[ids[i]], a);
            memcpy(buf + a, v->pieces[ids[i + 1]], b);
            int id = find_piece(v, buf, a + b);
            if (id >= 0 && v->scores[id] > best) {
                best = v->scores[id];
                best_id = id;
                at = i;
            }
        }
        if (best_id < 0) break;
        ids[at] = best_id;
        memmove(ids + at + 1, ids + at + 2, (n - at - 2) * sizeof(int));
        n--;
    }
    return n;
}

static void test_merges_match_hf(void **state) {
    weft_llama2c_vocab v;
    weft_error err;
    assert_int_equal(weft_llama2c_vocab_load(tok_path, 512, &v, &err), WEFT_OK);
    assert_int_equal(v.max_token_length, 7);
    assert_string_equal(v.pieces[1], "\n<s>\n");
    json_error_t je;
    json_t *cases =
        json_load_file(WEFT_SOURCE_DIR "/tests/data/files/tok512_hf_encodings.json", 0, &je);
    if (!cases) fail_msg("%s", je.text);
    assert_true(json_array_size(cases) >= 10);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *hf = json_object_get(c, "ids"); /* HF ids without the <s> the template adds */
        int ids[4096];
        assert_true(strlen(text) * 4 + 1 < 4096);
        size_t n = llama2c_encode(&v, text, ids);
        if (n != json_array_size(hf))
            fail_msg("'%s': %zu ids, HF %zu", text, n, json_array_size(hf));
        for (size_t k = 0; k < n; k++)
            if (ids[k] != json_integer_value(json_array_get(hf, k)))
                fail_msg("'%s': id %zu is %d, HF %lld", text, k, ids[k],
                         (long long)json_integer_value(json_array_get(hf, k)));
    }
    json_decref(cases);
    weft_llama2c_vocab_free(&v);
}

/* ---- logits parity with transformers ------------------------------------------------------
 * A plain fp32 forward pass of the converted checkpoint (HF half-split RoPE, GQA, SwiGLU,
 * RMSNorm) over the first tokens of reference.safetensors; its logits were computed by
 * transformers from the same llama2.c weights with its own conversion. A wrong q/k permutation
 * or a swapped gate/up shows up as differences of order 1. */
static const float *W(const weft_safetensors *st, const char *fmt, int l) {
    char name[128];
    if (l < 0)
        snprintf(name, sizeof(name), "%s", fmt); /* not a per-layer tensor */
    else
        snprintf(name, sizeof(name), fmt, l);
    const weft_st_tensor *t = weft_safetensors_find(st, name);
    if (!t) fail_msg("missing %s", name);
    return (const float *)t->data;
}

static void matvec(const float *w, const float *x, float *y, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float s = 0;
        for (int c = 0; c < cols; c++)
            s += w[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

static void rmsnorm(const float *x, const float *w, float *y, int n) {
    float ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float k = 1.0f / sqrtf(ss / (float)n + 1e-5f);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * k * w[i];
}

static void rope_half(float *v, int n_heads, int hd, int pos) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < hd / 2; i++) {
            double f = pos / pow(10000.0, 2.0 * i / hd);
            float c = (float)cos(f), s = (float)sin(f);
            float *a = v + h * hd + i, *b = a + hd / 2, x = *a, y = *b;
            *a = x * c - y * s;
            *b = y * c + x * s;
        }
}

static void test_logits_match_transformers(void **state) {
    enum { D = 64, L = 5, NH = 8, NKV = 4, HD = 8, FF = 172, V = 512, T = 24 };
    weft_safetensors *st, *ref;
    weft_error err;
    if (weft_safetensors_open_dir(outdir, &st, &err)) fail_msg("%s", err.message);
    const char *s = getenv("WEFT_SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/reference/stories260K/reference.safetensors",
             s && s[0] ? s : WEFT_SHARED_DIR);
    if (weft_safetensors_open_file(path, &ref, &err)) fail_msg("%s", err.message);
    const weft_st_tensor *ids = weft_safetensors_find(ref, "input_ids");
    const weft_st_tensor *lg = weft_safetensors_find(ref, "logits");
    assert_non_null(ids);
    assert_non_null(lg);
    assert_int_equal(lg->shape[1], V);
    static float kc[L][T][NKV * HD], vc[L][T][NKV * HD];
    float x[D], h[D], q[NH * HD], k[NKV * HD], v[NKV * HD], att[NH * HD], o[D], g[FF], u[FF];
    float logits[V], worst = 0;
    for (int pos = 0; pos < T; pos++) {
        int32_t tok;
        memcpy(&tok, ids->data + 4 * pos, 4);
        memcpy(x, W(st, "model.embed_tokens.weight", -1) + (size_t)tok * D, sizeof(x));
        for (int l = 0; l < L; l++) {
            rmsnorm(x, W(st, "model.layers.%d.input_layernorm.weight", l), h, D);
            matvec(W(st, "model.layers.%d.self_attn.q_proj.weight", l), h, q, NH * HD, D);
            matvec(W(st, "model.layers.%d.self_attn.k_proj.weight", l), h, k, NKV * HD, D);
            matvec(W(st, "model.layers.%d.self_attn.v_proj.weight", l), h, v, NKV * HD, D);
            rope_half(q, NH, HD, pos);
            rope_half(k, NKV, HD, pos);
            memcpy(kc[l][pos], k, sizeof(k));
            memcpy(vc[l][pos], v, sizeof(v));
            for (int hh = 0; hh < NH; hh++) {
                int kv = hh / (NH / NKV);
                float sc[T], m = -1e30f, z = 0;
                for (int t = 0; t <= pos; t++) {
                    float d = 0;
                    for (int i = 0; i < HD; i++)
                        d += q[hh * HD + i] * kc[l][t][kv * HD + i];
                    sc[t] = d / sqrtf((float)HD);
                    if (sc[t] > m) m = sc[t];
                }
                for (int t = 0; t <= pos; t++)
                    z += (sc[t] = expf(sc[t] - m));
                for (int i = 0; i < HD; i++) {
                    float a = 0;
                    for (int t = 0; t <= pos; t++)
                        a += sc[t] / z * vc[l][t][kv * HD + i];
                    att[hh * HD + i] = a;
                }
            }
            matvec(W(st, "model.layers.%d.self_attn.o_proj.weight", l), att, o, D, NH * HD);
            for (int i = 0; i < D; i++)
                x[i] += o[i];
            rmsnorm(x, W(st, "model.layers.%d.post_attention_layernorm.weight", l), h, D);
            matvec(W(st, "model.layers.%d.mlp.gate_proj.weight", l), h, g, FF, D);
            matvec(W(st, "model.layers.%d.mlp.up_proj.weight", l), h, u, FF, D);
            for (int i = 0; i < FF; i++)
                g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
            matvec(W(st, "model.layers.%d.mlp.down_proj.weight", l), g, o, D, FF);
            for (int i = 0; i < D; i++)
                x[i] += o[i];
        }
        rmsnorm(x, W(st, "model.norm.weight", -1), h, D);
        matvec(W(st, "model.embed_tokens.weight", -1), h, logits, V, D); /* tied head */
        const float *want = (const float *)lg->data + (size_t)pos * V;
        for (int i = 0; i < V; i++) {
            float d = fabsf(logits[i] - want[i]);
            if (d > worst) worst = d;
        }
    }
    if (!(worst < 2e-3f)) fail_msg("max |logit difference| %g over %d positions", worst, T);
    weft_safetensors_close(ref);
    weft_safetensors_close(st);
}

static void copy_cut(const char *src, const char *dst, long keep, const void *patch,
                     size_t patch_len) {
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    if (patch) memcpy(b, patch, patch_len);
    f = fopen(dst, "wb");
    fwrite(b, 1, (size_t)(keep <= 0 ? len + keep : keep), f); /* 0: whole file */
    fclose(f);
    free(b);
}

static void test_bad_inputs(void **state) {
    char bad[512], dir[512];
    snprintf(bad, sizeof(bad), "%s/bad.bin", outdir);
    snprintf(dir, sizeof(dir), "%s/out-bad", outdir);
    weft_error err;
    weft_llama2c_model m;
    copy_cut(model_path, bad, -4, NULL, 0);
    assert_int_equal(weft_llama2c_open(bad, &m, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "implies 1056540 bytes, the file has 1056536"));
    int32_t hdr[2] = {64, -172};
    copy_cut(model_path, bad, 0, hdr, sizeof(hdr));
    assert_int_equal(weft_llama2c_open(bad, &m, &err), WEFT_ERR_FORMAT);
    if (!strstr(err.message, "header hidden_dim: expected 1..1048576, got -172"))
        fail_msg("%s", err.message);
    int32_t heads[5] = {64, 172, 5, 7, 7};
    copy_cut(model_path, bad, 0, heads, sizeof(heads));
    assert_int_equal(weft_llama2c_open(bad, &m, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "dim is not a multiple of n_heads"));
    int32_t unshared[6] = {64, 172, 5, 8, 4, -512}; /* says untied, but no wcls follows */
    copy_cut(model_path, bad, 0, unshared, sizeof(unshared));
    assert_int_equal(weft_llama2c_open(bad, &m, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "vocab_size 512 unshared"));
    uint32_t magic[2] = {0x616b3432u, 1};
    copy_cut(model_path, bad, 0, magic, sizeof(magic));
    assert_int_equal(weft_llama2c_open(bad, &m, &err), WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "export version 1"));
    weft_llama2c_vocab v;
    copy_cut(tok_path, bad, -1, NULL, 0);
    assert_int_equal(weft_llama2c_vocab_load(bad, 512, &v, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "truncated in token 511 of 512"));
    assert_int_equal(weft_llama2c_vocab_load(tok_path, 500, &v, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "bytes left after 500 tokens"));
    assert_int_equal(weft_llama2c_convert(model_path, bad, dir, &err), WEFT_ERR_FORMAT);
    assert_int_equal(access(dir, F_OK), -1); /* nothing written before inputs are checked */
    /* A consistent checkpoint of two tokens (dim 2, hidden 1, one layer and head, seq 1, tied)
     * with a matching tok*.bin: the converted model would name eos 2 outside its vocabulary
     * (found by fuzz_llama2c). */
    int32_t tiny[7] = {2, 1, 1, 1, 1, 2, 1};
    /* embedding 4, rms_att 2, wq 4, wk 4, wv 4, wo 4, rms_ffn 2, w1 2, w2 2, w3 2, rms_final 2,
     * freq_cis real 1 and imaginary 1 */
    float w[34] = {0};
    FILE *f = fopen(bad, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(tiny, sizeof(tiny), 1, f), 1);
    assert_int_equal(fwrite(w, sizeof(w), 1, f), 1);
    fclose(f);
    assert_int_equal(weft_llama2c_open(bad, &m, &err), WEFT_OK);
    weft_llama2c_close(&m);
    assert_int_equal(weft_llama2c_convert(bad, tok_path, dir, &err), WEFT_ERR_FORMAT);
    if (!strstr(err.message, "header vocab_size 2: a llama2.c vocabulary holds at least"))
        fail_msg("%s", err.message);
    assert_int_equal(access(dir, F_OK), -1);
    remove(bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_written),     cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_permutation_helper), cmocka_unit_test(test_tokenizer_files),
        cmocka_unit_test(test_merges_match_hf),    cmocka_unit_test(test_logits_match_transformers),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
