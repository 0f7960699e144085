/* safetensors: writer -> reader round trips (single file, in memory, sharded), a table of
 * corrupted headers each refused with its own message, index validation, the 16-bit float
 * conversions against exact IEEE values, and a file written by transformers. */
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

#include "files/safetensors.h"
#include "util/error.h"

static char tmpdir[256];

static int setup(void **state) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-st-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* ---- round trip -------------------------------------------------------------------------- */
static void test_round_trip(void **state) {
    weft_error err;
    weft_error_clear(&err);
    weft_st_writer *w = weft_st_writer_new();
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[4] = {0x3f80, 0x4000, 0xbf80, 0x0000};
    int32_t c[3] = {7, -8, 9};
    int64_t sa[2] = {2, 3}, sb[1] = {4}, sc[1] = {3}, se[2] = {0, 5};
    assert_int_equal(
        weft_st_writer_add(w, "zeta.weight", WEFT_DTYPE_F32, 2, sa, a, sizeof(a), &err), WEFT_OK);
    assert_int_equal(weft_st_writer_add(w, "alpha", WEFT_DTYPE_BF16, 1, sb, b, sizeof(b), &err),
                     WEFT_OK);
    assert_int_equal(weft_st_writer_add(w, "mid", WEFT_DTYPE_I32, 1, sc, c, sizeof(c), &err),
                     WEFT_OK);
    assert_int_equal(weft_st_writer_add(w, "empty", WEFT_DTYPE_F16, 2, se, NULL, 0, &err), WEFT_OK);
    assert_int_equal(weft_st_writer_add(w, "scalar", WEFT_DTYPE_F32, 0, NULL, &a[5], 4, &err),
                     WEFT_OK);
    /* wrong byte count is refused at add time */
    assert_int_equal(weft_st_writer_add(w, "bad", WEFT_DTYPE_F32, 2, sa, a, 20, &err),
                     WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "20 bytes given"));
    const char *path = tmp_path("rt.safetensors");
    assert_int_equal(weft_st_writer_write(w, path, "{\"format\":\"pt\",\"k\":\"v\"}", &err),
                     WEFT_OK);
    weft_st_writer_free(w);

    size_t len;
    uint8_t *raw = slurp(path, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | raw[i];
    assert_int_equal((8 + hlen) % 8, 0); /* data section 8-byte aligned */
    assert_int_equal(len, 8 + hlen + 24 + 8 + 12 + 0 + 4);
    assert_int_equal(raw[8 + hlen - 1] == ' ' || raw[8 + hlen - 1] == '}', 1);

    weft_safetensors *st;
    assert_int_equal(weft_safetensors_open_file(path, &st, &err), WEFT_OK);
    assert_int_equal(weft_safetensors_count(st), 5);
    assert_string_equal(weft_safetensors_at(st, 0)->name, "alpha");
    assert_string_equal(weft_safetensors_at(st, 4)->name, "zeta.weight");
    assert_string_equal(weft_safetensors_metadata(st, "k"), "v");
    assert_string_equal(weft_safetensors_metadata(st, "format"), "pt");
    assert_null(weft_safetensors_metadata(st, "missing"));
    const weft_st_tensor *t = weft_safetensors_find(st, "zeta.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, WEFT_DTYPE_F32);
    assert_int_equal(t->rank, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->bytes, 24);
    assert_memory_equal(t->data, a, sizeof(a));
    t = weft_safetensors_find(st, "alpha");
    assert_memory_equal(t->data, b, sizeof(b));
    /* offsets contiguous in name order: alpha, empty, mid, scalar, zeta.weight */
    const uint8_t *base = raw ? weft_safetensors_at(st, 0)->data : NULL;
    assert_ptr_equal(weft_safetensors_find(st, "mid")->data, base + 8);
    assert_ptr_equal(weft_safetensors_find(st, "scalar")->data, base + 20);
    assert_ptr_equal(weft_safetensors_find(st, "zeta.weight")->data, base + 24);
    assert_int_equal(weft_safetensors_find(st, "scalar")->rank, 0);
    assert_int_equal(weft_safetensors_find(st, "empty")->bytes, 0);
    assert_null(weft_safetensors_find(st, "nope"));
    assert_int_equal(weft_safetensors_file_count(st), 1);
    assert_string_equal(weft_safetensors_file_path(st, 0), path);
    weft_safetensors_close(st);

    /* the same image parsed from memory */
    assert_int_equal(weft_safetensors_parse(raw, len, "mem", &st, &err), WEFT_OK);
    assert_int_equal(weft_safetensors_count(st), 5);
    assert_memory_equal(weft_safetensors_find(st, "mid")->data, c, sizeof(c));
    weft_safetensors_close(st);
    free(raw);
}

static void test_writer_duplicates(void **state) {
    weft_error err;
    weft_st_writer *w = weft_st_writer_new();
    float a = 1;
    int64_t s = 1;
    assert_int_equal(weft_st_writer_add(w, "x", WEFT_DTYPE_F32, 1, &s, &a, 4, &err), WEFT_OK);
    assert_int_equal(weft_st_writer_add(w, "x", WEFT_DTYPE_F32, 1, &s, &a, 4, &err), WEFT_OK);
    assert_int_equal(weft_st_writer_write(w, tmp_path("dup.safetensors"), NULL, &err),
                     WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "tensor 'x' added twice"));
    assert_int_equal(access(tmp_path("dup.safetensors"), F_OK), -1);
    weft_st_writer_free(w);
}

