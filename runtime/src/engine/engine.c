/* The engine (see engine.h and docs/ENGINE.md): opening a candidate into a runnable engine
 * (host services, op registration, config, weights, slot providers), building one step graph
 * per shape bucket on demand (model -> passes -> op resolution -> weight binding -> activation
 * arena -> executor prepare), and the step loop (schedule -> kv -> inputs -> execute ->
 * sample -> deliver text -> retire).
 *
 * Each engine owns a weft_host (plugin/host.h): the services table its plugins receive, with
 * this engine's services registered in it, so services are per engine, never process globals. */
#include "engine/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "engine/providers.h"
#include "engine/threads.h"
#include "files/config.h"
#include "files/safetensors.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/passes.h"
#include "plugin/host.h"
#include "text/stop.h"
#include "util/error.h"

#define ARENA_ALIGN 256
#define DEFAULT_MAX_MODEL_LEN 4096
#define DEFAULT_MAX_BATCH_TOKENS 512
/* Score steps keep (rows, vocab) f32 logits; cap that buffer. */
#define SCORE_LOGITS_BYTES (256u << 20)
#define PROFILE_MAX 64

/* ---- internal types ---------------------------------------------------------------------- */
typedef struct bound_weight {
    char key[320];
    weft_buffer buf;
    int owned; /* allocated through the backend (else a view of the mmap) */
} bound_weight;

/* One step graph per bucket, with everything needed to run it. */
typedef struct variant {
    weft_bucket bucket;
    weft_graph *g;
    const weft_op_impl **impls; /* (n_nodes) */
    const char **providers;     /* (n_nodes) for printing */
    weft_buffer *data;          /* (n_tensors) */
    weft_buffer arena;
    uint64_t arena_bytes;
    uint32_t t_tokens, t_positions, t_logits;
    uint32_t t_kv_slots, t_logit_rows; /* optional device-side step inputs, or NONE */
    /* positions, kv slots and logit rows (those the graph uses), in this order in one device
     * block outside the arena, so a pipelined step uploads them in one copy: each one's offset
     * in the block (UINT64_MAX: not there) and their bytes (in_bytes). The token ids follow in
     * the same block, past in_bytes: a pipelined step's sampler writes them there itself. */
    weft_buffer inputs;
    uint64_t in_off[3], in_bytes;
    void *prepared;
    char hash[33];
} variant;

typedef struct request {
    uint64_t id;
    uint32_t state;  /* 0 waiting, 1 prefilling, 2 decoding, 3 preempted (cache dropped) */
    int32_t *tokens; /* prompt then generated: (cap) */
    uint32_t n_tokens, cap;
    uint32_t n_prompt, n_computed, n_generated, max_total;
    int32_t kv_slot;
    uint64_t arrival_ns;
    uint32_t priority;
    weft_sampler_params sp;
    int32_t *bias_ids;
    float *bias_values;
    int32_t *stop_ids;
    uint32_t n_stop_ids;
    int ignore_eos;
    weft_detok *detok;
    weft_stopper *stopper;
    int stopped_by_string;
    weft_request_callback cb;
    void *user;
    int cancelled;
    uint32_t finish;
    char message[256];
    int in_step; /* scheduled in the current step */
    int32_t pipe_row; /* its row in the pipelined step in flight, -1 = none */
} request;

/* exec.async-pipeline, engine side (see "the pipelined step" below). */
#define PIPE_RING 4   /* pinned input slots: the host is at most one step ahead */
/* a pinned slot: room for a variant's inputs block of three i32 tensors of 2 S rows (a
 * pipelined step's n <= S rows round up to a power-of-two bucket), or the three inputs of S
 * rows apart */
#define PIPE_SLOT_BYTES(S) (3 * (((uint64_t)(S) * 8 + 15) / 16 * 16))
#define PIPE_EVENTS 4 /* step event pairs kept for the idle measurement */
typedef struct pipe_state {
    int checked, usable; /* the decoder has a pipeline hook and the sampler async hooks */
    int host;            /* no sampler plugin: the host samples (cpu; no overlap, same logic) */
    int ready;           /* buffers allocated */
    int active;          /* a step whose tokens are still on the device */
    uint32_t n;          /* its rows */
    request **req;      /* (max seqs) its request per row */
    /* the variant whose token ids input holds the last sampled step's ids (pipe_sample) */
    const struct variant *ids_v;
    weft_buffer stage;   /* pinned: PIPE_RING slots of step inputs (PIPE_SLOT_BYTES) */
    uint32_t slot;
    int32_t *tok, *hids; /* (max seqs) collected tokens; host path: ids to upload */
    float *lp;
    /* host path: the tokens of at most two sampled steps, oldest first */
    int32_t *h_tok[2];
    float *h_lp[2];
    char h_msg[2][256];
    uint32_t h_head, h_count;
    /* device idle measurement (decoder's measure flag): event pairs per launched step */
    int measure;
    void *ev_start[PIPE_EVENTS], *ev_end[PIPE_EVENTS];
    uint64_t n_events;
    double busy_s, idle_s;
    uint64_t launched, pipelined, drains;
} pipe_state;

typedef struct prof_entry {
    const char *name;
    double seconds;
    uint64_t calls;
    uint64_t open_ns;
} prof_entry;

struct weft_engine {
    weft_host *host; /* the services table plugins get, with this engine's services */
    const weft_host_services *hs;
    weft_graph_service graph_svc;
    weft_weights_service weights_svc;
    weft_device_service device_svc;
    weft_kv_service kv_svc;
    weft_threads_service threads_svc;
    weft_profile_service profile_svc;
    weft_tokens_service tokens_svc;
    weft_op_registry *ops;
    weft_pool *pool;
    uint32_t n_threads;

    weft_candidate *cand;
    const weft_loaded_plugin *backend_pl, *model_pl;
    const weft_backend_vtable *be;
    void *be_st;
    void *stream;
    char backend[32];
    int zero_copy;

    char model_dir[1024];
    weft_model_config cfg;
    char *config_json;
    weft_generation_config gen;
    weft_safetensors *st;
    weft_tokenizer *tok;

    /* slots */
    const weft_kv_vtable *kv;
    void *kv_st;
    int kv_default, kv_ready;
    uint32_t kv_dtype;
    char kv_layout[WEFT_LAYOUT_MAX];
    const weft_scheduler_vtable *sched;
    void *sched_st;
    const weft_executor_vtable *exec;
    void *exec_st;
    int exec_default;
    const weft_sampler_vtable *sampler;
    void *sampler_st;
    const weft_decoder_vtable *decoder;
    void *decoder_st;

    uint32_t max_model_len, max_requests, max_batch_tokens;
    uint64_t kv_tokens; /* pool budget in tokens, 0 = max_requests * max_model_len */
    uint32_t stalled;   /* steps in a row where the pool refused and nothing ran */
    int32_t eos[16];
    uint32_t n_eos;

    bound_weight *weights;
    size_t n_weights, cap_weights;
    variant **variants;
    size_t n_variants, cap_variants;
    const variant *current;

    request **reqs;
    size_t n_reqs, cap_reqs;
    uint64_t next_id;

    /* step scratch, sized for the largest bucket */
    int32_t *b_tokens, *b_positions, *b_seq_of_row, *b_logit_rows, *b_kv_slots;
    weft_seq *b_seqs;
    weft_batch b_batch; /* the step's batch as the executor saw it */
    request **b_req;       /* (max seqs) request of each seq */
    uint32_t *b_logit_seq; /* (max seqs) logits row of each seq, UINT32_MAX = none */
    weft_sched_request *s_reqs;
    weft_sched_item *s_items;
    float *logits; /* (max_requests or score rows, vocab) host copy */
    size_t logits_cap;
    void *sample_scratch;
    /* (max seqs) one device-sampler call per step: params, results, and per seq whether the
     * batched call already picked its token (1) or the row goes through sample_row (0) */
    weft_sampling *ps_params;
    int32_t *ps_tok;
    float *ps_lp;
    uint8_t *ps_done;

    pipe_state pipe; /* exec.async-pipeline */

