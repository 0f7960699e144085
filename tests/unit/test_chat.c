/* Chat templates against Jinja2: every record in tests/data/chat (JSON lines) was rendered by
 * Jinja2 in transformers' environment (tools/scripts/chat_refs.py) and must come out byte for
 * byte the same here, or fail where Jinja2 failed. Also checks error positions, the
 * resource limits and template loading. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the headers above first */
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_read.h"
#include "text/chat.h"

static const char *shared_dir(void) {
    const char *d = getenv("WEFT_SHARED_DIR");
    return d && *d ? d : WEFT_SHARED_DIR;
}

/* Prints where two renders first differ. */
static void show_diff(const char *what, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    printf("MISMATCH %s at byte %zu\n  want: %.*s|%.60s\n  got:  %.*s|%.60s\n", what, i,
           (int)(i - from), want + from, want + i, (int)(i - from), got + from, got + i);
}

/* Renders one record; returns 1 when it agrees with Jinja2. */
static int check_record(const char *label, const weft_chat_template *t, json_t *rec, json_t *vars) {
    json_t *msgs = json_object_get(rec, "messages"), *extra = json_object_get(rec, "extra");
    if (vars && json_is_string(extra)) extra = vars;
    char *mj = json_dumps(msgs, JSON_COMPACT | JSON_ENSURE_ASCII);
    char *ej = extra ? json_dumps(extra, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    int agp = json_is_true(json_object_get(rec, "add_generation_prompt"));
    weft_error err = {sizeof err, 0, "", ""};
    char *out = NULL;
    weft_status st = weft_chat_render(t, mj, agp, ej, &out, &err);
    json_t *want = json_object_get(rec, "expected"), *want_err = json_object_get(rec, "error");
    int ok = 1;
    if (want) {
        if (st != WEFT_OK) {
            printf("FAIL %s: Jinja2 rendered, weft failed: %s\n", label, err.message);
            ok = 0;
        } else if (strlen(out) != json_string_length(want) ||
                   strcmp(out, json_string_value(want)) != 0) {
            show_diff(label, json_string_value(want), out);
            ok = 0;
        }
    } else {
        const char *kind = json_string_value(json_object_get(want_err, "kind"));
        const char *msg = json_string_value(json_object_get(want_err, "message"));
        if (st == WEFT_OK) {
            printf("FAIL %s: Jinja2 failed (%s), weft rendered %zu bytes\n", label, msg,
                   strlen(out));
            ok = 0;
        } else if (kind && !strcmp(kind, "raise") && !strstr(err.message, msg)) {
            printf("FAIL %s: raise_exception message lost: %s\n", label, err.message);
            ok = 0;
        } else if (strstr(err.message, "chat template") == NULL &&
                   strchr(err.message, ':') == NULL) {
            printf("FAIL %s: error without a position: %s\n", label, err.message);
            ok = 0;
        }
    }
    free(out);
    free(mj);
    free(ej);
    return ok;
}

static json_t *load_jsonl(const char *rel, size_t *count) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/chat/%s", WEFT_SOURCE_DIR, rel);
    char *text = test_read_file(path, NULL);
    assert_non_null(text);
    json_t *all = json_array();
    char *line = text;
    while (*line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (*line) {
            json_error_t jerr;
            json_t *rec = json_loads(line, 0, &jerr);
            if (!rec) fail_msg("%s: %s", rel, jerr.text);
            json_array_append_new(all, rec);
        }
        if (!nl) break;
        line = nl + 1;
    }
    free(text);
    *count = json_array_size(all);
    return all;
}

