/* kv.prefix-cache: kv.paged's page pool (compiled in from ../kv.paged/paged_pool.c) plus an
 * index of full pages keyed by an XXH3 hash chain of the tokens before and in them, so a
 * request whose tokens begin with pages another request already computed maps those pages
 * instead of computing them again.
 *
 * Keys. Page i of a token sequence has the key h_i = XXH3_64(tokens of page i, seed h_{i-1}),
 * h_-1 = a fixed seed, so a key names the whole prefix up to the end of its page. An index
 * entry also keeps its parent key and its tokens, and a lookup compares both, so a match never
 * rests on a 64-bit hash alone.
 *
 * Life of a page. A request publishes its full pages once they are computed: at every reserve
 * (the pages before the previous reserve were written by an executed step; the request's prompt
 * is kept from prefix_attach for that) and at commit (the engine's "these n tokens are final",
 * prompt and output). A published page is shared read-only: the pool copies it before any
 * request writes into it. When no request maps it, it stays cached and becomes evictable;
 * the pool reuses evictable pages least recently released first, and releases a request's
 * pages last-first, so the tail of a cached conversation goes before its head.
 *
 * Attach. prefix_attach walks the chain of the new request's tokens through the index and maps
 * every page that matches, but reports at most n - 1 tokens cached: the last token is always
 * computed, since its logits are what the request samples from (when the whole prompt was
 * cached, the last page is then copied on write). */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "paged_pool.h"
#include "weft/sdk.h"

#define NAME "kv.prefix-cache"
#define CHAIN_SEED 0x7765667470726678ull /* h_-1: "weftprfx" */

typedef struct slot_tokens {
    int32_t *tokens; /* the prompt given to prefix_attach */
    uint32_t n;
    uint32_t n_hashed; /* leading full pages whose keys are known (published or matched) */
    uint64_t *keys;    /* (max_blocks) key of each of those pages */
} slot_tokens;

typedef struct prefix_state {
    const weft_host_services *host;
    kv_paged_pool pool;
    /* index: chained hash table over pages, one entry per cached page */
    uint32_t n_buckets;     /* power of two */
    int32_t *bucket;        /* (n_buckets) first page of the chain, -1 = empty */
    int32_t *next;          /* (n_pages) */
    uint64_t *key, *parent; /* (n_pages) */
    int32_t *page_tokens;   /* (n_pages, page_size) */
    uint32_t n_entries;
    slot_tokens *slots; /* (n_slots) */
} prefix_state;

/* ---- the index ---------------------------------------------------------------------------- */
static uint64_t page_key(const int32_t *tokens, uint32_t P, uint64_t parent) {
    return XXH3_64bits_withSeed(tokens, (size_t)P * sizeof(int32_t), parent);
}

static int32_t index_find(const prefix_state *s, uint64_t key, uint64_t parent,
                          const int32_t *tokens) {
    const uint32_t P = s->pool.page_size;
    for (int32_t pg = s->bucket[key & (s->n_buckets - 1)]; pg >= 0; pg = s->next[pg])
        if (s->key[pg] == key && s->parent[pg] == parent &&
            !memcmp(s->page_tokens + (size_t)pg * P, tokens, (size_t)P * sizeof(int32_t)))
            return pg;
    return -1;
}

static void index_insert(prefix_state *s, int32_t pg, uint64_t key, uint64_t parent,
                         const int32_t *tokens) {
    const uint32_t P = s->pool.page_size;
    uint32_t b = (uint32_t)(key & (s->n_buckets - 1));
    s->key[pg] = key;
    s->parent[pg] = parent;
    memcpy(s->page_tokens + (size_t)pg * P, tokens, (size_t)P * sizeof(int32_t));
    s->next[pg] = s->bucket[b];
    s->bucket[b] = pg;
    s->n_entries++;
    kv_paged_pool_set_cached(&s->pool, pg, 1);
}

/* The pool's hook: page pg is about to be reused, so its entry goes. */
static void index_forget(void *ctx, int32_t pg) {
    prefix_state *s = ctx;
    int32_t *link = &s->bucket[s->key[pg] & (s->n_buckets - 1)];
    while (*link >= 0 && *link != pg)
        link = &s->next[*link];
    if (*link == pg) {
        *link = s->next[pg];
        s->next[pg] = -1;
        s->n_entries--;
    }
}

