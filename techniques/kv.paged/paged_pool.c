/* The page pool (see paged_pool.h): allocation of pages for kv slots, reference counts, copy on
 * write of shared pages, LRU reuse of pages an index keeps, and the host and device block
 * tables attention ops read. Device work is limited to asynchronous copies on the engine's
 * stream (block-table rows, copied pages), which keeps reserve() a control-class call. */
#include "paged_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

static uint32_t dtype_bytes(uint32_t dt) {
    return dt == WEFT_DTYPE_F32 ? 4 : dt == WEFT_DTYPE_F16 || dt == WEFT_DTYPE_BF16 ? 2 : 0;
}

/* ---- lists --------------------------------------------------------------------------- */
static void lru_remove(kv_paged_pool *p, int32_t pg) {
    int32_t a = p->lru_prev[pg], b = p->lru_next[pg];
    if (a >= 0)
        p->lru_next[a] = b;
    else
        p->lru_head = b;
    if (b >= 0)
        p->lru_prev[b] = a;
    else
        p->lru_tail = a;
    p->lru_prev[pg] = p->lru_next[pg] = -1;
    p->n_lru--;
}

static void lru_push(kv_paged_pool *p, int32_t pg) { /* most recent at the tail */
    p->lru_prev[pg] = p->lru_tail;
    p->lru_next[pg] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = pg;
    else
        p->lru_head = pg;
    p->lru_tail = pg;
    p->n_lru++;
}

/* A free page: from the free stack, else the least recently released evictable page, which
 * the index forgets first. The caller checked that one exists. */
static int32_t take_page(kv_paged_pool *p) {
    int32_t pg;
    if (p->n_free) {
        pg = p->free_stack[--p->n_free];
    } else {
        pg = p->lru_head;
        lru_remove(p, pg);
        if (p->index.forget) p->index.forget(p->index.ctx, pg);
        p->cached[pg] = 0;
        p->evictions++;
    }
    p->refs[pg] = 1;
    return pg;
}

static void ref_page(kv_paged_pool *p, int32_t pg) {
    if (p->refs[pg]++ == 0 && p->cached[pg]) lru_remove(p, pg);
}

static void unref_page(kv_paged_pool *p, int32_t pg) {
    if (p->refs[pg] == 0) return; /* never mapped: nothing to drop */
    if (--p->refs[pg]) return;
    if (p->cached[pg])
        lru_push(p, pg);
    else
        p->free_stack[p->n_free++] = pg;
}

void kv_paged_pool_set_cached(kv_paged_pool *p, int32_t pg, int cached) {
    if (!p->ready || pg < 0 || (uint32_t)pg >= p->n_pages || !p->cached[pg] == !cached) return;
    p->cached[pg] = (uint8_t)(cached != 0);
    if (p->refs[pg]) return; /* still mapped: the state changes when the last slot lets go */
    if (cached) {            /* a free page the index now holds: only an index can do that */
        for (uint32_t i = 0; i < p->n_free; i++)
            if (p->free_stack[i] == pg) {
                p->free_stack[i] = p->free_stack[--p->n_free];
                break;
            }
        lru_push(p, pg);
    } else {
        lru_remove(p, pg);
        p->free_stack[p->n_free++] = pg;
    }
}

/* Copies block-table entries [b0, b1) of a slot to the device copy. */
static weft_status sync_table(kv_paged_pool *p, int32_t slot, uint32_t b0, uint32_t b1,
                              weft_error *err) {
    if (b1 <= b0) return WEFT_OK;
    weft_buffer host = {p->bt, (uint64_t)p->n_slots * p->max_blocks * 4, WEFT_MEMORY_HOST, 0, NULL};
    uint64_t off = ((uint64_t)slot * p->max_blocks + b0) * 4;
    weft_status s = p->dev->copy(p->dev->self, &p->tables, off, &host, off, (uint64_t)(b1 - b0) * 4,
                                 p->dev->stream(p->dev->self), err);
    if (s != WEFT_OK && err)
        weft_sdk_error(err, s, p->name, "copying the block table of slot %d: %s", slot,
                       err->message);
    return s;
}