/* One template per record: a parse failure must match a Jinja2 syntax error. */
static void run_template_records(const char *file, size_t min_count) {
    size_t n, bad = 0;
    json_t *all = load_jsonl(file, &n);
    assert_true(n >= min_count);
    json_t *vars = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *rec = json_array_get(all, i);
        if (json_object_get(rec, "vars")) {
            vars = json_object_get(rec, "vars");
            continue;
        }
        const char *name = json_string_value(json_object_get(rec, "name"));
        json_t *src = json_object_get(rec, "template");
        json_t *want_err = json_object_get(rec, "error");
        weft_chat_template *t = NULL;
        weft_error err = {sizeof err, 0, "", ""};
        weft_status st = weft_chat_template_parse(json_string_value(src), json_string_length(src),
                                                  name, &t, &err);
        const char *kind = want_err ? json_string_value(json_object_get(want_err, "kind")) : NULL;
        if (st != WEFT_OK) {
            if (!kind || strcmp(kind, "syntax") != 0) {
                printf("FAIL feature %s: parse error where Jinja2 parsed: %s\n", name, err.message);
                bad++;
            } else if (st != WEFT_ERR_FORMAT || strncmp(err.message, name, strlen(name)) != 0) {
                printf("FAIL feature %s: syntax error not reported as name:line:col: %s\n", name,
                       err.message);
                bad++;
            }
            continue;
        }
        if (kind && !strcmp(kind, "syntax")) {
            printf("FAIL feature %s: parsed, Jinja2 reported a syntax error\n", name);
            bad++;
        } else if (!check_record(name, t, rec, vars)) {
            bad++;
        }
        weft_chat_template_free(t);
    }
    json_decref(all);
    printf("%s: %zu records, %zu mismatches\n", file, n, bad);
    assert_int_equal(bad, 0);
}

static void test_features(void **state) {
    (void)state;
    run_template_records("features.jsonl", 100);
}

/* Random expressions and whitespace-control layouts (chat_refs.py make_generated). */
static void test_generated(void **state) {
    (void)state;
    run_template_records("generated.jsonl", 1000);
}

static void test_model_templates(void **state) {
    (void)state;
    size_t n, bad = 0, per[4] = {0};
    json_t *all = load_jsonl("cases.jsonl", &n);
    assert_true(n >= 300);
    weft_error err = {sizeof err, 0, "", ""};
    weft_chat_template *qwen = NULL, *llama[3] = {NULL, NULL, NULL};
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/qwen3-tokenizer", shared_dir());
    if (weft_chat_template_load(dir, &qwen, &err) != WEFT_OK)
        fail_msg("load %s: %s", dir, err.message);
    static const char *const names[] = {"llama3", "llama3_1", "llama3_2"};
    for (int k = 0; k < 3; k++) {
        char path[1024];
        size_t len = 0;
        snprintf(path, sizeof path, "%s/tests/data/chat/%s.jinja", WEFT_SOURCE_DIR, names[k]);
        char *src = test_read_file(path, &len);
        assert_non_null(src);
        if (weft_chat_template_parse(src, len, path, &llama[k], &err) != WEFT_OK)
            fail_msg("parse %s: %s", path, err.message);
        free(src);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *rec = json_array_get(all, i);
        const char *tn = json_string_value(json_object_get(rec, "template"));
        const weft_chat_template *t = NULL;
        int which = 0;
        if (!strcmp(tn, "qwen3")) t = qwen;
        for (int k = 0; k < 3; k++)
            if (!strcmp(tn, names[k])) {
                t = llama[k];
                which = k + 1;
            }
        assert_non_null(t);
        char label[64];
        snprintf(label, sizeof label, "case %zu (%s)", i, tn);
        if (check_record(label, t, rec, NULL))
            per[which]++;
        else
            bad++;
    }
    printf("model templates: %zu cases (qwen3 %zu, llama3 %zu, llama3.1 %zu, llama3.2 %zu agree), "
           "%zu mismatches\n",
           n, per[0], per[1], per[2], per[3], bad);
    weft_chat_template_free(qwen);
    for (int k = 0; k < 3; k++)
        weft_chat_template_free(llama[k]);
    json_decref(all);
    assert_int_equal(bad, 0);
}

/* ---- errors and limits ------------------------------------------------------------------- */
static weft_status render_src(const char *src, const char *msgs, const char *extra, char **out,
                              weft_error *err) {
    weft_chat_template *t = NULL;
    weft_status st = weft_chat_template_parse(src, strlen(src), "t.jinja", &t, err);
    if (st) return st;
    st = weft_chat_render(t, msgs ? msgs : "[]", 0, extra, out, err);
    weft_chat_template_free(t);
    return st;
}