/* Publishes the full pages of a slot among tokens[0..n) that are also held (computed). */
static void publish(prefix_state *s, int32_t slot, const int32_t *tokens, uint32_t n) {
    kv_paged_pool *p = &s->pool;
    slot_tokens *st = &s->slots[slot];
    const uint32_t P = p->page_size;
    uint32_t held = p->held[slot], full = (n < held ? n : held) / P;
    for (uint32_t i = st->n_hashed; i < full; i++) {
        const int32_t *t = tokens + (size_t)i * P;
        uint64_t parent = i ? st->keys[i - 1] : CHAIN_SEED, key = page_key(t, P, parent);
        int32_t mine = kv_paged_pool_page(p, slot, i);
        if (mine < 0) break;
        /* Another page already caches this prefix: keep that one (ours goes at close). */
        if (!p->cached[mine] && index_find(s, key, parent, t) < 0)
            index_insert(s, mine, key, parent, t);
        st->keys[i] = key;
        st->n_hashed = i + 1;
    }
}

/* ---- instance ---------------------------------------------------------------------------- */
static weft_status prefix_create(const weft_host_services *host, const weft_options *opts,
                                 void **out, weft_error *err) {
    if (!host || !out)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "create: missing argument");
    prefix_state *s = calloc(1, sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    weft_status st = kv_paged_pool_options(&s->pool, NAME, opts, err);
    if (st) {
        free(s);
        return st;
    }
    s->host = host;
    *out = s;
    return WEFT_OK;
}

static void index_free(prefix_state *s) {
    if (s->slots)
        for (uint32_t i = 0; i < s->pool.n_slots; i++) {
            free(s->slots[i].tokens);
            free(s->slots[i].keys);
        }
    free(s->slots);
    free(s->bucket);
    free(s->next);
    free(s->key);
    free(s->parent);
    free(s->page_tokens);
    s->slots = NULL;
    s->bucket = s->next = s->page_tokens = NULL;
    s->key = s->parent = NULL;
    s->n_entries = 0;
}

static void kv_fini(void *st) {
    prefix_state *s = st;
    kv_paged_pool_fini(&s->pool);
    index_free(s);
}

static void prefix_destroy(void *st) {
    if (!st) return;
    kv_fini(st);
    free(st);
}

/* ---- kv slot ------------------------------------------------------------------------------ */
static weft_status kv_init(void *st, const weft_kv_geometry *geo, const weft_device_service *dev,
                           weft_error *err) {
    prefix_state *s = st;
    weft_status r = kv_paged_pool_init(&s->pool, geo, dev, err);
    if (r != WEFT_OK) return r;
    uint32_t n = s->pool.n_pages, P = s->pool.page_size;
    s->n_buckets = 1;
    while (s->n_buckets < 2 * n && s->n_buckets < (1u << 30))
        s->n_buckets <<= 1;
    s->bucket = malloc(sizeof(int32_t) * s->n_buckets);
    s->next = malloc(sizeof(int32_t) * n);
    s->key = calloc(n, sizeof(uint64_t));
    s->parent = calloc(n, sizeof(uint64_t));
    s->page_tokens = malloc(sizeof(int32_t) * (size_t)n * P);
    s->slots = calloc(s->pool.n_slots, sizeof(slot_tokens));
    if (!s->bucket || !s->next || !s->key || !s->parent || !s->page_tokens || !s->slots) {
        kv_fini(s);
        return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory for the prefix index");
    }
    for (uint32_t i = 0; i < s->n_buckets; i++)
        s->bucket[i] = -1;
    for (uint32_t i = 0; i < n; i++)
        s->next[i] = -1;
    for (uint32_t i = 0; i < s->pool.n_slots; i++)
        if (!(s->slots[i].keys = malloc(sizeof(uint64_t) * s->pool.max_blocks))) {
            kv_fini(s);
            return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory for the prefix index");
        }
    s->pool.index.ctx = s;
    s->pool.index.forget = index_forget;
    return WEFT_OK;
}

static void slot_reset(prefix_state *s, int32_t slot) {
    slot_tokens *t = &s->slots[slot];
    free(t->tokens);
    t->tokens = NULL;
    t->n = 0;
    t->n_hashed = 0;
}

static weft_status kv_open(void *st, uint64_t request_id, int32_t *slot, weft_error *err) {
    prefix_state *s = st;
    (void)request_id;
    weft_status r = kv_paged_pool_open(&s->pool, slot, err);
    if (r == WEFT_OK) slot_reset(s, *slot);
    return r;
}

static int slot_valid(const prefix_state *s, int32_t slot) {
    return s->pool.ready && slot >= 0 && (uint32_t)slot < s->pool.n_slots && s->pool.open[slot];
}

