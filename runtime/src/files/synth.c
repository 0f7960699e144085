/* Synthetic checkpoints for a real config (see synth.h). The tensor list mirrors what
 * transformers' Llama, Qwen2, Qwen3 and Qwen3-MoE modules save; values come from a
 * counter-based generator (a splitmix64 hash of seed, tensor name and element index, then
 * Box-Muller) so that a tensor can be produced in independent chunks on several threads and the
 * same seed always gives the same bytes. Files are streamed through the safetensors writer's
 * fill callback and split into ~4 GB shards with an index, as transformers does, so a 16 GB
 * checkpoint never sits in memory. */
#include "files/synth.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files/config.h"
#include "files/safetensors.h"
#include "util/error.h"
#include "util/file.h"

#define SRC "synth"
#define DEFAULT_SHARD (4000ull * 1000 * 1000)
#define STDDEV 0.02

/* ---- values ------------------------------------------------------------------------------ */
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t tensor_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name, then mixed with the seed */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix64(h ^ mix64(seed));
}

/* The two normals of pair k (elements 2k and 2k+1). */
static void pair_normals(uint64_t key, uint64_t k, double *z0, double *z1) {
    uint64_t a = mix64(key ^ mix64(2 * k)), b = mix64(key ^ mix64(2 * k + 1));
    double u1 = ((double)(a >> 11) + 1.0) * (1.0 / 9007199254740992.0); /* (0, 1] */
    double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);         /* [0, 1) */
    double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
    *z0 = r * cos(t);
    *z1 = r * sin(t);
}

float weft_synth_value(uint64_t seed, const char *name, uint64_t i) {
    double z0, z1;
    pair_normals(tensor_key(seed, name), i / 2, &z0, &z1);
    return (float)(STDDEV * (i % 2 ? z1 : z0));
}

/* ---- tensor list ------------------------------------------------------------------------- */
typedef struct tlist {
    weft_synth_tensor *t;
    size_t n, cap;
    int oom;
} tlist;

static void add(tlist *l, uint32_t ones, int64_t s0, int64_t s1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void add(tlist *l, uint32_t ones, int64_t s0, int64_t s1, const char *fmt, ...) {
    if (l->oom) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        weft_synth_tensor *t = realloc(l->t, cap * sizeof(*t));
        if (!t) {
            l->oom = 1;
            return;
        }
        l->t = t;
        l->cap = cap;
    }
    weft_synth_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof(*t));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->ones = ones;
    t->rank = s1 ? 2 : 1;
    t->shape[0] = s0;
    t->shape[1] = s1;
}

/* Qwen3-MoE: layer l has experts unless listed in mlp_only_layers or off the sparse step. */
static int layer_is_sparse(json_t *root, uint32_t l) {
    json_t *only = json_object_get(root, "mlp_only_layers");
    size_t i;
    json_t *v;
    json_array_foreach(only, i, v) if (json_is_integer(v) &&
                                       json_integer_value(v) == (json_int_t)l) return 0;
    json_t *step = json_object_get(root, "decoder_sparse_step");
    json_int_t s = json_is_integer(step) ? json_integer_value(step) : 1;
    return s > 0 && (l + 1) % (uint64_t)s == 0;
}

