/* The planner (tools/plan): the ranking of gaps, each refusal rule of a plan review (stop with a
 * gap above noise, a gap left unanswered, nothing forecast beyond noise, time to first token
 * chased alone, a forecast past the limit, Amdahl), the Amdahl arithmetic against the textbook
 * values of Amdahl's law, profile parsing in both forms, YAML refusals, and plan check's
 * built / pruned / deferred records with forecast beside measured. No server needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "plan/plan.c"
#include "plan/plan_check.c"
#include "plan/plan_yaml.c"

/* A result with the headline KPIs (values: decode tokens/s, prefill tokens/s, ttft s). */
static json_t *result(double dec, double dnoise, double pre, double pnoise, double ttft,
                      const char *plugin) {
    json_t *k = json_object();
    if (dec > 0)
        json_object_set_new(k, "decode",
                            json_pack("{s:f, s:f, s:f, s:f}", "fraction", dec, "noise", dnoise,
                                      "value", 1000 * dec, "limit", 1000.0));
    if (pre > 0)
        json_object_set_new(k, "prefill",
                            json_pack("{s:f, s:f, s:f, s:f}", "fraction", pre, "noise", pnoise,
                                      "value", 50000 * pre, "limit", 50000.0));
    if (ttft > 0)
        json_object_set_new(k, "ttft",
                            json_pack("{s:f, s:f, s:f, s:f}", "fraction", ttft, "noise", 0.01,
                                      "value", 0.002 / ttft, "limit", 0.002));
    json_t *plugins = json_array();
    if (plugin) json_array_append_new(plugins, json_pack("{s:s}", "name", plugin));
    return json_pack("{s:s, s:{s:s, s:o}, s:{s:o, s:b}}", "format", "weft-eval-result", "candidate",
                     "id", plugin ? plugin : "base", "plugins", plugins, "summary", "kpis", k,
                     "counts", 1);
}

static json_t *yaml(const char *text) {
    json_t *o = NULL;
    weft_error err;
    weft_error_clear(&err);
    if (weft_plan_yaml_parse(text, strlen(text), "test.yaml", &o, &err))
        fail_msg("yaml: %s", err.message);
    return o;
}

/* Reviews and returns the review; *refused_rules gets "rule,rule," of refusing findings. */
static json_t *review(json_t *r, const char *plan_text, const weft_plan_profile *prof, char *rules,
                      size_t cap) {
    json_t *plan = yaml(plan_text), *rev = NULL;
    weft_error err;
    weft_error_clear(&err);
    if (weft_plan_review(r, plan, prof, &rev, &err)) fail_msg("review: %s", err.message);
    json_decref(plan);
    rules[0] = 0;
    size_t i, w = 0;
    json_t *f;
    json_array_foreach(json_object_get(rev, "findings"), i, f) {
        if (json_is_true(json_object_get(f, "refuse")) && w < cap)
            w += (size_t)snprintf(rules + w, cap - w, "%s,",
                                  json_string_value(json_object_get(f, "rule")));
    }
    return rev;
}

static int contains(json_t *o, const char *needle) {
    char *s = json_dumps(o, 0);
    int r = s && strstr(s, needle) != NULL;
    free(s);
    return r;
}

static int accepted(json_t *rev) {
    return json_is_true(json_object_get(rev, "accepted"));
}

