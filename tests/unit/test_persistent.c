/* exec.persistent (techniques/exec.persistent, the cuda backend's weft_persistent kernel):
 *   - the program layout the technique writes equals the kernel's (struct size and offsets, the
 *     op codes in core.cu's order) and the prefetch plan of a fused decoder layer;
 *   - on the GPU: greedy tokens of fast-cuda-persistent over 256 steps after a 128-token prompt
 *     equal the cuda baseline's and fast-cuda-all's, on stories260K and on every model
 *     directory in WEFT_EXEC_MODELS (colon-separated; the GPU run passes synthetic
 *     Llama-3.2-1B and Qwen3-0.6B bf16), twice per engine (capture, then program runs), and
 *     the technique's closing log line shows decode steps ran as the persistent kernel.
 * Without the cuda backend and a GPU (a CI machine) the GPU tests are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../techniques/exec.persistent/persistent_prog.h"
#include "engine/engine.h"
#include "engine/sampling.h"
#include "files/llama2c.h"
#include "util/error.h"

#define GPU_TEST_GENERATE
#include "gpu_engine_tests.h"

/* ---- the program layout -------------------------------------------------------------- */
static void test_prog_layout(void **state) {
    (void)state;
    assert_int_equal(sizeof(pk_node), 256);
    assert_int_equal(offsetof(pk_node, wait_nvb), 24);
    assert_int_equal(offsetof(pk_node, pf), 32);
    assert_int_equal(offsetof(pk_node, a), 64);
    /* core.cu lists the same op names in the same order (its enum starts at PK_EMBED = 1) */
    static const char *const names[] = {"PK_EMBED",
                                        "PK_RMSNORM",
                                        "PK_ADD_RMSNORM",
                                        "PK_ROPE",
                                        "PK_KV_STORE",
                                        "PK_ATTENTION",
                                        "PK_SWIGLU",
                                        "PK_ADD",
                                        "PK_SCALE",
                                        "PK_ACTIVATION",
                                        "PK_GATHER_ROWS",
                                        "PK_SLICE_COLS",
                                        "PK_TO_F32",
                                        "PK_FROM_F32",
                                        "PK_BIAS_ADD",
                                        "PK_SPLIT_COLS",
                                        "PK_QKV_ROPE",
                                        "PK_GEMV_1",
                                        "PK_GEMV_SWIGLU_1",
                                        "PK_ATTENTION_SPLIT",
                                        "PK_ATTENTION_COMBINE",
                                        "PK_ROPE_ATTENTION"};
    assert_int_equal(PK_ROPE_ATTENTION, 22);
    /* (a GPU bundle carries no sources: the check then ran where it was built) */
    FILE *f = fopen(WEFT_SOURCE_DIR "/plugins/backends/cuda/kernels/core.cu", "rb");
    if (!f) return;
    static char text[1 << 18];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = 0;
    assert_true(n < sizeof(text) - 1);
    const char *p = strstr(text, "PK_EMBED = 1,");
    assert_non_null(p);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        while (*p == ' ' || *p == '\n' || *p == ',')
            p++;
        if (strncmp(p, names[i], strlen(names[i])))
            fail_msg("core.cu's op %zu is '%.24s', the technique's %s", i + 1, p, names[i]);
        p += strlen(names[i]);
        if (i == 0) p += strlen(" = 1");
    }
    /* every kernel of the table fits the node's argument slots and is found by name */
    for (size_t i = 0; i < sizeof(pk_kernels) / sizeof(pk_kernels[0]); i++) {
        assert_true(strlen(pk_kernels[i].sig) <= PK_ARGS);
        assert_ptr_equal(pk_kernel_find(pk_kernels[i].name), &pk_kernels[i]);
        /* the GEMV kernels are named by a macro (weft_gemv_##TT) */
        if (strncmp(pk_kernels[i].name, "weft_gemv_", 10))
            assert_non_null(strstr(text, pk_kernels[i].name));
    }
    assert_null(pk_kernel_find("weft_gemv_2")); /* more than one row: graph replay */
    const pk_kernel *norm = pk_kernel_find("weft_add_rmsnorm");
    assert_true(pk_threads_ok(norm, 1024) && pk_threads_ok(norm, 64) && !pk_threads_ok(norm, 768));
    assert_false(pk_threads_ok(pk_kernel_find("weft_gemv_1"), 128));
    assert_false(pk_threads_ok(pk_kernel_find("weft_kv_store"), 48));
}