static void test_error_positions(void **state) {
    (void)state;
    weft_error err = {sizeof err, 0, "", ""};
    char *out = NULL;
    /* syntax error on line 3, column 9 (the second '+') */
    assert_int_equal(render_src("line one\n{{ 1 }}\n{{ 1 + + }}", NULL, NULL, &out, &err),
                     WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "t.jinja:3:"));
    assert_int_equal(render_src("a\n  {% for x in y %}\n  no end", NULL, NULL, &out, &err),
                     WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "endfor"));
    /* runtime errors name the expression and where it is */
    assert_int_equal(
        render_src("ok\n\n   {{ messages[0].content.upper() }}", "[]", NULL, &out, &err),
        WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "t.jinja:3:7"));
    assert_non_null(strstr(err.message, "messages[0].content"));
    assert_int_equal(render_src("{{ raise_exception('bad role: ' ~ messages[0].role) }}",
                                "[{\"role\":\"x\"}]", NULL, &out, &err),
                     WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "raise_exception: bad role: x"));
    /* invalid UTF-8 in the template */
    assert_int_equal(render_src("ok\n\xff", NULL, NULL, &out, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "t.jinja:2:1"));
    /* bad inputs */
    assert_int_equal(render_src("x", "{\"not\": \"a list\"}", NULL, &out, &err), WEFT_ERR_INVALID);
    assert_int_equal(render_src("x", "[", NULL, &out, &err), WEFT_ERR_INVALID);
    assert_int_equal(render_src("x", "[]", "[1]", &out, &err), WEFT_ERR_INVALID);
    assert_int_equal(render_src("x", "[]", "{\"strftime_now\": \"yesterday\"}", &out, &err),
                     WEFT_ERR_INVALID);
    assert_null(out);
}

static void test_limits(void **state) {
    (void)state;
    weft_error err = {sizeof err, 0, "", ""};
    char *out = NULL;
    weft_chat_template *t = NULL;
    const char *big =
        "{% for i in range(1000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}";
    assert_int_equal(weft_chat_template_parse(big, strlen(big), "loops", &t, &err), WEFT_OK);
    weft_chat_limits lim = {0, 0, 5000};
    weft_chat_template_set_limits(t, &lim);
    assert_int_equal(weft_chat_render(t, "[]", 0, NULL, &out, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "iterations"));
    lim.max_iterations = 0;
    lim.max_output_bytes = 1000;
    weft_chat_template_set_limits(t, &lim);
    assert_int_equal(weft_chat_render(t, "[]", 0, NULL, &out, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "output"));
    weft_chat_template_free(t);

    const char *mem = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ "
                      "ns.s %}{% endfor %}";
    assert_int_equal(weft_chat_template_parse(mem, strlen(mem), "mem", &t, &err), WEFT_OK);
    weft_chat_limits lim2 = {0, 8u << 20, 0};
    weft_chat_template_set_limits(t, &lim2);
    assert_int_equal(weft_chat_render(t, "[]", 0, NULL, &out, &err), WEFT_ERR_NOMEM);
    weft_chat_template_free(t);

    /* scanning big values inside loops is bounded by the work budget (64 units per iteration) */
    const char *scan = "{% set l = range(50000)|list %}{% for i in range(100000) %}"
                       "{% if -1 in l %}{% endif %}{% endfor %}";
    assert_int_equal(weft_chat_template_parse(scan, strlen(scan), "scan", &t, &err), WEFT_OK);
    weft_chat_limits lim3 = {0, 0, 200000};
    weft_chat_template_set_limits(t, &lim3);
    assert_int_equal(weft_chat_render(t, "[]", 0, NULL, &out, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "work"));
    weft_chat_template_free(t);

    /* comparisons charge the nested elements they visit: lists that share their elements
     * make one `==` (or sort, max, `in`) visit 10^9 values; they must stop at the budget */
    const char *shared =
        "{% set a = [[[1] * 1000] * 1000] * 1000 %}{% set b = [[[1] * 1000] * 1000] * 1000 %}"
        "{{ a == b }}";
    assert_int_equal(render_src(shared, NULL, NULL, &out, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "work"));
    const char *shared_sort = "{% set a = [[[1] * 1000] * 1000] * 1000 %}"
                              "{% set b = [[[1] * 1000] * 1000] * 1000 %}{{ [a, b]|max }}";
    assert_int_equal(render_src(shared_sort, NULL, NULL, &out, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "work"));
    /* searches that almost match everywhere are linear (a quadratic one takes minutes here),
     * and the default limits let them finish: results checked against Python */
    const char *search = "{% set s = 'a' * 4000000 %}{% set t = 'a' * 2000000 ~ 'b' %}"
                         "{{ t in s }} {{ s.rfind(t) }} {{ s.count(t) }} "
                         "{{ s.strip('b' * 4000000 ~ 'a')|length }}"
                         " {{ (s ~ t).rfind(t) }} {{ (t ~ s).rsplit(t)|length }}";
    assert_int_equal(render_src(search, NULL, NULL, &out, &err), WEFT_OK);
    assert_string_equal(out, "False -1 0 0 4000000 2");
    free(out);
    out = NULL;

    /* deep nesting is refused, not a stack overflow */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++)
        deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    assert_int_equal(weft_chat_template_parse(deep, strlen(deep), "deep", &t, &err),
                     WEFT_ERR_FORMAT);
    const char *rec = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    assert_int_equal(render_src(rec, NULL, NULL, &out, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "deep"));
}

