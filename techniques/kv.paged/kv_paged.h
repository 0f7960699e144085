/* kv_paged.h: the "paged" kv view layout, the description attention ops read when the kv slot
 * is filled by kv.paged (or kv.prefix-cache, which layers on it).
 *
 * The cache is a pool of fixed-size pages shared by every request. A page holds `page_size`
 * consecutive token positions of one request for every layer; per layer, K and V are each one
 * buffer of shape (n_pages, page_size, n_kv_heads, head_dim), row-major, in `dtype`. Token
 * position p of a request lives in page block_table[p / page_size] at row p % page_size, so
 *
 *     K(layer, request, p, head, d) =
 *         k[layer][((table[p / P] * P + p % P) * n_kv_heads + head) * head_dim + d]
 *
 * A request's block table reaches ops two ways:
 *   - on the host, in the step's batch: weft_seq.block_table / n_blocks (cpu ops read this);
 *   - on the device, in `tables`: one row of `max_blocks` int32 entries per kv slot, entry -1
 *     where no page is mapped (device ops index it with the row's kv slot from in.kv_slots).
 * Both are kept equal by the provider, which updates them between steps (control calls), so an
 * op never allocates or maps pages: the step only reads and writes pages already reserved for
 * it. Several requests may map the same page (prefix sharing); the provider copies a shared
 * page before a request writes into it (copy on write), so an op may always write the rows of
 * its step in place.
 *
 * Layout string: "paged" (weft_kv_view.layout); `desc` points at a weft_kv_paged. */
#ifndef WEFT_KV_PAGED_H
#define WEFT_KV_PAGED_H

#include <stdint.h>

#include "weft/plugin.h"

#define WEFT_KV_PAGED_LAYOUT "paged"

typedef struct weft_kv_paged {
    uint32_t size; /* sizeof(weft_kv_paged) */
    uint32_t n_layers;
    uint32_t n_pages;   /* pages in the pool */
    uint32_t page_size; /* token positions per page */
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t dtype;      /* weft_dtype of the cache: f32, f16 or bf16 */
    uint32_t n_slots;    /* kv slots (requests that can hold a cache at once) */
    uint32_t max_blocks; /* block table entries per slot: ceil(max_seq / page_size) */
    uint32_t max_seq;    /* longest request in tokens */
    /* Per layer: K and V, each (n_pages, page_size, n_kv_heads, head_dim) row-major. */
    weft_buffer *k; /* (n_layers) */
    weft_buffer *v; /* (n_layers) */
    /* Device copy of every slot's block table: int32 (n_slots, max_blocks), -1 = unmapped. */
    weft_buffer tables;
} weft_kv_paged;

#endif
