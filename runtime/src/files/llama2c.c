/* llama2.c files: reads the legacy (version 0) checkpoint and the tok*.bin tokenizer, checking
 * every header value against the file length, and converts both to the Hugging Face layout.
 * The conversion streams the weights straight from the mapping into model.safetensors (q and k
 * rows reordered on the way from llama2.c's interleaved-pair RoPE to HF's half-split RoPE) and
 * derives a BPE merge list from the sentencepiece scores so that HF's rank-ordered BPE picks the
 * same merges as llama2.c's highest-score-first encoder (docs/MODEL_FILES.md). */
#include "files/llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files/safetensors.h"
#include "util/error.h"

#define SRC "llama2c"
/* Bounds that keep every size product far inside 64 bits and refuse garbage headers. */
#define MAX_DIM (1 << 16)
#define MAX_HIDDEN (1 << 20)
#define MAX_LAYERS 4096
#define MAX_VOCAB (1 << 24)
#define MAX_SEQ (1 << 24)
#define MAGIC_AK42 0x616b3432u

static int32_t le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static int host_is_little_endian(void) {
    uint16_t x = 1;
    uint8_t b;
    memcpy(&b, &x, 1);
    return b == 1;
}

weft_status weft_llama2c_open(const char *path, weft_llama2c_model *m, weft_error *err) {
    memset(m, 0, sizeof(*m));
    if (!host_is_little_endian())
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC,
                              "%s: llama2.c files are little-endian; this host is not", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, SRC,
                              "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 28) {
        close(fd);
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: expected a llama2.c checkpoint of at least 28 bytes (7 int32 "
                              "header), got %lld bytes",
                              path, (long long)sb.st_size);
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: mmap failed: %s", path, strerror(errno));
    m->map = p;
    m->map_len = (size_t)sb.st_size;
    const uint8_t *b = p;
    if ((uint32_t)le32(b) == MAGIC_AK42) {
        int32_t version = le32(b + 4);
        weft_llama2c_close(m);
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC,
                              "%s: llama2.c export version %d (magic \"ak42\"); only the legacy "
                              "version 0 checkpoint is supported",
                              path, version);
    }
    int32_t h[7];
    for (int i = 0; i < 7; i++)
        h[i] = le32(b + 4 * i);
    static const char *names[] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                  "n_kv_heads", "vocab_size", "seq_len"};
    static const int32_t maxv[] = {MAX_DIM, MAX_HIDDEN, MAX_LAYERS, MAX_DIM,
                                   MAX_DIM, MAX_VOCAB,  MAX_SEQ};
    for (int i = 0; i < 7; i++) {
        int32_t v = i == 5 && h[i] < 0 && h[i] != INT32_MIN ? -h[i] : h[i];
        if (v <= 0 || v > maxv[i]) {
            weft_llama2c_close(m);
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "%s: header %s: expected 1..%d, got %d", path, names[i], maxv[i],
                                  h[i]);
        }
    }
    m->dim = h[0];
    m->hidden_dim = h[1];
    m->n_layers = h[2];
    m->n_heads = h[3];
    m->n_kv_heads = h[4];
    m->shared_classifier = h[5] > 0;
    m->vocab_size = h[5] > 0 ? h[5] : -h[5];
    m->seq_len = h[6];
    const char *why = NULL;
    if (m->dim % m->n_heads)
        why = "dim is not a multiple of n_heads";
    else if (m->n_heads % m->n_kv_heads)
        why = "n_heads is not a multiple of n_kv_heads";
    else if ((m->dim / m->n_heads) % 2)
        why = "head size dim / n_heads is odd (RoPE needs pairs)";
    if (why) {
        weft_status rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                        "%s: header: %s (dim %d, n_heads %d, n_kv_heads %d)", path,
                                        why, m->dim, m->n_heads, m->n_kv_heads);
        weft_llama2c_close(m);
        return rc;
    }
    m->head_size = m->dim / m->n_heads;
    uint64_t D = (uint64_t)m->dim, H = (uint64_t)m->hidden_dim, L = (uint64_t)m->n_layers;
    uint64_t V = (uint64_t)m->vocab_size, KV = (uint64_t)m->n_kv_heads * (uint64_t)m->head_size;
    uint64_t S = (uint64_t)m->seq_len, HS = (uint64_t)m->head_size;
    uint64_t sizes[] = {V * D,     L * D,     L * D * D, L * KV * D, L * KV * D, L * D * D, L * D,
                        L * H * D, L * D * H, L * H * D, D,          S * HS / 2, S * HS / 2};
    const float **dst[] = {&m->token_embedding,
                           &m->rms_att,
                           &m->wq,
                           &m->wk,
                           &m->wv,
                           &m->wo,
                           &m->rms_ffn,
                           &m->w1,
                           &m->w2,
                           &m->w3,
                           &m->rms_final,
                           NULL,
                           NULL};
    uint64_t floats = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        floats += sizes[i];
    uint64_t want = 28 + 4 * (floats + (m->shared_classifier ? 0 : V * D));
    if (want != (uint64_t)m->map_len) {
        weft_status rc = weft_error_set(
            err, WEFT_ERR_FORMAT, SRC,
            "%s: header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, "
            "vocab_size %d%s, seq_len %d) implies %llu bytes, the file has %zu",
            path, m->dim, m->hidden_dim, m->n_layers, m->n_heads, m->n_kv_heads, m->vocab_size,
            m->shared_classifier ? " shared" : " unshared", m->seq_len, (unsigned long long)want,
            m->map_len);
        weft_llama2c_close(m);
        return rc;
    }
    const float *f = (const float *)(b + 28);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (dst[i]) *dst[i] = f;
        f += sizes[i]; /* freq_cis_real / imag are skipped: RoPE is recomputed */
    }
    m->wcls = m->shared_classifier ? m->token_embedding : f;
    return WEFT_OK;
}