weft_status weft_synth_tensors(const weft_model_config *cfg, const char *raw_json,
                               weft_synth_tensor **out, size_t *n, weft_error *err) {
    *out = NULL;
    *n = 0;
    json_t *root = raw_json ? json_loads(raw_json, 0, NULL) : NULL;
    tlist l = {0};
    const char *type = cfg->model_type;
    int64_t D = cfg->hidden_size, V = cfg->vocab_size, hd = cfg->head_dim;
    int64_t Q = (int64_t)cfg->n_heads * hd, KV = (int64_t)cfg->n_kv_heads * hd;
    int qwen2 = !strcmp(type, "qwen2");
    add(&l, 0, V, D, "model.embed_tokens.weight");
    for (uint32_t i = 0; i < cfg->n_layers; i++) {
        const char *p = "model.layers";
        add(&l, 1, D, 0, "%s.%u.input_layernorm.weight", p, i);
        add(&l, 1, D, 0, "%s.%u.post_attention_layernorm.weight", p, i);
        add(&l, 0, Q, D, "%s.%u.self_attn.q_proj.weight", p, i);
        add(&l, 0, KV, D, "%s.%u.self_attn.k_proj.weight", p, i);
        add(&l, 0, KV, D, "%s.%u.self_attn.v_proj.weight", p, i);
        add(&l, 0, D, Q, "%s.%u.self_attn.o_proj.weight", p, i);
        if (cfg->attention_bias) {
            add(&l, 0, Q, 0, "%s.%u.self_attn.q_proj.bias", p, i);
            add(&l, 0, KV, 0, "%s.%u.self_attn.k_proj.bias", p, i);
            add(&l, 0, KV, 0, "%s.%u.self_attn.v_proj.bias", p, i);
            /* Qwen2's output projection never has a bias; Llama's and Qwen3's follow the flag. */
            if (!qwen2) add(&l, 0, D, 0, "%s.%u.self_attn.o_proj.bias", p, i);
        }
        if (cfg->qk_norm) {
            add(&l, 1, hd, 0, "%s.%u.self_attn.q_norm.weight", p, i);
            add(&l, 1, hd, 0, "%s.%u.self_attn.k_norm.weight", p, i);
        }
        if (cfg->n_experts && layer_is_sparse(root, i)) {
            int64_t E = cfg->n_experts, MI = cfg->moe_intermediate_size;
            add(&l, 0, E, D, "%s.%u.mlp.gate.weight", p, i);
            for (int64_t e = 0; e < E; e++) {
                add(&l, 0, MI, D, "%s.%u.mlp.experts.%lld.gate_proj.weight", p, i, (long long)e);
                add(&l, 0, MI, D, "%s.%u.mlp.experts.%lld.up_proj.weight", p, i, (long long)e);
                add(&l, 0, D, MI, "%s.%u.mlp.experts.%lld.down_proj.weight", p, i, (long long)e);
            }
        } else {
            int64_t I = cfg->intermediate_size;
            add(&l, 0, I, D, "%s.%u.mlp.gate_proj.weight", p, i);
            add(&l, 0, I, D, "%s.%u.mlp.up_proj.weight", p, i);
            add(&l, 0, D, I, "%s.%u.mlp.down_proj.weight", p, i);
        }
    }
    add(&l, 1, D, 0, "model.norm.weight");
    if (!cfg->tie_embeddings) add(&l, 0, V, D, "lm_head.weight");
    json_decref(root);
    if (l.oom) {
        free(l.t);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory for the tensor list");
    }
    *out = l.t;
    *n = l.n;
    return WEFT_OK;
}

/* ---- filling ----------------------------------------------------------------------------- */
typedef struct fill_job {
    uint64_t key;
    uint32_t dtype, ones;
    uint64_t first, count; /* element range */
    uint8_t *out;          /* element `first` goes to out[0] */
} fill_job;

static void *fill_range(void *arg) {
    const fill_job *j = arg;
    size_t es = weft_dtype_size(j->dtype);
    for (uint64_t e = 0; e < j->count;) {
        uint64_t idx = j->first + e;
        double z[2] = {1.0, 1.0};
        if (!j->ones) {
            pair_normals(j->key, idx / 2, &z[0], &z[1]);
            z[0] *= STDDEV;
            z[1] *= STDDEV;
        }
        for (uint64_t s = idx % 2; s < 2 && e < j->count; s++, e++) {
            float v = (float)z[s];
            uint8_t *o = j->out + (size_t)e * es;
            if (j->dtype == WEFT_DTYPE_F32) {
                memcpy(o, &v, 4);
            } else {
                uint16_t h = j->dtype == WEFT_DTYPE_BF16 ? weft_f32_to_bf16(v) : weft_f32_to_f16(v);
                memcpy(o, &h, 2);
            }
        }
    }
    return NULL;
}

typedef struct synth_ctx {
    uint64_t seed;
    uint32_t threads;
} synth_ctx;

static int name_is_norm(const char *name) {
    size_t n = strlen(name);
    return n >= 11 && !strcmp(name + n - 11, "norm.weight");
}