/* ---- setup --------------------------------------------------------------------------- */
void kv_paged_pool_fini(kv_paged_pool *p) {
    if (!p) return;
    for (uint32_t l = 0; p->dev && l < p->geo.n_layers; l++) {
        if (p->k && p->k[l].ptr) p->dev->free(p->dev->self, &p->k[l]);
        if (p->v && p->v[l].ptr) p->dev->free(p->dev->self, &p->v[l]);
    }
    if (p->dev && p->tables.ptr) p->dev->free(p->dev->self, &p->tables);
    free(p->k);
    free(p->v);
    free(p->bt);
    free(p->held);
    free(p->n_mapped);
    free(p->open);
    free(p->refs);
    free(p->cached);
    free(p->free_stack);
    free(p->lru_prev);
    free(p->lru_next);
    p->k = p->v = NULL;
    p->bt = p->free_stack = p->lru_prev = p->lru_next = NULL;
    p->held = p->n_mapped = p->refs = NULL;
    p->open = p->cached = NULL;
    memset(&p->tables, 0, sizeof(p->tables));
    p->ready = 0;
}

weft_status kv_paged_pool_options(kv_paged_pool *p, const char *name, const weft_options *opts,
                                  weft_error *err) {
    int64_t page_size = weft_sdk_option_int(opts, "page_size", 16);
    int64_t pages = weft_sdk_option_int(opts, "pages", 0);
    if (page_size < 1 || page_size > 4096)
        return weft_sdk_error(err, WEFT_ERR_INVALID, name,
                              "option page_size: expected 1..4096 tokens, got %lld",
                              (long long)page_size);
    if (pages < 0 || pages > (1 << 24))
        return weft_sdk_error(err, WEFT_ERR_INVALID, name,
                              "option pages: expected 0..16777216, got %lld", (long long)pages);
    p->name = name;
    p->page_size = (uint32_t)page_size;
    p->pages_option = (uint32_t)pages;
    return WEFT_OK;
}