    int profile;
    prof_entry prof[PROFILE_MAX];
    uint32_t n_prof;
    weft_engine_stats stats;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- host services (registered with this engine's weft_host) --------------------------- */
/* weights */
static weft_status ws_find(void *self, const char *source, weft_weight_info *out, weft_error *err) {
    weft_engine *e = self;
    if (!source || !out)
        return weft_error_set(err, WEFT_ERR_INVALID, "weights", "find: missing argument");
    const weft_st_tensor *t = e->st ? weft_safetensors_find(e->st, source) : NULL;
    if (!t)
        return weft_error_set(err, WEFT_ERR_NOT_FOUND, "weights",
                              "%s: the checkpoint has no tensor %s", e->model_dir, source);
    memset(out, 0, sizeof(*out));
    out->dtype = t->dtype;
    out->rank = t->rank;
    for (uint32_t d = 0; d < t->rank && d < WEFT_MAX_DIMS; d++)
        out->shape[d] = t->shape[d];
    out->data = t->data;
    out->bytes = t->bytes;
    return WEFT_OK;
}

static weft_status ws_bound(void *self, uint32_t tensor_id, weft_buffer *out, weft_error *err) {
    weft_engine *e = self;
    const variant *v = e->current;
    if (!v || tensor_id >= v->g->n_tensors || v->g->tensors[tensor_id].kind != WEFT_TENSOR_WEIGHT)
        return weft_error_set(err, WEFT_ERR_INVALID, "weights",
                              "bound: tensor %u is not a weight of the graph being prepared",
                              tensor_id);
    *out = v->data[tensor_id];
    return WEFT_OK;
}

/* device */
static weft_status ds_alloc(void *self, uint64_t bytes, uint32_t memory, weft_buffer *out,
                            weft_error *err) {
    weft_engine *e = self;
    return e->be->alloc(e->be_st, bytes, memory, out, err);
}

static void ds_free(void *self, weft_buffer *buf) {
    weft_engine *e = self;
    e->be->free(e->be_st, buf);
}

static weft_status ds_copy(void *self, weft_buffer *dst, uint64_t dst_off, const weft_buffer *src,
                           uint64_t src_off, uint64_t bytes, void *stream, weft_error *err) {
    weft_engine *e = self;
    return e->be->copy(e->be_st, dst, dst_off, src, src_off, bytes, stream, err);
}

static void *ds_stream(void *self) {
    return ((weft_engine *)self)->stream;
}

static void *ds_native(void *self) {
    weft_engine *e = self;
    return e->be->native ? e->be->native(e->be_st) : NULL;
}

/* kv */
static const weft_kv_view *ks_view(void *self) {
    weft_engine *e = self;
    return e->kv_ready ? e->kv->view(e->kv_st) : NULL;
}

/* threads */
static uint32_t ts_count(void *self) {
    return ((weft_engine *)self)->n_threads;
}

static void ts_parallel_for(void *self, void (*fn)(void *, uint32_t, uint32_t), void *arg,
                            uint32_t n) {
    weft_engine *e = self;
    if (!e->pool && e->n_threads > 1) e->pool = weft_pool_new(e->n_threads);
    weft_pool_parallel_for(e->pool, fn, arg, n);
}

/* profile */
static int32_t ps_enabled(void *self) {
    return ((weft_engine *)self)->profile;
}

static prof_entry *prof_find(weft_engine *e, const char *name) {
    for (uint32_t i = 0; i < e->n_prof; i++)
        if (e->prof[i].name == name || !strcmp(e->prof[i].name, name)) return &e->prof[i];
    if (e->n_prof == PROFILE_MAX) return NULL;
    prof_entry *p = &e->prof[e->n_prof++];
    memset(p, 0, sizeof(*p));
    p->name = name; /* op classes are static strings (op names) */
    return p;
}

static void ps_begin(void *self, const char *op_class, void *stream) {
    (void)stream;
    weft_engine *e = self;
    prof_entry *p = e->profile && op_class ? prof_find(e, op_class) : NULL;
    if (p) p->open_ns = now_ns();
}

static void ps_end(void *self, const char *op_class, void *stream) {
    weft_engine *e = self;
    prof_entry *p = e->profile && op_class ? prof_find(e, op_class) : NULL;
    if (!p || !p->open_ns) return;
    /* Device backends time asynchronously; the host clock is exact on cpu, where every op
     * finishes before it returns. */
    if (e->be && e->be->synchronize && e->stream) e->be->synchronize(e->be_st, stream, NULL);
    p->seconds += (double)(now_ns() - p->open_ns) * 1e-9;
    p->calls++;
    p->open_ns = 0;
}

/* Host phases of a step (inputs, logits download, sampling, delivery) as profile classes beside
 * the op classes, so `weft bench decode --profile` shows the host gap between device work, the
 * Amdahl fraction of exec.device-sampling and exec.async-pipeline. Host clock, no device sync:
 * each phase that waits for the device (the logits download) waits inside its own range. */
static void prof_host(weft_engine *e, const char *phase, uint64_t t0) {
    prof_entry *p = e->profile ? prof_find(e, phase) : NULL;
    if (!p) return;
    p->seconds += (double)(now_ns() - t0) * 1e-9;
    p->calls++;
}

/* tokens */
static weft_status tks_history(void *self, uint64_t request_id, const int32_t **tokens,
                               uint32_t *n) {
    weft_engine *e = self;
    for (size_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == request_id) {
            *tokens = e->reqs[i]->tokens;
            *n = e->reqs[i]->n_tokens;
            return WEFT_OK;
        }
    return WEFT_ERR_NOT_FOUND;
}

static uint32_t tks_vocab(void *self) {
    return ((weft_engine *)self)->cfg.vocab_size;
}

/* The services every plugin may ask for from create() on; weights, device and kv are
 * registered when they exist (after the model is opened, the backend known, the kv set up). */
static weft_status services_init(weft_engine *e, weft_error *err) {
    e->host = weft_host_new();
    if (!e->host) return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    e->hs = weft_host_services_of(e->host);
    e->graph_svc = *weft_graph_service_get();
    e->weights_svc = (weft_weights_service){sizeof(weft_weights_service), 1, e, ws_find, ws_bound};
    e->device_svc = (weft_device_service){
        sizeof(weft_device_service), 1, e, "", ds_alloc, ds_free, ds_copy, ds_stream, ds_native};
    e->kv_svc = (weft_kv_service){sizeof(weft_kv_service), 1, e, ks_view};
    e->threads_svc =
        (weft_threads_service){sizeof(weft_threads_service), 1, e, ts_count, ts_parallel_for};
    e->profile_svc =
        (weft_profile_service){sizeof(weft_profile_service), 1, e, ps_enabled, ps_begin, ps_end};
    e->tokens_svc =
        (weft_tokens_service){sizeof(weft_tokens_service), 1, e, tks_history, tks_vocab};
    weft_status s = weft_host_register_service(e->host, WEFT_SERVICE_GRAPH, &e->graph_svc);
    if (s == WEFT_OK)
        s = weft_host_register_service(e->host, WEFT_SERVICE_OPS, weft_op_registry_service(e->ops));
    if (s == WEFT_OK)
        s = weft_host_register_service(e->host, WEFT_SERVICE_THREADS, &e->threads_svc);
    if (s == WEFT_OK)
        s = weft_host_register_service(e->host, WEFT_SERVICE_PROFILE, &e->profile_svc);
    if (s == WEFT_OK) s = weft_host_register_service(e->host, WEFT_SERVICE_TOKENS, &e->tokens_svc);
    if (s != WEFT_OK) return weft_error_set(err, s, "engine", "registering host services failed");
    return WEFT_OK;
}

static weft_status register_late(weft_engine *e, uint32_t id, const void *table, weft_error *err) {
    weft_status s = weft_host_register_service(e->host, id, table);
    return s == WEFT_OK ? s : weft_error_set(err, s, "engine", "registering service %u failed", id);
}

/* ---- options and small helpers ----------------------------------------------------------- */
void weft_engine_options_default(weft_engine_options *o) {
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
}

void weft_request_params_default(weft_request_params *p) {
    memset(p, 0, sizeof(*p));
    p->size = sizeof(*p);
    weft_sampler_params_default(&p->sampling);
    p->skip_special = 1;
    p->detokenize = 1;
}

const char *weft_finish_name(uint32_t finish) {
    switch (finish) {
    case WEFT_FINISH_NONE:
        return "none";
    case WEFT_FINISH_STOP:
        return "stop";
    case WEFT_FINISH_LENGTH:
        return "length";
    case WEFT_FINISH_CANCELLED:
        return "cancelled";
    case WEFT_FINISH_ERROR:
        return "error";
    default:
        return "?";
    }
}

static const char *err_text(const weft_error *err) {
    return err && err->message[0] ? err->message : "the step failed";
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static uint32_t pow2_at_least(uint32_t n) {
    uint32_t p = 1;
    while (p < n && p < (1u << 30))
        p <<= 1;
    return p;
}

/* ---- weights ----------------------------------------------------------------------------- */
static bound_weight *weight_lookup(weft_engine *e, const char *key) {
    for (size_t i = 0; i < e->n_weights; i++)
        if (!strcmp(e->weights[i].key, key)) return &e->weights[i];
    return NULL;
}

static uint64_t weight_bytes(const weft_tensor *t) {
    uint64_t b = weft_graph_tensor_bytes(t);
    /* Technique dtypes cannot be sized by the host: the pass that made the tensor writes its
     * byte size into reserved[0] (docs/ENGINE.md, "Derived weights"). */
    if (!b) b = t->reserved[0];
    return b;
}

/* Binds weight tensor t of graph g to a buffer, sharing one buffer between every tensor (in
 * every bucket's graph) with the same binding. */
static weft_status bind_weight(weft_engine *e, const weft_graph *g, const weft_tensor *t,
                               weft_buffer *out, weft_error *err) {
    uint64_t bytes = weight_bytes(t);
    if (!bytes)
        return weft_error_set(err, WEFT_ERR_INVALID, "engine",
                              "weight %s: cannot size dtype %u (a technique dtype needs its byte "
                              "size in reserved[0])",
                              t->name, t->dtype);
    char key[320];
    if (t->deriver[0])
        snprintf(key, sizeof(key), "derived:%s:%s:%u:%s:%" PRIu64, t->deriver, t->name, t->dtype,
                 t->layout, bytes);
    else
        snprintf(key, sizeof(key), "source:%s:%u:%s:%" PRIu64, t->source, t->dtype, t->layout,
                 bytes);
    bound_weight *bw = weight_lookup(e, key);
    if (bw) {
        *out = bw->buf;
        return WEFT_OK;
    }
    if (e->n_weights == e->cap_weights) {
        size_t cap = e->cap_weights ? e->cap_weights * 2 : 64;
        bound_weight *w = realloc(e->weights, cap * sizeof(*w));
        if (!w) return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
        e->weights = w;
        e->cap_weights = cap;
    }
    bound_weight nw;
    memset(&nw, 0, sizeof(nw));
    snprintf(nw.key, sizeof(nw.key), "%s", key);
    weft_status s;
    if (t->deriver[0]) {
        const weft_loaded_plugin *p = weft_passes_deriver(e->cand, t->deriver);
        if (!p || !p->desc->pass->derive_weight)
            return weft_error_set(err, WEFT_ERR_NOT_FOUND, "engine",
                                  "weight %s: derived by %s, which is not a pass of this "
                                  "candidate with derive_weight",
                                  t->name, t->deriver);
        void *host = malloc(bytes);
        if (!host)
            return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "weight %s: %" PRIu64 " bytes",
                                  t->name, bytes);
        s = p->desc->pass->derive_weight(p->state, g, t, host, bytes, &e->weights_svc, err);
        if (s == WEFT_OK) s = e->be->alloc(e->be_st, bytes, WEFT_MEMORY_DEVICE, &nw.buf, err);
        if (s == WEFT_OK) {
            nw.owned = 1;
            s = e->be->upload(e->be_st, &nw.buf, 0, host, bytes, err);
        }
        free(host);
        if (s != WEFT_OK) {
            if (nw.owned) e->be->free(e->be_st, &nw.buf);
            weft_error_prefix(err, "weight %s (derived by %s)", t->name, t->deriver);
            return s;
        }
    } else {
        const weft_st_tensor *src = weft_safetensors_find(e->st, t->source);
        if (!src)
            return weft_error_set(err, WEFT_ERR_NOT_FOUND, "engine",
                                  "weight %s: %s has no tensor %s", t->name, e->model_dir,
                                  t->source);
        if (src->dtype != t->dtype || src->bytes != bytes)
            return weft_error_set(
                err, WEFT_ERR_MISMATCH, "engine",
                "weight %s: checkpoint tensor %s is %s (%" PRIu64
                " bytes), the graph expects %s (%" PRIu64 " bytes); a pass "
                "that changes a weight's format must derive it",
                t->name, t->source, weft_dtype_name(src->dtype), src->bytes,
                weft_graph_dtype_name(t->dtype) ? weft_graph_dtype_name(t->dtype) : "?", bytes);
        uint32_t es = weft_graph_dtype_size(t->dtype);
        if (e->zero_copy && es && ((uintptr_t)src->data % es) == 0) {
            /* cpu: the mapping is the weight. Read-only pages: kernels never write weights. */
            nw.buf.ptr = (void *)src->data;
            nw.buf.bytes = bytes;
            nw.buf.memory = WEFT_MEMORY_HOST;
        } else {
            s = e->be->alloc(e->be_st, bytes, WEFT_MEMORY_DEVICE, &nw.buf, err);
            if (s == WEFT_OK) {
                nw.owned = 1;
                s = e->be->upload(e->be_st, &nw.buf, 0, src->data, bytes, err);
            }
            if (s != WEFT_OK) {
                if (nw.owned) e->be->free(e->be_st, &nw.buf);
                weft_error_prefix(err, "weight %s", t->name);
                return s;
            }
        }
    }
    e->weights[e->n_weights++] = nw;
    *out = nw.buf;
    return WEFT_OK;
}

/* ---- activation arena -------------------------------------------------------------------- */
typedef struct live {
    uint32_t t;
    int64_t first, last; /* node interval, inclusive */
    uint64_t bytes, offset;
    int placed;
} live;

static int live_by_size(const void *a, const void *b) {
    const live *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->t < y->t ? -1 : x->t > y->t;
}

static int u64_pair_cmp(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Places every activation, input and output tensor in one arena. Two tensors share bytes only
 * when their live intervals (first producer .. last reader, inclusive, so a node's outputs never
 * alias its inputs) do not overlap; inputs and outputs live for the whole step. Largest first,
 * each at the lowest offset that fits. */
static weft_status plan_arena(const weft_graph *g, const uint8_t *skip, uint64_t *offsets,
                              uint64_t *total, weft_error *err) {
    live *lv = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*lv));
    uint64_t *busy = calloc(2 * (size_t)(g->n_tensors ? g->n_tensors : 1), sizeof(uint64_t));
    if (!lv || !busy) {
        free(lv);
        free(busy);
        return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    }
    for (uint32_t t = 0; t < g->n_tensors; t++) {
        lv[t].t = t;
        lv[t].first = INT64_MAX;
        lv[t].last = -1;
        offsets[t] = UINT64_MAX;
    }
    int64_t end = g->n_nodes;
    for (uint32_t n = 0; n < g->n_nodes; n++) {
        const weft_node *nd = &g->nodes[n];
        for (uint32_t i = 0; i < nd->n_in; i++)
            if (nd->in[i] < g->n_tensors) {
                live *l = &lv[nd->in[i]];
                if (l->first > n) l->first = n;
                if (l->last < (int64_t)n) l->last = n;
            }
        for (uint32_t o = 0; o < nd->n_out; o++)
            if (nd->out[o] < g->n_tensors) {
                live *l = &lv[nd->out[o]];
                if (l->first > n) l->first = n;
                if (l->last < (int64_t)n) l->last = n;
            }
    }
    uint32_t n_live = 0;
    for (uint32_t t = 0; t < g->n_tensors; t++) {
        const weft_tensor *tt = &g->tensors[t];
        if (tt->kind == WEFT_TENSOR_WEIGHT || lv[t].last < 0 || skip[t]) continue;
        if (tt->kind == WEFT_TENSOR_INPUT || tt->kind == WEFT_TENSOR_OUTPUT) {
            lv[t].first = -1;
            lv[t].last = end;
        }
        lv[t].bytes = weft_graph_tensor_bytes(tt);
        if (!lv[t].bytes) {
            free(lv);
            free(busy);
            return weft_error_set(err, WEFT_ERR_INVALID, "engine",
                                  "tensor %s: cannot size dtype %u for the activation arena",
                                  tt->name, tt->dtype);
        }
        lv[t].bytes = (lv[t].bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
        lv[n_live++] = lv[t];
    }
    qsort(lv, n_live, sizeof(*lv), live_by_size);
    uint64_t top = 0;
    for (uint32_t i = 0; i < n_live; i++) {
        size_t nb = 0;
        for (uint32_t j = 0; j < i; j++)
            if (lv[j].first <= lv[i].last && lv[i].first <= lv[j].last) {
                busy[2 * nb] = lv[j].offset;
                busy[2 * nb + 1] = lv[j].offset + lv[j].bytes;
                nb++;
            }
        qsort(busy, nb, 2 * sizeof(uint64_t), u64_pair_cmp);
        uint64_t at = 0;
        for (size_t k = 0; k < nb; k++) {
            if (busy[2 * k] >= at + lv[i].bytes) break;
            if (busy[2 * k + 1] > at) at = busy[2 * k + 1];
        }
        lv[i].offset = at;
        offsets[lv[i].t] = at;
        if (at + lv[i].bytes > top) top = at + lv[i].bytes;
    }
    *total = top;
    free(lv);
    free(busy);
    return WEFT_OK;
}

/* ---- variants (one graph per bucket) ----------------------------------------------------- */
static void variant_free(weft_engine *e, variant *v) {
    if (!v) return;
    if (v->prepared && e->exec && e->exec->release) e->exec->release(e->exec_st, v->prepared);
    if (v->arena.ptr && e->be) e->be->free(e->be_st, &v->arena);
    if (v->inputs.ptr && e->be) e->be->free(e->be_st, &v->inputs);
    free(v->impls);
    free(v->providers);
    free(v->data);
    weft_graph_free(v->g);
    free(v);
}

/* The kv cache dtype: what the graph feeds the attention node's k input, 0 when it has no
 * ATTENTION node (a pass fused it into a user op, e.g. fuse.rope-attention). */
static uint32_t attention_dtype(const weft_graph *g) {
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == WEFT_OP_ATTENTION && g->nodes[i].in[1] < g->n_tensors)
            return g->tensors[g->nodes[i].in[1]].dtype;
    return 0;
}

/* kv_dtype: attention_dtype of the graph after the passes, else of the model's graph before
 * them, else f32. */
static weft_status kv_setup(weft_engine *e, uint32_t kv_dtype, weft_error *err) {
    weft_kv_geometry geo;
    memset(&geo, 0, sizeof(geo));
    geo.size = sizeof(geo);
    geo.n_layers = e->cfg.n_layers;
    geo.n_kv_heads = e->cfg.n_kv_heads;
    geo.head_dim = e->cfg.head_dim;
    geo.dtype = kv_dtype;
    geo.max_seq = e->max_model_len;
    geo.max_requests = e->max_requests;
    /* A token budget becomes the pool's byte budget: k and v of every layer per token. */
    if (e->kv_tokens)
        geo.budget_bytes = e->kv_tokens * 2ull * geo.n_layers * geo.n_kv_heads * geo.head_dim *
                           weft_graph_dtype_size(geo.dtype);
    weft_status s = e->kv->init(e->kv_st, &geo, &e->device_svc, err);
    if (s != WEFT_OK) {
        weft_error_prefix(err, "kv init");
        return s;
    }
    e->kv_ready = 1;
    s = register_late(e, WEFT_SERVICE_KV, &e->kv_svc, err);
    if (s != WEFT_OK) return s;
    const weft_kv_view *view = e->kv->view(e->kv_st);
    e->kv_dtype = geo.dtype;
    snprintf(e->kv_layout, sizeof(e->kv_layout), "%s", view ? view->layout : "");
    return WEFT_OK;
}

/* The executor's context for variant v (the step fields, n_tokens and batch, stay 0); makes v
 * the current variant. */
static void exec_ctx_init(weft_engine *e, variant *v, weft_exec_ctx *ctx) {
    memset(ctx, 0, sizeof(*ctx));
    ctx->size = sizeof(*ctx);
    ctx->graph = v->g;
    ctx->data = v->data;
    ctx->kv = e->kv->view(e->kv_st);
    ctx->backend = e->be_st;
    ctx->stream = e->stream;
    ctx->host = e->hs;
    e->current = v;
}

static weft_status variant_build(weft_engine *e, uint32_t max_tokens, uint32_t max_logits,
                                 variant **out, weft_error *err) {
    variant *v = calloc(1, sizeof(*v));
    if (!v) return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    v->bucket.size = sizeof(v->bucket);
    v->bucket.max_tokens = max_tokens;
    v->bucket.max_seqs = max_tokens < e->max_requests ? max_tokens : e->max_requests;
    v->bucket.max_logits = max_logits;
    v->g = weft_graph_new(&v->bucket);
    weft_status s = v->g ? WEFT_OK : weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    const weft_model_vtable *mv = e->model_pl->desc->model;
    if (s == WEFT_OK) {
        weft_error_clear(err);
        s = mv->build_graph(e->model_pl->state, &e->cfg, &v->bucket, &e->graph_svc, v->g, err);
        if (s != WEFT_OK) {
            if (s > 0) s = WEFT_ERR_INTERNAL;
            weft_error_prefix(err, "model %s: build_graph (bucket of %u tokens)", e->model_pl->name,
                              max_tokens);
        }
    }
    if (s == WEFT_OK) {
        s = weft_graph_validate(v->g, err);
        if (s != WEFT_OK) weft_error_prefix(err, "graph of model %s", e->model_pl->name);
    }
    uint32_t model_kv_dtype = s == WEFT_OK ? attention_dtype(v->g) : 0;
    if (s == WEFT_OK) s = weft_passes_run(e->cand, &e->cfg, v->g, NULL, err);
    if (s == WEFT_OK && !e->kv_ready) {
        uint32_t dt = attention_dtype(v->g);
        s = kv_setup(e, dt ? dt : model_kv_dtype ? model_kv_dtype : WEFT_DTYPE_F32, err);
    }
    const weft_graph *g = v->g;
    if (s == WEFT_OK) {
        v->impls = calloc(g->n_nodes, sizeof(*v->impls));
        v->providers = calloc(g->n_nodes, sizeof(*v->providers));
        v->data = calloc(g->n_tensors, sizeof(*v->data));
        if (!v->impls || !v->providers || !v->data)
            s = weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    }
    if (s == WEFT_OK)
        s = weft_op_registry_resolve(e->ops, g, e->backend, e->kv_dtype, e->kv_layout, v->impls,
                                     err);
    if (s == WEFT_OK) {
        for (uint32_t i = 0; i < g->n_nodes; i++)
            v->providers[i] = v->impls[i]->provider;
        v->t_tokens = e->graph_svc.tensor_find(g, WEFT_INPUT_TOKENS);
        v->t_positions = e->graph_svc.tensor_find(g, WEFT_INPUT_POSITIONS);
        v->t_logits = e->graph_svc.tensor_find(g, WEFT_OUTPUT_LOGITS);
        v->t_kv_slots = e->graph_svc.tensor_find(g, WEFT_INPUT_KV_SLOTS);
        v->t_logit_rows = e->graph_svc.tensor_find(g, WEFT_INPUT_LOGIT_ROWS);
        if (v->t_tokens == WEFT_TENSOR_NONE || v->t_positions == WEFT_TENSOR_NONE ||
            v->t_logits == WEFT_TENSOR_NONE)
            s = weft_error_set(err, WEFT_ERR_INVALID, "engine",
                               "the graph must have tensors %s, %s and %s (model %s)",
                               WEFT_INPUT_TOKENS, WEFT_INPUT_POSITIONS, WEFT_OUTPUT_LOGITS,
                               e->model_pl->name);
        for (uint32_t t = 0; s == WEFT_OK && t < g->n_tensors; t++) {
            const weft_tensor *tt = &g->tensors[t];
            if (tt->kind == WEFT_TENSOR_INPUT && t != v->t_tokens && t != v->t_positions &&
                t != v->t_kv_slots && t != v->t_logit_rows && e->graph_svc.tensor_uses(g, t))
                s = weft_error_set(err, WEFT_ERR_UNSUPPORTED, "engine",
                                   "graph input %s is not one the engine fills (%s, %s, %s, %s)",
                                   tt->name, WEFT_INPUT_TOKENS, WEFT_INPUT_POSITIONS,
                                   WEFT_INPUT_KV_SLOTS, WEFT_INPUT_LOGIT_ROWS);
            else if (tt->kind == WEFT_TENSOR_INPUT && tt->dtype != WEFT_DTYPE_I32)
                s = weft_error_set(err, WEFT_ERR_INVALID, "engine",
                                   "graph input %s: expected i32, got dtype %u", tt->name,
                                   tt->dtype);
        }
        if (s == WEFT_OK &&
            (g->tensors[v->t_logits].dtype != WEFT_DTYPE_F32 || g->tensors[v->t_logits].rank != 2 ||
             g->tensors[v->t_logits].shape[1] != e->cfg.vocab_size ||
             g->tensors[v->t_logits].shape[0] < max_logits))
            s = weft_error_set(err, WEFT_ERR_INVALID, "engine",
                               "%s: expected f32 (>= %u, %u), got dtype %u rank %u",
                               WEFT_OUTPUT_LOGITS, max_logits, e->cfg.vocab_size,
                               g->tensors[v->t_logits].dtype, g->tensors[v->t_logits].rank);
    }
    /* Weights. */
    for (uint32_t t = 0; s == WEFT_OK && t < g->n_tensors; t++)
        if (g->tensors[t].kind == WEFT_TENSOR_WEIGHT && e->graph_svc.tensor_uses(g, t))
            s = bind_weight(e, g, &g->tensors[t], &v->data[t], err);
    /* Positions, kv slots and logit rows, then the token ids: one block (variant.inputs). */
    uint8_t *skip = s == WEFT_OK ? calloc(g->n_tensors ? g->n_tensors : 1, 1) : NULL;
    if (s == WEFT_OK && !skip) s = weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    if (s == WEFT_OK) {
        /* in this order; the first three are what a pipelined step uploads (in_off, in_bytes) */
        const uint32_t tid[4] = {v->t_positions, v->t_kv_slots, v->t_logit_rows, v->t_tokens};
        uint64_t off[4], at = 0;
        for (int k = 0; k < 4; k++) {
            off[k] = UINT64_MAX;
            if (k < 3 && (tid[k] == WEFT_TENSOR_NONE || !e->graph_svc.tensor_uses(g, tid[k])))
                continue;
            off[k] = at;
            at += (weft_graph_tensor_bytes(&g->tensors[tid[k]]) + 15) / 16 * 16;
            skip[tid[k]] = 1;
        }
        for (int k = 0; k < 3; k++)
            v->in_off[k] = off[k];
        v->in_bytes = off[3];
        s = e->be->alloc(e->be_st, at, WEFT_MEMORY_DEVICE, &v->inputs, err);
        for (int k = 0; s == WEFT_OK && k < 4; k++) {
            if (off[k] == UINT64_MAX) continue;
            weft_buffer *d = &v->data[tid[k]];
            *d = v->inputs;
            d->ptr = (uint8_t *)v->inputs.ptr + off[k];
            d->bytes = weft_graph_tensor_bytes(&g->tensors[tid[k]]);
        }
        if (s != WEFT_OK)
            weft_error_prefix(err, "step inputs block of %" PRIu64 " bytes", at);
    }
    /* Activations. */
    if (s == WEFT_OK) {
        uint64_t *offsets = malloc(sizeof(uint64_t) * g->n_tensors);
        if (!offsets) s = weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
        if (s == WEFT_OK) s = plan_arena(g, skip, offsets, &v->arena_bytes, err);
        if (s == WEFT_OK)
            s = e->be->alloc(e->be_st, v->arena_bytes ? v->arena_bytes : ARENA_ALIGN,
                             WEFT_MEMORY_DEVICE, &v->arena, err);
        if (s == WEFT_OK)
            for (uint32_t t = 0; t < g->n_tensors; t++) {
                if (offsets[t] == UINT64_MAX) continue;
                v->data[t].ptr = (uint8_t *)v->arena.ptr + offsets[t];
                v->data[t].bytes = weft_graph_tensor_bytes(&g->tensors[t]);
                v->data[t].memory = v->arena.memory;
                v->data[t].handle = v->arena.handle;
            }
        else
            weft_error_prefix(err, "activation arena of %" PRIu64 " bytes", v->arena_bytes);
        free(offsets);
    }
    free(skip);
    if (s == WEFT_OK) {
        weft_exec_ctx ctx;
        exec_ctx_init(e, v, &ctx);
        s = e->exec->prepare(e->exec_st, g, v->impls, &ctx, &v->prepared, err);
        if (s != WEFT_OK) weft_error_prefix(err, "executor prepare");
    }
    if (s == WEFT_OK && weft_graph_hash(g, v->hash) != WEFT_OK)
        s = weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    if (s != WEFT_OK) {
        variant_free(e, v);
        return s < 0 ? s : WEFT_ERR_INTERNAL;
    }
    e->stats.graphs_built++;
    *out = v;
    return WEFT_OK;
}

/* The variant for a step of n_rows rows and n_logits logit rows: the smallest power-of-two
 * bucket that holds the rows (capped at max_batch_tokens). score = every row has logits. */
static weft_status variant_get(weft_engine *e, uint32_t n_rows, uint32_t n_logits, int score,
                               variant **out, weft_error *err) {
    uint32_t T = pow2_at_least(n_rows);
    if (T > e->max_batch_tokens) T = e->max_batch_tokens;
    if (n_rows > T)
        return weft_error_set(err, WEFT_ERR_INVALID, "engine",
                              "a step of %u rows exceeds the largest bucket (%u)", n_rows, T);
    uint32_t seqs = T < e->max_requests ? T : e->max_requests;
    uint32_t R = score ? T : seqs;
    if (n_logits > R)
        return weft_error_set(err, WEFT_ERR_INVALID, "engine",
                              "a step with %u logit rows exceeds the bucket's %u", n_logits, R);
    for (size_t i = 0; i < e->n_variants; i++)
        if (e->variants[i]->bucket.max_tokens == T && e->variants[i]->bucket.max_logits == R) {
            *out = e->variants[i];
            return WEFT_OK;
        }
    if (e->n_variants == e->cap_variants) {
        size_t cap = e->cap_variants ? e->cap_variants * 2 : 16;
        variant **vs = realloc(e->variants, cap * sizeof(*vs));
        if (!vs) return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
        e->variants = vs;
        e->cap_variants = cap;
    }
    variant *v = NULL;
    weft_status s = variant_build(e, T, R, &v, err);
    if (s != WEFT_OK) return s;
    e->variants[e->n_variants++] = v;
    *out = v;
    return WEFT_OK;
}

/* ---- open and close ---------------------------------------------------------------------- */
static weft_status register_ops(weft_engine *e, weft_error *err) {
    weft_op_registry_set_provider(e->ops, e->backend_pl->name);
    if (!e->be->register_ops)
        return weft_error_set(err, WEFT_ERR_INVALID, e->backend_pl->name,
                              "backend has no register_ops");
    weft_status s = e->be->register_ops(e->be_st, weft_op_registry_service(e->ops), err);
    if (s != WEFT_OK) {
        weft_error_prefix(err, "backend %s: register_ops", e->backend_pl->name);
        return s < 0 ? s : WEFT_ERR_INTERNAL;
    }
    for (size_t i = 0; i < e->cand->n_plugins; i++) {
        const weft_loaded_plugin *p = &e->cand->plugins[i];
        if (!(p->desc->slots & WEFT_SLOT_OPS) || !p->desc->opset || !p->desc->opset->register_ops)
            continue;
        weft_op_registry_set_provider(e->ops, p->name);
        s = p->desc->opset->register_ops(p->state, e->backend, weft_op_registry_service(e->ops),
                                         err);
        if (s != WEFT_OK) {
            weft_error_prefix(err, "%s: register_ops", p->name);
            return s < 0 ? s : WEFT_ERR_INTERNAL;
        }
    }
    weft_op_registry_set_provider(e->ops, "");
    return WEFT_OK;
}

static void choose_slots(weft_engine *e) {
    const weft_loaded_plugin *p;
    if ((p = weft_candidate_slot(e->cand, WEFT_SLOT_KV)) && p->desc->kv) {
        e->kv = p->desc->kv;
        e->kv_st = p->state;
    } else {
        e->kv = &weft_kv_contiguous_vtable;
        e->kv_st = weft_kv_contiguous_new();
        e->kv_default = 1;
    }
    if ((p = weft_candidate_slot(e->cand, WEFT_SLOT_SCHEDULER)) && p->desc->scheduler) {
        e->sched = p->desc->scheduler;
        e->sched_st = p->state;
    } else {
        e->sched = &weft_sched_serial_vtable;
    }
    if ((p = weft_candidate_slot(e->cand, WEFT_SLOT_EXECUTOR)) && p->desc->executor) {
        e->exec = p->desc->executor;
        e->exec_st = p->state;
    } else {
        e->exec = &weft_exec_eager_vtable;
        e->exec_st = weft_exec_eager_new(&e->profile_svc);
        e->exec_default = 1;
    }
    if ((p = weft_candidate_slot(e->cand, WEFT_SLOT_SAMPLER)) && p->desc->sampler) {
        e->sampler = p->desc->sampler;
        e->sampler_st = p->state;
    }
    if ((p = weft_candidate_slot(e->cand, WEFT_SLOT_DECODER)) && p->desc->decoder) {
        e->decoder = p->desc->decoder;
        e->decoder_st = p->state;
    }
}

static void add_eos(weft_engine *e, int32_t id) {
    if (id < 0 || (uint32_t)id >= e->cfg.vocab_size) return;
    for (uint32_t i = 0; i < e->n_eos; i++)
        if (e->eos[i] == id) return;
    if (e->n_eos < sizeof(e->eos) / sizeof(e->eos[0])) e->eos[e->n_eos++] = id;
}

/* The positions the model was trained for, when config.json says (max_position_embeddings,
 * times the factor of a linear RoPE scaling, whose config keeps the original length); 0 when it
 * does not say (the parser's default then fills cfg.max_position). */
static uint32_t trained_positions(const weft_engine *e) {
    json_error_t je;
    json_t *root = e->config_json ? json_loads(e->config_json, 0, &je) : NULL;
    int said = json_is_integer(json_object_get(root, "max_position_embeddings"));
    json_decref(root);
    if (!said || !e->cfg.max_position) return 0;
    double n = e->cfg.max_position;
    if (e->cfg.rope_scaling == 2 && e->cfg.rope_factor > 1) n *= e->cfg.rope_factor;
    return n > 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)n;
}

