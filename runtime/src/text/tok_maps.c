/* The tokenizer's containers: a growable byte buffer, the piece list the pipeline passes along,
 * the vocabulary (an arena of pieces plus an open-addressing table of ids keyed by the piece
 * bytes) and the merge table (open addressing keyed by the pair of ids). Open addressing with
 * linear probing keeps a 151k vocabulary and 151k merges in a few flat arrays that load fast. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

int tok_buf_reserve(tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX / 2 - b->len) return -1;
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_put(tok_buf *b, const void *data, size_t n) {
    if (tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int tok_buf_putc(tok_buf *b, char c) {
    return tok_buf_put(b, &c, 1);
}

int tok_list_add(tok_list *l, const char *s, size_t n, int first) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        size_t *off = realloc(l->off, cap * sizeof(*off));
        if (!off) return -1;
        l->off = off;
        size_t *len = realloc(l->len, cap * sizeof(*len));
        if (!len) return -1;
        l->len = len;
        uint8_t *fi = realloc(l->first, cap);
        if (!fi) return -1;
        l->first = fi;
        l->cap = cap;
    }
    size_t at = l->text.len;
    if (tok_buf_put(&l->text, s, n)) return -1;
    l->off[l->n] = at;
    l->len[l->n] = n;
    l->first[l->n] = (uint8_t)(first != 0);
    l->n++;
    return 0;
}

void tok_list_clear(tok_list *l) {
    l->n = 0;
    l->text.len = 0;
}

void tok_list_free(tok_list *l) {
    free(l->text.p);
    free(l->off);
    free(l->len);
    free(l->first);
    memset(l, 0, sizeof(*l));
}

/* FNV-1a, then a final mix so that linear probing sees well-spread low bits. */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_u64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

int tok_vocab_init(tok_vocab *v, uint32_t n_ids, size_t n_keys) {
    memset(v, 0, sizeof(*v));
    v->n_ids = n_ids;
    if (n_keys > n_ids) n_keys = n_ids;
    size_t slots = 16;
    while (slots < n_keys * 2)
        slots *= 2;
    v->piece_off = malloc((n_ids ? n_ids : 1) * sizeof(*v->piece_off));
    v->piece_len = calloc(n_ids ? n_ids : 1, sizeof(*v->piece_len));
    v->slots = malloc(slots * sizeof(*v->slots));
    v->arena_cap = n_keys * 8 + 64;
    v->arena = malloc(v->arena_cap);
    if (!v->piece_off || !v->piece_len || !v->slots || !v->arena) return -1;
    for (uint32_t i = 0; i < n_ids; i++)
        v->piece_off[i] = UINT32_MAX;
    for (size_t i = 0; i < slots; i++)
        v->slots[i] = -1;
    v->n_slots = slots;
    return 0;
}

static int vocab_eq(const tok_vocab *v, int32_t id, const char *s, size_t n) {
    return v->piece_len[id] == n && memcmp(v->arena + v->piece_off[id], s, n) == 0;
}

int32_t tok_vocab_find(const tok_vocab *v, const char *s, size_t n) {
    if (!v->n_slots) return -1;
    size_t mask = v->n_slots - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = v->slots[i];
        if (id < 0) return -1;
        if (vocab_eq(v, id, s, n)) return id;
    }
}

int tok_vocab_add(tok_vocab *v, int32_t id, const char *s, size_t n) {
    if (id < 0 || (uint32_t)id >= v->n_ids || v->piece_off[id] != UINT32_MAX) return 1;
    /* Offsets are 32-bit: the arena (all pieces) stays below 4 GiB. */
    if (n >= UINT32_MAX - 1 || v->arena_len + n + 1 >= UINT32_MAX) return 1;
    if ((v->n_keys + 1) * 2 > v->n_slots) return 1;
    size_t mask = v->n_slots - 1;
    size_t i = hash_bytes(s, n) & mask;
    for (;; i = (i + 1) & mask) {
        int32_t other = v->slots[i];
        if (other < 0) break;
        if (vocab_eq(v, other, s, n)) return 1;
    }
    if (v->arena_len + n + 1 > v->arena_cap) {
        size_t cap = v->arena_cap * 2;
        while (cap < v->arena_len + n + 1)
            cap *= 2;
        char *a = realloc(v->arena, cap);
        if (!a) return -1;
        v->arena = a;
        v->arena_cap = cap;
    }
    memcpy(v->arena + v->arena_len, s, n);
    v->arena[v->arena_len + n] = '\0';
    v->piece_off[id] = (uint32_t)v->arena_len;
    v->piece_len[id] = (uint32_t)n;
    v->arena_len += n + 1;
    v->slots[i] = id;
    v->n_keys++;
    return 0;
}

const char *tok_vocab_piece(const tok_vocab *v, int32_t id, size_t *n) {
    if (id < 0 || (uint32_t)id >= v->n_ids || v->piece_off[id] == UINT32_MAX) return NULL;
    if (n) *n = v->piece_len[id];
    return v->arena + v->piece_off[id];
}

void tok_vocab_free(tok_vocab *v) {
    free(v->arena);
    free(v->piece_off);
    free(v->piece_len);
    free(v->slots);
    memset(v, 0, sizeof(*v));
}

int tok_merges_init(tok_merges *m, size_t expected) {
    memset(m, 0, sizeof(*m));
    size_t slots = 16;
    while (slots < expected * 2)
        slots *= 2;
    m->slots = malloc(slots * sizeof(*m->slots));
    if (!m->slots) return -1;
    for (size_t i = 0; i < slots; i++)
        m->slots[i].key = UINT64_MAX;
    m->n_slots = slots;
    return 0;
}

static int merges_grow(tok_merges *m) {
    tok_merges bigger;
    if (tok_merges_init(&bigger, m->n_slots)) return -1;
    for (size_t i = 0; i < m->n_slots; i++) {
        tok_merge_slot *s = &m->slots[i];
        if (s->key == UINT64_MAX) continue;
        size_t mask = bigger.n_slots - 1;
        size_t j = hash_u64(s->key) & mask;
        while (bigger.slots[j].key != UINT64_MAX)
            j = (j + 1) & mask;
        bigger.slots[j] = *s;
    }
    bigger.n = m->n;
    free(m->slots);
    *m = bigger;
    return 0;
}

int tok_merges_add(tok_merges *m, int32_t left, int32_t right, int32_t rank, int32_t id) {
    if ((m->n + 1) * 2 > m->n_slots && merges_grow(m)) return -1;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t mask = m->n_slots - 1;
    size_t i = hash_u64(key) & mask;
    for (; m->slots[i].key != UINT64_MAX; i = (i + 1) & mask)
        if (m->slots[i].key == key) {
            m->slots[i].rank = rank;
            m->slots[i].id = id;
            return 1;
        }
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].id = id;
    m->n++;
    return 0;
}

const tok_merge_slot *tok_merges_find(const tok_merges *m, int32_t left, int32_t right) {
    if (!m->n_slots) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t mask = m->n_slots - 1;
    for (size_t i = hash_u64(key) & mask; m->slots[i].key != UINT64_MAX; i = (i + 1) & mask)
        if (m->slots[i].key == key) return &m->slots[i];
    return NULL;
}

void tok_merges_free(tok_merges *m) {
    free(m->slots);
    memset(m, 0, sizeof(*m));
}