/* The streaming kernel's norm fold (persistent_prog.h foldable_norm): an add_rmsnorm of one row
 * whose output only the next product reads folds, guarded when the product's output overlaps
 * one of the norm's buffers; anything the kernel's mk_norm cannot reproduce does not fold. */
static void fold_pair(pk_node *p, uint64_t out) {
    memset(p, 0, 2 * sizeof(*p));
    /* add_rmsnorm: x, res, w, y, r, T, D, eps (bf16 rows of 1024 at 0x10000 apart) */
    p[0].op = PK_ADD_RMSNORM;
    p[0].nvb = 1;
    p[0].nt = 1024;
    uint64_t a0[8] = {0x100000, 0x110000, 0x120000, 0x130000, 0x140000, 1, 1024, 0};
    memcpy(p[0].a, a0, sizeof(a0));
    /* gemv_1: x = the norm's y, w, bias, y, out_f32, T, N, K, S */
    p[1].op = PK_GEMV_1;
    p[1].nvb = 512;
    p[1].nt = 256;
    uint64_t a1[9] = {0x130000, 0x8000000, 0, out, 0, 1, 4096, 1024, 1};
    memcpy(p[1].a, a1, sizeof(a1));
}

static void test_norm_fold(void **state) {
    (void)state;
    pk_node p[2];
    int guard = -1;
    fold_pair(p, 0x200000); /* output apart from every norm buffer */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 1024);
    assert_int_equal(guard, 0);
    fold_pair(p, 0x100000 - 4096); /* 4096 bf16 outputs ending inside x: guarded */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 1024);
    assert_int_equal(guard, 1);
    fold_pair(p, 0x140000 + 2046); /* the last output byte pair of r's first element */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 1024);
    assert_int_equal(guard, 1);
    fold_pair(p, 0x140000 + 2048); /* just past r */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 1024);
    assert_int_equal(guard, 0);
    /* what does not fold */
    fold_pair(p, 0x200000);
    p[1].a[0] = 0x150000; /* the product reads something else */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 0);
    fold_pair(p, 0x200000);
    p[0].a[5] = 2; /* two rows */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 0);
    fold_pair(p, 0x200000);
    p[0].nt = 768; /* a thread count the consumers cannot emulate */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 0);
    fold_pair(p, 0x200000);
    p[1].a[7] = 2048; /* K != D */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 0);
    fold_pair(p, 0x200000);
    p[1].op = PK_ROPE; /* not a product */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 0);
    fold_pair(p, 0x200000);
    assert_int_equal(foldable_norm(p, 1, 0, 2, &guard), 0); /* no node after it */
    /* a plain rmsnorm (x, w, y, T, cols, group, eps) folds only over whole rows */
    fold_pair(p, 0x200000);
    p[0].op = PK_RMSNORM;
    uint64_t r0[7] = {0x100000, 0x120000, 0x130000, 1, 1024, 1024, 0};
    memset(p[0].a, 0, sizeof(p[0].a));
    memcpy(p[0].a, r0, sizeof(r0));
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 1024);
    assert_int_equal(guard, 0);
    p[0].a[5] = 128; /* per-head groups */
    assert_int_equal(foldable_norm(p, 2, 0, 2, &guard), 0);
}

/* A fused Qwen3 layer: add_rmsnorm, qkv, qkv_rope, kv_store, attention split and combine, o,
 * add_rmsnorm, gate|up + swiglu, down; then the next layer's norm and qkv. */
