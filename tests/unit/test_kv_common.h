/* Helpers shared by the kv technique tests (test_kv_paged.c, test_kv_prefix.c): the shared
 * models, candidate manifests written on the fly (baseline plus kv techniques with chosen
 * options), engines opened from them, greedy runs, and a kv provider driven directly through
 * its vtable on top of the real cpu backend's memory functions. Header-only: each test is its
 * own executable. */
#ifndef TEST_KV_COMMON_H
#define TEST_KV_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "files/llama2c.h"
#include "plugin/candidate.h"
#include "plugin/host.h"
#include "util/error.h"

#include "stories_fixture.h"

static inline const char *kvt_shared_dir(void) {
    return fixture_shared_dir();
}

/* stories260K converted into a temporary directory (removed by kvt_stories_remove). */
static inline int kvt_stories_convert(char dir[64]) {
    return stories_convert(dir, "weft-kv");
}

static inline void kvt_stories_remove(const char *dir) {
    stories_remove(dir, NULL);
}

/* Writes a cpu candidate manifest with the given techniques block (YAML list items, each line
 * starting with "  - ", or "" for none) to a temporary file; path receives its name. */
static inline void kvt_manifest(char path[64], const char *techniques) {
    snprintf(path, 64, "/tmp/weft-kv-cand-XXXXXX.yaml");
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f,
            "format: 1\ncandidate: kv-test\nmodel: stories260k\n"
            "backend: {name: cpu, options: {threads: 1}}\nmodel_plugin: llama\n"
            "techniques:%s\n%s"
            "serving:\n  max_model_len: 512\n  max_concurrency: 1\n  threads: 1\n",
            techniques[0] ? "" : " []", techniques);
    fclose(f);
}

static inline weft_engine *kvt_open(const char *manifest, const char *model_dir,
                                    uint32_t max_requests, uint32_t max_batch_tokens) {
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = manifest;
    o.model_dir = model_dir;
    o.threads = 1;
    o.max_requests = max_requests;
    o.max_batch_tokens = max_batch_tokens;
    weft_error err;
    weft_error_clear(&err);
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK)
        fail_msg("open %s: %s: %s", manifest, err.source, err.message);
    return e;
}

typedef struct kvt_out {
    int32_t ids[1024];
    size_t n;
    uint32_t finish;
} kvt_out;

static inline void kvt_collect(void *user, const weft_token_event *ev) {
    kvt_out *o = user;
    if (ev->token >= 0 && o->n < sizeof(o->ids) / sizeof(o->ids[0])) o->ids[o->n++] = ev->token;
    if (ev->finish) o->finish = ev->finish;
}

/* Submits one greedy request (EOS ignored) and steps until every request ended. */
static inline void kvt_submit(weft_engine *e, const int32_t *prompt, size_t n, uint32_t max_tokens,
                              kvt_out *out) {
    memset(out, 0, sizeof(*out));
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = max_tokens;
    rp.ignore_eos = 1;
    rp.callback = kvt_collect;
    rp.user = out;
    weft_error err;
    weft_error_clear(&err);
    if (weft_request_submit(e, prompt, n, &rp, NULL, &err) != WEFT_OK)
        fail_msg("submit: %s", err.message);
}

static inline void kvt_drain(weft_engine *e) {
    weft_error err;
    weft_error_clear(&err);
    while (weft_engine_active(e)) {
        weft_status s = weft_engine_step(e, &err);
        if (s < 0) fail_msg("step: %s: %s", err.source, err.message);
    }
}

static inline void kvt_greedy(weft_engine *e, const int32_t *prompt, size_t n, uint32_t max_tokens,
                              kvt_out *out) {
    kvt_submit(e, prompt, n, max_tokens, out);
    kvt_drain(e);
    assert_int_equal(out->finish, WEFT_FINISH_LENGTH);
    assert_int_equal(out->n, max_tokens);
}

/* ---- a kv provider driven directly --------------------------------------------------------
 * The candidate (cpu backend, llama, the kv techniques) is loaded by the real loader; the
 * device service wraps the loaded cpu backend's alloc/free/copy, as the engine's does. */
typedef struct kvt_direct {
    weft_host *host;
    weft_candidate *cand;
    const weft_loaded_plugin *backend, *kv;
    weft_device_service dev;
} kvt_direct;

static inline weft_status kvt_dev_alloc(void *self, uint64_t bytes, uint32_t memory,
                                        weft_buffer *out, weft_error *err) {
    const weft_loaded_plugin *b = ((kvt_direct *)self)->backend;
    return b->desc->backend->alloc(b->state, bytes, memory, out, err);
}
static inline void kvt_dev_free(void *self, weft_buffer *buf) {
    const weft_loaded_plugin *b = ((kvt_direct *)self)->backend;
    b->desc->backend->free(b->state, buf);
}
static inline weft_status kvt_dev_copy(void *self, weft_buffer *dst, uint64_t dst_off,
                                       const weft_buffer *src, uint64_t src_off, uint64_t bytes,
                                       void *stream, weft_error *err) {
    const weft_loaded_plugin *b = ((kvt_direct *)self)->backend;
    return b->desc->backend->copy(b->state, dst, dst_off, src, src_off, bytes, stream, err);
}
static inline void *kvt_dev_stream(void *self) {
    (void)self;
    return NULL;
}

static inline void kvt_direct_open(kvt_direct *d, const char *manifest, const char *model_dir) {
    memset(d, 0, sizeof(*d));
    d->host = weft_host_new();
    assert_non_null(d->host);
    weft_error err;
    weft_error_clear(&err);
    if (weft_candidate_load_manifest(manifest, model_dir, weft_host_services_of(d->host), &d->cand,
                                     &err) != WEFT_OK)
        fail_msg("load %s: %s", manifest, err.message);
    d->backend = weft_candidate_slot(d->cand, WEFT_SLOT_BACKEND);
    d->kv = weft_candidate_slot(d->cand, WEFT_SLOT_KV);
    assert_non_null(d->backend);
    assert_non_null(d->kv);
    d->dev = (weft_device_service){sizeof(weft_device_service),
                                   1,
                                   d,
                                   "cpu",
                                   kvt_dev_alloc,
                                   kvt_dev_free,
                                   kvt_dev_copy,
                                   kvt_dev_stream,
                                   NULL};
}

static inline void kvt_direct_init(kvt_direct *d, uint32_t n_layers, uint32_t kv_heads, uint32_t hd,
                                   uint32_t max_seq, uint32_t max_requests) {
    weft_kv_geometry geo;
    memset(&geo, 0, sizeof(geo));
    geo.size = sizeof(geo);
    geo.n_layers = n_layers;
    geo.n_kv_heads = kv_heads;
    geo.head_dim = hd;
    geo.dtype = WEFT_DTYPE_F32;
    geo.max_seq = max_seq;
    geo.max_requests = max_requests;
    weft_error err;
    weft_error_clear(&err);
    if (d->kv->desc->kv->init(d->kv->state, &geo, &d->dev, &err) != WEFT_OK)
        fail_msg("kv init: %s", err.message);
}

static inline void kvt_direct_close(kvt_direct *d) {
    if (d->kv && d->kv->desc->kv->fini) d->kv->desc->kv->fini(d->kv->state);
    weft_candidate_unload(d->cand);
    weft_host_free(d->host);
}

#endif