static void test_ranking(void **state) {
    (void)state;
    weft_plan_kpi k[WEFT_PLAN_NKPI];
    weft_error err;
    weft_error_clear(&err);
    json_t *r = result(0.3, 0.01, 0.8, 0.01, 0.05, NULL);
    assert_int_equal(weft_plan_rank(r, k, &err), WEFT_OK);
    assert_true(k[WEFT_PLAN_DECODE].leads && !k[WEFT_PLAN_PREFILL].leads);
    assert_int_equal(k[WEFT_PLAN_DECODE].rank, 1);
    assert_int_equal(k[WEFT_PLAN_PREFILL].rank, 2);
    assert_true(fabs(k[WEFT_PLAN_DECODE].gap - 0.7) < 1e-12);
    assert_true(fabs(k[WEFT_PLAN_DECODE].margin - 0.02) < 1e-12);
    /* the time to first token gap is the largest and still does not lead */
    assert_false(k[WEFT_PLAN_TTFT].leads);
    assert_int_equal(k[WEFT_PLAN_TTFT].rank, 3);
    json_decref(r);
    /* gaps 0.50 and 0.55 with noise 0.05 (margin 0.10): both lead */
    r = result(0.5, 0.05, 0.45, 0.02, 0, NULL);
    assert_int_equal(weft_plan_rank(r, k, &err), WEFT_OK);
    assert_true(k[WEFT_PLAN_DECODE].leads && k[WEFT_PLAN_PREFILL].leads);
    json_decref(r);
    /* prefill further: prefill leads */
    r = result(0.9, 0.01, 0.2, 0.01, 0, NULL);
    assert_int_equal(weft_plan_rank(r, k, &err), WEFT_OK);
    assert_true(k[WEFT_PLAN_PREFILL].leads && !k[WEFT_PLAN_DECODE].leads);
    json_decref(r);
    /* nothing to plan against */
    r = result(0, 0, 0, 0, 0.5, NULL);
    assert_int_equal(weft_plan_rank(r, k, &err), WEFT_ERR_INVALID);
    json_decref(r);
}

static void test_amdahl_arithmetic(void **state) {
    (void)state;
    double smax, k;
    /* Amdahl's law: a 95% parallel/accelerated share can give at most 20x */
    weft_plan_amdahl(0.95, 2, &smax, &k);
    assert_true(fabs(smax - 20) < 1e-9);
    /* half the time, 1.5x overall: the kernel must be 0.5 / (1/1.5 - 0.5) = 3x faster */
    weft_plan_amdahl(0.5, 1.5, &smax, &k);
    assert_true(fabs(smax - 2) < 1e-12);
    assert_true(fabs(k - 3) < 1e-9);
    /* 80%, 2x overall: 0.8 / (0.5 - 0.2) = 8/3 */
    weft_plan_amdahl(0.8, 2, &smax, &k);
    assert_true(fabs(k - 8.0 / 3.0) < 1e-9);
    /* at or past s_max: impossible */
    weft_plan_amdahl(0.5, 2, &smax, &k);
    assert_true(isinf(k));
    weft_plan_amdahl(0.5, 2.5, &smax, &k);
    assert_true(isinf(k));
}

static const char bench_profile[] =
    "decode: /m (cpu, 1 thread), prompt 16, gen 256, max_model_len 512, 5 repeats after warm-up\n"
    "  tokens/s   median 1000.0  (min 990.0, max 1010.0)\n"
    "  time per op class (all timed repeats, prefill included):\n"
    "    linear           50.000 ms   50.0%  1000 calls\n"
    "    attention        30.000 ms   30.0%  500 calls\n"
    "    rmsnorm          15.000 ms   15.0%  1000 calls\n"
    "    lm_head           5.000 ms    5.0%  100 calls\n";

static void test_profile_parse(void **state) {
    (void)state;
    weft_plan_profile p;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_plan_profile_parse(bench_profile, strlen(bench_profile), "p", &p, &err),
                     WEFT_OK);
    assert_int_equal(p.n, 4);
    assert_string_equal(p.names[1], "attention");
    assert_true(fabs(p.total - 0.1) < 1e-12);
    const char *j = "{\"classes\": {\"linear\": 0.5, \"attention\": 0.25}}";
    assert_int_equal(weft_plan_profile_parse(j, strlen(j), "p", &p, &err), WEFT_OK);
    assert_true(fabs(p.total - 0.75) < 1e-12 && p.n == 2);
    const char *bad = "{\"classes\": {\"linear\": -1}}";
    assert_int_equal(weft_plan_profile_parse(bad, strlen(bad), "p", &p, &err), WEFT_ERR_FORMAT);
    assert_int_equal(weft_plan_profile_parse("nothing\n", 8, "p", &p, &err), WEFT_ERR_FORMAT);
}