static weft_status kv_reserve(void *st, int32_t slot, uint32_t n_total, weft_error *err) {
    prefix_state *s = st;
    /* What the previous reserve covered is computed now: publish its full prompt pages, so
     * requests arriving meanwhile share them. */
    if (slot_valid(s, slot) && s->slots[slot].tokens)
        publish(s, slot, s->slots[slot].tokens, s->slots[slot].n);
    return kv_paged_pool_reserve(&s->pool, slot, n_total, err);
}

static void kv_close(void *st, int32_t slot) {
    prefix_state *s = st;
    if (!slot_valid(s, slot)) return;
    kv_paged_pool_close(&s->pool, slot);
    slot_reset(s, slot);
}

static const weft_kv_view *kv_view(void *st) {
    prefix_state *s = st;
    return s->pool.ready ? &s->pool.view : NULL;
}

static const int32_t *kv_block_table(void *st, int32_t slot, int32_t *n_blocks) {
    return kv_paged_pool_block_table(&((prefix_state *)st)->pool, slot, n_blocks);
}

static weft_status kv_prefix_attach(void *st, int32_t slot, const int32_t *tokens, uint32_t n,
                                    uint32_t *n_cached, weft_error *err) {
    prefix_state *s = st;
    kv_paged_pool *p = &s->pool;
    if (!n_cached || (n && !tokens))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "prefix_attach: missing argument");
    *n_cached = 0;
    if (!slot_valid(s, slot) || p->held[slot])
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "prefix_attach: slot %d must be open and empty", slot);
    if (n > p->geo.max_seq)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "prefix_attach: %u tokens exceed the longest request (%u)", n,
                              p->geo.max_seq);
    slot_tokens *t = &s->slots[slot];
    free(t->tokens);
    t->tokens = n ? malloc(sizeof(int32_t) * n) : NULL;
    if (n && !t->tokens) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memcpy(t->tokens, tokens, sizeof(int32_t) * n);
    t->n = n;
    const uint32_t P = p->page_size;
    uint32_t k = 0;
    int32_t *pages = malloc(sizeof(int32_t) * (n / P + 1));
    if (!pages) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    while ((k + 1) * (uint64_t)P <= n) {
        const int32_t *tp = tokens + (size_t)k * P;
        uint64_t parent = k ? t->keys[k - 1] : CHAIN_SEED, key = page_key(tp, P, parent);
        int32_t pg = index_find(s, key, parent, tp);
        if (pg < 0) break;
        pages[k] = pg;
        t->keys[k++] = key;
    }
    /* The last token is always computed. */
    uint32_t cached = k * P < n ? k * P : (n ? n - 1 : 0);
    uint32_t use = (cached + P - 1) / P;
    weft_status r = WEFT_OK;
    if (use) r = kv_paged_pool_attach(p, slot, pages, use, cached, err);
    free(pages);
    if (r != WEFT_OK) return r;
    /* Every matched page is known to the index already: publishing resumes after them. */
    t->n_hashed = k;
    *n_cached = cached;
    return WEFT_OK;
}

static void kv_commit(void *st, int32_t slot, const int32_t *tokens, uint32_t n) {
    prefix_state *s = st;
    if (!slot_valid(s, slot) || (!tokens && n)) return;
    publish(s, slot, tokens, n);
}

static void kv_truncate(void *st, int32_t slot, uint32_t n) {
    prefix_state *s = st;
    if (!slot_valid(s, slot)) return;
    kv_paged_pool_truncate(&s->pool, slot, n);
    /* Pages past the new end will be written again: this slot forgets their keys (the pages
     * it published stay cached under them, unchanged). */
    slot_tokens *t = &s->slots[slot];
    uint32_t full = s->pool.held[slot] / s->pool.page_size;
    if (t->n_hashed > full) t->n_hashed = full;
}

static void kv_stats(void *st, weft_kv_stats *out) {
    kv_paged_pool_stats(&((prefix_state *)st)->pool, out);
}

static const weft_kv_vtable prefix_kv = {
    .size = sizeof(weft_kv_vtable),
    .init = kv_init,
    .open = kv_open,
    .reserve = kv_reserve,
    .close = kv_close,
    .view = kv_view,
    .block_table = kv_block_table,
    .prefix_attach = kv_prefix_attach,
    .commit = kv_commit,
    .swap_out = NULL,
    .swap_in = NULL,
    .truncate = kv_truncate,
    .stats = kv_stats,
    .fini = kv_fini,
};

static const weft_plugin_descriptor prefix_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_KV,
    .create = prefix_create,
    .destroy = prefix_destroy,
    .kv = &prefix_kv,
};

WEFT_SDK_ENTRY(prefix_desc, 1, 1)
