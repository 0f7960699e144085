/* The plugin SDK (plugins/sdk/weft/sdk.h): its graph helpers, and its KV-length buckets
 * (weft_sdk_kv_bucket), which exec.cuda-graph keys its captures by and the cuda backend's fused
 * attention sizes its split grid by: both must agree on every step, so the edges are pinned
 * here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../plugins/sdk/weft/sdk.h"
#include "util/error.h"

static int64_t bucket_of(const int32_t *pos, uint32_t n) {
    weft_batch b = {.size = sizeof(b), .n_tokens = n, .positions = pos};
    return weft_sdk_kv_bucket(&b);
}

static void test_kv_bucket_edges(void **state) {
    (void)state;
    /* position p needs p + 1 cache positions: a bucket of length L holds positions below L */
    static const struct {
        int32_t pos;
        int64_t len;
    } cases[] = {{0, 128},     {1, 128},     {127, 128},   {128, 256},     {255, 256},
                 {256, 512},   {511, 512},   {512, 1024},  {1023, 1024},   {1024, 2048},
                 {2559, 4096}, {4095, 4096}, {4096, 8192}, {32767, 32768}, {-1, 128}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(bucket_of(&cases[i].pos, 1), cases[i].len);
    assert_int_equal(WEFT_SDK_KV_BUCKET_MIN, 128);
}

static void test_kv_bucket_rows(void **state) {
    (void)state;
    /* several rows (a batched or speculative step): the largest position sets the bucket,
     * wherever it sits */
    static const int32_t a[] = {3, 900, 17, 511};
    static const int32_t b[] = {1500, 2, 0};
    assert_int_equal(bucket_of(a, 4), 1024);
    assert_int_equal(bucket_of(a, 1), 128);
    assert_int_equal(bucket_of(b, 3), 2048);
    /* the largest int32 position still gets a bucket that holds it */
    static const int32_t top[] = {INT32_MAX};
    assert_true(bucket_of(top, 1) > (int64_t)INT32_MAX);
}

static void test_kv_bucket_unknown(void **state) {
    (void)state;
    /* no host positions: 0, the whole cache */
    assert_int_equal(weft_sdk_kv_bucket(NULL), 0);
    weft_batch none = {.size = sizeof(none), .n_tokens = 3, .positions = NULL};
    assert_int_equal(weft_sdk_kv_bucket(&none), 0);
    static const int32_t p[] = {700};
    weft_batch empty = {.size = sizeof(empty), .n_tokens = 0, .positions = p};
    assert_int_equal(weft_sdk_kv_bucket(&empty), 0);
}

/* The graph helpers passes share: tensor ids in range, a node's reads and writes (in place
 * counted both ways), the one later reader. */
static weft_graph_service uses_svc;
static uint32_t uses_of(const weft_graph *g, uint32_t t) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        n += (uint32_t)weft_sdk_node_reads(&g->nodes[i], t);
    return n;
}
static void test_node_helpers(void **state) {
    (void)state;
    weft_tensor ts[4];
    weft_node ns[3];
    memset(ts, 0, sizeof(ts));
    memset(ns, 0, sizeof(ns));
    /* 0 -> node 0 -> 1; 1 -> node 1 (in place) -> 1; 1, 2 -> node 2 -> 3 */
    ns[0] = (weft_node){.n_in = 1, .n_out = 1, .in = {0}, .out = {1}};
    ns[1] = (weft_node){.n_in = 1, .n_out = 1, .in = {1}, .out = {1}};
    ns[2] = (weft_node){.n_in = 2, .n_out = 1, .in = {1, 2}, .out = {3}};
    weft_graph g = {.size = sizeof(g), .n_tensors = 4, .tensors = ts, .n_nodes = 3, .nodes = ns};
    assert_true(weft_sdk_tensor_valid(&g, 0));
    assert_true(weft_sdk_tensor_valid(&g, 3));
    assert_false(weft_sdk_tensor_valid(&g, 4));
    assert_false(weft_sdk_tensor_valid(&g, WEFT_TENSOR_NONE));
    assert_true(weft_sdk_node_reads(&ns[1], 1) && weft_sdk_node_writes(&ns[1], 1));
    assert_false(weft_sdk_node_reads(&ns[0], 1));
    assert_true(weft_sdk_node_writes(&ns[0], 1));
    assert_false(weft_sdk_node_writes(&ns[2], 2));
    uses_svc.tensor_uses = uses_of;
    assert_int_equal(weft_sdk_only_reader(&g, &uses_svc, 0, 0), -1); /* none after node 0 */
    assert_int_equal(weft_sdk_only_reader(&g, &uses_svc, 2, 0), 2);
    assert_int_equal(weft_sdk_only_reader(&g, &uses_svc, 1, 0), -1); /* read twice */
    assert_int_equal(weft_sdk_only_reader(&g, &uses_svc, 9, 0), -1); /* not a tensor */
}

/* An error wrapped with context passes its own message (and source) back to the setter:
 * `weft_sdk_error(err, s, name, "layer %u: %s", l, err->message)`. Formatting into the buffer
 * being read gave garbage ("layer 0: layer 0: ... es", kv.paged's pool, 2026-12-05); every setter
 * now formats apart first. */
static void test_error_wraps_itself(void **state) {
    (void)state;
    weft_error e = {.size = sizeof(e)};
    weft_sdk_error(&e, WEFT_ERR_IO, "inner", "alloc: out of host memory for %d bytes", 4096);
    weft_sdk_error(&e, WEFT_ERR_NOMEM, e.source, "layer %u: %s", 3u, e.message);
    assert_int_equal(e.code, WEFT_ERR_NOMEM);
    assert_string_equal(e.source, "inner");
    assert_string_equal(e.message, "layer 3: alloc: out of host memory for 4096 bytes");
    /* the runtime's setter, and a message that fills the record: cut, never overrun */
    char longmsg[sizeof(e.message) + 64];
    memset(longmsg, 'x', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    weft_error_set(&e, WEFT_ERR_FORMAT, "runtime-inner", "%s", longmsg);
    weft_error_set(&e, WEFT_ERR_INVALID, e.source, "wrapped: %s", e.message);
    assert_int_equal(e.code, WEFT_ERR_INVALID);
    assert_string_equal(e.source, "runtime-inner");
    assert_int_equal(strlen(e.message), sizeof(e.message) - 1);
    assert_memory_equal(e.message, "wrapped: xxxx", 13);
    for (size_t k = 9; k < sizeof(e.message) - 1; k++)
        if (e.message[k] != 'x')
            fail_msg("byte %zu of the wrapped message is '%c'", k, e.message[k]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_bucket_edges), cmocka_unit_test(test_error_wraps_itself),
        cmocka_unit_test(test_kv_bucket_rows),  cmocka_unit_test(test_kv_bucket_unknown),
        cmocka_unit_test(test_node_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