weft_status kv_paged_pool_init(kv_paged_pool *p, const weft_kv_geometry *geo,
                               const weft_device_service *dev, weft_error *err) {
    if (!p || !geo || !dev || !dev->alloc || !dev->free || !dev->copy || !dev->stream)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p ? p->name : "kv.paged",
                              "init: expected a geometry and a device service, got none");
    if (p->ready)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name, "init: the pool is already set up");
    uint32_t es = dtype_bytes(geo->dtype);
    if (geo->size < sizeof(weft_kv_geometry) || !es || !geo->n_layers || !geo->n_kv_heads ||
        !geo->head_dim || !geo->max_seq || !geo->max_requests)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                              "init: expected an f32, f16 or bf16 cache and positive sizes, got "
                              "dtype %u, %u layers, %u kv heads, head_dim %u, max_seq %u, %u "
                              "requests",
                              geo->dtype, geo->n_layers, geo->n_kv_heads, geo->head_dim,
                              geo->max_seq, geo->max_requests);
    if (!p->page_size || p->page_size > 65536)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                              "option page_size: expected 1..65536 tokens, got %u", p->page_size);
    p->geo = *geo;
    p->dev = dev;
    p->n_slots = geo->max_requests;
    p->max_blocks = (geo->max_seq + p->page_size - 1) / p->page_size;
    p->page_bytes = (uint64_t)p->page_size * geo->n_kv_heads * geo->head_dim * es;
    uint64_t n = p->pages_option ? p->pages_option : (uint64_t)p->n_slots * p->max_blocks;
    uint64_t per_page = p->page_bytes * 2 * geo->n_layers; /* every layer's K and V */
    if (geo->budget_bytes && n * per_page > geo->budget_bytes) {
        if (p->pages_option)
            return weft_sdk_error(err, WEFT_ERR_NOMEM, p->name,
                                  "option pages: %llu pages of %llu bytes exceed the kv budget of "
                                  "%llu bytes",
                                  (unsigned long long)n, (unsigned long long)per_page,
                                  (unsigned long long)geo->budget_bytes);
        n = geo->budget_bytes / per_page;
    }
    if (n == 0 || n > INT32_MAX || n * p->page_bytes / p->page_bytes != n)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                              "init: a pool of %llu pages of %u tokens cannot be made",
                              (unsigned long long)n, p->page_size);
    if ((uint64_t)p->n_slots * p->max_blocks > INT32_MAX / 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                              "init: %u slots x %u blocks is too many block-table entries",
                              p->n_slots, p->max_blocks);
    p->n_pages = (uint32_t)n;
    p->k = calloc(geo->n_layers, sizeof(weft_buffer));
    p->v = calloc(geo->n_layers, sizeof(weft_buffer));
    p->bt = malloc((size_t)p->n_slots * p->max_blocks * sizeof(int32_t));
    p->held = calloc(p->n_slots, sizeof(uint32_t));
    p->n_mapped = calloc(p->n_slots, sizeof(uint32_t));
    p->open = calloc(p->n_slots, 1);
    p->refs = calloc(p->n_pages, sizeof(uint32_t));
    p->cached = calloc(p->n_pages, 1);
    p->free_stack = malloc((size_t)p->n_pages * sizeof(int32_t));
    p->lru_prev = malloc((size_t)p->n_pages * sizeof(int32_t));
    p->lru_next = malloc((size_t)p->n_pages * sizeof(int32_t));
    if (!p->k || !p->v || !p->bt || !p->held || !p->n_mapped || !p->open || !p->refs ||
        !p->cached || !p->free_stack || !p->lru_prev || !p->lru_next) {
        kv_paged_pool_fini(p);
        return weft_sdk_error(err, WEFT_ERR_NOMEM, p->name, "out of memory");
    }
    for (size_t i = 0; i < (size_t)p->n_slots * p->max_blocks; i++)
        p->bt[i] = -1;
    /* Pages are handed out from the top of the stack: page 0 first. */
    for (uint32_t i = 0; i < p->n_pages; i++) {
        p->free_stack[i] = (int32_t)(p->n_pages - 1 - i);
        p->lru_prev[i] = p->lru_next[i] = -1;
    }
    p->n_free = p->n_pages;
    p->lru_head = p->lru_tail = -1;
    p->n_lru = 0;
    uint64_t layer_bytes = p->page_bytes * p->n_pages;
    weft_status s = WEFT_OK;
    for (uint32_t l = 0; l < geo->n_layers && s == WEFT_OK; l++) {
        s = dev->alloc(dev->self, layer_bytes, WEFT_MEMORY_DEVICE, &p->k[l], err);
        if (s == WEFT_OK) s = dev->alloc(dev->self, layer_bytes, WEFT_MEMORY_DEVICE, &p->v[l], err);
        if (s != WEFT_OK && err)
            weft_sdk_error(err, s, p->name, "layer %u: %llu bytes each for K and V: %s", l,
                           (unsigned long long)layer_bytes, err->message);
    }
    uint64_t table_bytes = (uint64_t)p->n_slots * p->max_blocks * 4;
    if (s == WEFT_OK) s = dev->alloc(dev->self, table_bytes, WEFT_MEMORY_DEVICE, &p->tables, err);
    if (s == WEFT_OK) {
        weft_buffer host = {p->bt, table_bytes, WEFT_MEMORY_HOST, 0, NULL};
        s = dev->copy(dev->self, &p->tables, 0, &host, 0, table_bytes, dev->stream(dev->self), err);
    }
    if (s != WEFT_OK) {
        kv_paged_pool_fini(p);
        return s;
    }
    memset(&p->desc, 0, sizeof(p->desc));
    p->desc.size = sizeof(p->desc);
    p->desc.n_layers = geo->n_layers;
    p->desc.n_pages = p->n_pages;
    p->desc.page_size = p->page_size;
    p->desc.n_kv_heads = geo->n_kv_heads;
    p->desc.head_dim = geo->head_dim;
    p->desc.dtype = geo->dtype;
    p->desc.n_slots = p->n_slots;
    p->desc.max_blocks = p->max_blocks;
    p->desc.max_seq = geo->max_seq;
    p->desc.k = p->k;
    p->desc.v = p->v;
    p->desc.tables = p->tables;
    memset(&p->view, 0, sizeof(p->view));
    p->view.size = sizeof(p->view);
    snprintf(p->view.layout, sizeof(p->view.layout), "%s", WEFT_KV_PAGED_LAYOUT);
    p->view.desc = &p->desc;
    p->ready = 1;
    return WEFT_OK;
}