/* max_model_len against the model's positions (vLLM's rule): a candidate's serving default above
 * them is lowered to them with a warning (a manifest may serve several models); a length asked
 * for explicitly (the caller's option: --max-model-len, weft bench prefill's prompt) is refused,
 * naming both numbers, unless WEFT_ALLOW_LONG_MAX_MODEL_LEN=1 says positions past training are
 * wanted. */
static weft_status position_limit(weft_engine *e, int explicit_len, weft_error *err) {
    uint32_t trained = trained_positions(e);
    if (!trained || e->max_model_len <= trained) return WEFT_OK;
    const char *allow = getenv("WEFT_ALLOW_LONG_MAX_MODEL_LEN");
    if (allow && !strcmp(allow, "1")) return WEFT_OK;
    if (explicit_len)
        return weft_error_set(err, WEFT_ERR_INVALID, "engine",
                              "max_model_len %u is beyond the %u positions the model was trained "
                              "for (%s/config.json, max_position_embeddings); ask for at most %u, "
                              "or set WEFT_ALLOW_LONG_MAX_MODEL_LEN=1 to run past them",
                              e->max_model_len, trained, e->model_dir, trained);
    e->hs->log(WEFT_LOG_WARN, "engine",
               "candidate %s: serving.max_model_len %u is beyond the %u positions of %s; using %u",
               e->cand->path, e->max_model_len, trained, e->model_dir, trained);
    e->max_model_len = trained;
    return WEFT_OK;
}