static weft_status synth_fill(void *vctx, const char *name, uint32_t dtype, uint32_t rank,
                              const int64_t *shape, uint64_t offset, void *buf, uint64_t bytes,
                              weft_error *err) {
    const synth_ctx *c = vctx;
    size_t es = weft_dtype_size(dtype);
    if (!es || offset % es || bytes % es)
        return weft_error_set(err, WEFT_ERR_INTERNAL, SRC, "unaligned chunk of %s", name);
    uint64_t first = offset / es, count = bytes / es;
    uint32_t nt = c->threads;
    if (count < 65536) nt = 1;
    fill_job jobs[16];
    pthread_t tid[16];
    int started[16] = {0};
    uint64_t per = (count + nt - 1) / nt;
    for (uint32_t t = 0; t < nt; t++) {
        uint64_t b = (uint64_t)t * per, e = b + per < count ? b + per : count;
        jobs[t] = (fill_job){tensor_key(c->seed, name),
                             dtype,
                             (uint32_t)name_is_norm(name),
                             first + b,
                             b < e ? e - b : 0,
                             (uint8_t *)buf + b * es};
        if (t > 0 && pthread_create(&tid[t], NULL, fill_range, &jobs[t]) == 0) started[t] = 1;
    }
    fill_range(&jobs[0]);
    for (uint32_t t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            fill_range(&jobs[t]); /* no thread: do it here */
    }
    return WEFT_OK;
}

/* ---- writing ----------------------------------------------------------------------------- */
static weft_status write_text(const char *dir, const char *name, const char *text,
                              weft_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot create: %s", path,
                              strerror(errno));
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok ? WEFT_OK
              : weft_error_set(err, WEFT_ERR_IO, SRC, "%s: write failed: %s", path,
                               strerror(errno));
}

static weft_status write_doc(const char *dir, const char *name, json_t *doc, weft_error *err) {
    if (!doc) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", name);
    char *s = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(doc);
    if (!s) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", name);
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", name);
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    weft_status rc = write_text(dir, name, t, err);
    free(t);
    return rc;
}

static const char *torch_name(uint32_t dtype) {
    return dtype == WEFT_DTYPE_BF16 ? "bfloat16" : dtype == WEFT_DTYPE_F16 ? "float16" : "float32";
}

/* config.json as given, or with the layer count and dtype the options changed. */
static weft_status write_config(const char *outdir, const char *raw, const weft_model_config *cfg,
                                uint32_t layers, uint32_t dtype, weft_error *err) {
    if (layers == cfg->n_layers && dtype == cfg->dtype)
        return write_text(outdir, "config.json", raw, err);
    json_t *root = json_loads(raw, 0, NULL);
    if (!root) return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "config.json: cannot re-read");
    json_object_set_new(root, "num_hidden_layers", json_integer(layers));
    /* Per-layer lists must keep one entry per layer. */
    json_t *lt = json_object_get(root, "layer_types");
    if (json_is_array(lt))
        while (json_array_size(lt) > layers)
            json_array_remove(lt, json_array_size(lt) - 1);
    const char *key = json_object_get(root, "dtype") ? "dtype" : "torch_dtype";
    json_object_set_new(root, key, json_string(torch_name(dtype)));
    return write_doc(outdir, "config.json", root, err);
}

static weft_status write_generation(const char *outdir, const weft_model_config *cfg,
                                    weft_error *err) {
    json_t *doc = json_object();
    if (cfg->bos_token_id >= 0)
        json_object_set_new(doc, "bos_token_id", json_integer(cfg->bos_token_id));
    if (cfg->n_eos == 1) {
        json_object_set_new(doc, "eos_token_id", json_integer(cfg->eos_token_ids[0]));
    } else if (cfg->n_eos > 1) {
        json_t *a = json_array();
        for (uint32_t i = 0; i < cfg->n_eos; i++)
            json_array_append_new(a, json_integer(cfg->eos_token_ids[i]));
        json_object_set_new(doc, "eos_token_id", a);
    }
    return write_doc(outdir, "generation_config.json", doc, err);
}