static void test_good_plan_accepted(void **state) {
    (void)state;
    char rules[512];
    json_t *r = result(0.3, 0.01, 0.6, 0.01, 0.5, NULL);
    json_t *rev = review(r,
                         "format: 1\n"
                         "levers:\n"
                         "  - name: paged\n"
                         "    technique: kv.paged\n"
                         "    kpis: [decode]\n"
                         "    forecast: {low: 1.2, expected: 1.5, high: 1.8}\n"
                         "  - name: chunked\n"
                         "    technique: sched.chunked-prefill\n"
                         "    kpis: [prefill, ttft]\n"
                         "    forecast: {low: 1.05, expected: 1.2, high: 1.4}\n",
                         NULL, rules, sizeof(rules));
    assert_string_equal(rules, "");
    assert_true(accepted(rev));
    json_decref(rev);
    json_decref(r);
}

static void test_refuse_stop(void **state) {
    (void)state;
    char rules[512];
    json_t *r = result(0.3, 0.01, 0.99, 0.01, 0, NULL);
    json_t *rev = review(r, "stop: true\n", NULL, rules, sizeof(rules));
    assert_false(accepted(rev));
    assert_string_equal(rules, "stop,");
    json_decref(rev);
    /* an empty plan is a stop too */
    rev = review(r, "levers: []\n", NULL, rules, sizeof(rules));
    assert_string_equal(rules, "stop,");
    json_decref(rev);
    json_decref(r);
    /* both within noise of their limits: stopping is allowed */
    r = result(0.995, 0.01, 0.985, 0.01, 0, NULL);
    rev = review(r, "stop: true\n", NULL, rules, sizeof(rules));
    assert_true(accepted(rev));
    json_decref(rev);
    json_decref(r);
}

static void test_refuse_unanswered(void **state) {
    (void)state;
    char rules[512];
    json_t *r = result(0.3, 0.01, 0.6, 0.01, 0, NULL);
    json_t *rev = review(r,
                         "levers:\n"
                         "  - name: q8\n"
                         "    technique: quant.q8\n"
                         "    kpis: [decode]\n"
                         "    forecast: {low: 1.2, expected: 1.5, high: 1.8}\n",
                         NULL, rules, sizeof(rules));
    assert_false(accepted(rev));
    assert_string_equal(rules, "unanswered,");
    assert_true(contains(rev, "prefill is at 0.600 of its limit"));
    json_decref(rev);
    json_decref(r);
}

static void test_refuse_noise(void **state) {
    (void)state;
    char rules[512];
    /* decode noise 0.03 -> margin 0.06: an expected 1.05x is within it */
    json_t *r = result(0.5, 0.03, 0.995, 0.01, 0, NULL);
    json_t *rev = review(r,
                         "levers:\n"
                         "  - name: tweak\n"
                         "    change: unroll the rmsnorm loop\n"
                         "    kpis: decode\n"
                         "    forecast: {low: 1.0, expected: 1.05, high: 1.1}\n",
                         NULL, rules, sizeof(rules));
    assert_false(accepted(rev));
    assert_string_equal(rules, "noise,");
    json_decref(rev);
    json_decref(r);
}

static void test_refuse_ttft_alone(void **state) {
    (void)state;
    char rules[512];
    json_t *r = result(0.995, 0.01, 0.996, 0.01, 0.2, NULL);
    json_t *rev = review(r,
                         "levers:\n"
                         "  - name: warm\n"
                         "    change: pre-warm the first bucket\n"
                         "    kpis: [ttft]\n"
                         "    forecast: {low: 1.5, expected: 2, high: 3}\n",
                         NULL, rules, sizeof(rules));
    assert_false(accepted(rev));
    assert_string_equal(rules, "ttft_alone,");
    json_decref(rev);
    json_decref(r);
}

static void test_refuse_past_limit(void **state) {
    (void)state;
    char rules[512];
    json_t *r = result(0.8, 0.01, 0.995, 0.01, 0, NULL);
    json_t *rev = review(r,
                         "levers:\n"
                         "  - name: magic\n"
                         "    technique: fuse.all\n"
                         "    kpis: [decode]\n"
                         "    forecast: {low: 1.1, expected: 1.2, high: 1.5}\n",
                         NULL, rules, sizeof(rules));
    assert_false(accepted(rev));
    assert_string_equal(rules, "limit,");
    json_decref(rev);
    json_decref(r);
}