/* tests/data/chat/hostile: templates built to spend as much CPU as the limits allow (the worst
 * inputs found for each bound; weft-chat-bench times them at the default limits). Each must end
 * in a limit's error, here under smaller limits (100,000 iterations, 64 MiB) so the suite stays
 * quick; a bound that stops holding shows as a render that never ends (the ctest timeout). */
static void test_hostile(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/data/chat/hostile", WEFT_SOURCE_DIR);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int seen = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".jinja")) continue;
        char path[800];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        char *src = test_read_file(path, &n);
        assert_non_null(src);
        weft_chat_template *t = NULL;
        weft_error err = {sizeof err, 0, "", ""};
        assert_int_equal(weft_chat_template_parse(src, n, e->d_name, &t, &err), WEFT_OK);
        weft_chat_limits lim = {0, 64u << 20, 100000};
        weft_chat_template_set_limits(t, &lim);
        char *out = NULL;
        weft_status st = weft_chat_render(t, "[]", 0, NULL, &out, &err);
        printf("  %s: %s\n", e->d_name, err.message);
        if (st != WEFT_ERR_INVALID && st != WEFT_ERR_NOMEM)
            fail_msg("%s rendered (status %d) instead of stopping at a limit", e->d_name, st);
        assert_null(out);
        weft_chat_template_free(t);
        free(src);
        seen++;
    }
    closedir(d);
    assert_true(seen >= 9);
}

static void test_load(void **state) {
    (void)state;
    weft_error err = {sizeof err, 0, "", ""};
    weft_chat_template *t = NULL;
    char dir[] = "/tmp/weft_chat_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(weft_chat_template_load(dir, &t, &err), WEFT_ERR_NOT_FOUND);
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\", "
          "\"unk_token\": null}",
          f);
    fclose(f);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}{{ "
          "unk_token is defined }}\n",
          f);
    fclose(f);
    assert_int_equal(weft_chat_template_load(dir, &t, &err), WEFT_OK);
    char *out = NULL;
    assert_int_equal(
        weft_chat_render(t, "[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL, &out, &err),
        WEFT_OK);
    assert_string_equal(out, "<s>[hi]</s>False");
    free(out);
    /* extra variables override the config's */
    assert_int_equal(weft_chat_render(t, "[]", 0, "{\"bos_token\": \"B\"}", &out, &err), WEFT_OK);
    assert_string_equal(out, "B</s>False");
    free(out);
    weft_chat_template_free(t);
    unlink(path);
    /* a chat_template of another type is named (its type was read after the config was freed
     * until fuzz_modeldir found it; ASan and valgrind runs of this test watch that) */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    static const char *const bad[][2] = {{"{\"chat_template\": {\"a\": 1}}", "an object"},
                                         {"{\"chat_template\": 7}", "a scalar"}};
    for (int i = 0; i < 2; i++) {
        f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i][0], f);
        fclose(f);
        assert_int_equal(weft_chat_template_load(dir, &t, &err), WEFT_ERR_FORMAT);
        assert_null(t);
        char want[96];
        snprintf(want, sizeof want, "chat_template must be a string or a list, got %s", bad[i][1]);
        if (!strstr(err.message, want)) fail_msg("%s", err.message);
    }
    unlink(path);
    rmdir(dir);
    assert_int_equal(weft_chat_template_load(NULL, &t, &err), WEFT_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_features),        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_model_templates), cmocka_unit_test(test_error_positions),
        cmocka_unit_test(test_limits), cmocka_unit_test(test_hostile),          cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