weft_status weft_synth_write(const char *config_path, const char *outdir,
                             const weft_synth_options *opts, weft_error *err) {
    weft_synth_options o = {0};
    if (opts) o = *opts;
    char *raw = NULL;
    size_t raw_len = 0;
    weft_model_config cfg;
    weft_synth_tensor *t = NULL;
    size_t n = 0;
    weft_status rc = weft_file_read(config_path, 16u << 20, "a config", SRC, &raw, &raw_len, err);
    if (rc) return rc;
    if ((rc = weft_config_parse(raw, raw_len, config_path, &cfg, err))) goto done;
    uint32_t dtype = o.dtype ? o.dtype : cfg.dtype;
    if (dtype != WEFT_DTYPE_F32 && dtype != WEFT_DTYPE_BF16 && dtype != WEFT_DTYPE_F16) {
        rc = weft_error_set(err, WEFT_ERR_INVALID, SRC, "dtype: expected f32, f16 or bf16, got %s",
                            weft_dtype_name(dtype));
        goto done;
    }
    uint32_t layers = o.layers ? o.layers : cfg.n_layers;
    if (layers > cfg.n_layers) {
        rc = weft_error_set(err, WEFT_ERR_INVALID, SRC,
                            "layers: expected at most the config's num_hidden_layers (%u), got %u",
                            cfg.n_layers, layers);
        goto done;
    }
    uint32_t cfg_layers = cfg.n_layers;
    cfg.n_layers = layers;
    if ((rc = weft_synth_tensors(&cfg, raw, &t, &n, err))) goto done;
    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
        rc =
            weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot create: %s", outdir, strerror(errno));
        goto done;
    }
    /* A checkpoint left by an earlier run would shadow this one: the index wins over a single
     * file when a directory is opened. */
    char stale[4096];
    snprintf(stale, sizeof(stale), "%s/model.safetensors.index.json", outdir);
    remove(stale);
    snprintf(stale, sizeof(stale), "%s/model.safetensors", outdir);
    remove(stale);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    synth_ctx ctx = {o.seed, o.threads ? o.threads : (uint32_t)(cpus > 0 ? cpus : 1)};
    if (ctx.threads > 16) ctx.threads = 16;
    uint64_t limit = o.shard_bytes ? o.shard_bytes : DEFAULT_SHARD;
    /* Assign tensors to shards in model order, starting a new shard when the next tensor would
     * push the current one past the limit (a tensor larger than the limit gets its own). */
    uint32_t *shard_of = calloc(n ? n : 1, sizeof(uint32_t));
    if (!shard_of) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        goto done;
    }
    uint32_t n_shards = 1;
    uint64_t in_shard = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = weft_dtype_bytes(dtype, t[i].rank, t[i].shape);
        if (in_shard && in_shard + b > limit) {
            n_shards++;
            in_shard = 0;
        }
        in_shard += b;
        total += b;
        shard_of[i] = n_shards - 1;
    }
    json_t *weight_map = n_shards > 1 ? json_object() : NULL;
    for (uint32_t s = 0; s < n_shards && !rc; s++) {
        char file[64], path[4096];
        if (n_shards == 1)
            snprintf(file, sizeof(file), "model.safetensors");
        else
            snprintf(file, sizeof(file), "model-%05u-of-%05u.safetensors", s + 1, n_shards);
        snprintf(path, sizeof(path), "%s/%s", outdir, file);
        weft_st_writer *w = weft_st_writer_new();
        if (!w) rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        for (size_t i = 0; i < n && !rc; i++) {
            if (shard_of[i] != s) continue;
            rc = weft_st_writer_add_deferred(w, t[i].name, dtype, t[i].rank, t[i].shape, err);
            if (!rc && weight_map) json_object_set_new(weight_map, t[i].name, json_string(file));
        }
        if (!rc) {
            weft_log(WEFT_LOG_INFO, SRC, "writing %s (%.1f MB)", path,
                     (double)weft_st_writer_data_bytes(w) / 1e6);
            rc = weft_st_writer_write_fill(w, path, "{\"format\":\"pt\"}", synth_fill, &ctx, err);
        }
        weft_st_writer_free(w);
    }
    free(shard_of);
    if (!rc && weight_map) {
        json_t *index = json_pack("{s:{s:I},s:O}", "metadata", "total_size", (json_int_t)total,
                                  "weight_map", weight_map);
        rc = write_doc(outdir, "model.safetensors.index.json", index, err);
    }
    json_decref(weight_map);
    if (!rc) {
        cfg.n_layers = cfg_layers;
        rc = write_config(outdir, raw, &cfg, layers, dtype, err);
    }
    if (!rc) rc = write_generation(outdir, &cfg, err);
done:
    free(t);
    free(raw);
    return rc;
}
