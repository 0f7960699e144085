/* config.json and generation_config.json: turns a Hugging Face model config into the plugin ABI's
 * weft_model_config. Field names, defaults and per-architecture quirks follow transformers (the
 * Llama, Qwen2, Qwen3, Qwen3-MoE and Mistral config classes); every field is type-checked and a
 * wrong one is named with what was expected and what was found. Both RoPE spellings are read:
 * transformers 5's `rope_parameters` and the older top-level `rope_theta` + `rope_scaling`.
 * docs/MODEL_FILES.md lists the rules. */
#include "files/config.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampling.h"
#include "util/error.h"
#include "util/file.h"

#define SRC "config"
#define CONFIG_MAX (16u << 20)
#define SIZE_MAX_FIELD 0x7fffffffll

/* Renders a JSON value (or its absence) for "got ..." in messages. */
static void describe(const json_t *v, char *buf, size_t n) {
    if (!v) {
        snprintf(buf, n, "nothing (missing)");
        return;
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, n, "an unprintable value");
        return;
    }
    if (strlen(s) > 48)
        snprintf(buf, n, "%.45s...", s);
    else
        snprintf(buf, n, "%s", s);
    free(s);
}

static weft_status bad_field(weft_error *err, const char *path, const char *field,
                             const char *expected, const json_t *got) {
    char g[64];
    describe(got, g, sizeof(g));
    return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: field %s: expected %s, got %s", path,
                          field, expected, g);
}

/* A present, non-null member, or NULL. */
static json_t *member(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* Positive integer field; missing uses dflt (0 = required). */
static weft_status get_pos(json_t *obj, const char *field, const char *path, uint32_t dflt,
                           uint32_t *out, weft_error *err) {
    json_t *v = member(obj, field);
    if (!v) {
        if (!dflt) return bad_field(err, path, field, "a positive integer", NULL);
        *out = dflt;
        return WEFT_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > SIZE_MAX_FIELD)
        return bad_field(err, path, field, "a positive integer", v);
    *out = (uint32_t)json_integer_value(v);
    return WEFT_OK;
}

/* Positive finite number; missing uses dflt (negative = required). */
static weft_status get_num(json_t *obj, const char *field, const char *path, double dflt,
                           float *out, weft_error *err) {
    json_t *v = member(obj, field);
    if (!v) {
        if (dflt < 0) return bad_field(err, path, field, "a positive number", NULL);
        *out = (float)dflt;
        return WEFT_OK;
    }
    double d = json_number_value(v);
    /* Checked after the narrowing too: 1e-66 is positive as a double but 0 as a float. */
    if (!json_is_number(v) || !(d > 0) || !isfinite(d) || d > 3.0e38 || !((float)d > 0))
        return bad_field(err, path, field, "a positive number", v);
    *out = (float)d;
    return WEFT_OK;
}

static weft_status get_bool(json_t *obj, const char *field, const char *path, uint32_t dflt,
                            uint32_t *out, weft_error *err) {
    json_t *v = member(obj, field);
    if (!v) {
        *out = dflt;
        return WEFT_OK;
    }
    if (!json_is_boolean(v)) return bad_field(err, path, field, "true or false", v);
    *out = json_is_true(v) ? 1 : 0;
    return WEFT_OK;
}

static weft_status get_token_id(json_t *obj, const char *field, const char *path, int32_t *out,
                                weft_error *err) {
    json_t *v = member(obj, field);
    *out = -1;
    if (!v) return WEFT_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SIZE_MAX_FIELD)
        return bad_field(err, path, field, "a token id (non-negative integer) or null", v);
    *out = (int32_t)json_integer_value(v);
    return WEFT_OK;
}