static weft_status open_model(weft_engine *e, weft_error *err) {
    snprintf(e->model_dir, sizeof(e->model_dir), "%s", e->cand->model_dir);
    memset(&e->cfg, 0, sizeof(e->cfg));
    e->cfg.size = sizeof(e->cfg);
    weft_status s = weft_config_load(e->model_dir, &e->cfg, &e->config_json, err);
    if (s != WEFT_OK) return s;
    const weft_model_vtable *mv = e->model_pl->desc->model;
    if (!mv || !mv->configure || !mv->build_graph)
        return weft_error_set(err, WEFT_ERR_INVALID, e->model_pl->name,
                              "model plugin without configure and build_graph");
    weft_error_clear(err);
    s = mv->configure(e->model_pl->state, e->config_json, &e->cfg, err);
    if (s != WEFT_OK) {
        weft_error_prefix(err, "%s", e->model_dir);
        return s < 0 ? s : WEFT_ERR_INTERNAL;
    }
    s = weft_generation_config_load(e->model_dir, &e->gen, err);
    if (s != WEFT_OK) return s;
    for (uint32_t i = 0; i < e->cfg.n_eos && i < 8; i++)
        add_eos(e, e->cfg.eos_token_ids[i]);
    for (uint32_t i = 0; i < e->gen.n_eos && i < 8; i++)
        add_eos(e, e->gen.eos_token_ids[i]);
    s = weft_safetensors_open_dir(e->model_dir, &e->st, err);
    if (s != WEFT_OK) return s;
    char path[1100];
    snprintf(path, sizeof(path), "%s/tokenizer.json", e->model_dir);
    if (file_exists(path)) {
        s = weft_tokenizer_load(path, &e->tok, err);
        if (s != WEFT_OK) return s;
    }
    return WEFT_OK;
}

static weft_status alloc_scratch(weft_engine *e, weft_error *err) {
    uint32_t T = e->max_batch_tokens, S = e->max_requests;
    e->b_tokens = calloc(T, sizeof(int32_t));
    e->b_positions = calloc(T, sizeof(int32_t));
    e->b_seq_of_row = calloc(T, sizeof(int32_t));
    e->b_logit_rows = calloc(T, sizeof(int32_t));
    e->b_kv_slots = calloc(T, sizeof(int32_t));
    e->b_seqs = calloc(S, sizeof(weft_seq));
    e->b_req = calloc(S, sizeof(request *));
    e->b_logit_seq = calloc(S, sizeof(uint32_t));
    e->logits_cap = (size_t)S * e->cfg.vocab_size;
    e->logits = malloc(e->logits_cap * sizeof(float));
    e->sample_scratch = malloc(weft_sample_scratch_bytes(e->cfg.vocab_size));
    e->ps_params = calloc(S, sizeof(weft_sampling));
    e->ps_tok = calloc(S, sizeof(int32_t));
    e->ps_lp = calloc(S, sizeof(float));
    e->ps_done = calloc(S, 1);
    if (!e->ps_params || !e->ps_tok || !e->ps_lp || !e->ps_done)
        return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    if (!e->b_tokens || !e->b_positions || !e->b_seq_of_row || !e->b_logit_rows || !e->b_kv_slots ||
        !e->b_seqs || !e->b_req || !e->b_logit_seq || !e->logits || !e->sample_scratch)
        return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    return WEFT_OK;
}

weft_status weft_engine_open(const weft_engine_options *o, weft_engine **out, weft_error *err) {
    if (!o || !out) return weft_error_set(err, WEFT_ERR_INVALID, "engine", "missing argument");
    *out = NULL;
    if (!o->lock_path == !o->manifest_path)
        return weft_error_set(err, WEFT_ERR_INVALID, "engine",
                              "expected exactly one of a lock or a candidate manifest, got %s",
                              o->lock_path ? "both" : "neither");
    weft_engine *e = calloc(1, sizeof(*e));
    if (!e) return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    e->profile = o->profile;
    e->next_id = 1;
    e->n_threads = o->threads;
    e->kv_tokens = o->size >= offsetof(weft_engine_options, kv_tokens) + sizeof(o->kv_tokens)
                       ? o->kv_tokens
                       : 0;
    e->ops = weft_op_registry_new();
    weft_status s =
        e->ops ? WEFT_OK : weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    if (s == WEFT_OK) s = services_init(e, err);
    if (s == WEFT_OK) {
        if (o->lock_path)
            s = weft_candidate_load_lock(o->lock_path, e->hs, &e->cand, err);
        else
            s = weft_candidate_load_manifest(o->manifest_path, o->model_dir, e->hs, &e->cand, err);
    }
    if (s == WEFT_OK) {
        if (!e->n_threads) e->n_threads = e->cand->threads ? e->cand->threads : 1;
        e->backend_pl = weft_candidate_slot(e->cand, WEFT_SLOT_BACKEND);
        e->model_pl = weft_candidate_slot(e->cand, WEFT_SLOT_MODEL);
        if (!e->backend_pl || !e->backend_pl->desc->backend)
            s = weft_error_set(err, WEFT_ERR_INVALID, "engine",
                               "candidate %s has no backend plugin", e->cand->path);
        else if (!e->model_pl || !e->model_pl->desc->model)
            s = weft_error_set(err, WEFT_ERR_INVALID, "engine", "candidate %s has no model plugin",
                               e->cand->path);
    }
    if (s == WEFT_OK) {
        e->be = e->backend_pl->desc->backend;
        e->be_st = e->backend_pl->state;
        snprintf(e->backend, sizeof(e->backend), "%s",
                 e->cand->backend[0] ? e->cand->backend : e->backend_pl->name);
        e->device_svc.backend = e->backend;
        if (!e->be->alloc || !e->be->free || !e->be->copy || !e->be->upload || !e->be->download)
            s = weft_error_set(err, WEFT_ERR_INVALID, e->backend_pl->name,
                               "backend vtable lacks alloc, free, copy, upload or download");
        else
            e->stream = e->be->stream ? e->be->stream(e->be_st) : NULL;
        e->zero_copy = !strcmp(e->backend, "cpu");
    }
    if (s == WEFT_OK) s = register_late(e, WEFT_SERVICE_DEVICE, &e->device_svc, err);
    if (s == WEFT_OK) s = register_ops(e, err);
    if (s == WEFT_OK) s = open_model(e, err);
    if (s == WEFT_OK) s = register_late(e, WEFT_SERVICE_WEIGHTS, &e->weights_svc, err);
    if (s == WEFT_OK) {
        uint32_t model_max = e->cfg.max_position ? e->cfg.max_position : DEFAULT_MAX_MODEL_LEN;
        e->max_model_len = o->max_model_len                    ? o->max_model_len
                           : e->cand->max_model_len            ? e->cand->max_model_len
                           : model_max < DEFAULT_MAX_MODEL_LEN ? model_max
                                                               : DEFAULT_MAX_MODEL_LEN;
        s = position_limit(e, o->max_model_len != 0, err);
        if (s == WEFT_OK && e->max_model_len < 2)
            s = weft_error_set(err, WEFT_ERR_INVALID, "engine",
                               "max_model_len: expected at least 2, got %u", e->max_model_len);
        e->max_requests = o->max_requests            ? o->max_requests
                          : e->cand->max_concurrency ? e->cand->max_concurrency
                                                     : 1;
        e->max_batch_tokens = o->max_batch_tokens ? o->max_batch_tokens : DEFAULT_MAX_BATCH_TOKENS;
        if (e->max_batch_tokens > e->max_model_len) e->max_batch_tokens = e->max_model_len;
        if (e->max_batch_tokens < e->max_requests) e->max_batch_tokens = e->max_requests;
    }
    if (s == WEFT_OK) {
        choose_slots(e);
        if (!e->kv_st && e->kv_default)
            s = weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
        if (!e->exec_st && e->exec_default)
            s = weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    }
    if (s == WEFT_OK) s = alloc_scratch(e, err);
    /* The decode graph is built now: a model, pass or op problem shows at open, not at the
     * first request. */
    variant *v = NULL;
    if (s == WEFT_OK) s = variant_get(e, 1, 1, 0, &v, err);
    if (s != WEFT_OK) {
        weft_engine_close(e);
        return s < 0 ? s : WEFT_ERR_INTERNAL;
    }
    *out = e;
    return WEFT_OK;
}

static void request_free(request *r) {
    if (!r) return;
    free(r->tokens);
    free(r->bias_ids);
    free(r->bias_values);
    free(r->stop_ids);
    free((void *)r->sp.eos_ids);
    weft_detok_free(r->detok);
    weft_stopper_free(r->stopper);
    free(r);
}

static weft_status pipe_collect(weft_engine *e, weft_error *err);
static void pipe_free(weft_engine *e);

void weft_engine_close(weft_engine *e) {
    if (!e) return;
    if (e->pipe.active) { /* the step in flight is waited for and dropped, not delivered */
        weft_error e2;
        weft_error_clear(&e2);
        pipe_collect(e, &e2);
        e->pipe.active = 0;
    }
    if (e->be && e->be->synchronize && e->pipe.ready) e->be->synchronize(e->be_st, e->stream, NULL);
    for (size_t i = 0; i < e->n_reqs; i++) {
        if (e->reqs[i]->kv_slot >= 0 && e->kv_ready) e->kv->close(e->kv_st, e->reqs[i]->kv_slot);
        request_free(e->reqs[i]);
    }
    free(e->reqs);
    for (size_t i = 0; i < e->n_variants; i++)
        variant_free(e, e->variants[i]);
    free(e->variants);
    pipe_free(e);
    if (e->kv_ready && e->kv->fini) e->kv->fini(e->kv_st);
    if (e->kv_default) weft_kv_contiguous_free(e->kv_st);
    if (e->exec_default) weft_exec_eager_free(e->exec_st);
    for (size_t i = 0; i < e->n_weights; i++)
        if (e->weights[i].owned) e->be->free(e->be_st, &e->weights[i].buf);
    free(e->weights);
    free(e->b_tokens);
    free(e->b_positions);
    free(e->b_seq_of_row);
    free(e->b_logit_rows);
    free(e->b_kv_slots);
    free(e->b_seqs);
    free(e->b_req);
    free(e->b_logit_seq);
    free(e->s_reqs);
    free(e->s_items);
    free(e->logits);
    free(e->sample_scratch);
    free(e->ps_params);
    free(e->ps_tok);
    free(e->ps_lp);
    free(e->ps_done);
    weft_tokenizer_free(e->tok);
    weft_safetensors_close(e->st);
    free(e->config_json);
    /* Plugins go after everything they allocated was handed back to them. */
    weft_candidate_unload(e->cand);
    weft_op_registry_free(e->ops);
    weft_pool_free(e->pool);
    weft_host_free(e->host);
    free(e);
}

const weft_tokenizer *weft_engine_tokenizer(const weft_engine *e) {
    return e ? e->tok : NULL;
}

const weft_model_config *weft_engine_config(const weft_engine *e) {
    return e ? &e->cfg : NULL;
}

const weft_candidate *weft_engine_candidate(const weft_engine *e) {
    return e ? e->cand : NULL;
}

uint32_t weft_engine_max_model_len(const weft_engine *e) {
    return e ? e->max_model_len : 0;
}

uint32_t weft_engine_threads(const weft_engine *e) {
    return e ? e->n_threads : 0;
}

void weft_engine_sampling_defaults(const weft_engine *e, weft_sampler_params *p) {
    weft_sampler_params_default(p);
    if (!e) return;
    const weft_generation_config *g = &e->gen;
    if (g->has_temperature) p->temperature = g->temperature;
    if (g->has_top_p) p->top_p = g->top_p;
    if (g->has_top_k) p->top_k = g->top_k;
    if (g->has_min_p) p->min_p = g->min_p;
    if (g->has_repetition_penalty) p->repetition_penalty = g->repetition_penalty;
}

const weft_generation_config *weft_engine_generation_config(const weft_engine *e) {
    return e ? &e->gen : NULL;
}

void weft_engine_get_stats(const weft_engine *e, weft_engine_stats *out) {
    if (e && out) *out = e->stats;
}

void weft_engine_kv_stats(const weft_engine *e, weft_kv_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    if (e && e->kv_ready && e->kv->stats) e->kv->stats(e->kv_st, out);
}

uint32_t weft_engine_profile(const weft_engine *e, const char **names, double *seconds,
                             uint64_t *calls, uint32_t cap) {
    if (!e) return 0;
    for (uint32_t i = 0; i < e->n_prof && i < cap; i++) {
        if (names) names[i] = e->prof[i].name;
        if (seconds) seconds[i] = e->prof[i].seconds;
        if (calls) calls[i] = e->prof[i].calls;
    }
    return e->n_prof;
}

void weft_engine_profile_reset(weft_engine *e) {
    if (e) e->n_prof = 0;
}

/* ---- requests ---------------------------------------------------------------------------- */
uint32_t weft_engine_active(const weft_engine *e) {
    return e ? (uint32_t)e->n_reqs : 0;
}