static void test_prefetch_plan(void **state) {
    (void)state;
    static const int has_w[] = {0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1};
    static const int want[] = {-1, -1, 0, -1, -1, -1, -1, 3, -1, 8, 9, -1, 11};
    int src[13];
    pk_prefetch_plan(has_w, 13, src);
    for (int i = 0; i < 13; i++)
        if (src[i] != want[i])
            fail_msg("node %d prefetched from %d, expected %d", i, src[i], want[i]);
    static const int first[] = {1, 0};
    pk_prefetch_plan(first, 2, src); /* nothing before the first node to prefetch from */
    assert_int_equal(src[0], -1);
}

/* ---- greedy tokens on the GPU ---------------------------------------------------------- */
/* Runs fn with stderr sent to a file and returns how many steps the technique's closing log
 * line reports as persistent (-1 when the line is missing). */
static long persistent_steps(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    long steps = -1;
    while (fgets(line, sizeof(line), f)) {
        const char *m = strstr(line, "[exec.persistent] ");
        long v;
        if (m && sscanf(m + strlen("[exec.persistent] "), "%ld persistent steps", &v) == 1)
            steps = v;
        if (m) fputs(line, stdout);
    }
    fclose(f);
    return steps;
}

static void greedy_on(const char *model) {
    static result base, all, got;
    weft_engine *e = open_candidate("baseline-cuda", model);
    if (!e) skip();
    int32_t prompt[128];
    size_t n = make_prompt(e, prompt, 128);
    weft_sampler_params sp;
    weft_sampler_params_default(&sp);
    sp.temperature = 0.0f;
    generate(e, prompt, n, &sp, 256, &base);
    weft_engine_close(e);
    e = open_candidate("fast-cuda-all", model);
    assert_non_null(e);
    generate(e, prompt, n, &sp, 256, &all);
    generate(e, prompt, n, &sp, 256, &all);
    weft_engine_close(e);
    for (size_t i = 0; i < 256; i++)
        if (all.ids[i] != base.ids[i])
            fail_msg("fast-cuda-all on %s: token %zu is %d, the baseline's %d", model, i,
                     all.ids[i], base.ids[i]);
    char logpath[] = "/tmp/weft-persist-log-XXXXXX";
    int fd = mkstemp(logpath);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    e = open_candidate("fast-cuda-persistent", model);
    assert_non_null(e);
    /* twice: the first run warms and captures, the second runs every decode step persistent */
    for (int rep = 0; rep < 2; rep++) {
        generate(e, prompt, n, &sp, 256, &got);
        for (size_t i = 0; i < 256; i++)
            if (got.ids[i] != base.ids[i]) {
                fflush(stderr);
                dup2(saved, 2);
                fail_msg("fast-cuda-persistent on %s, run %d: token %zu is %d, the baseline's %d",
                         model, rep, i, got.ids[i], base.ids[i]);
            }
    }
    weft_engine_close(e);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    long steps = persistent_steps(logpath);
    unlink(logpath);
    if (steps < 256)
        fail_msg("fast-cuda-persistent on %s: %ld decode steps ran as the persistent kernel, "
                 "expected at least 256 of the 510",
                 model, steps);
    fprintf(stderr,
            "  fast-cuda-persistent on %s: 2 x 256 greedy tokens equal baseline-cuda "
            "and fast-cuda-all (%ld persistent steps)\n",
            model, steps);
}

static void test_greedy_stories(void **state) {
    (void)state;
    greedy_on(stories_dir);
}

static void test_greedy_models(void **state) {
    (void)state;
    for_each_model(greedy_on);
}

int main(void) {
    setenv("WEFT_LOG", "info", 0); /* the technique's closing line is at info level */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prog_layout),   cmocka_unit_test(test_prefetch_plan),
        cmocka_unit_test(test_norm_fold),     cmocka_unit_test(test_greedy_stories),
        cmocka_unit_test(test_greedy_models),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