/* ---- corrupted headers ------------------------------------------------------------------- */
typedef struct bad_case {
    const char *header; /* NULL: raw bytes below */
    size_t data_len;
    const char *expect;
} bad_case;

static void check_bad(const uint8_t *img, size_t len, const char *expect) {
    weft_error err;
    weft_error_clear(&err);
    weft_safetensors *st = (weft_safetensors *)1;
    weft_status rc = weft_safetensors_parse(img, len, "x.safetensors", &st, &err);
    if (rc == WEFT_OK || !strstr(err.message, expect))
        fail_msg("expected an error containing \"%s\", got rc %d \"%s\"", expect, rc, err.message);
    assert_null(st);
}

static void test_corrupt_table(void **state) {
    static const bad_case cases[] = {
        {"[1,2]", 0, "expected a JSON object starting with '{'"},
        {"{\"a\":", 0, "header is not valid JSON"},
        {"{\"a\":1,\"a\":2}", 0, "header is not valid JSON"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[5,6],\"data_offsets\":[0,100]}}", 100,
         "x.safetensors: tensor 'x': data_offsets [0, 100] but F32 [5, 6] needs 120 bytes"},
        {"{\"x\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensor 'x': unknown dtype 'F12'"},
        {"{\"x\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensor 'x': dtype: expected a string"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
         "tensor 'x': shape[0]: expected a non-negative integer"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
         "shape[0]: expected a non-negative integer"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4,
         "shape: expected a list of integers"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
         "\"data_offsets\":[0,4]}}",
         4, "overflows 64-bit byte counts"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         "shape has 5 dimensions, at most 4 supported"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
         "data_offsets: expected [begin, end]"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
         "data_offsets: expected [begin, end]"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
         "data_offsets [4, 0]: end before begin"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
         "data_offsets [0, 8] run past the data section of 4 bytes"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "tensor 'y': data_offsets [4, 8] overlap tensor 'x' at [0, 8]"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
         16, "overlap tensor 'x' at [0, 16]"},
        {"{\"x\":[1]}", 0, "tensor 'x': expected an object with dtype, shape and data_offsets"},
        {"{\"__metadata__\":{\"a\":1}}", 0, "__metadata__: key 'a': expected a string value"},
        {"{\"__metadata__\":[\"a\"]}", 0, "__metadata__: expected an object of strings"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t hl = strlen(cases[i].header), len = 8 + hl + cases[i].data_len;
        uint8_t *img = calloc(1, len);
        for (int k = 0; k < 8; k++)
            img[k] = (uint8_t)((uint64_t)hl >> (8 * k));
        memcpy(img + 8, cases[i].header, hl);
        check_bad(img, len, cases[i].expect);
        free(img);
    }
    /* Lengths that lie. */
    uint8_t small[5] = {1, 0, 0, 0, 0};
    check_bad(small, sizeof(small), "truncated: 5 bytes");
    uint8_t huge[16] = {0x00, 0xe2, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100,000,256 */
    check_bad(huge, sizeof(huge), "exceeds the limit of 100000000 bytes");
    uint8_t past[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    check_bad(past, sizeof(past), "header length 200 but only 8 bytes follow it");
    uint8_t max[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    check_bad(max, sizeof(max), "exceeds the limit");

    /* A valid file cut short: its last tensor runs past the end. */
    weft_error err;
    weft_st_writer *w = weft_st_writer_new();
    float v[4] = {1, 2, 3, 4};
    int64_t s = 4;
    assert_int_equal(weft_st_writer_add(w, "v", WEFT_DTYPE_F32, 1, &s, v, sizeof(v), &err), 0);
    const char *path = tmp_path("cut.safetensors");
    assert_int_equal(weft_st_writer_write(w, path, NULL, &err), WEFT_OK);
    weft_st_writer_free(w);
    size_t len;
    uint8_t *raw = slurp(path, &len);
    spit(path, raw, len - 3);
    weft_safetensors *st;
    assert_int_equal(weft_safetensors_open_file(path, &st, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "cut.safetensors: tensor 'v': data_offsets [0, 16] run "
                                        "past the data section of 13 bytes"));
    spit(path, raw, 3);
    assert_int_equal(weft_safetensors_open_file(path, &st, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "truncated: 3 bytes"));
    free(raw);
    assert_int_equal(weft_safetensors_open_file(tmp_path("absent"), &st, &err), WEFT_ERR_NOT_FOUND);
}

/* Empty tensors may share offsets; gaps between tensors are tolerated. */
static void test_lenient_cases(void **state) {
    const char *h = "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
                    "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}  ";
    size_t hl = strlen(h);
    uint8_t img[256] = {0};
    img[0] = (uint8_t)hl;
    memcpy(img + 8, h, hl);
    weft_safetensors *st;
    weft_error err;
    assert_int_equal(weft_safetensors_parse(img, 8 + hl + 8, "ok", &st, &err), WEFT_OK);
    assert_int_equal(weft_safetensors_count(st), 3);
    assert_int_equal(weft_safetensors_find(st, "y")->dtype, WEFT_DTYPE_U8);
    weft_safetensors_close(st);
}

/* ---- sharded ----------------------------------------------------------------------------- */
static void write_shard(const char *file, const char *const *names, size_t n) {
    weft_error err;
    weft_st_writer *w = weft_st_writer_new();
    for (size_t i = 0; i < n; i++) {
        float v[2] = {(float)i, (float)(i + 1)};
        int64_t s = 2;
        assert_int_equal(weft_st_writer_add(w, names[i], WEFT_DTYPE_F32, 1, &s, v, 8, &err), 0);
    }
    assert_int_equal(weft_st_writer_write(w, tmp_path(file), NULL, &err), WEFT_OK);
    weft_st_writer_free(w);
}

static void write_index(const char *map) {
    char text[1024];
    snprintf(text, sizeof(text), "{\"metadata\":{\"total_size\":32},\"weight_map\":{%s}}", map);
    spit(tmp_path("model.safetensors.index.json"), text, strlen(text));
}

static void expect_dir_error(const char *map, const char *expect) {
    write_index(map);
    weft_safetensors *st = NULL;
    weft_error err;
    weft_error_clear(&err);
    weft_status rc = weft_safetensors_open_dir(tmpdir, &st, &err);
    if (rc == WEFT_OK || !strstr(err.message, expect))
        fail_msg("index {%s}: expected \"%s\", got rc %d \"%s\"", map, expect, rc, err.message);
}

static void test_sharded(void **state) {
    static const char *const s1[] = {"a", "b"}, *const s2[] = {"c", "d"};
    write_shard("s-1.safetensors", s1, 2);
    write_shard("s-2.safetensors", s2, 2);
    const char *good = "\"a\":\"s-1.safetensors\",\"b\":\"s-1.safetensors\","
                       "\"c\":\"s-2.safetensors\",\"d\":\"s-2.safetensors\"";
    write_index(good);
    weft_safetensors *st;
    weft_error err;
    assert_int_equal(weft_safetensors_open_dir(tmpdir, &st, &err), WEFT_OK);
    assert_int_equal(weft_safetensors_count(st), 4);
    assert_int_equal(weft_safetensors_file_count(st), 2);
    const weft_st_tensor *d = weft_safetensors_find(st, "d");
    assert_non_null(d);
    assert_int_equal(d->file, 1);
    assert_non_null(strstr(weft_safetensors_file_path(st, d->file), "s-2.safetensors"));
    float v[2];
    memcpy(v, d->data, 8);
    assert_true(v[0] == 1.0f && v[1] == 2.0f);
    weft_safetensors_close(st);

    expect_dir_error(
        "\"a\":\"s-1.safetensors\",\"b\":\"s-1.safetensors\","
        "\"c\":\"s-2.safetensors\",\"d\":\"s-2.safetensors\",\"e\":\"s-2.safetensors\"",
        "weight_map maps tensor 'e' to s-2.safetensors, which has no such tensor");
    expect_dir_error("\"a\":\"s-1.safetensors\",\"b\":\"s-2.safetensors\","
                     "\"c\":\"s-2.safetensors\",\"d\":\"s-2.safetensors\"",
                     "weight_map maps tensor 'b' to s-2.safetensors, but it is in s-1.safetensors");
    expect_dir_error("\"a\":\"s-1.safetensors\",\"b\":\"s-1.safetensors\","
                     "\"c\":\"s-2.safetensors\"",
                     "tensor 'd' of");
    expect_dir_error("\"a\":\"../s-1.safetensors\"", "expected a file name inside the model");
    expect_dir_error("\"a\":\"/etc/passwd\"", "expected a file name inside the model");
    expect_dir_error("\"a\":\"..\"", "expected a file name inside the model");
    expect_dir_error("\"a\":3", "got a non-string");
    expect_dir_error("", "weight_map: expected a non-empty object");
    expect_dir_error("\"a\":\"s-1.safetensors\",\"a\":\"s-1.safetensors\"", "not valid JSON");
    expect_dir_error("\"a\":\"missing.safetensors\"", "missing.safetensors: cannot open");
    /* the same tensor in two shards */
    static const char *const s3[] = {"a"};
    write_shard("s-3.safetensors", s3, 1);
    expect_dir_error("\"a\":\"s-1.safetensors\",\"b\":\"s-1.safetensors\","
                     "\"c\":\"s-2.safetensors\",\"d\":\"s-3.safetensors\"",
                     "tensor 'a' appears in both");
    remove(tmp_path("model.safetensors.index.json"));
    assert_int_equal(weft_safetensors_open_dir(tmpdir, &st, &err), WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no model.safetensors"));
}

/* ---- 16-bit floats ----------------------------------------------------------------------- */
static float f_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void test_half_conversions(void **state) {
    /* bf16: exact values and ties to even */
    assert_int_equal(weft_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(weft_f32_to_bf16(-2.0f), 0xc000);
    assert_int_equal(weft_f32_to_bf16(f_of(0x3f808000)), 0x3f80); /* tie, even stays */
    assert_int_equal(weft_f32_to_bf16(f_of(0x3f818000)), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(weft_f32_to_bf16(f_of(0x3f808001)), 0x3f81); /* above half */
    assert_int_equal(weft_f32_to_bf16(f_of(0x7f7fffff)), 0x7f80); /* max float -> inf */
    assert_int_equal(weft_f32_to_bf16(f_of(0x7f800000)), 0x7f80);
    assert_int_equal(weft_f32_to_bf16(f_of(0xff800000)), 0xff80);
    uint16_t nan = weft_f32_to_bf16(f_of(0x7f800001)); /* payload only in dropped bits */
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
    assert_true(weft_bf16_to_f32(0x3fc0) == 1.5f);
    /* f16 */
    assert_int_equal(weft_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(weft_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(weft_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(weft_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(weft_f32_to_f16(65520.0f), 0x7c00); /* tie above max rounds to inf */
    assert_int_equal(weft_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(weft_f32_to_f16(f_of(0x33800000)), 0x0001); /* 2^-24 */
    assert_int_equal(weft_f32_to_f16(f_of(0x33000000)), 0x0000); /* 2^-25: tie to even 0 */
    assert_int_equal(weft_f32_to_f16(f_of(0x33000001)), 0x0001); /* just above the tie */
    assert_int_equal(weft_f32_to_f16(f_of(0x33c00000)), 0x0002); /* 1.5 * 2^-24: tie -> 2 */
    assert_int_equal(weft_f32_to_f16(f_of(0x387fe000)), 0x0400); /* rounds up to min normal */
    assert_int_equal(weft_f32_to_f16(f_of(0x3f801000)), 0x3c00); /* 1 + 2^-11: tie, even */
    assert_int_equal(weft_f32_to_f16(f_of(0x3f803000)), 0x3c02); /* 1 + 3*2^-11: tie, odd */
    assert_int_equal(weft_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(weft_f32_to_f16(f_of(0x7f800000)), 0x7c00);
    uint16_t hn = weft_f32_to_f16(f_of(0x7f800001));
    assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);
    assert_true(weft_f16_to_f32(0x0001) == f_of(0x33800000));
    assert_true(weft_f16_to_f32(0x03ff) == f_of(0x387fc000));
    assert_true(weft_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(weft_f16_to_f32(0xfc00) == f_of(0xff800000));
    /* every 16-bit value survives the trip through f32 */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = weft_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(f != f);
            continue;
        }
        assert_int_equal(weft_f32_to_f16(f), h);
        float g = weft_bf16_to_f32((uint16_t)h);
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
        assert_int_equal(weft_f32_to_bf16(g), h);
    }
}

static void test_dtype_helpers(void **state) {
    assert_int_equal(weft_dtype_from_name("BF16"), WEFT_DTYPE_BF16);
    assert_int_equal(weft_dtype_from_name("F8_E4M3"), WEFT_DTYPE_F8_E4M3);
    assert_int_equal(weft_dtype_from_name("bf16"), WEFT_DTYPE_INVALID);
    assert_string_equal(weft_dtype_name(WEFT_DTYPE_I16), "I16");
    assert_int_equal(weft_dtype_size(WEFT_DTYPE_F64), 8);
    assert_int_equal(weft_dtype_size(WEFT_DTYPE_Q4_K), 0);
    int64_t s[2] = {3, 5}, big[2] = {INT64_MAX, 2};
    assert_int_equal(weft_dtype_bytes(WEFT_DTYPE_BF16, 2, s), 30);
    assert_int_equal(weft_dtype_bytes(WEFT_DTYPE_F32, 2, big), 0);
}

/* A file written by transformers (safetensors' own writer), not by us. */
static void test_reference_file(void **state) {
    const char *shared = getenv("WEFT_SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/reference/tiny-qwen3/model.safetensors",
             shared ? shared : WEFT_SHARED_DIR);
    weft_safetensors *st;
    weft_error err;
    assert_int_equal(weft_safetensors_open_file(path, &st, &err), WEFT_OK);
    /* 2 layers x (q,k,v,o, q_norm, k_norm, gate, up, down, 2 norms) + embed, norm, lm_head */
    assert_int_equal(weft_safetensors_count(st), 25);
    const weft_st_tensor *q = weft_safetensors_find(st, "model.layers.1.self_attn.q_proj.weight");
    assert_non_null(q);
    assert_int_equal(q->dtype, WEFT_DTYPE_F32);
    assert_int_equal(q->shape[0], 512); /* 4 heads x head_dim 128 */
    assert_int_equal(q->shape[1], 256);
    assert_int_equal(weft_safetensors_find(st, "model.layers.0.self_attn.k_norm.weight")->shape[0],
                     128);
    weft_safetensors_close(st);
    snprintf(path, sizeof(path), "%s/reference/tiny-qwen3", shared ? shared : WEFT_SHARED_DIR);
    assert_int_equal(weft_safetensors_open_dir(path, &st, &err), WEFT_OK);
    assert_non_null(weft_safetensors_find(st, "lm_head.weight"));
    weft_safetensors_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_writer_duplicates),
        cmocka_unit_test(test_corrupt_table), cmocka_unit_test(test_lenient_cases),
        cmocka_unit_test(test_sharded),       cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_dtype_helpers), cmocka_unit_test(test_reference_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