weft_status weft_request_submit(weft_engine *e, const int32_t *prompt, size_t n_prompt,
                                const weft_request_params *p, uint64_t *id, weft_error *err) {
    if (!e || !p || (!prompt && n_prompt))
        return weft_error_set(err, WEFT_ERR_INVALID, "engine", "submit: missing argument");
    if (n_prompt == 0)
        return weft_error_set(err, WEFT_ERR_INVALID, "request",
                              "prompt: expected at least one token, got none");
    if (n_prompt >= e->max_model_len)
        return weft_error_set(err, WEFT_ERR_INVALID, "request",
                              "prompt: %zu tokens leave no room under max_model_len %u", n_prompt,
                              e->max_model_len);
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= e->cfg.vocab_size)
            return weft_error_set(err, WEFT_ERR_INVALID, "request",
                                  "prompt token %zu: id %d is outside the vocabulary (0..%u)", i,
                                  prompt[i], e->cfg.vocab_size - 1);
    const weft_sampler_params *sp = &p->sampling;
    if (sp->n_bias && (!sp->bias_ids || !sp->bias_values))
        return weft_error_set(err, WEFT_ERR_INVALID, "request", "logit_bias: missing arrays");
    if ((p->n_stop && !p->stop) || (p->n_stop_ids && !p->stop_ids))
        return weft_error_set(err, WEFT_ERR_INVALID, "request", "stop: missing array");
    request *r = calloc(1, sizeof(*r));
    if (!r) return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    uint64_t max_total = n_prompt + (p->max_tokens ? (uint64_t)p->max_tokens : UINT32_MAX);
    r->max_total = max_total < e->max_model_len ? (uint32_t)max_total : e->max_model_len;
    r->cap = r->max_total;
    r->tokens = malloc(sizeof(int32_t) * r->cap);
    r->sp = *sp;
    if (sp->n_bias) {
        r->bias_ids = malloc(sizeof(int32_t) * sp->n_bias);
        r->bias_values = malloc(sizeof(float) * sp->n_bias);
    }
    if (p->n_stop_ids) r->stop_ids = malloc(sizeof(int32_t) * p->n_stop_ids);
    /* The EOS ids the sampler masks for min_tokens: the caller's, else the model's. */
    uint32_t n_eos = sp->n_eos && sp->eos_ids ? sp->n_eos : e->n_eos;
    int32_t *eos = malloc(sizeof(int32_t) * (n_eos ? n_eos : 1));
    int ok = r->tokens && eos && (!sp->n_bias || (r->bias_ids && r->bias_values)) &&
             (!p->n_stop_ids || r->stop_ids);
    if (ok && e->tok && p->detokenize) {
        r->detok = weft_detok_new(e->tok, p->skip_special);
        /* The prompt's tail is the stream's context: the first generated piece decodes as a
         * continuation (keeps its leading space), not as the start of a text. */
        ok = r->detok != NULL && weft_detok_prime(r->detok, prompt, n_prompt, NULL) == WEFT_OK;
    }
    if (ok && p->n_stop) {
        for (uint32_t i = 0; i < p->n_stop; i++)
            if (!p->stop[i] || !p->stop[i][0]) {
                free(eos);
                request_free(r);
                return weft_error_set(err, WEFT_ERR_INVALID, "request",
                                      "stop[%u]: expected a non-empty string", i);
            }
        r->stopper = weft_stopper_new(p->stop, p->n_stop);
        ok = r->stopper != NULL;
    }
    if (!ok) {
        free(eos);
        request_free(r);
        return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    }
    memcpy(r->tokens, prompt, sizeof(int32_t) * n_prompt);
    if (sp->n_bias) {
        memcpy(r->bias_ids, sp->bias_ids, sizeof(int32_t) * sp->n_bias);
        memcpy(r->bias_values, sp->bias_values, sizeof(float) * sp->n_bias);
    }
    r->sp.bias_ids = r->bias_ids;
    r->sp.bias_values = r->bias_values;
    memcpy(eos, sp->n_eos && sp->eos_ids ? sp->eos_ids : e->eos, sizeof(int32_t) * n_eos);
    r->sp.eos_ids = eos;
    r->sp.n_eos = n_eos;
    if (p->n_stop_ids) memcpy(r->stop_ids, p->stop_ids, sizeof(int32_t) * p->n_stop_ids);
    r->n_stop_ids = p->n_stop_ids;
    r->n_tokens = r->n_prompt = (uint32_t)n_prompt;
    r->kv_slot = -1;
    r->pipe_row = -1;
    r->ignore_eos = p->ignore_eos;
    r->cb = p->callback;
    r->user = p->user;
    r->priority = p->priority;
    r->arrival_ns = now_ns();
    if (e->n_reqs == e->cap_reqs) {
        size_t cap = e->cap_reqs ? e->cap_reqs * 2 : 16;
        request **rs = realloc(e->reqs, cap * sizeof(*rs));
        weft_sched_request *sr = realloc(e->s_reqs, cap * sizeof(*sr));
        if (sr) e->s_reqs = sr;
        weft_sched_item *si = realloc(e->s_items, cap * sizeof(*si));
        if (si) e->s_items = si;
        if (rs) e->reqs = rs;
        if (!rs || !sr || !si) {
            request_free(r);
            return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
        }
        e->cap_reqs = cap;
    }
    r->id = e->next_id++;
    e->reqs[e->n_reqs++] = r;
    if (id) *id = r->id;
    return WEFT_OK;
}

weft_status weft_request_cancel(weft_engine *e, uint64_t id) {
    if (!e) return WEFT_ERR_INVALID;
    for (size_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == id && !e->reqs[i]->finish) {
            e->reqs[i]->cancelled = 1;
            return WEFT_OK;
        }
    return WEFT_ERR_NOT_FOUND;
}

/* ---- delivering text --------------------------------------------------------------------- */
static void deliver(request *r, const weft_token_event *ev) {
    if (r->cb) r->cb(r->user, ev);
}

static void event_init(weft_token_event *ev, const request *r) {
    memset(ev, 0, sizeof(*ev));
    ev->size = sizeof(*ev);
    ev->request_id = r->id;
    ev->token = -1;
    ev->n_prompt = r->n_prompt;
    ev->n_generated = r->n_generated;
}

/* Ends a request: releases held-back text, sends the final event, frees its kv slot. The
 * request stays in the list until retire(). */
static void finish_request(weft_engine *e, request *r, uint32_t finish, const char *message) {
    if (r->finish) return;
    r->finish = finish;
    if (message) snprintf(r->message, sizeof(r->message), "%s", message);
    char *tail = NULL, *out = NULL;
    size_t tail_len = 0, out_len = 0;
    weft_error err;
    weft_error_clear(&err);
    if (r->detok && weft_detok_flush(r->detok, &tail, &tail_len, &err) != WEFT_OK) tail = NULL;
    if (r->stopper && !r->stopped_by_string) {
        char *emit = NULL;
        size_t emit_len = 0;
        int stopped = 0;
        if (tail && tail_len &&
            weft_stopper_feed(r->stopper, tail, tail_len, &emit, &emit_len, &stopped, &err) ==
                WEFT_OK) {
            free(tail);
            tail = emit;
            tail_len = emit_len;
            if (stopped) r->stopped_by_string = 1;
        }
        if (!r->stopped_by_string &&
            weft_stopper_flush(r->stopper, &out, &out_len, &err) == WEFT_OK && out_len) {
            char *joined = realloc(tail, tail_len + out_len + 1);
            if (joined) {
                memcpy(joined + tail_len, out, out_len);
                tail = joined;
                tail_len += out_len;
            }
        }
        free(out);
    } else if (r->stopped_by_string) {
        free(tail);
        tail = NULL;
        tail_len = 0;
    }
    weft_token_event ev;
    event_init(&ev, r);
    ev.finish = finish;
    ev.text = tail ? tail : "";
    ev.text_len = tail ? tail_len : 0;
    ev.message = r->message[0] ? r->message : NULL;
    deliver(r, &ev);
    free(tail);
    if (r->kv_slot >= 0) {
        if (e->kv->commit) e->kv->commit(e->kv_st, r->kv_slot, r->tokens, r->n_computed);
        e->kv->close(e->kv_st, r->kv_slot);
        r->kv_slot = -1;
    }
}

static void retire(weft_engine *e) {
    size_t w = 0;
    for (size_t i = 0; i < e->n_reqs; i++) {
        request *r = e->reqs[i];
        if (r->cancelled && !r->finish) finish_request(e, r, WEFT_FINISH_CANCELLED, NULL);
        if (r->finish)
            request_free(r);
        else
            e->reqs[w++] = r;
    }
    e->n_reqs = w;
}

static int is_eos(const request *r, int32_t tok) {
    for (uint32_t i = 0; i < r->sp.n_eos; i++)
        if (r->sp.eos_ids[i] == tok) return 1;
    return 0;
}

/* Appends a sampled token, streams its text, and decides whether the request ends. */
static void accept_token(weft_engine *e, request *r, const weft_sample_result *res) {
    int32_t tok = res->token;
    r->tokens[r->n_tokens++] = tok;
    r->n_generated++;
    r->state = 2;
    uint32_t finish = WEFT_FINISH_NONE;
    int stop_tok = (!r->ignore_eos && is_eos(r, tok));
    for (uint32_t i = 0; i < r->n_stop_ids && !stop_tok; i++)
        stop_tok = r->stop_ids[i] == tok;
    char *piece = NULL, *emit = NULL;
    size_t piece_len = 0, emit_len = 0;
    weft_error err;
    weft_error_clear(&err);
    if (stop_tok) {
        finish = WEFT_FINISH_STOP;
    } else if (r->detok) {
        if (weft_detok_push(r->detok, tok, &piece, &piece_len, &err) != WEFT_OK) piece = NULL;
        if (piece && r->stopper) {
            int stopped = 0;
            if (weft_stopper_feed(r->stopper, piece, piece_len, &emit, &emit_len, &stopped, &err) ==
                WEFT_OK) {
                if (stopped) {
                    r->stopped_by_string = 1;
                    finish = WEFT_FINISH_STOP;
                }
            } else {
                emit = NULL;
            }
            free(piece);
            piece = NULL;
        } else {
            emit = piece;
            emit_len = piece_len;
            piece = NULL;
        }
    }
    if (!finish && r->n_tokens >= r->max_total) finish = WEFT_FINISH_LENGTH;
    weft_token_event ev;
    event_init(&ev, r);
    ev.token = tok;
    ev.logprob = res->logprob;
    ev.n_top = res->n_top;
    ev.top = res->top;
    ev.text = emit ? emit : "";
    ev.text_len = emit ? emit_len : 0;
    deliver(r, &ev);
    free(emit);
    if (finish) finish_request(e, r, finish, NULL);
}

/* ---- the step ---------------------------------------------------------------------------- */
/* A request that gets its kv slot before computing anything offers its tokens to the kv
 * provider's prefix cache (kv.prefix-cache): the tokens the provider already holds for it count
 * as computed, so the step skips them. The provider leaves the last token to compute (its
 * logits are sampled); a provider that claims every token is refused. */
static weft_status kv_prefix_attach(weft_engine *e, request *r, weft_error *err) {
    if (!e->kv->prefix_attach || r->n_computed || r->n_tokens < 2) return WEFT_OK;
    uint32_t n_cached = 0;
    weft_status s =
        e->kv->prefix_attach(e->kv_st, r->kv_slot, r->tokens, r->n_tokens, &n_cached, err);
    if (s != WEFT_OK) return s < 0 ? s : WEFT_ERR_INTERNAL;
    if (n_cached >= r->n_tokens)
        return weft_error_set(err, WEFT_ERR_INTERNAL, "engine",
                              "kv prefix_attach: expected fewer than %u cached tokens, got %u",
                              r->n_tokens, n_cached);
    r->n_computed = n_cached;
    e->stats.prefix_cached_tokens += n_cached;
    return WEFT_OK;
}

static weft_status upload_i32(weft_engine *e, weft_buffer *dst, const int32_t *src, uint32_t n,
                              weft_error *err) {
    weft_buffer host = {(void *)src, (uint64_t)n * 4, WEFT_MEMORY_HOST, 0, NULL};
    return e->be->copy(e->be_st, dst, 0, &host, 0, (uint64_t)n * 4, e->stream, err);
}

static weft_status exec_run(weft_engine *e, variant *v, uint32_t n_rows, uint32_t n_seqs,
                            uint32_t n_logits, weft_exec_ctx *ctx_out, weft_error *err);
static weft_status logits_download(weft_engine *e, const variant *v, uint32_t n_logits,
                                   float *out, weft_error *err);

/* Runs one step over rows already in e->b_* and returns the logits rows on the host. */
static weft_status run_step(weft_engine *e, uint32_t n_rows, uint32_t n_seqs, uint32_t n_logits,
                            int score, float *logits_out, variant **used, weft_error *err) {
    variant *v = NULL;
    weft_status s = variant_get(e, n_rows, n_logits, score, &v, err);
    if (s != WEFT_OK) return s;
    if (used) *used = v;
    uint64_t t_in = now_ns();
    s = upload_i32(e, &v->data[v->t_tokens], e->b_tokens, n_rows, err);
    /* A model that reads no positions (fake.model's bigram graph) has the tensor but no node
     * using it, so the arena gave it no bytes. */
    if (s == WEFT_OK && v->data[v->t_positions].ptr)
        s = upload_i32(e, &v->data[v->t_positions], e->b_positions, n_rows, err);
    if (s == WEFT_OK && v->t_kv_slots != WEFT_TENSOR_NONE && v->data[v->t_kv_slots].ptr) {
        for (uint32_t r = 0; r < n_rows; r++)
            e->b_kv_slots[r] = e->b_seqs[e->b_seq_of_row[r]].kv_slot;
        s = upload_i32(e, &v->data[v->t_kv_slots], e->b_kv_slots, n_rows, err);
    }
    if (s == WEFT_OK && n_logits && v->t_logit_rows != WEFT_TENSOR_NONE &&
        v->data[v->t_logit_rows].ptr)
        s = upload_i32(e, &v->data[v->t_logit_rows], e->b_logit_rows, n_logits, err);
    if (s != WEFT_OK) {
        weft_error_prefix(err, "step inputs");
        return s;
    }
    prof_host(e, "engine.inputs", t_in);
    weft_exec_ctx ctx;
    s = exec_run(e, v, n_rows, n_seqs, n_logits, &ctx, err);
    if (s != WEFT_OK) return s;
    /* An executor that returns before its outputs are ready (exec.async-pipeline) is waited for
     * only when the host reads them; a device sampler reads them on the stream instead. */
    if (n_logits && logits_out && e->exec->wait) {
        s = e->exec->wait(e->exec_st, v->prepared, &ctx, err);
        if (s != WEFT_OK) return s < 0 ? s : WEFT_ERR_INTERNAL;
    }
    if (n_logits && logits_out) {
        uint64_t t_dl = now_ns();
        s = logits_download(e, v, n_logits, logits_out, err);
        if (s != WEFT_OK) return s;
        prof_host(e, "engine.logits", t_dl);
    }
    return WEFT_OK;
}