/* eos_token_id: an id, a list of ids, or null. */
static weft_status get_eos(json_t *obj, const char *path, int32_t *ids, uint32_t *n,
                           weft_error *err) {
    json_t *v = member(obj, "eos_token_id");
    *n = 0;
    if (!v) return WEFT_OK;
    const char *want = "a token id or a list of at most 8 token ids";
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0 || json_integer_value(v) > SIZE_MAX_FIELD)
            return bad_field(err, path, "eos_token_id", want, v);
        ids[0] = (int32_t)json_integer_value(v);
        *n = 1;
        return WEFT_OK;
    }
    if (!json_is_array(v) || json_array_size(v) > 8)
        return bad_field(err, path, "eos_token_id", want, v);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) > SIZE_MAX_FIELD)
            return bad_field(err, path, "eos_token_id", want, v);
        ids[(*n)++] = (int32_t)json_integer_value(e);
    }
    return WEFT_OK;
}

/* RoPE: rope_parameters (transformers 5) or rope_theta + rope_scaling (older). */
static weft_status parse_rope(json_t *root, const char *path, weft_model_config *cfg,
                              weft_error *err) {
    json_t *rp = member(root, "rope_parameters");
    json_t *scaling = NULL;
    const char *where; /* field prefix for messages */
    weft_status rc;
    if (rp) {
        where = "rope_parameters";
        if (!json_is_object(rp))
            return bad_field(err, path, "rope_parameters",
                             "an object with rope_type and rope_theta", rp);
        if (!member(rp, "rope_theta") && !member(rp, "rope_type"))
            return weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC,
                                  "%s: field rope_parameters: expected rope_type and rope_theta "
                                  "(per-layer-type RoPE parameters are not supported)",
                                  path);
        if (get_num(rp, "rope_theta", path, 10000.0, &cfg->rope_theta, err))
            return bad_field(err, path, "rope_parameters.rope_theta", "a positive number",
                             member(rp, "rope_theta"));
        scaling = rp;
    } else {
        where = "rope_scaling";
        if ((rc = get_num(root, "rope_theta", path, 10000.0, &cfg->rope_theta, err))) return rc;
        scaling = member(root, "rope_scaling");
        if (scaling && !json_is_object(scaling))
            return bad_field(err, path, "rope_scaling", "an object or null", scaling);
    }
    cfg->rope_scaling = 0;
    if (!scaling) return WEFT_OK;
    json_t *type = member(scaling, "rope_type");
    if (!type) type = member(scaling, "type");
    const char *t = type ? json_string_value(type) : "default";
    char field[64];
    snprintf(field, sizeof(field), "%s.rope_type", where);
    if (!t) return bad_field(err, path, field, "a string (default, linear or llama3)", type);
    if (!strcmp(t, "default")) return WEFT_OK;
    int llama3 = !strcmp(t, "llama3");
    if (!llama3 && strcmp(t, "linear"))
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC,
                              "%s: field %s: expected default, linear or llama3, got \"%.32s\"",
                              path, field, t);
    cfg->rope_scaling = llama3 ? 1 : 2;
    snprintf(field, sizeof(field), "%s.factor", where);
    if ((rc = get_num(scaling, "factor", path, -1, &cfg->rope_factor, err)))
        return bad_field(err, path, field, "a positive number", member(scaling, "factor"));
    if (!llama3) return WEFT_OK;
    static const char *names[] = {"low_freq_factor", "high_freq_factor"};
    float *dst[] = {&cfg->rope_low_freq_factor, &cfg->rope_high_freq_factor};
    for (int i = 0; i < 2; i++) {
        snprintf(field, sizeof(field), "%s.%s", where, names[i]);
        if (get_num(scaling, names[i], path, -1, dst[i], err))
            return bad_field(err, path, field, "a positive number", member(scaling, names[i]));
    }
    snprintf(field, sizeof(field), "%s.original_max_position_embeddings", where);
    if (get_pos(scaling, "original_max_position_embeddings", path, 0,
                &cfg->rope_original_max_position, err))
        return bad_field(err, path, field, "a positive integer",
                         member(scaling, "original_max_position_embeddings"));
    if (cfg->rope_high_freq_factor == cfg->rope_low_freq_factor)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: field %s.high_freq_factor: expected a value different from "
                              "low_freq_factor (both %g)",
                              path, where, (double)cfg->rope_low_freq_factor);
    return WEFT_OK;
}

