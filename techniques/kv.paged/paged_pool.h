/* The page pool behind kv.paged and kv.prefix-cache: fixed-size pages allocated through the
 * device service, one block table per kv slot, reference counts, copy on write, and a list of
 * evictable pages for a prefix index. Both bundles compile this file into their library (each
 * bundle is one shared object), so the kv provider of kv.prefix-cache is exactly kv.paged's plus
 * the hash-chain index.
 *
 * A page is in one of three states:
 *   free       no slot maps it and no index holds it              (on the free stack)
 *   mapped     refs > 0 slots map it (refs > 1 = shared)           (neither list)
 *   evictable  refs == 0 but an index holds it (`cached`)          (on the LRU list)
 * An evictable page is reclaimed when the free stack is empty: the least recently released one
 * first, after the index is told to forget it. A slot never writes a page that is shared or
 * cached: reserve() copies it first (copy on write), so cached content is immutable.
 *
 * Writes of a step go to positions [held, n_total) of its slot, where held is the previous
 * reserve (or what prefix attach mapped): the engine reserves n_computed + n before each step.
 * Invariant per slot: n_mapped == ceil(held / page_size). All hooks are control-class except
 * init/fini (setup). Errors name `pool->name` (the bundle). */
#ifndef KV_PAGED_POOL_H
#define KV_PAGED_POOL_H

#include <stdint.h>

#include "kv_paged.h"

/* What an index layered on the pool is told. */
typedef struct kv_paged_index_hooks {
    void *ctx;
    /* The pool is about to reuse an evictable page: the index drops its entry for it. */
    void (*forget)(void *ctx, int32_t page);
} kv_paged_index_hooks;

typedef struct kv_paged_pool {
    const char *name;                 /* bundle name for messages */
    uint32_t page_size, pages_option; /* options: tokens per page; pages (0 = derived) */
    weft_kv_geometry geo;
    const weft_device_service *dev;
    uint32_t n_pages, max_blocks, n_slots;
    uint64_t page_bytes; /* one page of one layer's K (or V) */
    weft_buffer *k, *v;  /* (n_layers) each (n_pages, page_size, n_kv_heads, head_dim) */
    weft_buffer tables;  /* device: int32 (n_slots, max_blocks) */
    int32_t *bt;         /* host mirror of tables */
    uint32_t *held;      /* (n_slots) tokens written or mapped */
    uint32_t *n_mapped;  /* (n_slots) block table entries in use */
    uint8_t *open;       /* (n_slots) */
    uint32_t *refs;      /* (n_pages) slots mapping the page */
    uint8_t *cached;     /* (n_pages) an index holds the page */
    int32_t *free_stack; /* (n_pages) */
    uint32_t n_free;
    int32_t *lru_prev, *lru_next; /* (n_pages) evictable pages, head = least recent */
    int32_t lru_head, lru_tail;
    uint32_t n_lru;
    kv_paged_index_hooks index;
    weft_kv_paged desc;
    weft_kv_view view;
    int ready;
    /* counters for stats and tests */
    uint64_t prefix_hits; /* tokens served from attached pages */
    uint64_t cow_copies, evictions;
} kv_paged_pool;

/* The pool's options, page_size (tokens a page, 1..4096, default 16) and pages (0..2^24, 0 =
 * derived), read into p with p->name set to `name`; a value out of range is WEFT_ERR_INVALID
 * naming the option (the manifest's declared ranges normally refuse it first). Shared by every
 * bundle that compiles the pool in (kv.paged, kv.prefix-cache). */
weft_status kv_paged_pool_options(kv_paged_pool *p, const char *name, const weft_options *opts,
                                  weft_error *err);

/* setup: sizes the pool from geo and the options and allocates every page. The pool holds
 * `pages_option` pages, or when 0 enough for every slot at max_seq
 * (max_requests * ceil(max_seq / page_size)), capped by geo->budget_bytes when set. */
weft_status kv_paged_pool_init(kv_paged_pool *p, const weft_kv_geometry *geo,
                               const weft_device_service *dev, weft_error *err);
void kv_paged_pool_fini(kv_paged_pool *p);

weft_status kv_paged_pool_open(kv_paged_pool *p, int32_t *slot, weft_error *err);
/* WEFT_AGAIN when the pool (free plus evictable pages) cannot hold n_total tokens; then
 * nothing changed. */
weft_status kv_paged_pool_reserve(kv_paged_pool *p, int32_t slot, uint32_t n_total,
                                  weft_error *err);
void kv_paged_pool_close(kv_paged_pool *p, int32_t slot);
void kv_paged_pool_truncate(kv_paged_pool *p, int32_t slot, uint32_t n);
const int32_t *kv_paged_pool_block_table(kv_paged_pool *p, int32_t slot, int32_t *n_blocks);
void kv_paged_pool_stats(kv_paged_pool *p, weft_kv_stats *out);

/* Maps pages[0..n) as the first pages of an empty, open slot (each gains a reference) and
 * marks n_tokens of it held. n_tokens must need exactly n pages. */
weft_status kv_paged_pool_attach(kv_paged_pool *p, int32_t slot, const int32_t *pages, uint32_t n,
                                 uint32_t n_tokens, weft_error *err);
/* Page of block b of a slot, or -1. */
int32_t kv_paged_pool_page(const kv_paged_pool *p, int32_t slot, uint32_t b);
/* The index takes (1) or drops (0) its hold on a page. A page dropped while no slot maps it
 * becomes free. */
void kv_paged_pool_set_cached(kv_paged_pool *p, int32_t page, int cached);

#endif