/* Runs the graph of v over the step in e->b_* whose inputs are already on the device. ctx is
 * filled for the executor's wait hook. */
static weft_status exec_run(weft_engine *e, variant *v, uint32_t n_rows, uint32_t n_seqs,
                            uint32_t n_logits, weft_exec_ctx *ctx_out, weft_error *err) {
    weft_batch *batch = &e->b_batch; /* kept for the executor's wait hook */
    memset(batch, 0, sizeof(*batch));
    batch->size = sizeof(*batch);
    batch->n_tokens = n_rows;
    batch->n_seqs = n_seqs;
    batch->n_logits = n_logits;
    batch->tokens = e->b_tokens;
    batch->positions = e->b_positions;
    batch->seq_of_row = e->b_seq_of_row;
    batch->seqs = e->b_seqs;
    batch->logit_rows = e->b_logit_rows;
    weft_exec_ctx ctx;
    exec_ctx_init(e, v, &ctx);
    ctx.n_tokens = n_rows;
    ctx.batch = batch;
    weft_status s = e->exec->run(e->exec_st, v->prepared, &ctx, err);
    *ctx_out = ctx;
    return s == WEFT_OK ? s : s < 0 ? s : WEFT_ERR_INTERNAL;
}

/* The first n_logits logits rows of v's last run, to the host (waits for the stream). */
static weft_status logits_download(weft_engine *e, const variant *v, uint32_t n_logits,
                                   float *out, weft_error *err) {
    if (e->be->synchronize) {
        weft_status s = e->be->synchronize(e->be_st, e->stream, err);
        if (s != WEFT_OK) return s;
    }
    weft_status s = e->be->download(e->be_st, out, &v->data[v->t_logits], 0,
                                    (uint64_t)n_logits * e->cfg.vocab_size * sizeof(float), err);
    if (s != WEFT_OK) weft_error_prefix(err, "logits");
    return s;
}

/* Whether a feature plugin edits logits on the host: then every row is sampled on the host
 * from its processed copy (a sampler plugin reads the device row and would miss the edits). */
static int has_logit_features(const weft_engine *e) {
    for (size_t i = 0; i < e->cand->n_plugins; i++) {
        const weft_loaded_plugin *p = &e->cand->plugins[i];
        if ((p->desc->slots & WEFT_SLOT_FEATURE) && p->desc->feature &&
            p->desc->feature->process_logits)
            return 1;
    }
    return 0;
}

/* The sampler plugin's parameters of request r's next token. */
static void sampling_params(const request *r, weft_sampling *sp) {
    memset(sp, 0, sizeof(*sp));
    sp->size = sizeof(*sp);
    sp->temperature = r->sp.temperature;
    sp->top_p = r->sp.top_p;
    sp->min_p = r->sp.min_p;
    sp->top_k = r->sp.top_k;
    sp->repetition_penalty = r->sp.repetition_penalty;
    sp->presence_penalty = r->sp.presence_penalty;
    sp->frequency_penalty = r->sp.frequency_penalty;
    sp->seed = r->sp.seed;
    sp->counter = r->n_generated;
    sp->n_logprobs = r->sp.n_logprobs;
    sp->request_id = r->id;
}

/* Whether request r's token `ahead` tokens after its next one must be sampled on the host even
 * with a sampler plugin: logit bias and an active min_tokens EOS mask are not in weft_sampling. */
static int host_only_row(const request *r, uint32_t ahead) {
    return r->sp.n_bias || (r->n_generated + ahead < r->sp.min_tokens && r->sp.n_eos);
}

/* Samples one logits row. row is its place in the host copy, filled when on_host; otherwise
 * the step left the logits on the device for a sampler plugin (exec.device-sampling) and only
 * the token id and its logprob cross to the host. A request the plugin cannot serve falls back
 * to the host sampler over a download of its row alone: logit bias and an active min_tokens EOS
 * mask (weft_sampling carries neither), or a row the plugin declines with WEFT_ERR_UNSUPPORTED
 * (penalties, top alternatives). */
static weft_status sample_row(weft_engine *e, request *r, float *row, int on_host,
                              uint32_t logits_row, const variant *v, weft_sample_result *res,
                              weft_error *err) {
    uint32_t V = e->cfg.vocab_size;
    int features = has_logit_features(e);
    if (e->sampler && !features && !host_only_row(r, 0)) {
        weft_sampling sp;
        sampling_params(r, &sp);
        weft_buffer rowbuf = v->data[v->t_logits];
        rowbuf.ptr = (uint8_t *)rowbuf.ptr + (uint64_t)logits_row * V * sizeof(float);
        rowbuf.bytes = (uint64_t)V * sizeof(float);
        memset(res, 0, sizeof(*res));
        weft_status s =
            e->sampler->sample(e->sampler_st, &rowbuf, 1, V, &sp, &res->token, &res->logprob, err);
        if (s != WEFT_ERR_UNSUPPORTED) return s;
        weft_error_clear(err); /* declined: the host sampler serves this row */
    }
    if (!on_host) {
        weft_status s = e->be->download(e->be_st, row, &v->data[v->t_logits],
                                        (uint64_t)logits_row * V * sizeof(float),
                                        (uint64_t)V * sizeof(float), err);
        if (s != WEFT_OK) {
            weft_error_prefix(err, "logits row %u", logits_row);
            return s;
        }
    }
    for (size_t i = 0; features && i < e->cand->n_plugins; i++) {
        const weft_loaded_plugin *p = &e->cand->plugins[i];
        if ((p->desc->slots & WEFT_SLOT_FEATURE) && p->desc->feature &&
            p->desc->feature->process_logits) {
            weft_status s = p->desc->feature->process_logits(p->state, r->id, row, V, err);
            if (s != WEFT_OK) {
                weft_error_prefix(err, "feature %s", p->name);
                return s < 0 ? s : WEFT_ERR_INTERNAL;
            }
        }
    }
    return weft_sample(row, V, &r->sp, r->tokens, r->n_prompt, r->tokens + r->n_prompt,
                       r->n_generated, r->n_generated, e->sample_scratch, res, err);
}

/* Whether seq q of the step has a row the sampler plugin may take in a batched call. */
static int presample_row(const weft_engine *e, uint32_t q) {
    const request *r = e->b_req[q];
    return e->b_logit_seq[q] != UINT32_MAX && !r->finish && !r->cancelled && !host_only_row(r, 0);
}

/* Device sampling of a step in as few sampler calls as possible: the rows the plugin may take,
 * grouped into runs of consecutive logits rows, one call per run (one launch sequence and one
 * wait instead of one of each per row). A run the plugin declines or fails leaves its rows to
 * sample_row, which retries each alone, so a declined row (penalties, top alternatives) still
 * falls back to the host and an error still ends only its own request. */
static void presample(weft_engine *e, uint32_t n_seqs, const variant *v) {
    memset(e->ps_done, 0, n_seqs);
    if (!e->sampler || has_logit_features(e)) return;
    uint32_t V = e->cfg.vocab_size;
    for (uint32_t q = 0; q < n_seqs;) {
        if (!presample_row(e, q)) {
            q++;
            continue;
        }
        uint32_t q0 = q, row0 = e->b_logit_seq[q], n = 0;
        while (q < n_seqs && presample_row(e, q) && e->b_logit_seq[q] == row0 + n) {
            sampling_params(e->b_req[q], &e->ps_params[q]);
            q++;
            n++;
        }
        if (n < 2) continue; /* a lone row goes through sample_row as before */
        weft_buffer rows = v->data[v->t_logits];
        rows.ptr = (uint8_t *)rows.ptr + (uint64_t)row0 * V * sizeof(float);
        rows.bytes = (uint64_t)n * V * sizeof(float);
        weft_error e2;
        memset(&e2, 0, sizeof(e2));
        weft_error_clear(&e2);
        if (e->sampler->sample(e->sampler_st, &rows, n, V, e->ps_params + q0, e->ps_tok + q0,
                               e->ps_lp + q0, &e2) == WEFT_OK)
            memset(e->ps_done + q0, 1, n);
    }
}

/* ---- the pipelined step (exec.async-pipeline) ---------------------------------------------
 * A plain decode step (every row the last known token of a decoding request, one row each)
 * whose tokens the sampler can pick with sample_async is launched without waiting for them: the
 * sampled ids stay on the device, written by the sampler into the step's own token input (its
 * variant's in.tokens, outside the arena), which the next step of the same rows reads as is
 * (another variant gets a device-to-device copy), so the engine launches step n+1 first and
 * only then collects step n's tokens (pinned memory, an event) and delivers them while step n+1
 * runs. The host learns each token one step late. Before launching n+1 the engine checks, from
 * what it knows on the host, that every request of the step in flight takes one more row: not
 * cancelled, not ending by length with the token in flight, parameters the async sampler
 * serves, the scheduler plans exactly these rows, and the kv provider has room; otherwise it
 * drains (collects step n) and runs the ordinary path. A request that ends at step n (EOS, stop
 * id or string) wastes its row in step n+1: that row's token is dropped, its kv write lands at
 * a position past the request's n_computed in a slot closed when step n's token was delivered,
 * and every later use of that slot or page is ordered after it on the same stream (the argument
 * is in techniques/exec.async-pipeline/README.md).
 *
 * Tokens are identical to the ordinary path: the same variant (graph) runs on the same ids,
 * positions and slots, and each row's Philox counter is its token index (n_generated plus the
 * tokens still on the device). Without a sampler plugin the host samples (cpu): the same
 * control flow with no overlap, which is what the cpu tests exercise. */
static int pipe_usable(weft_engine *e) {
    pipe_state *p = &e->pipe;
    if (p->checked) return p->usable;
    p->checked = 1;
    const weft_decoder_vtable *d = e->decoder;
    if (!d || d->size < offsetof(weft_decoder_vtable, pipeline) + sizeof(d->pipeline) ||
        !d->pipeline)
        return 0;
    const weft_sampler_vtable *sv = e->sampler;
    if (sv) {
        if (sv->size < offsetof(weft_sampler_vtable, collect) + sizeof(sv->collect) ||
            !sv->sample_async || !sv->collect) {
            e->hs->log(WEFT_LOG_WARN, "engine",
                       "the sampler plugin has no sample_async/collect: steps are not pipelined");
            return 0;
        }
    } else {
        p->host = 1;
    }
    p->usable = 1;
    return 1;
}

static weft_status pipe_setup(weft_engine *e, weft_error *err) {
    pipe_state *p = &e->pipe;
    if (p->ready) return WEFT_OK;
    uint32_t S = e->max_requests;
    p->req = calloc(S, sizeof(*p->req));
    p->tok = calloc(S, sizeof(int32_t));
    p->hids = calloc(S, sizeof(int32_t));
    p->lp = calloc(S, sizeof(float));
    for (int i = 0; i < 2; i++) {
        p->h_tok[i] = calloc(S, sizeof(int32_t));
        p->h_lp[i] = calloc(S, sizeof(float));
    }
    if (!p->req || !p->tok || !p->hids || !p->lp || !p->h_tok[0] || !p->h_lp[0] || !p->h_tok[1] ||
        !p->h_lp[1])
        return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    weft_status s = e->be->alloc(e->be_st, (uint64_t)PIPE_RING * PIPE_SLOT_BYTES(S),
                                 WEFT_MEMORY_HOST_PINNED, &p->stage, err);
    /* rows past a step's own in a slot (a bucket of more rows than the step) are copied too and
     * read by nothing: zeros, not whatever the allocation held */
    if (s == WEFT_OK) memset(p->stage.ptr, 0, (size_t)(PIPE_RING * PIPE_SLOT_BYTES(S)));
    if (s != WEFT_OK) {
        weft_error_prefix(err, "exec.async-pipeline buffers");
        return s;
    }
    p->ready = 1;
    return WEFT_OK;
}

static void pipe_free(weft_engine *e) {
    pipe_state *p = &e->pipe;
    if (p->stage.ptr) e->be->free(e->be_st, &p->stage);
    free(p->req);
    free(p->tok);
    free(p->hids);
    free(p->lp);
    for (int i = 0; i < 2; i++) {
        free(p->h_tok[i]);
        free(p->h_lp[i]);
    }
}

/* Whether request r's token `ahead` tokens after its last known one can be sampled without the
 * host: the same rules as the device sampler's (no bias, min_tokens EOS mask, penalties or top
 * alternatives, no feature editing logits). */
static int pipe_row_ok(const weft_engine *e, const request *r, uint32_t ahead) {
    const weft_sampler_params *sp = &r->sp;
    return !r->finish && !r->cancelled && !host_only_row(r, ahead) &&
           sp->repetition_penalty == 1.0f && sp->presence_penalty == 0.0f &&
           sp->frequency_penalty == 0.0f && sp->n_logprobs == 0 && !has_logit_features(e);
}

/* The decoder's verdict on launching a step of n rows ahead of the host. */
static int pipe_ask(weft_engine *e, uint32_t n, int in_flight) {
    weft_pipeline_step q;
    memset(&q, 0, sizeof(q));
    q.size = sizeof(q);
    q.n_rows = n;
    q.in_flight = (uint32_t)in_flight;
    q.steps = e->stats.steps;
    q.device_busy_s = e->pipe.busy_s;
    q.device_idle_s = e->pipe.idle_s;
    int32_t yes = e->decoder->pipeline(e->decoder_st, &q);
    e->pipe.measure = q.measure && e->be->event_record && e->be->event_elapsed;
    return yes == 1;
}

/* Device idle measurement: an event before a launched step's inputs and one after its sampler.
 * Step k's pair and the next step's start are read two launches later, when the host has
 * already waited past them (collect of step k+1), so reading them never blocks. */
