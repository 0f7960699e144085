/* Tests of semver parsing, precedence and ranges. The precedence chain is the one given in
 * section 11 of the semver 2.0.0 specification; range cases follow npm's documented meaning
 * of ^, ~ and x-ranges, including its rule that pre-releases only match a comparator set that
 * names the same MAJOR.MINOR.PATCH with a pre-release. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "plugin/semver.h"

static weft_semver V(const char *s) {
    weft_semver v;
    weft_error err;
    memset(&err, 0, sizeof(err));
    if (weft_semver_parse(s, &v, &err)) fail_msg("%s: %s", s, err.message);
    return v;
}

static void test_parse(void **state) {
    (void)state;
    weft_semver v = V("1.22.333-alpha.1.x-y+build.007.z");
    assert_int_equal(v.major, 1);
    assert_int_equal(v.minor, 22);
    assert_int_equal(v.patch, 333);
    assert_string_equal(v.pre, "alpha.1.x-y");
    assert_string_equal(v.build, "build.007.z"); /* leading zeros are fine in build metadata */
    char buf[WEFT_SEMVER_TEXT_MAX];
    weft_semver_format(&v, buf, sizeof(buf));
    assert_string_equal(buf, "1.22.333-alpha.1.x-y+build.007.z");
    v = V("0.0.0");
    assert_int_equal(v.major + v.minor + v.patch, 0);
    v = V("9007199254740991.0.0");
    assert_int_equal(v.major, 9007199254740991ull);

    static const char *const bad[] = {
        "",         "1",           "1.2",
        "1.2.3.4",  "01.2.3",      "1.02.3",
        "1.2.03",   "v1.2.3",      "1.2.3-",
        "1.2.3+",   "1.2.3-01",    "1.2.3-a..b",
        "1.2.3-a.", "1.2.3+a..b",  "1.2.3 ",
        " 1.2.3",   "1.2.3-é",     "1.2.-1",
        "-1.2.3",   "1.2.3-a+b+c", "9007199254740992.0.0",
        "1..3",     "a.b.c",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weft_error err;
        memset(&err, 0, sizeof(err));
        if (weft_semver_parse(bad[i], &v, &err) == WEFT_OK) fail_msg("accepted \"%s\"", bad[i]);
        assert_non_null(strstr(err.message, "expected a semver 2.0 version"));
    }
    weft_error err;
    weft_semver_parse("1.2", &v, &err);
    assert_string_equal(err.message,
                        "expected a semver 2.0 version MAJOR.MINOR.PATCH[-PRE][+BUILD] "
                        "(numbers without leading zeros), found \"1.2\"");
}

static void test_precedence(void **state) {
    (void)state;
    /* semver 2.0.0, section 11, in increasing order */
    static const char *const chain[] = {
        "1.0.0-alpha",  "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
        "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1",       "1.0.0",
        "1.0.1",        "1.1.0",         "2.0.0-0",          "2.0.0",
        "2.1.0",        "2.1.1",         "10.0.0",
    };
    size_t n = sizeof(chain) / sizeof(chain[0]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            weft_semver a = V(chain[i]), b = V(chain[j]);
            int c = weft_semver_compare(&a, &b);
            int want = i < j ? -1 : i > j ? 1 : 0;
            if (c != want) fail_msg("compare(%s, %s) = %d, want %d", chain[i], chain[j], c, want);
        }
    /* build metadata has no precedence */
    weft_semver a = V("1.0.0+a"), b = V("1.0.0+b.2");
    assert_int_equal(weft_semver_compare(&a, &b), 0);
    /* numeric identifiers compare as numbers, also past 64 bits of digits */
    a = V("1.0.0-99999999999999999999999");
    b = V("1.0.0-100000000000000000000000");
    assert_int_equal(weft_semver_compare(&a, &b), -1);
    /* numeric before alphanumeric; ASCII order for alphanumeric (uppercase first) */
    a = V("1.0.0-9");
    b = V("1.0.0-a");
    assert_int_equal(weft_semver_compare(&a, &b), -1);
    a = V("1.0.0-Z");
    b = V("1.0.0-a");
    assert_int_equal(weft_semver_compare(&a, &b), -1);
    a = V("1.0.0-alpha-2");
    b = V("1.0.0-alpha");
    assert_int_equal(weft_semver_compare(&a, &b), 1);
}

