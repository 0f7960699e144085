/* The default kv provider: contiguous caches, one per slot and layer, each sized for max_seq
 * tokens, allocated once at init through the device service. A request holds a slot from its
 * first step to its retirement; reserve checks that the request still fits. The view is
 * the "contiguous" layout of weft/plugin.h (weft_kv_contiguous), read by attention ops.
 *
 * A byte budget (geometry budget_bytes, the engine's kv_tokens option) smaller than every slot
 * at full length caps the tokens reserved across all slots: reserve answers WEFT_AGAIN past it,
 * as a paged pool does when it runs out of pages. The memory is still allocated whole (a slot
 * cannot be shorter than max_seq here), so the cap is an admission limit that makes kv pressure
 * and preemption (sched.preempt) testable with the default provider, not a memory saving. */
#include <stdlib.h>
#include <string.h>

#include "engine/providers.h"
#include "graph/graph.h"
#include "util/error.h"

typedef struct kv_contig {
    weft_kv_geometry geo;
    const weft_device_service *dev;
    weft_kv_contiguous desc;
    weft_kv_view view;
    weft_buffer *k, *v;   /* (n_layers) */
    uint8_t *used;        /* (n_slots) */
    uint32_t *reserved;   /* (n_slots) tokens the slot may hold now */
    uint64_t slot_bytes;  /* per slot, all layers, k and v */
    uint64_t cap_tokens;  /* tokens reservable across slots (the budget), or slots * max_seq */
    uint64_t held_tokens; /* sum of reserved[] over open slots */
} kv_contig;

void *weft_kv_contiguous_new(void) {
    return calloc(1, sizeof(kv_contig));
}