static void pipe_event(weft_engine *e, int end) {
    pipe_state *p = &e->pipe;
    if (!p->measure) return;
    weft_error e2;
    weft_error_clear(&e2);
    uint64_t k = end ? p->n_events - 1 : p->n_events;
    void **ev = end ? &p->ev_end[k % PIPE_EVENTS] : &p->ev_start[k % PIPE_EVENTS];
    if (e->be->event_record(e->be_st, ev, e->stream, &e2) != WEFT_OK) {
        p->measure = 0;
        return;
    }
    if (end) return;
    p->n_events++;
    if (p->n_events < 4) return;
    uint64_t m = p->n_events - 4; /* step m and the start of m + 1 are complete */
    float busy = 0, idle = 0;
    if (e->be->event_elapsed(e->be_st, p->ev_start[m % PIPE_EVENTS], p->ev_end[m % PIPE_EVENTS],
                             &busy, &e2) == WEFT_OK &&
        e->be->event_elapsed(e->be_st, p->ev_end[m % PIPE_EVENTS],
                             p->ev_start[(m + 1) % PIPE_EVENTS], &idle, &e2) == WEFT_OK) {
        p->busy_s += busy * 1e-3;
        p->idle_s += idle > 0 ? idle * 1e-3 : 0;
    }
}

/* Samples the n logits rows of v (rows of e->b_req) into v's token ids input without waiting
 * (e->pipe.ids_v = v). ahead: tokens of each request still on the device before this one (0 or
 * 1). */
static weft_status pipe_sample(weft_engine *e, const variant *v, uint32_t n, uint32_t ahead,
                               weft_error *err) {
    pipe_state *p = &e->pipe;
    uint32_t V = e->cfg.vocab_size;
    for (uint32_t q = 0; q < n; q++) {
        sampling_params(e->b_req[q], &e->ps_params[q]);
        e->ps_params[q].counter = e->b_req[q]->n_generated + ahead;
    }
    weft_buffer *ids = &v->data[v->t_tokens];
    p->ids_v = v;
    if (!p->host) {
        weft_buffer rows = v->data[v->t_logits];
        rows.bytes = (uint64_t)n * V * sizeof(float);
        return e->sampler->sample_async(e->sampler_st, &rows, n, V, e->ps_params, ids, err);
    }
    /* host path: the logits were downloaded to e->logits; sample now, queue the results */
    if (p->h_count == 2)
        return weft_error_set(err, WEFT_ERR_INTERNAL, "engine", "pipeline: two steps queued");
    uint32_t slot = (p->h_head + p->h_count) % 2;
    p->h_msg[slot][0] = '\0';
    for (uint32_t q = 0; q < n; q++) {
        const request *r = e->b_req[q];
        weft_sampler_params sp = r->sp;
        sp.min_tokens = 0; /* pipe_row_ok: the mask is off at this token's index */
        weft_sample_result res;
        weft_error e2;
        weft_error_clear(&e2);
        if (weft_sample(e->logits + (size_t)q * V, V, &sp, r->tokens, r->n_prompt,
                        r->tokens + r->n_prompt, r->n_generated, e->ps_params[q].counter,
                        e->sample_scratch, &res, &e2) == WEFT_OK) {
            p->h_tok[slot][q] = res.token;
            p->h_lp[slot][q] = res.logprob;
        } else {
            p->h_tok[slot][q] = -1;
            p->h_lp[slot][q] = 0.f;
            if (!p->h_msg[slot][0]) snprintf(p->h_msg[slot], sizeof(p->h_msg[slot]), "%s", e2.message);
        }
        p->hids[q] = p->h_tok[slot][q] >= 0 ? p->h_tok[slot][q] : 0;
    }
    weft_status s = upload_i32(e, ids, p->hids, n, err);
    if (s == WEFT_OK) p->h_count++;
    return s;
}

/* The tokens of the oldest sampled step (e->pipe.n rows) into e->pipe.tok / lp. */
static weft_status pipe_collect(weft_engine *e, weft_error *err) {
    pipe_state *p = &e->pipe;
    uint64_t t0 = now_ns();
    weft_status s;
    if (!p->host) {
        s = e->sampler->collect(e->sampler_st, p->n, p->tok, p->lp, err);
    } else if (p->h_count == 0) {
        for (uint32_t q = 0; q < p->n; q++)
            p->tok[q] = -1;
        s = weft_error_set(err, WEFT_ERR_INTERNAL, "engine", "pipeline: no step to collect");
    } else {
        memcpy(p->tok, p->h_tok[p->h_head], p->n * sizeof(int32_t));
        memcpy(p->lp, p->h_lp[p->h_head], p->n * sizeof(float));
        s = p->h_msg[p->h_head][0]
                ? weft_error_set(err, WEFT_ERR_INVALID, "sampler", "%s", p->h_msg[p->h_head])
                : WEFT_OK;
        p->h_head = (p->h_head + 1) % 2;
        p->h_count--;
    }
    prof_host(e, "engine.collect", t0);
    return s;
}

/* Collects the step in flight and delivers its tokens. next: a step for the same rows was
 * launched behind it, so each request that lives on has one more row computed. A row whose
 * request ended or was cancelled meanwhile is dropped. */
static void pipe_deliver(weft_engine *e, int next) {
    pipe_state *p = &e->pipe;
    weft_error err;
    weft_error_clear(&err);
    pipe_collect(e, &err);
    uint64_t t_d = now_ns();
    for (uint32_t q = 0; q < p->n; q++) {
        request *r = p->req[q];
        if (r->finish || r->cancelled) continue;
        if (p->tok[q] < 0) {
            finish_request(e, r, WEFT_FINISH_ERROR, err_text(&err));
            continue;
        }
        weft_sample_result res;
        memset(&res, 0, sizeof(res));
        res.token = p->tok[q];
        res.logprob = p->lp[q];
        accept_token(e, r, &res);
        if (next && !r->finish) {
            r->n_computed++;
            e->stats.decode_tokens++;
        }
    }
    prof_host(e, "engine.deliver", t_d);
    if (!next) {
        for (uint32_t q = 0; q < p->n; q++)
            p->req[q]->pipe_row = -1;
        p->active = 0;
    }
}

/* The scheduler's view of every request and of the step's limits. ahead: plan the step after
 * the one in flight (exec.async-pipeline), where each request with a row in flight is decoding
 * and has one more generated token than the host knows yet. */
static void sched_inputs(weft_engine *e, int ahead, weft_sched_limits *limits) {
    for (size_t i = 0; i < e->n_reqs; i++) {
        const request *r = e->reqs[i];
        int in = ahead && r->pipe_row >= 0;
        weft_sched_request *sr = &e->s_reqs[i];
        sr->request_id = r->id;
        sr->state = in ? 2 : r->state;
        sr->n_prompt = r->n_prompt;
        sr->n_computed = r->n_computed;
        sr->n_generated = r->n_generated + (in ? 1 : 0);
        sr->max_total = r->max_total;
        sr->priority = r->priority;
        sr->arrival_ns = r->arrival_ns;
    }
    memset(limits, 0, sizeof(*limits));
    limits->size = sizeof(*limits);
    limits->max_tokens = e->max_batch_tokens;
    limits->max_seqs = e->max_requests;
    if (e->kv->stats) e->kv->stats(e->kv_st, &limits->kv);
}

/* Whether the step in flight can be followed by one more for the same rows before its tokens
 * are known (see the section comment), reserving the kv room for it. */
static int pipe_can_continue(weft_engine *e) {
    pipe_state *p = &e->pipe;
    for (uint32_t q = 0; q < p->n; q++) {
        const request *r = p->req[q];
        /* the token in flight makes n_tokens + 1; it must not end the request by length */
        if (!pipe_row_ok(e, r, 1) || r->n_tokens + 1 >= r->max_total || r->kv_slot < 0) return 0;
    }
    /* The scheduler plans the step as it will look once the token in flight is known: it must
     * pick exactly these requests, one token each. */
    weft_sched_limits limits;
    sched_inputs(e, 1, &limits);
    uint32_t n_items = 0, picked = 0;
    weft_error e2;
    weft_error_clear(&e2);
    if (e->sched->schedule(e->sched_st, e->s_reqs, (uint32_t)e->n_reqs, &limits, e->s_items,
                           &n_items, &e2) != WEFT_OK)
        return 0;
    for (uint32_t k = 0; k < n_items && k < e->n_reqs; k++) {
        const weft_sched_item *it = &e->s_items[k];
        if (it->index >= e->n_reqs) return 0;
        if (it->action == 0 && it->n_tokens == 0) continue;
        if (it->action != 0 || e->reqs[it->index]->pipe_row < 0) return 0;
        picked++;
    }
    if (picked != p->n) return 0;
    for (uint32_t q = 0; q < p->n; q++) {
        const request *r = p->req[q];
        if (e->kv->reserve(e->kv_st, r->kv_slot, r->n_computed + 1, &e2) != WEFT_OK) return 0;
    }
    return pipe_ask(e, p->n, 1);
}

/* Launches the next step of the rows in flight: token ids from the device, positions, slots and
 * logit rows through a pinned slot. */
static weft_status pipe_launch(weft_engine *e, weft_error *err) {
    pipe_state *p = &e->pipe;
    uint32_t n = p->n;
    for (uint32_t q = 0; q < n; q++) {
        request *r = p->req[q];
        weft_seq *sq = &e->b_seqs[q];
        memset(sq, 0, sizeof(*sq));
        sq->request_id = r->id;
        sq->kv_slot = r->kv_slot;
        sq->n_past = (int32_t)r->n_computed;
        sq->n_new = 1;
        sq->first_row = (int32_t)q;
        sq->block_table =
            e->kv->block_table ? e->kv->block_table(e->kv_st, r->kv_slot, &sq->n_blocks) : NULL;
        e->b_tokens[q] = -1; /* on the device only */
        e->b_positions[q] = (int32_t)r->n_computed;
        e->b_seq_of_row[q] = (int32_t)q;
        e->b_logit_rows[q] = (int32_t)q;
        e->b_kv_slots[q] = r->kv_slot;
        e->b_req[q] = r;
        e->b_logit_seq[q] = q;
    }
    variant *v = NULL;
    weft_status s = variant_get(e, n, n, 0, &v, err);
    if (s != WEFT_OK) return s;
    uint64_t t_in = now_ns();
    pipe_event(e, 0);
    /* the ids are already in v's token input when the step in flight ran v too (the usual case:
     * the same rows); otherwise one copy on the stream, behind the sampler that wrote them */
    if (p->ids_v != v)
        s = e->be->copy(e->be_st, &v->data[v->t_tokens], 0, &p->ids_v->data[p->ids_v->t_tokens],
                        0, (uint64_t)n * 4, e->stream, err);
    /* positions, kv slots and logit rows: laid out in one pinned slot as in the variant's
     * inputs block and uploaded in one copy (what runs on the stream between two steps is on
     * the critical path at batch 1: docs/perf/batch1.md, session of 2026-12-01 17:59 UTC); the
     * slot is reused PIPE_RING launches later, when the copy out of it has long completed (the
     * host waits for every step's tokens). A block larger than a slot takes a copy per input. */
    uint64_t base = (uint64_t)(p->slot++ % PIPE_RING) * PIPE_SLOT_BYTES(e->max_requests);
    const int32_t *src[3] = {e->b_positions, e->b_kv_slots, e->b_logit_rows};
    int one = v->in_bytes <= PIPE_SLOT_BYTES(e->max_requests);
    for (int k = 0; k < 3 && s == WEFT_OK; k++) {
        if (v->in_off[k] == UINT64_MAX) continue;
        uint64_t off = base + (one ? v->in_off[k] : (uint64_t)k * e->max_requests * 4);
        memcpy((uint8_t *)p->stage.ptr + off, src[k], (size_t)n * 4);
        if (!one)
            s = e->be->copy(e->be_st, &v->inputs, v->in_off[k], &p->stage, off,
                            (uint64_t)n * 4, e->stream, err);
    }
    if (s == WEFT_OK && one && v->in_bytes)
        s = e->be->copy(e->be_st, &v->inputs, 0, &p->stage, base, v->in_bytes, e->stream, err);
    if (s != WEFT_OK) {
        weft_error_prefix(err, "step inputs");
        return s;
    }
    prof_host(e, "engine.inputs", t_in);
    weft_exec_ctx ctx;
    s = exec_run(e, v, n, n, n, &ctx, err);
    if (s == WEFT_OK && p->host) {
        if (e->exec->wait) s = e->exec->wait(e->exec_st, v->prepared, &ctx, err);
        if (s == WEFT_OK) s = logits_download(e, v, n, e->logits, err);
    }
    uint64_t t_s = now_ns();
    if (s == WEFT_OK) s = pipe_sample(e, v, n, 1, err);
    prof_host(e, "engine.sample", t_s);
    pipe_event(e, 1);
    return s;
}

/* One engine step while a step is in flight: launch the next one and deliver the one in flight
 * (returns 1), or only deliver it (returns 0: the caller runs the ordinary step). */
static int pipe_step(weft_engine *e, weft_status *status, weft_error *err) {
    pipe_state *p = &e->pipe;
    uint64_t t0 = now_ns();
    if (!pipe_can_continue(e)) {
        p->drains++;
        pipe_deliver(e, 0);
        return 0;
    }
    prof_host(e, "engine.plan", t0);
    weft_status s = pipe_launch(e, err);
    if (s != WEFT_OK) {
        /* nothing of the new step is outstanding in the sampler: deliver the old one, end the
         * rows of the new one as the ordinary path does when a step fails */
        pipe_deliver(e, 0);
        for (uint32_t q = 0; q < p->n; q++)
            finish_request(e, p->req[q], WEFT_FINISH_ERROR, err_text(err));
        *status = s < 0 ? s : WEFT_ERR_INTERNAL;
        retire(e);
        return 1;
    }
    p->launched++;
    p->pipelined++;
    pipe_deliver(e, 1);
    e->stats.steps++;
    e->stats.step_seconds += (double)(now_ns() - t0) * 1e-9;
    *status = WEFT_OK;
    return 1;
}

/* Whether the ordinary step just assembled in e->b_* may be launched ahead of the host. */
static int pipe_can_start(weft_engine *e, uint32_t n_rows, uint32_t n_seqs, uint32_t n_logits) {
    if (!pipe_usable(e) || n_rows != n_seqs || n_logits != n_seqs || n_seqs == 0) return 0;
    for (uint32_t q = 0; q < n_seqs; q++) {
        const request *r = e->b_req[q];
        if (e->b_seqs[q].n_new != 1 || e->b_logit_seq[q] != q || r->n_generated == 0 ||
            r->n_computed + 1 != r->n_tokens || !pipe_row_ok(e, r, 0))
            return 0;
    }
    weft_error e2;
    weft_error_clear(&e2);
    if (pipe_setup(e, &e2) != WEFT_OK) {
        e->hs->log(WEFT_LOG_WARN, "engine", "%s: steps are not pipelined", e2.message);
        e->pipe.usable = 0;
        return 0;
    }
    return pipe_ask(e, n_seqs, 0);
}

