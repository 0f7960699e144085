/* BPE over one pre-tokenized word, with the semantics of Hugging Face's BPE model: the word
 * starts as one symbol per character (a vocabulary piece, else its <0xNN> byte pieces under
 * byte_fallback, else unk, fused when fuse_unk), then the adjacent pair with the lowest merge
 * rank is merged, leftmost first on ties, until no pair has a rank. A binary heap of candidate
 * merges keyed by (rank, position) makes this O(n log n) in the word length; entries made stale
 * by an earlier merge are recognised when popped and skipped, exactly as HF does. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/tok_unicode.h"

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes of the word covered; 0 once merged into its left neighbour */
} sym;

typedef struct cand {
    int32_t rank, pos, id;
} cand;

static int cand_less(const cand *a, const cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    h[i] = c;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&h[i], &h[p])) break;
        cand t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0];
    h[0] = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && cand_less(&h[l], &h[m])) m = l;
        if (r < *n && cand_less(&h[r], &h[m])) m = r;
        if (m == i) break;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
    return top;
}

static int push_id(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        int32_t *v = realloc(*ids, c * sizeof(*v));
        if (!v) return -1;
        *ids = v;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

static void add_sym(sym *syms, size_t *n, int32_t id, uint32_t len) {
    syms[*n].id = id;
    syms[*n].len = len;
    syms[*n].prev = (int32_t)*n - 1;
    syms[*n].next = (int32_t)*n + 1;
    (*n)++;
}

int tok_bpe_word(const weft_tokenizer *tok, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                 size_t *cap) {
    if (n == 0) return 0;
    if (tok->ignore_merges) {
        int32_t whole = tok_vocab_find(&tok->vocab, s, n);
        if (whole >= 0) return push_id(ids, n_ids, cap, whole);
    }
    if (n > INT32_MAX / 2) return -1;
    /* At most one symbol per byte (byte fallback). Most words are short: their symbols and
     * heap live on the stack. */
    sym syms_small[48];
    cand heap_small[3 * 48 + 1];
    sym *syms = syms_small;
    cand *heap = heap_small;
    if (n > 48) {
        syms = malloc(n * sizeof(*syms));
        heap = malloc(3 * n * sizeof(*heap) + sizeof(*heap));
        if (!syms || !heap) {
            free(syms);
            free(heap);
            return -1;
        }
    }
    size_t ns = 0;
    int32_t unk_pending = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        size_t k = weft_tok_utf8_len(s + i, n - i);
        if (k > n - i) k = n - i;
        int32_t id = tok_vocab_find(&tok->vocab, s + i, k);
        if (id >= 0) {
            if (unk_pending >= 0) {
                add_sym(syms, &ns, unk_pending, unk_len);
                unk_pending = -1;
            }
            add_sym(syms, &ns, id, (uint32_t)k);
        } else {
            int fell_back = 0;
            if (tok->byte_fallback) {
                fell_back = 1;
                for (size_t j = 0; j < k; j++)
                    if (tok->byte_ids[(unsigned char)s[i + j]] < 0) fell_back = 0;
                /* HF leaves a pending unk in place here and adds it after these bytes. */
                if (fell_back)
                    for (size_t j = 0; j < k; j++)
                        add_sym(syms, &ns, tok->byte_ids[(unsigned char)s[i + j]], 1);
            }
            if (!fell_back && tok->unk_id >= 0) {
                if (unk_pending >= 0 && tok->fuse_unk) {
                    unk_len += (uint32_t)k;
                } else {
                    if (unk_pending >= 0) add_sym(syms, &ns, unk_pending, unk_len);
                    unk_pending = tok->unk_id;
                    unk_len = (uint32_t)k;
                }
            }
        }
        i += k;
    }
    if (unk_pending >= 0) add_sym(syms, &ns, unk_pending, unk_len);
    if (ns > 0) syms[ns - 1].next = -1;

    size_t nh = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const tok_merge_slot *m = tok_merges_find(&tok->merges, syms[i].id, syms[i + 1].id);
        if (m) heap_push(heap, &nh, (cand){m->rank, (int32_t)i, m->id});
    }
    while (nh > 0) {
        cand top = heap_pop(heap, &nh);
        sym *cur = &syms[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        sym *right = &syms[cur->next];
        const tok_merge_slot *m = tok_merges_find(&tok->merges, cur->id, right->id);
        if (!m || m->id != top.id) continue;
        cur->id = top.id;
        cur->len += right->len;
        right->len = 0;
        cur->next = right->next;
        if (cur->next >= 0) syms[cur->next].prev = top.pos;
        /* ns - 1 initial pushes plus two per merge, at most ns - 1 merges: within 3n. */
        if (cur->prev >= 0) {
            m = tok_merges_find(&tok->merges, syms[cur->prev].id, cur->id);
            if (m) heap_push(heap, &nh, (cand){m->rank, cur->prev, m->id});
        }
        if (cur->next >= 0) {
            m = tok_merges_find(&tok->merges, cur->id, syms[cur->next].id);
            if (m) heap_push(heap, &nh, (cand){m->rank, top.pos, m->id});
        }
    }
    int rc = 0;
    for (size_t i = 0; i < ns && !rc; i++)
        if (syms[i].len) rc = push_id(ids, n_ids, cap, syms[i].id);
    if (syms != syms_small) {
        free(syms);
        free(heap);
    }
    return rc;
}