/* ---- control ------------------------------------------------------------------------- */
static int slot_ok(const kv_paged_pool *p, int32_t slot) {
    return p->ready && slot >= 0 && (uint32_t)slot < p->n_slots && p->open[slot];
}

weft_status kv_paged_pool_open(kv_paged_pool *p, int32_t *slot, weft_error *err) {
    if (!p->ready || !slot)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name, "open: the pool is not set up");
    for (uint32_t i = 0; i < p->n_slots; i++)
        if (!p->open[i]) {
            p->open[i] = 1;
            p->held[i] = 0;
            p->n_mapped[i] = 0;
            *slot = (int32_t)i;
            return WEFT_OK;
        }
    return WEFT_AGAIN;
}

weft_status kv_paged_pool_reserve(kv_paged_pool *p, int32_t slot, uint32_t n_total,
                                  weft_error *err) {
    if (!slot_ok(p, slot))
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name, "reserve: slot %d is not open", slot);
    if (n_total > p->geo.max_seq)
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                              "reserve: %u tokens exceed the longest request (%u)", n_total,
                              p->geo.max_seq);
    uint32_t held = p->held[slot];
    if (n_total <= held) return WEFT_OK;
    const uint32_t P = p->page_size;
    int32_t *row = p->bt + (size_t)slot * p->max_blocks;
    uint32_t have = p->n_mapped[slot], want = (n_total + P - 1) / P;
    /* The page that receives position `held` is written in place unless someone else can see
     * it: another slot (refs > 1) or an index (cached). */
    uint32_t first = held / P;
    int cow = first < have && (p->refs[row[first]] > 1 || p->cached[row[first]]);
    uint32_t need = (want - have) + (cow ? 1u : 0u);
    if (need > p->n_free + p->n_lru) return WEFT_AGAIN;
    uint32_t b0 = have;
    if (cow) {
        int32_t old = row[first], pg = take_page(p);
        for (uint32_t l = 0; l < p->geo.n_layers; l++) {
            void *stream = p->dev->stream(p->dev->self);
            uint64_t from = (uint64_t)old * p->page_bytes, to = (uint64_t)pg * p->page_bytes;
            weft_status s = p->dev->copy(p->dev->self, &p->k[l], to, &p->k[l], from, p->page_bytes,
                                         stream, err);
            if (s == WEFT_OK)
                s = p->dev->copy(p->dev->self, &p->v[l], to, &p->v[l], from, p->page_bytes, stream,
                                 err);
            if (s != WEFT_OK) {
                unref_page(p, pg);
                return s;
            }
        }
        row[first] = pg;
        unref_page(p, old);
        p->cow_copies++;
        b0 = first;
    }
    for (uint32_t b = have; b < want; b++)
        row[b] = take_page(p);
    p->n_mapped[slot] = want;
    p->held[slot] = n_total;
    return sync_table(p, slot, b0, want, err);
}

