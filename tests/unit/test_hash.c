/* util/hash: SHA-256 against the FIPS 180-2 vectors and sha256sum, XXH3-128 against the
 * python-xxhash package (values printed by `python -c "import xxhash; ..."`), the fd variant
 * leaving the file position alone, and the on-disk cache: a second call hits, a rewrite (new
 * size or mtime) misses, and a poisoned entry for another identity is not trusted. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/error.h"
#include "util/hash.h"

static char tmpdir[256];

static int setup(void **state) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-hash-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    char cache[300];
    snprintf(cache, sizeof(cache), "%s/cache", tmpdir);
    setenv("WEFT_CACHE", cache, 1);
    return 0;
}

static int teardown(void **state) {
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void test_sha256_vectors(void **state) {
    char hex[WEFT_SHA256_HEX_LEN + 1];
    weft_hash_sha256_buf("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    weft_hash_sha256_buf("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    weft_hash_sha256_buf(two, strlen(two), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_sha256_file_and_fd(void **state) {
    /* 3,000,000 zero bytes: several 1 MiB reads; value from `head -c 3000000 /dev/zero |
     * sha256sum`. */
    char path[300], hex[WEFT_SHA256_HEX_LEN + 1];
    snprintf(path, sizeof(path), "%s/zeros", tmpdir);
    char *zeros = calloc(1, 3000000);
    assert_non_null(zeros);
    write_file(path, zeros, 3000000);
    free(zeros);
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_hash_sha256_file(path, hex, &err), WEFT_OK);
    assert_string_equal(hex, "35bce4eae54ec8e6cc2868baa8d157914d6ae2858811b4cc0c078c94460fa26f");
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(lseek(fd, 12345, SEEK_SET), 12345);
    assert_int_equal(weft_hash_sha256_fd(fd, path, hex, &err), WEFT_OK);
    assert_string_equal(hex, "35bce4eae54ec8e6cc2868baa8d157914d6ae2858811b4cc0c078c94460fa26f");
    assert_int_equal(lseek(fd, 0, SEEK_CUR), 12345); /* pread: position untouched */
    close(fd);
    snprintf(path, sizeof(path), "%s/absent", tmpdir);
    assert_int_equal(weft_hash_sha256_file(path, hex, &err), WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "cannot open"));
    assert_string_equal(err.source, path);
}

static void test_xxh3_128(void **state) {
    char hex[WEFT_XXH128_HEX_LEN + 1];
    weft_hash_xxh3_128_hex("", 0, hex);
    assert_string_equal(hex, "99aa06d3014798d86001c324468d497f");
    weft_hash_xxh3_128_hex("abc", 3, hex);
    assert_string_equal(hex, "06b05ab6733a618578af5f94892f3950");
    unsigned char buf[256 * 40];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i % 256);
    weft_hash_xxh3_128_hex(buf, sizeof(buf), hex);
    assert_string_equal(hex, "1cb22534d0d96975c03d2231ab9348f3");
}

static void test_is_hex(void **state) {
    assert_true(weft_hash_is_hex("0123456789abcdef", 16));
    assert_false(weft_hash_is_hex("0123456789ABCDEF", 16));
    assert_false(weft_hash_is_hex("0123", 16));
    assert_false(weft_hash_is_hex(NULL, 0));
}

static void test_cache(void **state) {
    char path[300], hex[WEFT_SHA256_HEX_LEN + 1], dir[512];
    snprintf(path, sizeof(path), "%s/model.safetensors", tmpdir);
    write_file(path, "abc", 3);
    weft_error err;
    weft_error_clear(&err);
    int hit = -1;
    assert_int_equal(weft_hash_sha256_file_cached(path, hex, &hit, &err), WEFT_OK);
    assert_int_equal(hit, 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_int_equal(weft_hash_sha256_file_cached(path, hex, &hit, &err), WEFT_OK);
    assert_int_equal(hit, 1);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* the entry lives where the documentation says */
    assert_int_equal(weft_hash_cache_dir(dir, sizeof(dir)), 0);
    char want[400];
    snprintf(want, sizeof(want), "%s/cache/hashes", tmpdir);
    assert_string_equal(dir, want);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);

    /* Same size, different content and mtime: the identity changed, so a miss. */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 123}};
    write_file(path, "xyz", 3);
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
    assert_int_equal(weft_hash_sha256_file_cached(path, hex, &hit, &err), WEFT_OK);
    assert_int_equal(hit, 0);
    char direct[WEFT_SHA256_HEX_LEN + 1];
    weft_hash_sha256_buf("xyz", 3, direct);
    assert_string_equal(hex, direct);
    assert_int_equal(weft_hash_sha256_file_cached(path, hex, &hit, &err), WEFT_OK);
    assert_int_equal(hit, 1);

    /* A cache entry claiming another inode is ignored. */
    char key[WEFT_XXH128_HEX_LEN + 1], abs[300], entry[600];
    assert_non_null(realpath(path, abs));
    weft_hash_xxh3_128_hex(abs, strlen(abs), key);
    snprintf(entry, sizeof(entry), "%s/%s", dir, key);
    FILE *f = fopen(entry, "w");
    assert_non_null(f);
    fprintf(f, "weft-hash-cache 1\n1 2 3 4\n%s\n%s\n",
            "0000000000000000000000000000000000000000000000000000000000000000", abs);
    fclose(f);
    assert_int_equal(weft_hash_sha256_file_cached(path, hex, &hit, &err), WEFT_OK);
    assert_int_equal(hit, 0);
    assert_string_equal(hex, direct);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors), cmocka_unit_test(test_sha256_file_and_fd),
        cmocka_unit_test(test_xxh3_128),       cmocka_unit_test(test_is_hex),
        cmocka_unit_test(test_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
