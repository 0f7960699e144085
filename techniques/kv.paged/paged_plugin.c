/* kv.paged: the kv slot as a pool of fixed-size pages with a block table per request
 * (paged_pool.c), and attention op implementations that read K and V through the block table
 * (paged_cpu.c; paged_cuda.c when built with CUDA). The engine resolves attention nodes by the
 * kv view's layout, so once this provider is the kv slot every attention node goes to the
 * "paged" implementations registered here; no graph pass is needed. Exact: the same
 * arithmetic as the contiguous kernels, only the addresses of cache rows differ. */
#include <stdlib.h>
#include <string.h>

#include "paged_ops.h"
#include "paged_pool.h"
#include "weft/sdk.h"

typedef struct paged_state {
    const weft_host_services *host;
    kv_paged_pool pool;
    void *cuda; /* paged_cuda.c's state, when the cuda ops were registered */
    int tc_prefill; /* option prefill_tensor_cores */
} paged_state;

/* ---- instance ---------------------------------------------------------------------------- */
static weft_status paged_create(const weft_host_services *host, const weft_options *opts,
                                void **out, weft_error *err) {
    if (!host || !out)
        return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME, "create: missing argument");
    paged_state *s = calloc(1, sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, KV_PAGED_NAME, "out of memory");
    weft_status st = kv_paged_pool_options(&s->pool, KV_PAGED_NAME, opts, err);
    if (st) {
        free(s);
        return st;
    }
    s->host = host;
    s->tc_prefill = weft_sdk_option_bool(opts, "prefill_tensor_cores", 1);
    *out = s;
    return WEFT_OK;
}

static void paged_destroy(void *st) {
    paged_state *s = st;
    if (!s) return;
    kv_paged_pool_fini(&s->pool);
#ifdef KV_PAGED_CUDA
    kv_paged_cuda_free(s->cuda);
#endif
    free(s);
}

/* ---- kv slot ------------------------------------------------------------------------------ */
static weft_status kv_init(void *st, const weft_kv_geometry *geo, const weft_device_service *dev,
                           weft_error *err) {
    paged_state *s = st;
    return kv_paged_pool_init(&s->pool, geo, dev, err);
}
static weft_status kv_open(void *st, uint64_t request_id, int32_t *slot, weft_error *err) {
    (void)request_id;
    return kv_paged_pool_open(&((paged_state *)st)->pool, slot, err);
}
static weft_status kv_reserve(void *st, int32_t slot, uint32_t n_total, weft_error *err) {
    return kv_paged_pool_reserve(&((paged_state *)st)->pool, slot, n_total, err);
}
static void kv_close(void *st, int32_t slot) {
    kv_paged_pool_close(&((paged_state *)st)->pool, slot);
}
static const weft_kv_view *kv_view(void *st) {
    paged_state *s = st;
    return s->pool.ready ? &s->pool.view : NULL;
}
static const int32_t *kv_block_table(void *st, int32_t slot, int32_t *n_blocks) {
    return kv_paged_pool_block_table(&((paged_state *)st)->pool, slot, n_blocks);
}
static void kv_truncate(void *st, int32_t slot, uint32_t n) {
    kv_paged_pool_truncate(&((paged_state *)st)->pool, slot, n);
}
static void kv_stats(void *st, weft_kv_stats *out) {
    kv_paged_pool_stats(&((paged_state *)st)->pool, out);
}
static void kv_fini(void *st) {
    kv_paged_pool_fini(&((paged_state *)st)->pool);
}

static const weft_kv_vtable paged_kv = {
    .size = sizeof(weft_kv_vtable),
    .init = kv_init,
    .open = kv_open,
    .reserve = kv_reserve,
    .close = kv_close,
    .view = kv_view,
    .block_table = kv_block_table,
    .prefix_attach = NULL, /* kv.prefix-cache layers that on this pool */
    .commit = NULL,
    .swap_out = NULL,
    .swap_in = NULL,
    .truncate = kv_truncate,
    .stats = kv_stats,
    .fini = kv_fini,
};

/* ---- ops ---------------------------------------------------------------------------------- */
static weft_status paged_register_ops(void *st, const char *backend, const weft_ops_service *ops,
                                      weft_error *err) {
    paged_state *s = st;
    if (!s || !backend || !ops || !ops->add)
        return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME,
                              "register_ops: missing argument");
    if (!strcmp(backend, "cpu")) {
        const weft_threads_service *threads =
            s->host->get_service ? s->host->get_service(s->host, WEFT_SERVICE_THREADS, 1) : NULL;
        return kv_paged_register_cpu(threads, ops, err);
    }
    if (!strcmp(backend, "cuda")) {
#ifdef KV_PAGED_CUDA
        if (s->cuda) return WEFT_OK;
        return kv_paged_register_cuda(s->host, ops, s->tc_prefill, &s->cuda, err);
#else
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, KV_PAGED_NAME,
                              "register_ops: this build of kv.paged has no cuda kernels "
                              "(configure with -DWEFT_CUDA=ON)");
#endif
    }
    return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, KV_PAGED_NAME,
                          "register_ops: expected backend cpu or cuda, got %s", backend);
}

static const weft_opset_vtable paged_ops = {
    .size = sizeof(weft_opset_vtable),
    .register_ops = paged_register_ops,
};

static const weft_plugin_descriptor paged_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = KV_PAGED_NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_KV | WEFT_SLOT_OPS,
    .create = paged_create,
    .destroy = paged_destroy,
    .kv = &paged_kv,
    .opset = &paged_ops,
};

WEFT_SDK_ENTRY(paged_desc, 1, 1)
