/* exec.l2-prefetch on the GPU:
 *   - the decode graph of fast-cuda-prefetch has one exec.l2_prefetch node per layer on the
 *     synthetic models, none on stories260K (no weight reaches the pass's 1 MiB threshold), and
 *     the prefill graph (bucket above max_tokens) has none;
 *   - greedy: fast-cuda-prefetch gives fast-cuda-all's and baseline-cuda's tokens over 256 steps
 *     (EOS ignored), twice in one engine (the second run replays captured graphs), on
 *     stories260K and every model directory in WEFT_EXEC_MODELS (colon-separated).
 * On the cpu backend the technique is refused by name (it declares backends: [cuda]); that part
 * runs everywhere. Without a GPU the GPU tests are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GPU_TEST_GENERATE
#include "gpu_engine_tests.h"

#define GEN 256

/* Counts lines of the printed graph that contain needle; fills the node names' layers. */
static int graph_lines(weft_engine *e, uint32_t tokens, const char *needle, char *text,
                       size_t cap) {
    weft_error err;
    weft_error_clear(&err);
    FILE *f = fmemopen(text, cap, "w");
    assert_non_null(f);
    if (weft_engine_print_graph(e, tokens, f, NULL, &err) != WEFT_OK)
        fail_msg("print graph: %s: %s", err.source, err.message);
    fclose(f);
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* expect_nodes: every layer (the synthetic 1B-class models) or none (stories260K, whose
 * products are all under the pass's 1 MiB threshold). */
static void check_graph(const char *model, int every_layer) {
    weft_engine *e = open_candidate("fast-cuda-prefetch", model);
    if (!e) skip();
    const weft_model_config *cfg = weft_engine_config(e);
    static char text[1 << 20];
    int decode = graph_lines(e, 1, "exec.l2_prefetch", text, sizeof(text));
    printf("%s: %d prefetch nodes in the decode graph (%u layers)\n", model, decode,
           (unsigned)cfg->n_layers);
    assert_int_equal(decode, every_layer ? (int)cfg->n_layers : 0);
    for (uint32_t l = 0; every_layer && l < cfg->n_layers; l++) {
        char want[64];
        snprintf(want, sizeof(want), "layers.%u.l2_prefetch", (unsigned)l);
        assert_non_null(strstr(text, want));
    }
    int prefill = graph_lines(e, 64, "exec.l2_prefetch", text, sizeof(text));
    assert_int_equal(prefill, 0);
    weft_engine_close(e);
}

static void test_graph_stories(void **state) {
    (void)state;
    check_graph(stories_dir, 0);
}

static void graph_of_model(const char *model) {
    check_graph(model, 1);
}

static void test_graph_models(void **state) {
    (void)state;
    for_each_model(graph_of_model);
}

static void greedy_same(const char *model) {
    const char *names[3] = {"baseline-cuda", "fast-cuda-all", "fast-cuda-prefetch"};
    static result r[3][2];
    int32_t prompt[128];
    size_t n_prompt = 0;
    weft_sampler_params sp;
    weft_sampler_params_default(&sp);
    sp.temperature = 0;
    for (int c = 0; c < 3; c++) {
        weft_engine *e = open_candidate(names[c], model);
        if (!e) skip();
        if (!n_prompt) n_prompt = make_prompt(e, prompt, 128);
        for (int run = 0; run < 2; run++)
            generate(e, prompt, n_prompt, &sp, GEN, &r[c][run]);
        weft_engine_close(e);
    }
    for (int c = 1; c < 3; c++)
        for (int run = 0; run < 2; run++)
            for (size_t i = 0; i < GEN; i++)
                if (r[c][run].ids[i] != r[0][0].ids[i])
                    fail_msg("%s on %s, run %d: token %zu is %d, baseline-cuda's %d", names[c],
                             model, run, i, r[c][run].ids[i], r[0][0].ids[i]);
    printf("%s: fast-cuda-prefetch = fast-cuda-all = baseline-cuda over %d greedy tokens, twice\n",
           model, GEN);
}

static void test_greedy_stories(void **state) {
    (void)state;
    greedy_same(stories_dir);
}

static void test_greedy_models(void **state) {
    (void)state;
    for_each_model(greedy_same);
}

/* Everywhere: a cpu candidate with the technique is refused, naming it. */
static void test_cpu_refused(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof(path), "%s/cpu-prefetch.yaml", stories_dir);
    assert_int_equal(stories_manifest(path, "cpu-prefetch", stories_dir, "cpu", "exec.l2-prefetch"),
                     0);
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = path;
    o.model_dir = stories_dir;
    weft_error err;
    weft_error_clear(&err);
    weft_engine *e = NULL;
    assert_int_not_equal(weft_engine_open(&o, &e, &err), WEFT_OK);
    assert_null(e);
    printf("cpu candidate refused: %s: %s\n", err.source, err.message);
    assert_non_null(strstr(err.message, "exec.l2-prefetch"));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_refused),   cmocka_unit_test(test_graph_stories),
        cmocka_unit_test(test_graph_models),  cmocka_unit_test(test_greedy_stories),
        cmocka_unit_test(test_greedy_models),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