void weft_llama2c_close(weft_llama2c_model *m) {
    if (m && m->map) munmap(m->map, m->map_len);
    if (m) memset(m, 0, sizeof(*m));
}

/* ---- tokenizer --------------------------------------------------------------------------- */
weft_status weft_llama2c_vocab_load(const char *path, uint32_t n, weft_llama2c_vocab *v,
                                    weft_error *err) {
    memset(v, 0, sizeof(*v));
    if (!host_is_little_endian())
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC,
                              "%s: llama2.c files are little-endian; this host is not", path);
    if (n == 0 || n > MAX_VOCAB)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "%s: vocab size %u out of range", path,
                              n);
    FILE *f = fopen(path, "rb");
    if (!f)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, SRC,
                              "%s: cannot open: %s", path, strerror(errno));
    weft_status rc = WEFT_OK;
    uint8_t b[8];
    v->pieces = calloc(n, sizeof(*v->pieces));
    v->lens = calloc(n, sizeof(*v->lens));
    v->scores = calloc(n, sizeof(*v->scores));
    if (!v->pieces || !v->lens || !v->scores) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", path);
        goto done;
    }
    v->n = n;
    if (fread(b, 1, 4, f) != 4 || le32(b) <= 0 || le32(b) > 65536) {
        rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                            "%s: expected an int32 max_token_length in 1..65536 first", path);
        goto done;
    }
    v->max_token_length = (uint32_t)le32(b);
    for (uint32_t i = 0; i < n; i++) {
        if (fread(b, 1, 8, f) != 8) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                "%s: truncated at token %u of %u (expected score and length)", path,
                                i, n);
            goto done;
        }
        memcpy(&v->scores[i], b, 4); /* little-endian host checked by the model reader */
        int32_t len = le32(b + 4);
        if (len <= 0 || (uint32_t)len > v->max_token_length) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                "%s: token %u: length %d, expected 1..max_token_length %u", path, i,
                                len, v->max_token_length);
            goto done;
        }
        v->lens[i] = (uint32_t)len;
        v->pieces[i] = malloc((size_t)len + 1);
        if (!v->pieces[i]) {
            rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", path);
            goto done;
        }
        if (fread(v->pieces[i], 1, (size_t)len, f) != (size_t)len) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: truncated in token %u of %u", path,
                                i, n);
            goto done;
        }
        v->pieces[i][len] = '\0';
        if (memchr(v->pieces[i], '\0', (size_t)len)) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: token %u contains a NUL byte", path,
                                i);
            goto done;
        }
    }
    if (fgetc(f) != EOF)
        rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                            "%s: bytes left after %u tokens (does the tokenizer match the "
                            "model's vocab_size?)",
                            path, n);
done:
    fclose(f);
    if (rc) weft_llama2c_vocab_free(v);
    return rc;
}