static uint32_t dtype_from_torch(const char *s) {
    if (!strcmp(s, "float32")) return WEFT_DTYPE_F32;
    if (!strcmp(s, "bfloat16")) return WEFT_DTYPE_BF16;
    if (!strcmp(s, "float16")) return WEFT_DTYPE_F16;
    return WEFT_DTYPE_INVALID;
}

static weft_status parse_root(json_t *root, const char *path, weft_model_config *cfg,
                              weft_error *err) {
    weft_status rc;
    if (!json_is_object(root))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: expected a JSON object", path);
    json_t *mt = member(root, "model_type");
    if (!json_is_string(mt) || !json_string_length(mt) ||
        json_string_length(mt) >= sizeof(cfg->model_type))
        return bad_field(err, path, "model_type", "a short string such as \"llama\"", mt);
    snprintf(cfg->model_type, sizeof(cfg->model_type), "%s", json_string_value(mt));
    const char *type = cfg->model_type;
    json_t *arch = member(root, "architectures");
    if (arch) {
        json_t *a0 = json_array_get(arch, 0);
        if (!json_is_array(arch) || !json_is_string(a0) ||
            json_string_length(a0) >= sizeof(cfg->architecture))
            return bad_field(err, path, "architectures", "a list of class names", arch);
        snprintf(cfg->architecture, sizeof(cfg->architecture), "%s", json_string_value(a0));
    }
    if ((rc = get_pos(root, "vocab_size", path, 0, &cfg->vocab_size, err)) ||
        (rc = get_pos(root, "hidden_size", path, 0, &cfg->hidden_size, err)) ||
        (rc = get_pos(root, "intermediate_size", path, 0, &cfg->intermediate_size, err)) ||
        (rc = get_pos(root, "num_hidden_layers", path, 0, &cfg->n_layers, err)) ||
        (rc = get_pos(root, "num_attention_heads", path, 0, &cfg->n_heads, err)) ||
        (rc = get_pos(root, "num_key_value_heads", path, cfg->n_heads, &cfg->n_kv_heads, err)) ||
        (rc = get_pos(root, "max_position_embeddings", path, 2048, &cfg->max_position, err)) ||
        (rc = get_num(root, "rms_norm_eps", path, 1e-6, &cfg->rms_eps, err)))
        return rc;
    if (cfg->n_heads % cfg->n_kv_heads)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: field num_key_value_heads: expected a divisor of "
                              "num_attention_heads (%u), got %u",
                              path, cfg->n_heads, cfg->n_kv_heads);
    if (member(root, "head_dim")) {
        if ((rc = get_pos(root, "head_dim", path, 0, &cfg->head_dim, err))) return rc;
    } else {
        if (cfg->hidden_size % cfg->n_heads)
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "%s: field head_dim: missing, and hidden_size %u is not a "
                                  "multiple of num_attention_heads %u",
                                  path, cfg->hidden_size, cfg->n_heads);
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    }
    if ((rc = parse_rope(root, path, cfg, err))) return rc;
    if (cfg->rope_scaling && (cfg->head_dim % 2))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: field head_dim: expected an even size for RoPE, got %u", path,
                              cfg->head_dim);
    /* transformers' Llama, Qwen2, Qwen3, Qwen3-MoE and Mistral configs all default to untied. */
    if ((rc = get_bool(root, "tie_word_embeddings", path, 0, &cfg->tie_embeddings, err))) return rc;
    /* Qwen2 always has q/k/v biases and no attention_bias field; Llama and Qwen3 read it. */
    if (!strcmp(type, "qwen2") || !strcmp(type, "qwen2_moe")) {
        cfg->attention_bias = 1;
    } else if ((rc = get_bool(root, "attention_bias", path, 0, &cfg->attention_bias, err))) {
        return rc;
    }
    cfg->qk_norm = !strcmp(type, "qwen3") || !strcmp(type, "qwen3_moe");
    /* A window only counts when the model uses it: Qwen's use_sliding_window switch, or always
     * for Mistral, whose config has no switch. */
    json_t *sw = member(root, "sliding_window");
    json_t *use = member(root, "use_sliding_window");
    uint32_t use_sw = 0;
    if ((rc = get_bool(root, "use_sliding_window", path, 0, &use_sw, err))) return rc;
    if (!use) use_sw = !strcmp(type, "mistral");
    if (use_sw && sw) {
        if ((rc = get_pos(root, "sliding_window", path, 0, &cfg->sliding_window, err))) return rc;
    } else if (use_sw && use) {
        return bad_field(err, path, "sliding_window",
                         "a positive integer when use_sliding_window is true", NULL);
    }
    json_t *ne = member(root, "num_experts");
    const char *ne_field = "num_experts";
    if (!ne) ne = member(root, "num_local_experts"), ne_field = "num_local_experts";
    if (ne) {
        if ((rc = get_pos(root, ne_field, path, 0, &cfg->n_experts, err)) ||
            (rc = get_pos(root, "num_experts_per_tok", path, 0, &cfg->n_experts_per_token, err)))
            return rc;
        if (cfg->n_experts_per_token > cfg->n_experts)
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "%s: field num_experts_per_tok: expected at most %s (%u), got "
                                  "%u",
                                  path, ne_field, cfg->n_experts, cfg->n_experts_per_token);
        if ((rc = get_pos(root, "moe_intermediate_size", path, cfg->intermediate_size,
                          &cfg->moe_intermediate_size, err)))
            return rc;
    } else if (!strcmp(type, "qwen3_moe")) {
        return bad_field(err, path, "num_experts", "a positive integer for qwen3_moe", NULL);
    }
    json_t *dt = member(root, "dtype");
    const char *dt_field = "dtype";
    if (!dt) dt = member(root, "torch_dtype"), dt_field = "torch_dtype";
    cfg->dtype = WEFT_DTYPE_F32; /* transformers loads float32 when the config does not say */
    if (dt) {
        cfg->dtype = json_is_string(dt) ? dtype_from_torch(json_string_value(dt)) : 0;
        if (!cfg->dtype)
            return bad_field(err, path, dt_field, "\"float32\", \"bfloat16\" or \"float16\"", dt);
    }
    if ((rc = get_token_id(root, "bos_token_id", path, &cfg->bos_token_id, err)) ||
        (rc = get_eos(root, path, cfg->eos_token_ids, &cfg->n_eos, err)))
        return rc;
    if (cfg->bos_token_id >= 0 && (uint32_t)cfg->bos_token_id >= cfg->vocab_size)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: field bos_token_id: expected an id below vocab_size %u, got %d",
                              path, cfg->vocab_size, cfg->bos_token_id);
    for (uint32_t i = 0; i < cfg->n_eos; i++)
        if ((uint32_t)cfg->eos_token_ids[i] >= cfg->vocab_size)
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "%s: field eos_token_id: expected ids below vocab_size %u, got "
                                  "%d",
                                  path, cfg->vocab_size, cfg->eos_token_ids[i]);
    return WEFT_OK;
}