static void test_amdahl_gate(void **state) {
    (void)state;
    char rules[512];
    weft_plan_profile p;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_plan_profile_parse(bench_profile, strlen(bench_profile), "p", &p, &err),
                     WEFT_OK);
    json_t *r = result(0.3, 0.01, 0.995, 0.01, 0, NULL);
    /* attention is f = 0.3 of the time: s_max = 1/0.7 = 1.4286; 1.5x is impossible */
    const char *too_much = "levers:\n"
                           "  - name: flash\n"
                           "    technique: attn.flash\n"
                           "    kpis: [decode]\n"
                           "    kernel: {hotspot: attention}\n"
                           "    forecast: {low: 1.2, expected: 1.5, high: 1.6}\n";
    json_t *rev = review(r, too_much, &p, rules, sizeof(rules));
    assert_false(accepted(rev));
    assert_string_equal(rules, "amdahl,");
    assert_true(contains(rev, "S_max = 1/(1-f) = 1.429x"));
    json_decref(rev);
    /* 1.2x of it needs the kernel 0.3 / (1/1.2 - 0.7) = 2.25x faster: allowed, arithmetic kept */
    rev = review(r,
                 "levers:\n"
                 "  - name: flash\n"
                 "    technique: attn.flash\n"
                 "    kpis: [decode]\n"
                 "    kernel: {hotspot: [attention]}\n"
                 "    forecast: {low: 1.1, expected: 1.2, high: 1.3}\n",
                 &p, rules, sizeof(rules));
    assert_string_equal(rules, "");
    json_t *am = json_object_get(json_array_get(json_object_get(rev, "levers"), 0), "amdahl");
    assert_true(fabs(json_number_value(json_object_get(am, "fraction")) - 0.3) < 1e-12);
    assert_true(fabs(json_number_value(json_object_get(am, "kernel_speedup_expected")) - 2.25) <
                1e-9);
    json_decref(rev);
    /* the high forecast alone past s_max is refused as well */
    rev = review(r,
                 "levers:\n"
                 "  - name: flash\n"
                 "    technique: attn.flash\n"
                 "    kpis: [decode]\n"
                 "    kernel: {hotspot: [attention]}\n"
                 "    forecast: {low: 1.1, expected: 1.2, high: 1.45}\n",
                 &p, rules, sizeof(rules));
    assert_string_equal(rules, "amdahl,");
    json_decref(rev);
    /* two hotspots add up: linear + rmsnorm = 0.65, s_max = 2.857 */
    rev = review(r,
                 "levers:\n"
                 "  - name: fuse\n"
                 "    technique: fuse.x\n"
                 "    kpis: [decode]\n"
                 "    kernel: {hotspot: [linear, rmsnorm]}\n"
                 "    forecast: {low: 1.5, expected: 2.0, high: 2.5}\n",
                 &p, rules, sizeof(rules));
    assert_string_equal(rules, "");
    json_decref(rev);
    /* without a profile, or with a hotspot the profile lacks: refused */
    rev = review(r, too_much, NULL, rules, sizeof(rules));
    assert_string_equal(rules, "amdahl,");
    json_decref(rev);
    rev = review(r,
                 "levers:\n"
                 "  - name: x\n"
                 "    technique: fuse.x\n"
                 "    kpis: [decode]\n"
                 "    kernel: {hotspot: softmax}\n"
                 "    forecast: {low: 1.1, expected: 1.2, high: 1.3}\n",
                 &p, rules, sizeof(rules));
    assert_string_equal(rules, "amdahl,");
    assert_true(contains(rev, "'softmax' is not an op class"));
    json_decref(rev);
    json_decref(r);
}

static void expect_bad(const char *text, const char *needle) {
    weft_error err;
    weft_error_clear(&err);
    json_t *o = NULL;
    weft_status st = weft_plan_yaml_parse(text, strlen(text), "bad.yaml", &o, &err);
    if (st == WEFT_OK) {
        json_t *r = result(0.3, 0.01, 0.3, 0.01, 0, NULL), *rev = NULL;
        st = weft_plan_review(r, o, NULL, &rev, &err);
        json_decref(rev);
        json_decref(r);
        json_decref(o);
    }
    assert_int_not_equal(st, WEFT_OK);
    if (!strstr(err.message, needle)) fail_msg("expected '%s' in '%s'", needle, err.message);
}