void weft_llama2c_vocab_free(weft_llama2c_vocab *v) {
    if (!v) return;
    for (uint32_t i = 0; v->pieces && i < v->n; i++)
        free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->scores);
    memset(v, 0, sizeof(*v));
}

/* ---- RoPE row permutation ---------------------------------------------------------------- */
uint32_t weft_llama2c_permuted_source_row(uint32_t r, uint32_t head_size) {
    uint32_t half = head_size / 2, head = r / head_size, k = r % head_size;
    uint32_t i = k / half, j = k % half; /* HF: half i, pair j */
    return head * head_size + 2 * j + i;
}

void weft_llama2c_permute_rows(const float *src, float *dst, uint32_t n_heads, uint32_t head_size,
                               uint32_t cols) {
    for (uint32_t r = 0; r < n_heads * head_size; r++)
        memcpy(dst + (size_t)r * cols,
               src + (size_t)weft_llama2c_permuted_source_row(r, head_size) * cols,
               (size_t)cols * sizeof(float));
}

/* ---- conversion -------------------------------------------------------------------------- */
typedef struct conv_tensor {
    char name[96];
    const float *src;
    int64_t shape[2];
    uint32_t rank;
    uint32_t permute_head_size; /* 0: copy as is */
} conv_tensor;

typedef struct conv_ctx {
    conv_tensor *t;
    size_t n;
} conv_ctx;

static weft_status conv_fill(void *vctx, const char *name, uint32_t dtype, uint32_t rank,
                             const int64_t *shape, uint64_t offset, void *buf, uint64_t bytes,
                             weft_error *err) {
    conv_ctx *c = vctx;
    const conv_tensor *t = NULL;
    for (size_t i = 0; i < c->n && !t; i++)
        if (!strcmp(c->t[i].name, name)) t = &c->t[i];
    if (!t || offset % 4 || bytes % 4)
        return weft_error_set(err, WEFT_ERR_INTERNAL, SRC, "convert: unexpected chunk of %s", name);
    if (!t->permute_head_size) {
        memcpy(buf, (const uint8_t *)t->src + offset, bytes);
        return WEFT_OK;
    }
    uint64_t cols = (uint64_t)t->shape[1], first = offset / 4, count = bytes / 4;
    float *out = buf;
    for (uint64_t e = 0; e < count; e++) {
        uint64_t idx = first + e, row = idx / cols, col = idx % cols;
        uint64_t srow = weft_llama2c_permuted_source_row((uint32_t)row, t->permute_head_size);
        out[e] = t->src[srow * cols + col];
    }
    return WEFT_OK;
}

static weft_status write_json(const char *dir, const char *name, json_t *doc, weft_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (!doc) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", path);
    int rc = json_dump_file(doc, path, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(doc);
    if (rc != 0)
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot write: %s", path, strerror(errno));
    return WEFT_OK;
}

/* mkdir -p */
static weft_status make_dirs(const char *dir, weft_error *err) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(buf))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "output directory name too long");
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot create: %s", buf,
                                  strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: not a directory", dir);
    return WEFT_OK;
}