typedef struct rcase {
    const char *range;
    const char *version;
    int match;
} rcase;

static void test_ranges(void **state) {
    (void)state;
    static const rcase cases[] = {
        {"*", "0.0.0", 1},
        {"*", "99.1.2", 1},
        {"*", "1.0.0-rc.1", 0}, /* pre-releases are opted into, never matched by wildcards */
        {">=1.2.0 <2.0.0", "1.2.0", 1},
        {">=1.2.0 <2.0.0", "1.9.99", 1},
        {">=1.2.0 <2.0.0", "2.0.0", 0},
        {">=1.2.0 <2.0.0", "1.1.9", 0},
        {">=1.2.0 <2.0.0", "2.0.0-rc.1", 0},
        {">= 1.2.0  < 2.0.0", "1.5.0", 1}, /* spaces after operators */
        {"^1.2", "1.2.0", 1},
        {"^1.2", "1.99.0", 1},
        {"^1.2", "2.0.0", 0},
        {"^1.2", "1.1.9", 0},
        {"^1.2.3", "1.2.3", 1},
        {"^1.2.3", "1.2.2", 0},
        {"^0.2.3", "0.2.9", 1},
        {"^0.2.3", "0.3.0", 0},
        {"^0.0.3", "0.0.3", 1},
        {"^0.0.3", "0.0.4", 0},
        {"^0.0", "0.0.9", 1},
        {"^0.0", "0.1.0", 0},
        {"^0", "0.9.9", 1},
        {"^0", "1.0.0", 0},
        {"^1.2.3-beta.2", "1.2.3-beta.4", 1}, /* same tuple: pre-release allowed */
        {"^1.2.3-beta.2", "1.2.3-beta.1", 0},
        {"^1.2.3-beta.2", "1.2.4-beta.2", 0}, /* other tuple: pre-release refused */
        {"^1.2.3-beta.2", "1.2.4", 1},
        {"~1.2.3", "1.2.9", 1},
        {"~1.2.3", "1.3.0", 0},
        {"~1.2", "1.2.0", 1},
        {"~1.2", "1.3.0", 0},
        {"~1", "1.9.0", 1},
        {"~1", "2.0.0", 0},
        {"1.x", "1.0.0", 1},
        {"1.x", "1.7.3", 1},
        {"1.x", "2.0.0", 0},
        {"1.x", "0.9.9", 0},
        {"1.2.x", "1.2.7", 1},
        {"1.2.x", "1.3.0", 0},
        {"1.2.*", "1.2.7", 1},
        {"1", "1.4.0", 1},
        {"1.2", "1.2.5", 1},
        {"1.2", "1.3.0", 0},
        {"=1.2.3", "1.2.3", 1},
        {"=1.2.3", "1.2.4", 0},
        {"1.2.3", "1.2.3+build.5", 1}, /* build metadata is ignored */
        {"1.2.3-rc.1", "1.2.3-rc.1", 1},
        {"1.2.3-rc.1", "1.2.3", 0},
        {">1.2.3", "1.2.4", 1},
        {">1.2.3", "1.2.3", 0},
        {">1.2", "1.2.9", 0},
        {">1.2", "1.3.0", 1},
        {"<=1.2", "1.2.9", 1},
        {"<=1.2", "1.3.0", 0},
        {"<=1.2.3", "1.2.3", 1},
        {"<1.2.3", "1.2.3", 0},
        {"<1.2.3", "1.2.3-rc.1", 0}, /* no comparator names 1.2.3 with a pre-release */
        {">=1.2.3-rc.1 <1.3.0", "1.2.3-rc.2", 1},
        {">=1.2.3-rc.1 <1.3.0", "1.2.3", 1},
        {"^1 || ^3", "1.5.0", 1},
        {"^1 || ^3", "2.5.0", 0},
        {"^1 || ^3", "3.0.0", 1},
        {"<1.0.0 || >=2.0.0 <2.1", "2.0.5", 1},
        {"<1.0.0 || >=2.0.0 <2.1", "1.5.0", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        weft_semver_range r;
        weft_error err;
        memset(&err, 0, sizeof(err));
        if (weft_semver_range_parse(cases[i].range, &r, &err))
            fail_msg("range \"%s\": %s", cases[i].range, err.message);
        weft_semver v = V(cases[i].version);
        int got = weft_semver_satisfies(&r, &v);
        if (got != cases[i].match)
            fail_msg("\"%s\" vs %s: got %d, want %d", cases[i].range, cases[i].version, got,
                     cases[i].match);
    }
    weft_semver_range any;
    weft_semver_range_any(&any);
    assert_string_equal(any.text, "*");
    weft_semver v = V("3.1.4");
    assert_true(weft_semver_satisfies(&any, &v));
    weft_semver_range r;
    assert_int_equal(weft_semver_range_parse("  ^1.2  ", &r, NULL), WEFT_OK);
    assert_string_equal(r.text, "^1.2");
    assert_int_equal(r.n, 2);
    assert_int_equal(r.c[0].op, WEFT_SEMVER_GE);
    assert_int_equal(r.c[1].op, WEFT_SEMVER_LT);
    assert_int_equal(r.c[1].v.major, 2);
}

static void test_bad_ranges(void **state) {
    (void)state;
    static const struct {
        const char *range, *message;
    } bad[] = {
        {"", "expected a version range such as \">=1.2.0 <2.0.0\" or \"^1.2\", found an empty "
             "string"},
        {">=", "expected comparators like \">=1.2.0\", \"^1.2\", \"~1.2.3\", \"1.x\" or \"*\", "
               "found \">=\""},
        {"=>1.0.0", "expected comparators like \">=1.2.0\", \"^1.2\", \"~1.2.3\", \"1.x\" or "
                    "\"*\", found \"=>1.0.0\""},
        {"^^1", "expected comparators like \">=1.2.0\", \"^1.2\", \"~1.2.3\", \"1.x\" or \"*\", "
                "found \"^^1\""},
        {"1.2.3.4", "expected a version like 1.2.3, 1.2, 1.x or *, found \"1.2.3.4\""},
        {">=1.0 <2.0 foo", "expected a version like 1.2.3, 1.2, 1.x or *, found \"foo\" in "
                           "\">=1.0 <2.0 foo\""},
        {"1.x.3", "expected a version like 1.2.3, 1.2, 1.x or *, found \"1.x.3\""},
        {">*", "expected a version after the operator (\"*\" cannot be compared), found \">*\""},
        {"^1 ||", "expected a comparator on each side of \"||\", found \"^1 ||\""},
        {"|| ^1", "expected a comparator on each side of \"||\", found \"|| ^1\""},
        {"1.2-beta", "expected a version like 1.2.3, 1.2, 1.x or *, found \"1.2-beta\""},
        {"^1 ^1 ^1 ^1 ^1 ^1 ^1 ^1 ^1", "expected at most 16 comparators in a range, found \"^1\" "
                                       "in \"^1 ^1 ^1 ^1 ^1 ^1 ^1 ^1 ^1\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weft_semver_range r;
        weft_error err;
        memset(&err, 0, sizeof(err));
        if (weft_semver_range_parse(bad[i].range, &r, &err) == WEFT_OK)
            fail_msg("accepted \"%s\"", bad[i].range);
        if (strcmp(err.message, bad[i].message))
            fail_msg("\"%s\":\n  got  %s\n  want %s", bad[i].range, err.message, bad[i].message);
    }
    char longer[200];
    memset(longer, '1', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    weft_semver_range r;
    assert_int_equal(weft_semver_range_parse(longer, &r, NULL), WEFT_ERR_FORMAT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_bad_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
