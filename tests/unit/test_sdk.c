/* The plugin SDK's KV-length buckets (plugins/sdk/weft/sdk.h weft_sdk_kv_bucket), which
 * exec.cuda-graph keys its captures by and the cuda backend's fused attention sizes its split
 * grid by: both must agree on every step, so the edges are pinned here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../plugins/sdk/weft/sdk.h"

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
    } cases[] = {{0, 512},     {1, 512},     {511, 512},   {512, 1024},
                 {1023, 1024}, {1024, 2048}, {2559, 4096}, {4095, 4096},
                 {4096, 8192}, {32767, 32768}, {-1, 512}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(bucket_of(&cases[i].pos, 1), cases[i].len);
    assert_int_equal(WEFT_SDK_KV_BUCKET_MIN, 512);
}

static void test_kv_bucket_rows(void **state) {
    (void)state;
    /* several rows (a batched or speculative step): the largest position sets the bucket,
     * wherever it sits */
    static const int32_t a[] = {3, 900, 17, 511};
    static const int32_t b[] = {1500, 2, 0};
    assert_int_equal(bucket_of(a, 4), 1024);
    assert_int_equal(bucket_of(a, 1), 512);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_bucket_edges),
        cmocka_unit_test(test_kv_bucket_rows),
        cmocka_unit_test(test_kv_bucket_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