static void add_conv(conv_ctx *c, const char *name, const float *src, uint32_t rank, int64_t s0,
                     int64_t s1, uint32_t permute_head_size) {
    conv_tensor *t = &c->t[c->n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->src = src;
    t->rank = rank;
    t->shape[0] = s0;
    t->shape[1] = s1;
    t->permute_head_size = permute_head_size;
}

static weft_status write_weights(const weft_llama2c_model *m, const char *outdir, weft_error *err) {
    size_t cap = 4 + 9 * (size_t)m->n_layers;
    conv_ctx c = {calloc(cap, sizeof(conv_tensor)), 0};
    weft_st_writer *w = weft_st_writer_new();
    weft_status rc = WEFT_OK;
    if (!c.t || !w) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "convert: out of memory");
        goto done;
    }
    int64_t D = m->dim, H = m->hidden_dim, V = m->vocab_size;
    int64_t KV = (int64_t)m->n_kv_heads * m->head_size;
    char nm[96];
    add_conv(&c, "model.embed_tokens.weight", m->token_embedding, 2, V, D, 0);
    add_conv(&c, "model.norm.weight", m->rms_final, 1, D, 0, 0);
    if (!m->shared_classifier) add_conv(&c, "lm_head.weight", m->wcls, 2, V, D, 0);
    uint32_t hs = (uint32_t)m->head_size;
    for (int32_t l = 0; l < m->n_layers; l++) {
        size_t L = (size_t)l;
#define NAME(suffix) (snprintf(nm, sizeof(nm), "model.layers.%d.%s", l, suffix), nm)
        add_conv(&c, NAME("input_layernorm.weight"), m->rms_att + L * D, 1, D, 0, 0);
        add_conv(&c, NAME("post_attention_layernorm.weight"), m->rms_ffn + L * D, 1, D, 0, 0);
        add_conv(&c, NAME("self_attn.q_proj.weight"), m->wq + L * D * D, 2, D, D, hs);
        add_conv(&c, NAME("self_attn.k_proj.weight"), m->wk + L * KV * D, 2, KV, D, hs);
        add_conv(&c, NAME("self_attn.v_proj.weight"), m->wv + L * KV * D, 2, KV, D, 0);
        add_conv(&c, NAME("self_attn.o_proj.weight"), m->wo + L * D * D, 2, D, D, 0);
        add_conv(&c, NAME("mlp.gate_proj.weight"), m->w1 + L * H * D, 2, H, D, 0);
        add_conv(&c, NAME("mlp.down_proj.weight"), m->w2 + L * D * H, 2, D, H, 0);
        add_conv(&c, NAME("mlp.up_proj.weight"), m->w3 + L * H * D, 2, H, D, 0);
#undef NAME
    }
    for (size_t i = 0; i < c.n && !rc; i++)
        rc = weft_st_writer_add_deferred(w, c.t[i].name, WEFT_DTYPE_F32, c.t[i].rank, c.t[i].shape,
                                         err);
    if (!rc) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/model.safetensors", outdir);
        rc = weft_st_writer_write_fill(w, path, "{\"format\":\"pt\"}", conv_fill, &c, err);
    }
done:
    weft_st_writer_free(w);
    free(c.t);
    return rc;
}