static void drop_blocks(kv_paged_pool *p, int32_t slot, uint32_t keep) {
    int32_t *row = p->bt + (size_t)slot * p->max_blocks;
    /* Last block first: an index's pages then enter the LRU list tail-first, so the end of a
     * cached prefix is evicted before its beginning (which more requests share). */
    for (uint32_t b = p->n_mapped[slot]; b-- > keep;) {
        unref_page(p, row[b]);
        row[b] = -1;
    }
    uint32_t from = keep < p->n_mapped[slot] ? keep : p->n_mapped[slot];
    uint32_t to = p->n_mapped[slot];
    p->n_mapped[slot] = from;
    /* The device rows are cleared too, so a stale entry can never be followed. */
    sync_table(p, slot, from, to, NULL);
}

void kv_paged_pool_close(kv_paged_pool *p, int32_t slot) {
    if (!slot_ok(p, slot)) return;
    drop_blocks(p, slot, 0);
    p->held[slot] = 0;
    p->open[slot] = 0;
}

void kv_paged_pool_truncate(kv_paged_pool *p, int32_t slot, uint32_t n) {
    if (!slot_ok(p, slot) || n >= p->held[slot]) return;
    drop_blocks(p, slot, (n + p->page_size - 1) / p->page_size);
    p->held[slot] = n;
}

const int32_t *kv_paged_pool_block_table(kv_paged_pool *p, int32_t slot, int32_t *n_blocks) {
    if (!slot_ok(p, slot)) {
        if (n_blocks) *n_blocks = 0;
        return NULL;
    }
    if (n_blocks) *n_blocks = (int32_t)p->n_mapped[slot];
    return p->bt + (size_t)slot * p->max_blocks;
}

int32_t kv_paged_pool_page(const kv_paged_pool *p, int32_t slot, uint32_t b) {
    if (!slot_ok(p, slot) || b >= p->n_mapped[slot]) return -1;
    return p->bt[(size_t)slot * p->max_blocks + b];
}

weft_status kv_paged_pool_attach(kv_paged_pool *p, int32_t slot, const int32_t *pages, uint32_t n,
                                 uint32_t n_tokens, weft_error *err) {
    if (!slot_ok(p, slot) || p->n_mapped[slot] || p->held[slot])
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                              "prefix attach: slot %d must be open and empty", slot);
    if (n > p->max_blocks || n_tokens > p->geo.max_seq ||
        (n_tokens + p->page_size - 1) / p->page_size != n || (n && !pages))
        return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                              "prefix attach: %u tokens do not fill %u pages of %u", n_tokens, n,
                              p->page_size);
    for (uint32_t i = 0; i < n; i++)
        if (pages[i] < 0 || (uint32_t)pages[i] >= p->n_pages)
            return weft_sdk_error(err, WEFT_ERR_INVALID, p->name,
                                  "prefix attach: page %d outside 0..%u", pages[i], p->n_pages - 1);
    int32_t *row = p->bt + (size_t)slot * p->max_blocks;
    for (uint32_t i = 0; i < n; i++) {
        ref_page(p, pages[i]);
        row[i] = pages[i];
    }
    p->n_mapped[slot] = n;
    p->held[slot] = n_tokens;
    p->prefix_hits += n_tokens;
    return sync_table(p, slot, 0, n, err);
}

void kv_paged_pool_stats(kv_paged_pool *p, weft_kv_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    if (!p->ready) return;
    uint64_t per_page = p->page_bytes * 2 * p->geo.n_layers;
    uint64_t mapped = (uint64_t)p->n_pages - p->n_free - p->n_lru; /* refs > 0 */
    for (uint32_t s = 0; s < p->n_slots; s++)
        if (p->open[s]) out->used_tokens += p->held[s];
    out->capacity_tokens = (uint64_t)p->n_pages * p->page_size;
    out->bytes_total = per_page * p->n_pages;
    out->bytes_used = per_page * mapped;
    out->prefix_hits = p->prefix_hits;
}