weft_status weft_config_parse(const char *json, size_t len, const char *path,
                              weft_model_config *cfg, weft_error *err) {
    if (!path) path = "config.json";
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    cfg->bos_token_id = -1;
    if (!json) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "%s: no text given", path);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: not valid JSON: %s (line %d)", path,
                              jerr.text, jerr.line);
    weft_status rc = parse_root(root, path, cfg, err);
    json_decref(root);
    if (rc) {
        memset(cfg, 0, sizeof(*cfg));
        cfg->size = sizeof(*cfg);
        cfg->bos_token_id = -1;
    }
    return rc;
}

/* Reads DIR/NAME whole (its path into path); a missing file is WEFT_ERR_NOT_FOUND. */
static weft_status read_file(const char *dir, const char *name, char **text, size_t *len,
                             char *path, size_t path_size, weft_error *err) {
    snprintf(path, path_size, "%s/%s", dir, name);
    return weft_file_read(path, CONFIG_MAX, "a JSON file", SRC, text, len, err);
}

weft_status weft_config_load(const char *dir, weft_model_config *cfg, char **raw, weft_error *err) {
    char path[4096], *text = NULL;
    size_t len = 0;
    if (raw) *raw = NULL;
    weft_status rc = read_file(dir, "config.json", &text, &len, path, sizeof(path), err);
    if (rc) {
        memset(cfg, 0, sizeof(*cfg));
        cfg->size = sizeof(*cfg);
        return rc;
    }
    rc = weft_config_parse(text, len, path, cfg, err);
    if (!rc && raw)
        *raw = text;
    else
        free(text);
    return rc;
}