static json_t *config_doc(const weft_llama2c_model *m) {
    json_t *d = json_object();
    json_object_set_new(d, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(d, "model_type", json_string("llama"));
    json_object_set_new(d, "attention_bias", json_false());
    json_object_set_new(d, "attention_dropout", json_real(0.0));
    json_object_set_new(d, "bos_token_id", json_integer(1));
    json_object_set_new(d, "eos_token_id", json_integer(2));
    json_object_set_new(d, "head_dim", json_integer(m->head_size));
    json_object_set_new(d, "hidden_act", json_string("silu"));
    json_object_set_new(d, "hidden_size", json_integer(m->dim));
    json_object_set_new(d, "initializer_range", json_real(0.02));
    json_object_set_new(d, "intermediate_size", json_integer(m->hidden_dim));
    json_object_set_new(d, "max_position_embeddings", json_integer(m->seq_len));
    json_object_set_new(d, "mlp_bias", json_false());
    json_object_set_new(d, "num_attention_heads", json_integer(m->n_heads));
    json_object_set_new(d, "num_hidden_layers", json_integer(m->n_layers));
    json_object_set_new(d, "num_key_value_heads", json_integer(m->n_kv_heads));
    json_object_set_new(d, "pretraining_tp", json_integer(1));
    json_object_set_new(d, "rms_norm_eps", json_real(1e-5));
    json_object_set_new(d, "rope_scaling", json_null());
    json_object_set_new(d, "rope_theta", json_real(10000.0));
    json_object_set_new(d, "tie_word_embeddings", json_boolean(m->shared_classifier));
    json_object_set_new(d, "torch_dtype", json_string("float32"));
    json_object_set_new(d, "use_cache", json_true());
    json_object_set_new(d, "vocab_size", json_integer(m->vocab_size));
    return d;
}

/* "<0xAB>" with upper-case hex: a byte-fallback piece. */
static int is_byte_piece(const char *s, uint32_t len) {
    static const char hex[] = "0123456789ABCDEF";
    return len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && strchr(hex, s[3]) && s[3] &&
           strchr(hex, s[4]) && s[4] && s[5] == '>';
}

/* The HF form of piece i: specials renamed, spaces as U+2581. */
static char *hf_piece(const weft_llama2c_vocab *v, uint32_t i) {
    static const char *special[] = {"<unk>", "<s>", "</s>"};
    if (i < 3) return strdup(special[i]);
    size_t spaces = 0;
    for (uint32_t k = 0; k < v->lens[i]; k++)
        spaces += v->pieces[i][k] == ' ';
    char *s = malloc(v->lens[i] + 2 * spaces + 1), *o = s;
    if (!s) return NULL;
    for (uint32_t k = 0; k < v->lens[i]; k++) {
        if (v->pieces[i][k] == ' ') {
            memcpy(o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            *o++ = v->pieces[i][k];
        }
    }
    *o = '\0';
    return s;
}

typedef struct merge_cand {
    float score;
    uint32_t id;    /* the merged token */
    uint32_t split; /* byte offset of the split in its HF piece */
} merge_cand;

static int cmp_merge(const void *a, const void *b) {
    const merge_cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->split < y->split ? -1 : x->split > y->split;
}

static json_t *special_token(uint32_t id, const char *content) {
    return json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", (int)id, "content", content,
                     "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
}

static weft_status tokenizer_doc(const weft_llama2c_vocab *v, json_t **out, weft_error *err) {
    weft_status rc = WEFT_OK;
    char **hf = calloc(v->n, sizeof(char *));
    json_t *vocab = json_object(), *merges = json_array();
    merge_cand *cands = NULL;
    size_t n_cands = 0, cap_cands = 0;
    uint8_t *mergeable = calloc(v->n, 1);
    *out = NULL;
    if (!hf || !vocab || !merges || !mergeable) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "convert: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < v->n; i++) {
        hf[i] = hf_piece(v, i);
        json_t *id = json_integer(i);
        if (!hf[i] || !id) {
            json_decref(id);
            rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "convert: out of memory");
            goto done;
        }
        if (json_object_get(vocab, hf[i])) {
            json_decref(id);
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                "tokenizer: token %u repeats piece '%.40s' (token %lld)", i, hf[i],
                                (long long)json_integer_value(json_object_get(vocab, hf[i])));
            goto done;
        }
        if (json_object_set_new(vocab, hf[i], id)) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                "tokenizer: token %u is not valid UTF-8; a HF vocab cannot hold "
                                "it",
                                i);
            goto done;
        }
        /* Specials and byte pieces never take part in merges, as in sentencepiece. */
        mergeable[i] = i >= 3 && !is_byte_piece(v->pieces[i], v->lens[i]);
    }
    /* Every way to write a mergeable token as two mergeable tokens is a merge; its rank is
     * the merged token's score order, which is the order llama2.c's encoder prefers. */
    for (uint32_t i = 0; i < v->n; i++) {
        if (!mergeable[i]) continue;
        size_t len = strlen(hf[i]);
        for (size_t k = 1; k < len; k++) {
            if (((unsigned char)hf[i][k] & 0xc0) == 0x80) continue; /* inside a UTF-8 char */
            char *left = strndup(hf[i], k);
            if (!left) {
                rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "convert: out of memory");
                goto done;
            }
            json_t *a = json_object_get(vocab, left), *b = json_object_get(vocab, hf[i] + k);
            free(left);
            if (!a || !b || !mergeable[json_integer_value(a)] || !mergeable[json_integer_value(b)])
                continue;
            if (n_cands == cap_cands) {
                cap_cands = cap_cands ? 2 * cap_cands : 1024;
                merge_cand *nc = realloc(cands, cap_cands * sizeof(*nc));
                if (!nc) {
                    rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "convert: out of memory");
                    goto done;
                }
                cands = nc;
            }
            cands[n_cands++] = (merge_cand){v->scores[i], i, (uint32_t)k};
        }
    }
    if (n_cands) qsort(cands, n_cands, sizeof(*cands), cmp_merge);
    for (size_t c = 0; c < n_cands; c++) {
        const char *p = hf[cands[c].id];
        json_t *pair = json_pack("[s%,s]", p, (size_t)cands[c].split, p + cands[c].split);
        if (!pair || json_array_append_new(merges, pair)) {
            rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "convert: out of memory");
            goto done;
        }
    }
    json_t *model = json_pack("{s:s,s:n,s:s,s:n,s:n,s:b,s:b,s:b,s:O,s:O}", "type", "BPE", "dropout",
                              "unk_token", "<unk>", "continuing_subword_prefix",
                              "end_of_word_suffix", "fuse_unk", 1, "byte_fallback", 1,
                              "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_t *normalizer =
        json_pack("{s:s,s:[{s:s,s:s},{s:s,s:{s:s},s:s}]}", "type", "Sequence", "normalizers",
                  "type", "Prepend", "prepend", "\xe2\x96\x81", "type", "Replace", "pattern",
                  "String", " ", "content", "\xe2\x96\x81");
    json_t *decoder = json_pack("{s:s,s:[{s:s,s:{s:s},s:s},{s:s},{s:s},{s:s,s:s,s:i,s:i}]}", "type",
                                "Sequence", "decoders", "type", "Replace", "pattern", "String",
                                "\xe2\x96\x81", "content", " ", "type", "ByteFallback", "type",
                                "Fuse", "type", "Strip", "content", " ", "start", 1, "stop", 0);
    json_t *post = json_pack(
        "{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}],s:[{s:{s:s,s:i}},{s:{s:s,s:i}},{s:{s:s,s:i}},"
        "{s:{s:s,s:i}}],s:{s:{s:s,s:[i],s:[s]}}}",
        "type", "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "type_id", 0,
        "Sequence", "id", "A", "type_id", 0, "pair", "SpecialToken", "id", "<s>", "type_id", 0,
        "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id", "<s>", "type_id", 1, "Sequence",
        "id", "B", "type_id", 1, "special_tokens", "<s>", "id", "<s>", "ids", 1, "tokens", "<s>");
    json_t *added = json_pack("[o,o,o]", special_token(0, "<unk>"), special_token(1, "<s>"),
                              special_token(2, "</s>"));
    json_t *doc =
        json_pack("{s:s,s:n,s:n,s:o,s:o,s:n,s:o,s:o,s:o}", "version", "1.0", "truncation",
                  "padding", "added_tokens", added, "normalizer", normalizer, "pre_tokenizer",
                  "post_processor", post, "decoder", decoder, "model", model);
    if (!doc) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "convert: cannot build tokenizer.json");
        goto done;
    }
    *out = doc;