static void kv_fini(void *st) {
    kv_contig *kv = st;
    if (!kv) return;
    for (uint32_t l = 0; l < kv->geo.n_layers && kv->dev; l++) {
        if (kv->k && kv->k[l].ptr) kv->dev->free(kv->dev->self, &kv->k[l]);
        if (kv->v && kv->v[l].ptr) kv->dev->free(kv->dev->self, &kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->used);
    free(kv->reserved);
    kv->k = kv->v = NULL;
    kv->used = NULL;
    kv->reserved = NULL;
}

void weft_kv_contiguous_free(void *st) {
    kv_fini(st);
    free(st);
}

static weft_status kv_init(void *st, const weft_kv_geometry *geo, const weft_device_service *dev,
                           weft_error *err) {
    kv_contig *kv = st;
    if (!kv || !geo || !dev)
        return weft_error_set(err, WEFT_ERR_INVALID, "kv.contiguous", "init: missing argument");
    uint32_t es = weft_graph_dtype_size(geo->dtype);
    if (!es || !geo->n_layers || !geo->n_kv_heads || !geo->head_dim || !geo->max_seq ||
        !geo->max_requests)
        return weft_error_set(err, WEFT_ERR_INVALID, "kv.contiguous",
                              "init: expected a dense dtype and positive sizes, got dtype %u, "
                              "%u layers, %u kv heads, head_dim %u, max_seq %u, %u requests",
                              geo->dtype, geo->n_layers, geo->n_kv_heads, geo->head_dim,
                              geo->max_seq, geo->max_requests);
    kv->geo = *geo;
    kv->dev = dev;
    uint64_t per_layer =
        (uint64_t)geo->max_requests * geo->max_seq * geo->n_kv_heads * geo->head_dim * es;
    kv->slot_bytes = per_layer / geo->max_requests * 2 * geo->n_layers;
    uint64_t token_bytes = kv->slot_bytes / geo->max_seq;
    kv->cap_tokens = (uint64_t)geo->max_requests * geo->max_seq;
    kv->held_tokens = 0;
    if (geo->budget_bytes && geo->budget_bytes / token_bytes < kv->cap_tokens)
        kv->cap_tokens = geo->budget_bytes / token_bytes;
    if (kv->cap_tokens == 0)
        return weft_error_set(err, WEFT_ERR_INVALID, "kv.contiguous",
                              "budget: expected at least one token (%llu bytes), got %llu bytes",
                              (unsigned long long)token_bytes,
                              (unsigned long long)geo->budget_bytes);
    kv->k = calloc(geo->n_layers, sizeof(weft_buffer));
    kv->v = calloc(geo->n_layers, sizeof(weft_buffer));
    kv->used = calloc(geo->max_requests, 1);
    kv->reserved = calloc(geo->max_requests, sizeof(uint32_t));
    if (!kv->k || !kv->v || !kv->used || !kv->reserved) {
        kv_fini(kv);
        return weft_error_set(err, WEFT_ERR_NOMEM, "kv.contiguous", "out of memory");
    }
    for (uint32_t l = 0; l < geo->n_layers; l++) {
        weft_status s = dev->alloc(dev->self, per_layer, WEFT_MEMORY_DEVICE, &kv->k[l], err);
        if (s == WEFT_OK) s = dev->alloc(dev->self, per_layer, WEFT_MEMORY_DEVICE, &kv->v[l], err);
        if (s != WEFT_OK) {
            weft_error_prefix(err, "kv.contiguous: layer %u (%llu bytes each for k and v)", l,
                              (unsigned long long)per_layer);
            kv_fini(kv);
            return s;
        }
    }
    memset(&kv->desc, 0, sizeof(kv->desc));
    kv->desc.size = sizeof(kv->desc);
    kv->desc.n_layers = geo->n_layers;
    kv->desc.n_slots = geo->max_requests;
    kv->desc.max_seq = geo->max_seq;
    kv->desc.n_kv_heads = geo->n_kv_heads;
    kv->desc.head_dim = geo->head_dim;
    kv->desc.dtype = geo->dtype;
    kv->desc.k = kv->k;
    kv->desc.v = kv->v;
    memset(&kv->view, 0, sizeof(kv->view));
    kv->view.size = sizeof(kv->view);
    snprintf(kv->view.layout, sizeof(kv->view.layout), "contiguous");
    kv->view.desc = &kv->desc;
    return WEFT_OK;
}

static weft_status kv_open(void *st, uint64_t request_id, int32_t *slot, weft_error *err) {
    kv_contig *kv = st;
    (void)request_id;
    for (uint32_t i = 0; i < kv->geo.max_requests; i++)
        if (!kv->used[i]) {
            kv->used[i] = 1;
            kv->reserved[i] = 0;
            *slot = (int32_t)i;
            return WEFT_OK;
        }
    (void)err;
    return WEFT_AGAIN;
}

static weft_status kv_reserve(void *st, int32_t slot, uint32_t n_total, weft_error *err) {
    kv_contig *kv = st;
    if (slot < 0 || (uint32_t)slot >= kv->geo.max_requests || !kv->used[slot])
        return weft_error_set(err, WEFT_ERR_INVALID, "kv.contiguous",
                              "reserve: slot %d is not open", slot);
    if (n_total > kv->geo.max_seq)
        return weft_error_set(err, WEFT_ERR_INVALID, "kv.contiguous",
                              "reserve: %u tokens exceed the slot length %u", n_total,
                              kv->geo.max_seq);
    if (n_total > kv->reserved[slot]) {
        uint64_t more = n_total - kv->reserved[slot];
        if (kv->held_tokens + more > kv->cap_tokens) return WEFT_AGAIN;
        kv->held_tokens += more;
        kv->reserved[slot] = n_total;
    }
    return WEFT_OK;
}

static void kv_close(void *st, int32_t slot) {
    kv_contig *kv = st;
    if (slot >= 0 && (uint32_t)slot < kv->geo.max_requests && kv->used && kv->used[slot]) {
        kv->held_tokens -= kv->reserved[slot];
        kv->used[slot] = 0;
        kv->reserved[slot] = 0;
    }
}

static const weft_kv_view *kv_view(void *st) {
    kv_contig *kv = st;
    return kv->k ? &kv->view : NULL;
}

static const int32_t *kv_block_table(void *st, int32_t slot, int32_t *n_blocks) {
    (void)st;
    (void)slot;
    if (n_blocks) *n_blocks = 0;
    return NULL;
}

static void kv_truncate(void *st, int32_t slot, uint32_t n) {
    kv_contig *kv = st;
    if (slot >= 0 && (uint32_t)slot < kv->geo.max_requests && kv->reserved &&
        kv->reserved[slot] > n) {
        kv->held_tokens -= kv->reserved[slot] - n;
        kv->reserved[slot] = n;
    }
}

static void kv_stats(void *st, weft_kv_stats *out) {
    kv_contig *kv = st;
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    uint64_t per_token = kv->geo.max_seq ? kv->slot_bytes / kv->geo.max_seq : 0;
    out->capacity_tokens = kv->cap_tokens;
    out->used_tokens = kv->held_tokens;
    out->bytes_total = kv->slot_bytes * kv->geo.max_requests;
    out->bytes_used = out->used_tokens * per_token;
}

const weft_kv_vtable weft_kv_contiguous_vtable = {
    .size = sizeof(weft_kv_vtable),
    .init = kv_init,
    .open = kv_open,
    .reserve = kv_reserve,
    .close = kv_close,
    .view = kv_view,
    .block_table = kv_block_table,
    .truncate = kv_truncate,
    .stats = kv_stats,
    .fini = kv_fini,
};