/* Delivers the step in flight, if any (before anything else touches the device or the kv). */
static void pipe_drain(weft_engine *e) {
    if (!e->pipe.active) return;
    e->pipe.drains++;
    pipe_deliver(e, 0);
}

weft_status weft_engine_step(weft_engine *e, weft_error *err) {
    if (!e) return WEFT_ERR_INVALID;
    weft_error_clear(err);
    weft_status ps = WEFT_OK;
    if (e->pipe.active && pipe_step(e, &ps, err)) return ps;
    retire(e);
    if (e->n_reqs == 0) return WEFT_FINISHED;
    uint64_t t0 = now_ns();
    /* Plan. */
    weft_sched_limits limits;
    sched_inputs(e, 0, &limits);
    uint32_t n_items = 0;
    weft_status s = e->sched->schedule(e->sched_st, e->s_reqs, (uint32_t)e->n_reqs, &limits,
                                       e->s_items, &n_items, err);
    if (s != WEFT_OK) {
        weft_error_prefix(err, "scheduler");
        return s < 0 ? s : WEFT_ERR_INTERNAL;
    }
    for (size_t i = 0; i < e->n_reqs; i++)
        e->reqs[i]->in_step = 0;
    /* Preemptions (action 1, sched.preempt) come before any reservation, so the cache they
     * free serves this step. The request's cache is published (commit, for a prefix cache) and
     * released; its prompt and generated tokens are recomputed when it is scheduled again, and
     * its next token is then sampled from the same logits with the same Philox counter (the
     * output index), so its output does not change. It sits out the step that preempted it.
     * Swap actions (2, 3) need a host tier no kv provider has yet; they are ignored. */
    uint32_t n_preempted = 0;
    for (uint32_t k = 0; k < n_items && k < e->n_reqs; k++) {
        const weft_sched_item *it = &e->s_items[k];
        if (it->action != 1 || it->index >= e->n_reqs) continue;
        request *r = e->reqs[it->index];
        if (r->finish || r->in_step || (r->kv_slot < 0 && r->n_computed == 0)) continue;
        if (r->kv_slot >= 0) {
            if (e->kv->commit) e->kv->commit(e->kv_st, r->kv_slot, r->tokens, r->n_computed);
            e->kv->close(e->kv_st, r->kv_slot);
            r->kv_slot = -1;
        }
        r->n_computed = 0;
        r->state = 3;
        r->in_step = 1;
        e->stats.preemptions++;
        n_preempted++;
    }
    /* Assemble the batch. */
    uint32_t n_rows = 0, n_seqs = 0, n_logits = 0;
    request *last_denied = NULL;
    uint32_t denied_tokens = 0;
    for (uint32_t k = 0; k < n_items && k < e->n_reqs; k++) {
        const weft_sched_item *it = &e->s_items[k];
        if (it->index >= e->n_reqs || it->action != 0 || it->n_tokens == 0) continue;
        request *r = e->reqs[it->index];
        uint32_t pending = r->n_tokens - r->n_computed;
        uint32_t n = it->n_tokens < pending ? it->n_tokens : pending;
        if (r->in_step || r->finish || n == 0 || n_seqs == e->max_requests ||
            n_rows + n > e->max_batch_tokens)
            continue;
        int opened = 0;
        if (r->kv_slot < 0) {
            s = e->kv->open(e->kv_st, r->id, &r->kv_slot, err);
            if (s == WEFT_AGAIN) {
                if (e->sched->kv_denied) e->sched->kv_denied(e->sched_st, r->id);
                continue;
            }
            if (s != WEFT_OK) return s;
            opened = 1;
            if ((s = kv_prefix_attach(e, r, err)) != WEFT_OK) {
                finish_request(e, r, WEFT_FINISH_ERROR, err_text(err));
                continue;
            }
            /* cached tokens are skipped: this step computes at most what is left */
            if (n > r->n_tokens - r->n_computed) n = r->n_tokens - r->n_computed;
        }
        s = e->kv->reserve(e->kv_st, r->kv_slot, r->n_computed + n, err);
        if (s == WEFT_AGAIN) {
            /* A request with nothing cached gives its slot back: a waiting request never holds
             * kv, which a preempting scheduler relies on when it counts what can be freed. */
            if (r->n_computed == 0 || opened) {
                /* prefix pages attached this step go back too (they stay cached) */
                e->stats.prefix_cached_tokens -= opened ? r->n_computed : 0;
                r->n_computed = opened ? 0 : r->n_computed;
                e->kv->close(e->kv_st, r->kv_slot);
                r->kv_slot = -1;
            }
            last_denied = r;
            denied_tokens = r->n_computed + n;
            if (e->sched->kv_denied) e->sched->kv_denied(e->sched_st, r->id);
            continue;
        }
        if (s != WEFT_OK) {
            finish_request(e, r, WEFT_FINISH_ERROR, err_text(err));
            continue;
        }
        weft_seq *sq = &e->b_seqs[n_seqs];
        memset(sq, 0, sizeof(*sq));
        sq->request_id = r->id;
        sq->kv_slot = r->kv_slot;
        sq->n_past = (int32_t)r->n_computed;
        sq->n_new = (int32_t)n;
        sq->first_row = (int32_t)n_rows;
        sq->block_table =
            e->kv->block_table ? e->kv->block_table(e->kv_st, r->kv_slot, &sq->n_blocks) : NULL;
        for (uint32_t j = 0; j < n; j++) {
            e->b_tokens[n_rows + j] = r->tokens[r->n_computed + j];
            e->b_positions[n_rows + j] = (int32_t)(r->n_computed + j);
            e->b_seq_of_row[n_rows + j] = (int32_t)n_seqs;
        }
        e->b_req[n_seqs] = r;
        e->b_logit_seq[n_seqs] = UINT32_MAX;
        if (r->n_computed + n == r->n_tokens) { /* its last known token: sample after it */
            e->b_logit_seq[n_seqs] = n_logits;
            e->b_logit_rows[n_logits++] = (int32_t)(n_rows + n - 1);
        }
        r->in_step = 1;
        n_rows += n;
        n_seqs++;
    }
    if (n_rows == 0) {
        /* Nothing ran. After a refusal the scheduler gets one more step to make room (a
         * preempting one does so through kv_denied); a second step in a row where the pool
         * refuses and nothing is preempted cannot change anything, so the youngest refused
         * request ends with an error instead of being retried forever (it needs more than the
         * pool can give while the others keep theirs). */
        e->stalled = last_denied && !n_preempted ? e->stalled + 1 : 0;
        if (e->stalled >= 2) {
            char msg[200];
            snprintf(msg, sizeof(msg),
                     "kv: the pool (capacity %llu tokens) refused %u tokens for this request and "
                     "nothing else could free room",
                     (unsigned long long)limits.kv.capacity_tokens, denied_tokens);
            finish_request(e, last_denied, WEFT_FINISH_ERROR, msg);
            e->stalled = 0;
        }
        retire(e);
        return e->n_reqs ? WEFT_AGAIN : WEFT_FINISHED;
    }
    e->stalled = 0;
    prof_host(e, "engine.plan", t0);
    /* With a sampler plugin the logits stay on the device (unless a feature edits them). */
    int on_host = !e->sampler || has_logit_features(e);
    /* exec.async-pipeline: a plain decode step may leave its tokens on the device */
    int pipe_start = pipe_can_start(e, n_rows, n_seqs, n_logits), pipelined = 0;
    pipe_event(e, 0);
    variant *v = NULL;
    s = run_step(e, n_rows, n_seqs, n_logits, 0, on_host ? e->logits : NULL, &v, err);
    if (s == WEFT_OK && pipe_start) {
        uint64_t t_p = now_ns();
        s = pipe_sample(e, v, n_seqs, 0, err);
        prof_host(e, "engine.sample", t_p);
        pipelined = s == WEFT_OK;
        if (s == WEFT_ERR_UNSUPPORTED) { /* a row the sampler declines: the ordinary path */
            weft_error_clear(err);
            s = WEFT_OK;
        }
    }
    if (s == WEFT_OK && pipelined) {
        /* nothing to sample now: the tokens come with the next step */
    } else if (s == WEFT_OK && !on_host) {
        uint64_t t_p = now_ns();
        presample(e, n_seqs, v);
        prof_host(e, "engine.sample", t_p);
    } else if (s == WEFT_OK) {
        memset(e->ps_done, 0, n_seqs);
    }
    if (s == WEFT_OK) {
        for (uint32_t q = 0; q < n_seqs; q++) {
            request *r = e->b_req[q];
            uint32_t n = (uint32_t)e->b_seqs[q].n_new, p0 = r->n_computed;
            r->n_computed += n;
            /* Rows at prompt positions are prefill; a row at the last known token after the
             * prompt is decode; generated tokens before it are fed again after a preemption. */
            uint32_t pre = p0 < r->n_prompt ? (r->n_prompt - p0 < n ? r->n_prompt - p0 : n) : 0;
            uint32_t dec = r->n_computed == r->n_tokens && r->n_tokens > r->n_prompt ? 1 : 0;
            e->stats.prefill_tokens += pre;
            e->stats.decode_tokens += dec;
            e->stats.recomputed_tokens += n - pre - dec;
            if (r->n_computed < r->n_tokens || r->n_generated == 0) r->state = 1;
            if (pipelined) {
                e->pipe.req[q] = r;
                r->pipe_row = (int32_t)q;
                continue;
            }
            if (e->b_logit_seq[q] == UINT32_MAX || r->finish) continue;
            if (r->cancelled) continue;
            weft_sample_result res;
            float *row = e->logits + (size_t)e->b_logit_seq[q] * e->cfg.vocab_size;
            weft_status ss = WEFT_OK;
            if (e->ps_done[q]) {
                memset(&res, 0, sizeof(res));
                res.token = e->ps_tok[q];
                res.logprob = e->ps_lp[q];
            } else {
                uint64_t t_s = now_ns();
                ss = sample_row(e, r, row, on_host, e->b_logit_seq[q], v, &res, err);
                prof_host(e, "engine.sample", t_s);
            }
            if (ss != WEFT_OK) {
                finish_request(e, r, WEFT_FINISH_ERROR, err_text(err));
                continue;
            }
            uint64_t t_d = now_ns();
            accept_token(e, r, &res);
            prof_host(e, "engine.deliver", t_d);
        }
    } else {
        for (uint32_t q = 0; q < n_seqs; q++)
            finish_request(e, e->b_req[q], WEFT_FINISH_ERROR, err_text(err));
    }
    pipe_event(e, 1);
    if (pipelined) {
        e->pipe.active = 1;
        e->pipe.n = n_seqs;
        e->pipe.launched++;
    }
    retire(e);
    e->stats.steps++;
    e->stats.step_seconds += (double)(now_ns() - t0) * 1e-9;
    return s;
}

/* ---- score ------------------------------------------------------------------------------- */
weft_status weft_engine_score(weft_engine *e, const int32_t *ids, size_t n, float *logits,
                              weft_error *err) {
    if (!e || !ids || !logits || n == 0)
        return weft_error_set(err, WEFT_ERR_INVALID, "engine", "score: missing argument");
    if (n > e->max_model_len)
        return weft_error_set(err, WEFT_ERR_INVALID, "request",
                              "score: %zu tokens exceed max_model_len %u", n, e->max_model_len);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= e->cfg.vocab_size)
            return weft_error_set(err, WEFT_ERR_INVALID, "request",
                                  "score token %zu: id %d is outside the vocabulary (0..%u)", i,
                                  ids[i], e->cfg.vocab_size - 1);
    pipe_drain(e); /* its tokens are delivered before the score step uses the device */
    uint32_t V = e->cfg.vocab_size;
    uint32_t chunk = e->max_batch_tokens;
    while (chunk > 1 && (uint64_t)chunk * V * sizeof(float) > SCORE_LOGITS_BYTES)
        chunk /= 2;
    int32_t slot = -1;
    weft_status s = e->kv->open(e->kv_st, 0, &slot, err);
    if (s == WEFT_AGAIN) return weft_error_set(err, WEFT_AGAIN, "engine", "score: no free kv slot");
    if (s != WEFT_OK) return s;
    s = e->kv->reserve(e->kv_st, slot, (uint32_t)n, err);
    for (size_t done = 0; s == WEFT_OK && done < n;) {
        uint32_t rows = n - done < chunk ? (uint32_t)(n - done) : chunk;
        weft_seq *sq = &e->b_seqs[0];
        memset(sq, 0, sizeof(*sq));
        sq->kv_slot = slot;
        sq->n_past = (int32_t)done;
        sq->n_new = (int32_t)rows;
        sq->block_table =
            e->kv->block_table ? e->kv->block_table(e->kv_st, slot, &sq->n_blocks) : NULL;
        for (uint32_t j = 0; j < rows; j++) {
            e->b_tokens[j] = ids[done + j];
            e->b_positions[j] = (int32_t)(done + j);
            e->b_seq_of_row[j] = 0;
            e->b_logit_rows[j] = (int32_t)j;
        }
        s = run_step(e, rows, 1, rows, 1, logits + done * V, NULL, err);
        done += rows;
    }
    e->kv->close(e->kv_st, slot);
    return s;
}

/* ---- inspection -------------------------------------------------------------------------- */
weft_status weft_engine_print_graph(weft_engine *e, uint32_t max_tokens, FILE *f, char hash[33],
                                    weft_error *err) {
    if (!e || !f) return weft_error_set(err, WEFT_ERR_INVALID, "engine", "missing argument");
    if (max_tokens == 0 || max_tokens > e->max_batch_tokens)
        return weft_error_set(err, WEFT_ERR_INVALID, "engine",
                              "bucket: expected 1..%u tokens, got %u", e->max_batch_tokens,
                              max_tokens);
    variant *v = NULL;
    uint32_t T = pow2_at_least(max_tokens);
    if (T > e->max_batch_tokens) T = e->max_batch_tokens;
    uint32_t R = T < e->max_requests ? T : e->max_requests;
    weft_status s = variant_get(e, T, R, 0, &v, err);
    if (s != WEFT_OK) return s;
    if (weft_graph_print(v->g, v->providers, f) != WEFT_OK)
        return weft_error_set(err, WEFT_ERR_NOMEM, "engine", "out of memory");
    if (hash) memcpy(hash, v->hash, 33);
    return WEFT_OK;
}