done:
    for (uint32_t i = 0; hf && i < v->n; i++)
        free(hf[i]);
    free(hf);
    free(cands);
    free(mergeable);
    json_decref(vocab);
    json_decref(merges);
    return rc;
}

weft_status weft_llama2c_convert(const char *model_path, const char *tokenizer_path,
                                 const char *outdir, weft_error *err) {
    weft_llama2c_model m;
    weft_llama2c_vocab v;
    weft_status rc = weft_llama2c_open(model_path, &m, err);
    if (rc) return rc;
    if (m.vocab_size < 3) { /* ids 0, 1, 2 are <unk>, <s>, </s> in llama2.c's vocabularies */
        rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                            "%s: header vocab_size %d: a llama2.c vocabulary holds at least "
                            "<unk>, <s> and </s> (ids 0-2), which the converted model's "
                            "bos_token_id 1 and eos_token_id 2 name",
                            model_path, m.vocab_size);
        weft_llama2c_close(&m);
        return rc;
    }
    if ((rc = weft_llama2c_vocab_load(tokenizer_path, (uint32_t)m.vocab_size, &v, err))) {
        weft_llama2c_close(&m);
        return rc;
    }
    json_t *tok = NULL;
    if ((rc = make_dirs(outdir, err))) goto done;
    if ((rc = tokenizer_doc(&v, &tok, err))) goto done;
    char stale[4096]; /* an index left in OUTDIR would shadow the new model.safetensors */
    snprintf(stale, sizeof(stale), "%s/model.safetensors.index.json", outdir);
    remove(stale);
    if ((rc = write_weights(&m, outdir, err))) goto done;
    if ((rc = write_json(outdir, "config.json", config_doc(&m), err))) goto done;
    if ((rc = write_json(outdir, "generation_config.json",
                         json_pack("{s:i,s:i}", "bos_token_id", 1, "eos_token_id", 2), err)))
        goto done;
    rc = write_json(outdir, "tokenizer.json", tok, err);
    tok = NULL;
    if (rc) goto done;
    rc = write_json(outdir, "tokenizer_config.json",
                    json_pack("{s:b,s:b,s:s,s:s,s:s,s:n,s:i,s:b,s:s}", "add_bos_token", 1,
                              "add_eos_token", 0, "bos_token", "<s>", "eos_token", "</s>",
                              "unk_token", "<unk>", "pad_token", "model_max_length", m.seq_len,
                              "clean_up_tokenization_spaces", 0, "tokenizer_class",
                              "LlamaTokenizerFast"),
                    err);
done:
    json_decref(tok);
    weft_llama2c_vocab_free(&v);
    weft_llama2c_close(&m);
    return rc;
}
