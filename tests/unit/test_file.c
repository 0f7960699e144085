/* util/file: whole-file reads on real files in a fresh temporary folder: contents byte for byte
 * (an embedded NUL, an empty file) and NUL-terminated; a file of exactly max_bytes read and
 * one byte more refused as WEFT_ERR_FORMAT naming what it should be and the bound; no bound
 * (0) for a large file; a missing file WEFT_ERR_NOT_FOUND and a folder WEFT_ERR_IO, with the
 * path in the message and the caller's source, or (source NULL) the path as the source and not
 * repeated in the message; *text NULL and *len 0 after every error. weft_file_read_json: a
 * document parsed, the bound applied, a parse error (and a duplicate key under
 * JSON_REJECT_DUPLICATES) WEFT_ERR_FORMAT naming path:line, a missing file WEFT_ERR_NOT_FOUND. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/file.h"

static char dir[64];

static void put(const char *name, const char *data, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void expect_error(const char *path, size_t max, const char *source, weft_status code,
                         const char *want_in_message) {
    char *text = (char *)"untouched";
    size_t len = 7;
    weft_error err = {.size = sizeof(err)};
    assert_int_equal(weft_file_read(path, max, "a test file", source, &text, &len, &err), code);
    printf("%s: [%s] %s\n", path, err.source, err.message);
    assert_null(text);
    assert_int_equal(len, 0);
    assert_non_null(strstr(err.message, want_in_message));
    if (source) {
        assert_string_equal(err.source, source);
        assert_non_null(strstr(err.message, path));
    } else {
        assert_string_equal(err.source, path);
        assert_null(strstr(err.message, path));
    }
}

static void test_contents(void **state) {
    (void)state;
    char path[128], *text = NULL;
    size_t len = 0;
    weft_error err = {.size = sizeof(err)};
    const char data[] = {'a', '\0', 'b', '\n', 'c'};
    put("five", data, sizeof(data), path, sizeof(path));
    assert_int_equal(weft_file_read(path, 5, "a test file", "test", &text, &len, &err), WEFT_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(text, data, 5);
    assert_int_equal(text[5], '\0');
    free(text);
    /* one byte over the bound */
    expect_error(path, 4, "test", WEFT_ERR_FORMAT, "expected a test file of at most 4 bytes");
    expect_error(path, 4, NULL, WEFT_ERR_FORMAT, "at most 4 bytes");
    put("empty", "", 0, path, sizeof(path));
    assert_int_equal(weft_file_read(path, 1, "a test file", "test", &text, &len, &err), WEFT_OK);
    assert_int_equal(len, 0);
    assert_int_equal(text[0], '\0');
    free(text);
}

static void test_unbounded(void **state) {
    (void)state;
    size_t n = 3u << 20;
    char path[128], *big = malloc(n), *text = NULL;
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i * 131 + 7);
    put("big", big, n, path, sizeof(path));
    size_t len = 0;
    weft_error err = {.size = sizeof(err)};
    assert_int_equal(weft_file_read(path, 0, "a test file", NULL, &text, &len, &err), WEFT_OK);
    assert_int_equal(len, n);
    assert_memory_equal(text, big, n);
    free(text);
    expect_error(path, n - 1, "test", WEFT_ERR_FORMAT, "found a larger file");
    free(big);
}

static void test_not_a_file(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s/missing.json", dir);
    expect_error(path, 0, "test", WEFT_ERR_NOT_FOUND, "cannot open");
    expect_error(path, 0, NULL, WEFT_ERR_NOT_FOUND, "cannot open");
    expect_error(dir, 0, "test", WEFT_ERR_IO, "expected a regular file, found a directory");
}

static void test_json(void **state) {
    (void)state;
    char path[128];
    json_t *v = NULL;
    weft_error err = {.size = sizeof(err)};
    const char *ok = "{\"a\": [1, 2]}";
    put("ok.json", ok, strlen(ok), path, sizeof(path));
    assert_int_equal(weft_file_read_json(path, 64, 0, "test", &v, &err), WEFT_OK);
    assert_int_equal(json_array_size(json_object_get(v, "a")), 2);
    json_decref(v);
    assert_int_equal(weft_file_read_json(path, 12, 0, "test", &v, &err), WEFT_ERR_FORMAT);
    assert_null(v);
    assert_non_null(strstr(err.message, "at most 12 bytes"));
    put("bad.json", "{\"a\": }", 7, path, sizeof(path));
    assert_int_equal(weft_file_read_json(path, 64, 0, "test", &v, &err), WEFT_ERR_FORMAT);
    assert_null(v);
    printf("%s\n", err.message);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, ":1:"));
    const char *dup = "{\"a\": 1, \"a\": 2}";
    put("dup.json", dup, strlen(dup), path, sizeof(path));
    assert_int_equal(weft_file_read_json(path, 64, JSON_REJECT_DUPLICATES, NULL, &v, &err),
                     WEFT_ERR_FORMAT);
    assert_string_equal(err.source, path);
    snprintf(path, sizeof(path), "%s/none.json", dir);
    assert_int_equal(weft_file_read_json(path, 64, 0, "test", &v, &err), WEFT_ERR_NOT_FOUND);
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/weft-test-file-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    const char *names[] = {"five", "empty", "big", "ok.json", "bad.json", "dup.json"};
    char path[128];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    return rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contents),
        cmocka_unit_test(test_unbounded),
        cmocka_unit_test(test_not_a_file),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