/* A sampling default, held to the range the sampler accepts (engine/sampling.h's table, which
 * its check_params uses too), so that a bad file is named when the model loads rather than in
 * every request that uses its defaults. The range is checked on the float the sampler would
 * see, after a check that the number fits a float at all (1e300 does not; 1e-300 becomes 0). */
static weft_status gen_float(json_t *root, const weft_param_range *r, const char *path, int *has,
                             float *out, weft_error *err) {
    json_t *v = member(root, r->name);
    if (!v) return WEFT_OK;
    double d = json_number_value(v);
    if (!json_is_number(v) || !isfinite(d) || fabs(d) > FLT_MAX ||
        !weft_param_in_range(r, (float)d))
        return bad_field(err, path, r->name, r->expect, v);
    *has = 1;
    *out = (float)d;
    return WEFT_OK;
}

weft_status weft_generation_config_load(const char *dir, weft_generation_config *gen,
                                        weft_error *err) {
    memset(gen, 0, sizeof(*gen));
    gen->bos_token_id = -1;
    char path[4096], *text = NULL;
    size_t len = 0;
    weft_error scratch;
    weft_status rc =
        read_file(dir, "generation_config.json", &text, &len, path, sizeof(path), &scratch);
    if (rc == WEFT_ERR_NOT_FOUND) return WEFT_OK;
    if (rc) {
        if (err) *err = scratch;
        return rc;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: not valid JSON: %s (line %d)", path,
                              jerr.text, jerr.line);
    if (!json_is_object(root)) {
        json_decref(root);
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: expected a JSON object", path);
    }
    uint32_t do_sample = 0, top_k = 0;
    json_t *tk = member(root, "top_k");
    if ((rc = get_bool(root, "do_sample", path, 0, &do_sample, err)) ||
        (rc = gen_float(root, &weft_range_temperature, path, &gen->has_temperature,
                        &gen->temperature, err)) ||
        (rc = gen_float(root, &weft_range_top_p, path, &gen->has_top_p, &gen->top_p, err)) ||
        (rc = gen_float(root, &weft_range_min_p, path, &gen->has_min_p, &gen->min_p, err)) ||
        (rc = gen_float(root, &weft_range_repetition_penalty, path, &gen->has_repetition_penalty,
                        &gen->repetition_penalty, err)) ||
        (rc = get_token_id(root, "bos_token_id", path, &gen->bos_token_id, err)) ||
        (rc = get_eos(root, path, gen->eos_token_ids, &gen->n_eos, err)))
        goto done;
    if (tk) {
        if (json_is_integer(tk) && json_integer_value(tk) == 0) {
            gen->has_top_k = 1; /* 0 = off, as in transformers */
        } else if ((rc = get_pos(root, "top_k", path, 0, &top_k, err))) {
            goto done;
        } else {
            gen->has_top_k = 1;
            gen->top_k = (int32_t)top_k;
        }
    }
    if (member(root, "max_new_tokens")) {
        uint32_t m = 0;
        if ((rc = get_pos(root, "max_new_tokens", path, 0, &m, err))) goto done;
        gen->max_new_tokens = m;
    }
    /* transformers samples only when do_sample is true; otherwise it decodes greedily and
     * ignores temperature, top_p and top_k. Say so explicitly as temperature 0. */
    if (!do_sample) {
        gen->has_temperature = 1;
        gen->temperature = 0.0f;
    }
done:
    json_decref(root);
    return rc;
}
