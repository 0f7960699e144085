/* kv.prefix-cache on the cpu backend with stories260K:
 *   - resolution: it requires kv.paged, layers on its kv slot (becoming the provider) and keeps
 *     kv.paged's attention ops;
 *   - a three-turn conversation (each turn's prompt = everything before + new text) gives the
 *     same greedy tokens as the contiguous default, while every follow-up turn skips exactly the
 *     full pages of the earlier turns that were computed;
 *   - the same prompt twice (a length that is a multiple of the page size, so the second
 *     request must recompute the last token inside a shared page: copy on write), and prompts
 *     that diverge inside a page;
 *   - a pool too small to keep everything: cached pages are evicted least recently released
 *     first, tail pages before head pages, and outputs stay identical;
 *   - the index and the pool driven directly: shared pages, copy on write leaves the cached
 *     page untouched, eviction order, refusal of bad arguments.
 * The reference for outputs is the runtime's contiguous kv (itself checked against Hugging
 * Face references by test_golden). */
#include "test_kv_common.h"

#include "../../techniques/kv.paged/kv_paged.h"

static char stories[64];
static char base_manifest[64];

static int group_setup(void **state) {
    (void)state;
    if (kvt_stories_convert(stories)) return -1;
    kvt_manifest(base_manifest, "");
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    kvt_stories_remove(stories);
    unlink(base_manifest);
    return 0;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int32_t rtok(void) { /* a token id of stories260K other than 0..2 (unk, bos, eos) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return 3 + (int32_t)((rng >> 33) % 509);
}

static void prefix_manifest(char path[64], uint32_t page_size, uint32_t pages) {
    char tech[160];
    snprintf(tech, sizeof(tech),
             "  - kv.paged\n  - {name: kv.prefix-cache, options: {page_size: %u, pages: %u}}\n",
             page_size, pages);
    kvt_manifest(path, tech);
}

/* ---- resolution --------------------------------------------------------------------------- */
static void test_layers_on_kv_paged(void **state) {
    (void)state;
    char manifest[64];
    weft_host *h = weft_host_new();
    weft_candidate *c = NULL;
    weft_error err;
    weft_error_clear(&err);
    kvt_manifest(manifest, "  - kv.prefix-cache\n");
    assert_int_not_equal(
        weft_candidate_load_manifest(manifest, stories, weft_host_services_of(h), &c, &err),
        WEFT_OK);
    printf("alone: %s\n", err.message);
    assert_non_null(strstr(err.message, "requires kv.paged"));
    unlink(manifest);
    /* listed first, it still goes after kv.paged (its `after`) and provides the kv slot */
    kvt_manifest(manifest, "  - kv.prefix-cache\n  - kv.paged\n");
    weft_error_clear(&err);
    if (weft_candidate_load_manifest(manifest, stories, weft_host_services_of(h), &c, &err))
        fail_msg("load: %s", err.message);
    assert_string_equal(weft_candidate_slot(c, WEFT_SLOT_KV)->name, "kv.prefix-cache");
    assert_string_equal(weft_candidate_slot(c, WEFT_SLOT_OPS)->name, "kv.paged");
    weft_candidate_unload(c);
    weft_host_free(h);
    unlink(manifest);
}

/* ---- conversations through the engine ----------------------------------------------------- */
typedef struct turn {
    uint32_t n_new, n_out;
} turn;

typedef struct conversation {
    int32_t fresh[256]; /* new tokens of every turn, in order */
    int32_t history[512];
    size_t n, used;
    kvt_out outs[8];
    uint64_t cached[8]; /* tokens the engine skipped in each turn */
} conversation;

static const turn turns[] = {{45, 30}, {21, 40}, {60, 25}, {3, 20}};
enum { N_TURNS = 4 };

static void conversation_init(conversation *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < 256; i++)
        c->fresh[i] = rtok();
    c->fresh[0] = 1; /* BOS */
}

/* Turn t: every earlier prompt and output plus the turn's fresh tokens. */
static void conversation_turn(weft_engine *e, conversation *c, int t) {
    memcpy(c->history + c->n, c->fresh + c->used, sizeof(int32_t) * turns[t].n_new);
    c->n += turns[t].n_new;
    c->used += turns[t].n_new;
    weft_engine_stats s0, s1;
    weft_engine_get_stats(e, &s0);
    kvt_greedy(e, c->history, c->n, turns[t].n_out, &c->outs[t]);
    weft_engine_get_stats(e, &s1);
    c->cached[t] = s1.prefix_cached_tokens - s0.prefix_cached_tokens;
    memcpy(c->history + c->n, c->outs[t].ids, sizeof(int32_t) * c->outs[t].n);
    c->n += c->outs[t].n;
}

/* Tokens of turn t's request that were computed before turn t + 1: all but its last output. */
static uint32_t computed_after(int t) {
    uint32_t n = 0;
    for (int k = 0; k <= t; k++)
        n += turns[k].n_new + turns[k].n_out;
    return n - 1;
}

/* n_conv conversations, their turns interleaved, with and without the prefix cache. With an
 * unbounded pool (pages 0) each follow-up reuses every full page of the previous turn's
 * computed tokens; with a small pool, at most that. Returns the tokens reused and the most
 * that could have been. */
static void check_conversations(uint32_t P, uint32_t pages, int n_conv, uint64_t *reused,
                                uint64_t *possible) {
    conversation *base = calloc((size_t)n_conv, sizeof(*base));
    conversation *got = calloc((size_t)n_conv, sizeof(*got));
    assert_non_null(base);
    assert_non_null(got);
    for (int c = 0; c < n_conv; c++) {
        conversation_init(&base[c]);
        memcpy(got[c].fresh, base[c].fresh, sizeof(base[c].fresh));
    }
    weft_engine *e = kvt_open(base_manifest, stories, 1, 0);
    for (int t = 0; t < N_TURNS; t++)
        for (int c = 0; c < n_conv; c++)
            conversation_turn(e, &base[c], t);
    weft_engine_close(e);
    char manifest[64];
    prefix_manifest(manifest, P, pages);
    e = kvt_open(manifest, stories, 1, 0);
    for (int t = 0; t < N_TURNS; t++)
        for (int c = 0; c < n_conv; c++)
            conversation_turn(e, &got[c], t);
    *reused = *possible = 0;
    for (int c = 0; c < n_conv; c++)
        for (int t = 0; t < N_TURNS; t++) {
            assert_int_equal(base[c].cached[t], 0);
            assert_int_equal(got[c].outs[t].n, base[c].outs[t].n);
            for (size_t i = 0; i < base[c].outs[t].n; i++)
                if (got[c].outs[t].ids[i] != base[c].outs[t].ids[i])
                    fail_msg("page_size %u conversation %d turn %d token %zu: %d with the prefix "
                             "cache, %d without",
                             P, c, t, i, got[c].outs[t].ids[i], base[c].outs[t].ids[i]);
            uint32_t expect = t ? computed_after(t - 1) / P * P : 0;
            printf("page_size %u pages %u conversation %d turn %d: %llu tokens reused (of %u)\n", P,
                   pages, c, t, (unsigned long long)got[c].cached[t], expect);
            if (!pages)
                assert_int_equal(got[c].cached[t], expect);
            else
                assert_true(got[c].cached[t] <= expect && got[c].cached[t] % P == 0);
            *reused += got[c].cached[t];
            *possible += expect;
        }
    weft_kv_stats ks;
    weft_engine_kv_stats(e, &ks);
    assert_int_equal(ks.used_tokens, 0);
    assert_int_equal(ks.bytes_used, 0); /* cached pages are not in use: they can be reclaimed */
    assert_int_equal(ks.prefix_hits, *reused);
    weft_engine_close(e);
    unlink(manifest);
    free(base);
    free(got);
}

static void test_conversation(void **state) {
    (void)state;
    uint64_t reused, possible;
    static const uint32_t sizes[] = {16, 5, 1};
    for (int i = 0; i < 3; i++) {
        check_conversations(sizes[i], 0, 1, &reused, &possible);
        assert_int_equal(reused, possible);
    }
}

/* Two conversations in a pool of 40 pages of 8 (the longest request needs 31): each one's
 * turns evict part of the other's cached pages, least recently released first. */
static void test_conversation_small_pool(void **state) {
    (void)state;
    uint64_t reused, possible;
    check_conversations(8, 40, 2, &reused, &possible);
    printf("small pool: %llu of %llu tokens reused\n", (unsigned long long)reused,
           (unsigned long long)possible);
    assert_true(reused > 0);
    assert_true(reused < possible);
}

/* The same prompt twice, of a length that fills whole pages and of one that does not; then a
 * prompt that diverges inside a page. */
static void test_repeat_and_diverge(void **state) {
    (void)state;
    const uint32_t P = 8;
    char manifest[64];
    prefix_manifest(manifest, P, 0);
    weft_engine *pe = kvt_open(manifest, stories, 1, 0);
    weft_engine *be = kvt_open(base_manifest, stories, 1, 0);
    int32_t prompt[64];
    for (int i = 0; i < 64; i++)
        prompt[i] = rtok();
    prompt[0] = 1;
    static const uint32_t lens[] = {48, 45};
    for (int k = 0; k < 2; k++) {
        uint32_t n = lens[k];
        kvt_out want, a, b;
        kvt_greedy(be, prompt, n, 30, &want);
        weft_engine_stats s0, s1, s2;
        weft_engine_get_stats(pe, &s0);
        kvt_greedy(pe, prompt, n, 30, &a);
        weft_engine_get_stats(pe, &s1);
        kvt_greedy(pe, prompt, n, 30, &b);
        weft_engine_get_stats(pe, &s2);
        assert_memory_equal(a.ids, want.ids, sizeof(int32_t) * 30);
        assert_memory_equal(b.ids, want.ids, sizeof(int32_t) * 30);
        /* The first run of the 45-token prompt finds the 40 tokens of the 48-token run. */
        uint64_t first = s1.prefix_cached_tokens - s0.prefix_cached_tokens;
        uint64_t second = s2.prefix_cached_tokens - s1.prefix_cached_tokens;
        printf("prompt of %u: %llu then %llu tokens reused\n", n, (unsigned long long)first,
               (unsigned long long)second);
        assert_int_equal(first, k == 0 ? 0 : 40);
        /* Whole pages: all but the last token (recomputed inside a shared page, so the page is
         * copied first); otherwise every full page. */
        assert_int_equal(second, n % P == 0 ? n - 1 : n / P * P);
    }
    /* diverging at token 20 (inside page 2): pages 0 and 1 are reused */
    prompt[20] = prompt[20] == 3 ? 4 : 3;
    kvt_out want, got;
    kvt_greedy(be, prompt, 48, 30, &want);
    weft_engine_stats s0, s1;
    weft_engine_get_stats(pe, &s0);
    kvt_greedy(pe, prompt, 48, 30, &got);
    weft_engine_get_stats(pe, &s1);
    assert_memory_equal(got.ids, want.ids, sizeof(int32_t) * 30);
    assert_int_equal(s1.prefix_cached_tokens - s0.prefix_cached_tokens, 16);
    weft_engine_close(pe);
    weft_engine_close(be);
    unlink(manifest);
}

/* ---- the provider, directly --------------------------------------------------------------- */
static float *page_k(const weft_kv_paged *d, int32_t page) {
    return (float *)d->k[0].ptr + (size_t)page * d->page_size * d->n_kv_heads * d->head_dim;
}

static void test_direct(void **state) {
    (void)state;
    enum { P = 4, PAGES = 12, MAX_SEQ = 48, SLOTS = 3, HD = 4 };
    char manifest[64];
    prefix_manifest(manifest, P, PAGES);
    kvt_direct d;
    kvt_direct_open(&d, manifest, stories);
    assert_string_equal(d.kv->name, "kv.prefix-cache");
    kvt_direct_init(&d, 1, 1, HD, MAX_SEQ, SLOTS);
    const weft_kv_vtable *kv = d.kv->desc->kv;
    void *st = d.kv->state;
    const weft_kv_paged *desc = kv->view(st)->desc;
    weft_error err;
    weft_error_clear(&err);
    int32_t tok[MAX_SEQ];
    for (int i = 0; i < MAX_SEQ; i++)
        tok[i] = rtok();
    /* Request A computes 14 tokens (3 full pages + 2), writes recognisable K values, ends. */
    int32_t a, b, c;
    uint32_t n_cached = 99;
    assert_int_equal(kv->open(st, 1, &a, &err), WEFT_OK);
    assert_int_equal(kv->prefix_attach(st, a, tok, 14, &n_cached, &err), WEFT_OK);
    assert_int_equal(n_cached, 0);
    assert_int_equal(kv->reserve(st, a, 14, &err), WEFT_OK);
    int32_t nb;
    const int32_t *bt = kv->block_table(st, a, &nb);
    assert_int_equal(nb, 4);
    int32_t a_pages[4];
    memcpy(a_pages, bt, sizeof(a_pages));
    for (int p = 0; p < 14; p++)
        for (int i = 0; i < HD; i++)
            page_k(desc, a_pages[p / P])[(p % P) * HD + i] = (float)(p * 10 + i);
    kv->commit(st, a, tok, 14);
    weft_kv_stats ks;
    kv->stats(st, &ks);
    assert_int_equal(ks.bytes_used, 4ull * 2 * P * HD * 4);
    kv->close(st, a);
    kv->stats(st, &ks);
    assert_int_equal(ks.bytes_used, 0);
    /* B shares 12 tokens with A (3 pages), then differs: it maps A's pages. */
    int32_t tb[20];
    memcpy(tb, tok, sizeof(tb));
    tb[13] = tb[13] == 3 ? 4 : 3;
    assert_int_equal(kv->open(st, 2, &b, &err), WEFT_OK);
    assert_int_equal(kv->prefix_attach(st, b, tb, 20, &n_cached, &err), WEFT_OK);
    assert_int_equal(n_cached, 12);
    bt = kv->block_table(st, b, &nb);
    assert_int_equal(nb, 3);
    assert_memory_equal(bt, a_pages, sizeof(int32_t) * 3);
    /* C has exactly A's first 12 tokens: all of it is cached but its last token is recomputed,
     * so only 11 count and its third page is copied before C writes into it. */
    assert_int_equal(kv->open(st, 3, &c, &err), WEFT_OK);
    assert_int_equal(kv->prefix_attach(st, c, tok, 12, &n_cached, &err), WEFT_OK);
    assert_int_equal(n_cached, 11);
    kv->stats(st, &ks);
    assert_int_equal(ks.bytes_used, 3ull * 2 * P * HD * 4); /* three pages, shared by two */
    assert_int_equal(kv->reserve(st, c, 12, &err), WEFT_OK);
    bt = kv->block_table(st, c, &nb);
    assert_int_equal(nb, 3);
    assert_memory_equal(bt, a_pages, sizeof(int32_t) * 2);
    assert_int_not_equal(bt[2], a_pages[2]);
    assert_memory_equal(page_k(desc, bt[2]), page_k(desc, a_pages[2]), sizeof(float) * P * HD);
    page_k(desc, bt[2])[3 * HD] = -1.0f; /* C writes position 11 in its own copy */
    assert_true(page_k(desc, a_pages[2])[3 * HD] == 110.0f);
    /* B extends past its shared pages into fresh ones; the shared ones stay mapped. */
    assert_int_equal(kv->reserve(st, b, 20, &err), WEFT_OK);
    bt = kv->block_table(st, b, &nb);
    assert_int_equal(nb, 5);
    assert_memory_equal(bt, a_pages, sizeof(int32_t) * 3);
    kv->close(st, b);
    kv->close(st, c);
    /* Eviction: fill the pool with a request of fresh tokens. Of A's cached pages (3 full;
     * the partial fourth was freed), the last one released goes first. */
    int32_t fresh[MAX_SEQ];
    for (int i = 0; i < MAX_SEQ; i++)
        fresh[i] = rtok();
    int32_t e1;
    assert_int_equal(kv->open(st, 4, &e1, &err), WEFT_OK);
    assert_int_equal(kv->prefix_attach(st, e1, fresh, MAX_SEQ, &n_cached, &err), WEFT_OK);
    assert_int_equal(n_cached, 0);
    /* free pages: 12 - 3 cached (A's) - C's copy and B's two extra pages were freed = 9 free */
    assert_int_equal(kv->reserve(st, e1, 9 * P, &err), WEFT_OK);
    assert_int_equal(kv->reserve(st, e1, 10 * P, &err), WEFT_OK); /* evicts A's page 2 */
    int32_t probe;
    assert_int_equal(kv->open(st, 5, &probe, &err), WEFT_OK);
    assert_int_equal(kv->prefix_attach(st, probe, tok, 14, &n_cached, &err), WEFT_OK);
    assert_int_equal(n_cached, 8); /* pages 0 and 1 are still cached */
    kv->close(st, probe);
    assert_int_equal(kv->reserve(st, e1, 12 * P, &err), WEFT_OK); /* evicts pages 1, then 0 */
    assert_int_equal(kv->open(st, 5, &probe, &err), WEFT_OK);
    assert_int_equal(kv->reserve(st, probe, 1, &err), WEFT_AGAIN); /* nothing left at all */
    kv->close(st, probe);
    kv->close(st, e1);
    assert_int_equal(kv->open(st, 5, &probe, &err), WEFT_OK);
    assert_int_equal(kv->prefix_attach(st, probe, tok, 14, &n_cached, &err), WEFT_OK);
    assert_int_equal(n_cached, 0);
    /* bad arguments */
    assert_int_equal(kv->prefix_attach(st, probe, tok, 14, &n_cached, &err), WEFT_OK);
    assert_int_equal(kv->reserve(st, probe, 5, &err), WEFT_OK);
    assert_int_equal(kv->prefix_attach(st, probe, tok, 14, &n_cached, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "must be open and empty"));
    assert_int_equal(kv->prefix_attach(st, 77, tok, 14, &n_cached, &err), WEFT_ERR_INVALID);
    assert_int_equal(kv->prefix_attach(st, probe, NULL, 14, &n_cached, &err), WEFT_ERR_INVALID);
    kv->commit(st, 77, tok, 14);
    kv->commit(st, probe, NULL, 3);
    kv->close(st, probe);
    kvt_direct_close(&d);
    unlink(manifest);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layers_on_kv_paged),
        cmocka_unit_test(test_conversation),
        cmocka_unit_test(test_conversation_small_pool),
        cmocka_unit_test(test_repeat_and_diverge),
        cmocka_unit_test(test_direct),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