static void test_malformed_plans(void **state) {
    (void)state;
    expect_bad("levers:\n  - name: a\n    name: b\n", "given twice");
    expect_bad("x: &a [1, 2]\ny: *a\n", "aliases");
    expect_bad("levers: [{name: a, technique: t, kpis: [decode], forecast: {low: 1.5, "
               "expected: 1.2, high: 1.8}}]\n",
               "low <= expected <= high");
    expect_bad("levers: [{name: a, kpis: [decode], forecast: {low: 1, expected: 1.2, high: 2}}]\n",
               "technique");
    expect_bad("levers: [{name: a, technique: t, kpis: [speed], forecast: {low: 1, expected: "
               "1.2, high: 2}}]\n",
               "kpis");
    expect_bad("levers: [{name: a, technique: t, kpis: [decode], forecast: {low: 1, expected: "
               "1.2, high: 2}, colour: red}]\n",
               "unknown field");
    expect_bad("levers: [{name: a, technique: t, kpis: [decode], forecast: {low: 1, expected: "
               "1.2, high: 2}}, {name: a, technique: u, kpis: [decode], forecast: {low: 1, "
               "expected: 1.2, high: 2}}]\n",
               "already");
    expect_bad("stop: maybe\n", "stop");
    expect_bad("levers: [1\n", "line");
}

static void test_plan_check(void **state) {
    (void)state;
    json_t *before = result(0.3, 0.01, 0.6, 0.01, 0.5, "old.technique");
    json_t *after = result(0.39, 0.01, 0.6, 0.01, 0.5, "kv.paged"); /* decode x1.3 */
    json_t *plan = yaml("levers:\n"
                        "  - name: paged\n"
                        "    technique: kv.paged\n"
                        "    kpis: [decode]\n"
                        "    forecast: {low: 1.2, expected: 1.3, high: 1.4}\n"
                        "  - name: q4\n"
                        "    technique: quant.q4\n"
                        "    kpis: [decode, prefill]\n"
                        "    forecast: {low: 1.5, expected: 2, high: 2.5}\n"
                        "  - name: drop-old\n"
                        "    technique: old.technique\n"
                        "    kpis: [prefill]\n"
                        "    forecast: {low: 1.1, expected: 1.2, high: 1.3}\n"
                        "  - name: hand\n"
                        "    change: rewrite the sampler loop\n"
                        "    outcome: built\n"
                        "    kpis: [decode]\n"
                        "    forecast: {low: 1.5, expected: 1.6, high: 1.7}\n");
    json_t *chk = NULL;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_plan_check(plan, before, after, &chk, &err), WEFT_OK);
    json_t *k = json_object_get(json_object_get(chk, "kpis"), "decode");
    assert_true(fabs(json_number_value(json_object_get(k, "speedup")) - 1.3) < 1e-9);
    json_t *lv = json_object_get(chk, "levers");
    const char *want[] = {"built", "deferred", "pruned", "built"};
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(lv, i), "status")),
                            want[i]);
    json_t *m0 = json_object_get(json_object_get(json_array_get(lv, 0), "measured"), "decode");
    assert_string_equal(json_string_value(json_object_get(m0, "verdict")), "within the forecast");
    assert_non_null(json_object_get(m0, "shared")); /* "hand" is built on decode too */
    json_t *m3 = json_object_get(json_object_get(json_array_get(lv, 3), "measured"), "decode");
    assert_string_equal(json_string_value(json_object_get(m3, "verdict")), "below the forecast");
    json_t *m1 = json_object_get(json_object_get(json_array_get(lv, 1), "measured"), "decode");
    assert_non_null(strstr(json_string_value(json_object_get(m1, "verdict")), "not built"));
    json_decref(chk);
    json_decref(plan);
    json_decref(before);
    json_decref(after);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranking),           cmocka_unit_test(test_amdahl_arithmetic),
        cmocka_unit_test(test_profile_parse),     cmocka_unit_test(test_good_plan_accepted),
        cmocka_unit_test(test_refuse_stop),       cmocka_unit_test(test_refuse_unanswered),
        cmocka_unit_test(test_refuse_noise),      cmocka_unit_test(test_refuse_ttft_alone),
        cmocka_unit_test(test_refuse_past_limit), cmocka_unit_test(test_amdahl_gate),
        cmocka_unit_test(test_malformed_plans),   cmocka_unit_test(test_plan_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
