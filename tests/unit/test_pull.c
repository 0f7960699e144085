/* Tests of `weft pull`: the cache naming rule; pulling stories260k from the shared mirror folder
 * into a temporary cache with hashes checked against the folder's own SHA256SUMS (one that is
 * a folder instead of a file fails the pull); resuming a truncated (and a wrong) .part;
 * refusing a corrupted mirror file; and HTTP through a real local server
 * (tests/data/sampling/pull_http_server.py, started and stopped here) as a URL mirror,
 * with a resumed Range download and a server that ignores Range, and in the hub's layout
 * (model-info API, LFS redirects with X-Linked-Etag), with 401, 404 and unreachable hosts;
 * busy answers (503, 429) and a transfer cut off halfway retried with backoff. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "files/pull.h"
#include "test_read.h"
#include "util/error.h"

#define STORIES_SIZE 1056540
#define TOK_SIZE 6227

/* ---- helpers -------------------------------------------------------------------------------- */

static char shared_models[4096];

static const char *shared_dir(void) {
    const char *s = getenv("WEFT_SHARED_DIR");
    return s && *s ? s : WEFT_SHARED_DIR;
}

static void make_tmp(char *out, size_t cap) {
    snprintf(out, cap, "/tmp/weft-test-pull-XXXXXX");
    assert_non_null(mkdtemp(out));
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void mkdirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static void write_all(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void copy_file(const char *src, const char *dst) {
    size_t n = 0;
    unsigned char *b = (unsigned char *)test_read_file(src, &n);
    assert_non_null(b);
    write_all(dst, b, n);
    free(b);
}

static int exists(const char *path) {
    struct stat sb;
    return !stat(path, &sb);
}

static void sha256_file(const char *path, char out[65]) {
    size_t n = 0;
    unsigned char *b = (unsigned char *)test_read_file(path, &n);
    assert_non_null(b);
    unsigned char md[32];
    unsigned int l = 0;
    assert_true(EVP_Digest(b, n, md, &l, EVP_sha256(), NULL));
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
    free(b);
}

/* The hash the shared mirror's own SHA256SUMS gives for stories260K/<name>. */
static void shared_sum(const char *name, char out[65]) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/stories260K/SHA256SUMS", shared_models);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    out[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strlen(line) > 66 && !strcmp(line + 66, name)) {
            memcpy(out, line, 64);
            out[64] = '\0';
        }
    }
    fclose(f);
    assert_int_equal(strlen(out), 64);
}

static json_t *record_of(const char *dir) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/.weft-pull.json", dir);
    json_t *r = json_load_file(path, 0, NULL);
    assert_non_null(r);
    return r;
}

static const char *rec_str(json_t *rec, const char *file, const char *key) {
    return json_string_value(
        json_object_get(json_object_get(json_object_get(rec, "files"), file), key));
}

static weft_status pull(const char *id, const char *mirror, const char *endpoint, int force,
                        weft_pull_stats *stats, weft_error *err) {
    weft_pull_options o;
    weft_pull_options_default(&o);
    o.id = id;
    o.mirror = mirror;
    o.endpoint = endpoint;
    o.force = force;
    o.progress = 0;
    weft_error_clear(err);
    return weft_pull_model(&o, stats, err);
}

static void check_stories(const char *dir) {
    char path[4200], got[65], want[65];
    const char *names[2] = {"stories260K.bin", "tok512.bin"};
    json_t *rec = record_of(dir);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        sha256_file(path, got);
        shared_sum(names[i], want);
        assert_string_equal(got, want);
        assert_string_equal(rec_str(rec, names[i], "sha256"), want);
        snprintf(path, sizeof(path), "%s/%s.part", dir, names[i]);
        assert_false(exists(path));
    }
    json_decref(rec);
}

/* ---- the local HTTP server ----------------------------------------------------------------- */

typedef struct server {
    pid_t pid;
    int port;
    char log[4200];
    char url[128];
} server;

static int have_python(void) {
    return system("python3 -c 'import http.server' >/dev/null 2>&1") == 0;
}

/* The running server's pid: a failed assertion leaves its test before server_stop, and a child
 * still holding the test's stdout would keep ctest waiting, so the process kills it at exit. */
static pid_t live_server;
static void kill_live_server(void) {
    if (live_server > 0) {
        kill(live_server, SIGTERM);
        waitpid(live_server, NULL, 0);
        live_server = 0;
    }
}

static void server_start(server *s, const char *root, const char *tmp) {
    kill_live_server(); /* one left by a failed test */
    char script[4200], portf[4200];
    snprintf(script, sizeof(script), "%s/tests/data/sampling/pull_http_server.py", WEFT_SOURCE_DIR);
    snprintf(portf, sizeof(portf), "%s/port", tmp);
    snprintf(s->log, sizeof(s->log), "%s/requests.log", tmp);
    s->pid = fork();
    assert_true(s->pid >= 0);
    live_server = s->pid;
    if (s->pid == 0) {
        execlp("python3", "python3", script, root, portf, s->log, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && !exists(portf); i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    char *b = test_read_file(portf, NULL);
    if (!b) fail_msg("the test HTTP server did not start (%s)", script);
    s->port = atoi(b);
    free(b);
    assert_true(s->port > 0);
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", s->port);
}

static void server_stop(server *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
        live_server = 0;
    }
}

static int log_has(const server *s, const char *needle) {
    char *b = test_read_file(s->log, NULL);
    if (!b) return 0;
    int found = strstr(b, needle) != NULL;
    free(b);
    return found;
}

static void truncate_log(const server *s) {
    write_all(s->log, "", 0);
}

/* A small hub-style model: config, tokenizer, two shards and an index, plus files a pull must
 * not take (README.md, a nested safetensors). */
static void make_model(const char *dir, int with_index) {
    char path[4200];
    mkdirs(dir);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    const char *cfg = "{\"model_type\": \"llama\", \"hidden_size\": 64}\n";
    write_all(path, cfg, strlen(cfg));
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    write_all(path, "{\"version\": \"1.0\"}", 18);
    snprintf(path, sizeof(path), "%s/README.md", dir);
    write_all(path, "# tiny\n", 7);
    unsigned char blob[70000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(blob); i++) {
        x = x * 1103515245u + 12345u;
        blob[i] = (unsigned char)(x >> 16);
    }
    if (with_index) {
        snprintf(path, sizeof(path), "%s/model-00001-of-00002.safetensors", dir);
        write_all(path, blob, 40000);
        snprintf(path, sizeof(path), "%s/model-00002-of-00002.safetensors", dir);
        write_all(path, blob + 40000, 30000);
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
        const char *idx = "{\"metadata\": {}, \"weight_map\": {\"a.weight\": "
                          "\"model-00001-of-00002.safetensors\", \"b.weight\": "
                          "\"model-00002-of-00002.safetensors\"}}";
        write_all(path, idx, strlen(idx));
    } else {
        snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        write_all(path, blob, sizeof(blob));
    }
    snprintf(path, sizeof(path), "%s/nested", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/nested/extra.safetensors", dir);
    write_all(path, blob, 100);
}

static void write_sums(const char *dir, const char *const *names, size_t n) {
    char path[4200], line[512], sums[4096] = "";
    for (size_t i = 0; i < n; i++) {
        char h[65];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        sha256_file(path, h);
        snprintf(line, sizeof(line), "%s  %s\n", h, names[i]);
        strcat(sums, line);
    }
    snprintf(path, sizeof(path), "%s/SHA256SUMS", dir);
    write_all(path, sums, strlen(sums));
}

static void assert_same_file(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = (unsigned char *)test_read_file(a, &na),
                  *y = (unsigned char *)test_read_file(b, &nb);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(na, nb);
    assert_memory_equal(x, y, na);
    free(x);
    free(y);
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* A temporary folder tmp (256 bytes) with WEFT_CACHE at tmp/cache (cache), stories260K's files in
 * root = tmp/root/stories260K/ (4200 bytes each), the local HTTP server s serving root, and dir
 * the folder a pull of the alias fills. */
static void stories_server(char *tmp, char *root, char *cache, char *dir, server *s) {
    char path[4200], src[4200];
    make_tmp(tmp, 256);
    snprintf(cache, 4200, "%s/cache", tmp);
    setenv("WEFT_CACHE", cache, 1);
    snprintf(root, 4200, "%s/root", tmp);
    snprintf(path, sizeof(path), "%s/stories260K", root);
    mkdirs(path);
    const char *names[] = {"stories260K.bin", "tok512.bin", "SHA256SUMS"};
    for (int i = 0; i < 3; i++) {
        snprintf(src, sizeof(src), "%s/stories260K/%s", shared_models, names[i]);
        snprintf(path, sizeof(path), "%s/stories260K/%s", root, names[i]);
        copy_file(src, path);
    }
    server_start(s, root, tmp);
    snprintf(dir, 4200, "%s/models/stories260k", cache);
}

static void test_cache_rule(void **state) {
    (void)state;
    char out[4096];
    weft_error err;
    weft_error_clear(&err);
    setenv("WEFT_CACHE", "/c/weft/", 1);
    assert_int_equal(weft_pull_model_dir("Qwen/Qwen3-0.6B", out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, "/c/weft/models/Qwen--Qwen3-0.6B");
    assert_int_equal(weft_pull_model_dir("stories260K", out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, "/c/weft/models/stories260k");
    assert_int_equal(weft_pull_model_dir("gpt2", out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, "/c/weft/models/gpt2");
    unsetenv("WEFT_CACHE");
    setenv("XDG_CACHE_HOME", "/x", 1);
    assert_int_equal(weft_pull_model_dir("a/b", out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, "/x/weft/models/a--b");
    unsetenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char saved[4096];
    snprintf(saved, sizeof(saved), "%s", home ? home : "");
    setenv("HOME", "/h", 1);
    assert_int_equal(weft_pull_model_dir("a/b", out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, "/h/.cache/weft/models/a--b");
    setenv("HOME", saved, 1);
    const char *bad[] = {"", "../x", "a/b/c", "a/..", "a b", "/abs", "a/", "x/.", "a\\b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(weft_pull_cache_name(bad[i], out, sizeof(out), &err), WEFT_ERR_INVALID);
        assert_non_null(strstr(err.message, "model id"));
    }
}

static void test_folder_mirror(void **state) {
    (void)state;
    char tmp[256], dir[4200];
    make_tmp(tmp, sizeof(tmp));
    setenv("WEFT_CACHE", tmp, 1);
    snprintf(dir, sizeof(dir), "%s/models/stories260k", tmp);
    weft_pull_stats st;
    weft_error err;
    /* Through the environment variable, as a user would. */
    setenv("WEFT_MODEL_MIRROR", shared_models, 1);
    if (pull("stories260k", NULL, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    unsetenv("WEFT_MODEL_MIRROR");
    assert_string_equal(st.dir, dir);
    assert_int_equal(st.files, 2);
    assert_int_equal(st.fetched, 2);
    assert_int_equal(st.bytes, STORIES_SIZE + TOK_SIZE);
    check_stories(dir);
    json_t *rec = record_of(dir);
    assert_non_null(strstr(rec_str(rec, "stories260K.bin", "verified_by"), "SHA256SUMS"));
    assert_non_null(strstr(rec_str(rec, "tok512.bin", "verified_by"), "pinned"));
    assert_string_equal(json_string_value(json_object_get(rec, "source")), "folder");
    json_decref(rec);

    /* Again: nothing to do. With --force: everything again. */
    assert_int_equal(pull("stories260k", shared_models, NULL, 0, &st, &err), WEFT_OK);
    assert_int_equal(st.skipped, 2);
    assert_int_equal(st.fetched, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(pull("stories260k", shared_models, NULL, 1, &st, &err), WEFT_OK);
    assert_int_equal(st.fetched, 2);
    check_stories(dir);
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
}

static void test_folder_resume(void **state) {
    (void)state;
    char tmp[256], dir[4200], part[4300], src[4200];
    make_tmp(tmp, sizeof(tmp));
    setenv("WEFT_CACHE", tmp, 1);
    snprintf(dir, sizeof(dir), "%s/models/stories260k", tmp);
    snprintf(part, sizeof(part), "%s/stories260K.bin.part", dir);
    snprintf(src, sizeof(src), "%s/stories260K/stories260K.bin", shared_models);
    mkdirs(dir);
    size_t n = 0;
    unsigned char *orig = (unsigned char *)test_read_file(src, &n);
    assert_non_null(orig);
    write_all(part, orig, 300000); /* an interrupted copy */
    weft_pull_stats st;
    weft_error err;
    if (pull("stories260k", shared_models, NULL, 0, &st, &err) != WEFT_OK)
        fail_msg("%s", err.message);
    assert_int_equal(st.resumed, 1);
    assert_int_equal(st.bytes, (STORIES_SIZE - 300000) + TOK_SIZE);
    check_stories(dir);

    /* A .part from something else: the resumed file fails, and is fetched again whole. */
    snprintf(src, sizeof(src), "%s/stories260K.bin", dir);
    unlink(src);
    memset(orig, 0xAA, 300000);
    write_all(part, orig, 300000);
    if (pull("stories260k", shared_models, NULL, 0, &st, &err) != WEFT_OK)
        fail_msg("%s", err.message);
    assert_int_equal(st.fetched, 1);
    assert_int_equal(st.resumed, 0);
    assert_int_equal(st.skipped, 1);
    assert_int_equal(st.bytes, (STORIES_SIZE - 300000) + STORIES_SIZE);
    check_stories(dir);
    free(orig);
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
}

static void test_corrupt_mirror(void **state) {
    (void)state;
    char tmp[256], mirror[4200], path[4200], src[4200], cache[4200];
    make_tmp(tmp, sizeof(tmp));
    snprintf(cache, sizeof(cache), "%s/cache", tmp);
    setenv("WEFT_CACHE", cache, 1);
    snprintf(mirror, sizeof(mirror), "%s/mirror", tmp);
    snprintf(path, sizeof(path), "%s/stories260K", mirror);
    mkdirs(path);
    const char *names[] = {"stories260K.bin", "tok512.bin", "SHA256SUMS"};
    for (int i = 0; i < 3; i++) {
        snprintf(src, sizeof(src), "%s/stories260K/%s", shared_models, names[i]);
        snprintf(path, sizeof(path), "%s/stories260K/%s", mirror, names[i]);
        copy_file(src, path);
    }
    snprintf(path, sizeof(path), "%s/stories260K/stories260K.bin", mirror);
    size_t n = 0;
    unsigned char *b = (unsigned char *)test_read_file(path, &n);
    assert_non_null(b);
    b[123456] ^= 0x01;
    write_all(path, b, n);
    free(b);
    weft_pull_stats st;
    weft_error err;
    assert_int_equal(pull("stories260k", mirror, NULL, 0, &st, &err), WEFT_ERR_MISMATCH);
    assert_non_null(strstr(err.message, "stories260K.bin"));
    assert_non_null(strstr(err.message, "SHA256SUMS"));
    snprintf(path, sizeof(path), "%s/models/stories260k/stories260K.bin", cache);
    assert_false(exists(path));
    strcat(path, ".part");
    assert_false(exists(path));

    /* The alias in the hub layout, without SHA256SUMS: the pinned hashes still decide. */
    char mirror2[4200];
    snprintf(mirror2, sizeof(mirror2), "%s/mirror2", tmp);
    snprintf(path, sizeof(path), "%s/karpathy/tinyllamas/stories260K", mirror2);
    mkdirs(path);
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof(src), "%s/stories260K/%s", shared_models, names[i]);
        snprintf(path, sizeof(path), "%s/karpathy/tinyllamas/stories260K/%s", mirror2, names[i]);
        copy_file(src, path);
    }
    if (pull("stories260k", mirror2, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    snprintf(path, sizeof(path), "%s/models/stories260k", cache);
    check_stories(path);
    json_t *rec2 = record_of(path);
    assert_non_null(strstr(rec_str(rec2, "tok512.bin", "verified_by"), "pinned"));
    assert_null(strstr(rec_str(rec2, "tok512.bin", "verified_by"), "SHA256SUMS"));
    json_decref(rec2);
    snprintf(path, sizeof(path), "%s/karpathy/tinyllamas/stories260K/tok512.bin", mirror2);
    b = (unsigned char *)test_read_file(path, &n);
    assert_non_null(b);
    b[0] ^= 0x01;
    write_all(path, b, n);
    free(b);
    assert_int_equal(pull("stories260k", mirror2, NULL, 1, &st, &err), WEFT_ERR_MISMATCH);
    assert_non_null(strstr(err.message, "tok512.bin"));
    assert_non_null(strstr(err.message, "pinned"));

    /* A hub-id model in a mirror folder whose only check is its SHA256SUMS. */
    snprintf(path, sizeof(path), "%s/acme--tiny", mirror);
    make_model(path, 0);
    const char *files[] = {"config.json", "tokenizer.json", "model.safetensors"};
    write_sums(path, files, 3);
    if (pull("acme/tiny", mirror, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    assert_int_equal(st.files, 3); /* no README.md, no nested file */
    snprintf(src, sizeof(src), "%s/models/acme--tiny", cache);
    json_t *rec = record_of(src);
    assert_non_null(strstr(rec_str(rec, "model.safetensors", "verified_by"), "SHA256SUMS"));
    json_decref(rec);
    snprintf(src, sizeof(src), "%s/models/acme--tiny/README.md", cache);
    assert_false(exists(src));
    snprintf(src, sizeof(src), "%s/model.safetensors", path);
    b = (unsigned char *)test_read_file(src, &n);
    assert_non_null(b);
    b[5] ^= 0x80;
    write_all(src, b, n);
    free(b);
    assert_int_equal(pull("acme/tiny", mirror, NULL, 1, &st, &err), WEFT_ERR_MISMATCH);
    assert_non_null(strstr(err.message, "model.safetensors"));
    assert_non_null(strstr(err.message, "SHA256SUMS"));
    /* A SHA256SUMS that is there but cannot be read is an error, not a check skipped. */
    snprintf(src, sizeof(src), "%s/SHA256SUMS", path);
    assert_int_equal(unlink(src), 0);
    mkdirs(src);
    assert_int_equal(pull("acme/tiny", mirror, NULL, 1, &st, &err), WEFT_ERR_IO);
    printf("SHA256SUMS a folder: %s\n", err.message);
    assert_non_null(strstr(err.message, "SHA256SUMS"));
    assert_non_null(strstr(err.message, "expected a regular file"));
    /* An id the mirror does not have. */
    assert_int_equal(pull("acme/absent", mirror, NULL, 0, &st, &err), WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "acme--absent"));
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
}

static void test_url_mirror(void **state) {
    (void)state;
    if (!have_python()) skip();
    char tmp[256], root[4200], path[4200], src[4200], cache[4200], dir[4200];
    server s = {0};
    stories_server(tmp, root, cache, dir, &s);
    weft_pull_stats st;
    weft_error err;

    if (pull("stories260k", s.url, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    assert_int_equal(st.fetched, 2);
    check_stories(dir);
    assert_true(log_has(&s, "GET /stories260K/stories260K.bin range=- status=200"));

    /* Resume with Range from a truncated .part. */
    snprintf(path, sizeof(path), "%s/stories260K.bin", dir);
    unlink(path);
    snprintf(src, sizeof(src), "%s/stories260K/stories260K.bin", root);
    size_t n = 0;
    unsigned char *orig = (unsigned char *)test_read_file(src, &n);
    assert_non_null(orig);
    strcat(path, ".part");
    write_all(path, orig, 500000);
    truncate_log(&s);
    if (pull("stories260k", s.url, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    assert_int_equal(st.resumed, 1);
    assert_int_equal(st.bytes, STORIES_SIZE - 500000);
    assert_true(log_has(&s, "GET /stories260K/stories260K.bin range=bytes=500000- status=206"));
    check_stories(dir);

    /* A server that ignores Range: the .part starts over. */
    path[strlen(path) - 5] = '\0';
    unlink(path);
    strcat(path, ".part");
    write_all(path, orig, 500000);
    char url[256];
    snprintf(url, sizeof(url), "%s/norange", s.url);
    truncate_log(&s);
    if (pull("stories260k", url, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    assert_int_equal(st.resumed, 0);
    assert_int_equal(st.fetched, 1);
    assert_int_equal(st.bytes, STORIES_SIZE);
    assert_true(log_has(&s, "range=bytes=500000- status=200"));
    check_stories(dir);
    free(orig);

    /* A hub-id model with an index and no SHA256SUMS: the shards come from the index. */
    snprintf(path, sizeof(path), "%s/acme/sharded", root);
    make_model(path, 1);
    if (pull("acme/sharded", s.url, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    assert_int_equal(st.files, 5);
    const char *got[] = {"config.json", "tokenizer.json", "model.safetensors.index.json",
                         "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (int i = 0; i < 5; i++) {
        char a[4300], c[4300];
        snprintf(a, sizeof(a), "%s/%s", path, got[i]);
        snprintf(c, sizeof(c), "%s/models/acme--sharded/%s", cache, got[i]);
        assert_same_file(a, c);
    }
    snprintf(src, sizeof(src), "%s/models/acme--sharded/README.md", cache);
    assert_false(exists(src));
    /* Unknown model: every probe is a 404. */
    assert_int_equal(pull("acme/nothing", s.url, NULL, 0, &st, &err), WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "config.json"));

    server_stop(&s);
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
}

static void test_hub_layout(void **state) {
    (void)state;
    if (!have_python()) skip();
    char tmp[256], root[4200], path[4200], cache[4200], dir[4200];
    make_tmp(tmp, sizeof(tmp));
    snprintf(cache, sizeof(cache), "%s/cache", tmp);
    setenv("WEFT_CACHE", cache, 1);
    unsetenv("HF_TOKEN");
    snprintf(root, sizeof(root), "%s/root", tmp);
    snprintf(path, sizeof(path), "%s/acme/tiny", root);
    make_model(path, 1);
    server s = {0};
    server_start(&s, root, tmp);
    weft_pull_stats st;
    weft_error err;

    weft_pull_options o;
    weft_pull_options_default(&o);
    o.id = "acme/tiny";
    o.mirror = "";
    o.endpoint = s.url;
    o.revision = "v1.0";
    o.progress = 0;
    weft_error_clear(&err);
    if (weft_pull_model(&o, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    assert_int_equal(st.files, 5);
    assert_true(log_has(&s, "GET /api/models/acme/tiny/revision/v1.0?blobs=true"));
    assert_true(log_has(&s, "GET /acme/tiny/resolve/v1.0/model-00001-of-00002.safetensors "
                            "range=- status=302"));
    assert_true(log_has(&s, "GET /cdn/acme/tiny/model-00001-of-00002.safetensors range=- "
                            "status=200"));
    snprintf(dir, sizeof(dir), "%s/models/acme--tiny", cache);
    json_t *rec = record_of(dir);
    const char *v = rec_str(rec, "model-00002-of-00002.safetensors", "verified_by");
    assert_non_null(strstr(v, "LFS"));
    assert_non_null(strstr(v, "X-Linked-Etag"));
    assert_non_null(strstr(rec_str(rec, "config.json", "verified_by"), "git blob id"));
    assert_string_equal(json_string_value(json_object_get(rec, "source")), "hub");
    assert_int_equal(strlen(json_string_value(json_object_get(rec, "commit"))), 40);
    json_decref(rec);
    for (int i = 0; i < 2; i++) {
        char a[4300], c[4300];
        const char *nm = i ? "model-00002-of-00002.safetensors" : "config.json";
        snprintf(a, sizeof(a), "%s/%s", path, nm);
        snprintf(c, sizeof(c), "%s/%s", dir, nm);
        assert_same_file(a, c);
    }

    /* An index that names a shard the repository lacks. */
    snprintf(path, sizeof(path), "%s/acme/broken", root);
    make_model(path, 1);
    snprintf(path, sizeof(path), "%s/acme/broken/model-00002-of-00002.safetensors", root);
    unlink(path);
    assert_int_equal(pull("acme/broken", "", s.url, 0, &st, &err), WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "model-00002-of-00002.safetensors"));
    /* An index that is not JSON: a format error naming the file, line and column. */
    snprintf(path, sizeof(path), "%s/acme/badjson", root);
    make_model(path, 1);
    snprintf(path, sizeof(path), "%s/acme/badjson/model.safetensors.index.json", root);
    write_all(path, "{\"weight_map\": ", 15);
    assert_int_equal(pull("acme/badjson", "", s.url, 0, &st, &err), WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "model.safetensors.index.json:1:"));

    /* 404 and 401 name the file and the URL. */
    assert_int_equal(pull("acme/nothere", "", s.url, 0, &st, &err), WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "HTTP 404"));
    assert_non_null(strstr(err.message, "/api/models/acme/nothere/revision/main"));
    char priv[256];
    snprintf(priv, sizeof(priv), "%s/private", s.url);
    assert_int_equal(pull("acme/tiny", "", priv, 0, &st, &err), WEFT_ERR_IO);
    assert_non_null(strstr(err.message, "HTTP 401"));
    assert_non_null(strstr(err.message, "the file list"));
    assert_non_null(strstr(err.message, "HF_TOKEN"));
    /* The alias through the hub layout: the file is missing there, a 404 naming it. */
    assert_int_equal(pull("stories260k", "", s.url, 0, &st, &err), WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "stories260K.bin"));
    assert_non_null(strstr(err.message, "/karpathy/tinyllamas/resolve/main/stories260K/"));

    server_stop(&s);
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
}

/* A count of the log lines that hold needle. */
static int log_count(const server *s, const char *needle) {
    size_t n = 0;
    char *text = test_read_file(s->log, &n);
    int k = 0;
    for (const char *at = text; at && (at = strstr(at, needle)); at += strlen(needle))
        k++;
    free(text);
    return k;
}

/* Busy answers (503 without Retry-After, 429 with Retry-After: 0) are retried with backoff and
 * the pull completes; past WEFT_PULL_RETRIES it fails naming the status and the retries, and the
 * .part is kept; a transfer cut off halfway resumes with Range from where the .part stands;
 * with WEFT_PULL_RETRIES=0 a busy answer fails at once; a 404 is never retried. */
static void test_retries(void **state) {
    (void)state;
    if (!have_python()) skip();
    char tmp[256], root[4200], path[4200], cache[4200], dir[4200], url[300];
    setenv("WEFT_PULL_BACKOFF_MS", "5", 1);
    server s = {0};
    stories_server(tmp, root, cache, dir, &s);
    weft_pull_stats st;
    weft_error err;

    /* two 503s for each document asked for (SHA256SUMS in two places, the two files), then the
     * documents (or a 404 for the SHA256SUMS the mirror lacks) */
    snprintf(url, sizeof(url), "%s/flaky/2", s.url);
    if (pull("stories260k", url, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    check_stories(dir);
    assert_int_equal(st.fetched, 2);
    assert_int_equal(st.retries, 8);
    assert_int_equal(log_count(&s, "GET /flaky/2/stories260K/stories260K.bin range=- status=503"),
                     2);
    assert_true(log_has(&s, "GET /flaky/2/stories260K/stories260K.bin range=- status=200"));
    rm_rf(dir);

    /* 429 with Retry-After: 0 */
    snprintf(url, sizeof(url), "%s/ratelimit/1", s.url);
    if (pull("stories260k", url, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    check_stories(dir);
    assert_int_equal(st.retries, 4);
    rm_rf(dir);

    /* more busy answers than retries: the status and the retries named, exit without the file */
    setenv("WEFT_PULL_RETRIES", "2", 1);
    snprintf(url, sizeof(url), "%s/flaky/9", s.url);
    assert_int_not_equal(pull("stories260k", url, NULL, 0, &st, &err), WEFT_OK);
    assert_non_null(strstr(err.message, "after 2 retries"));
    assert_non_null(strstr(err.message, "HTTP 503"));
    snprintf(path, sizeof(path), "%s/stories260K.bin", dir);
    assert_false(exists(path));
    rm_rf(dir);

    /* no retries at all */
    setenv("WEFT_PULL_RETRIES", "0", 1);
    truncate_log(&s);
    snprintf(url, sizeof(url), "%s/flaky/1", s.url);
    assert_int_not_equal(pull("stories260k", url, NULL, 0, &st, &err), WEFT_OK);
    assert_non_null(strstr(err.message, "HTTP 503"));
    assert_null(strstr(err.message, "retries"));
    assert_int_equal(log_count(&s, "status=503"), 1);
    unsetenv("WEFT_PULL_RETRIES");
    rm_rf(dir);

    /* a body cut off halfway: resumed with Range, the whole file verified */
    truncate_log(&s);
    snprintf(url, sizeof(url), "%s/drop", s.url);
    if (pull("stories260k", url, NULL, 0, &st, &err) != WEFT_OK) fail_msg("%s", err.message);
    check_stories(dir);
    assert_int_equal(st.resumed, 2);
    assert_int_equal(st.retries, 3); /* SHA256SUMS cut off too, fetched again whole */
    char want[200];
    snprintf(want, sizeof(want), "GET /drop/stories260K/stories260K.bin range=bytes=%d- status=206",
             STORIES_SIZE / 2);
    assert_true(log_has(&s, want));
    rm_rf(dir);

    /* a 404 is an answer, not a busy server: nothing asked for twice */
    snprintf(url, sizeof(url), "%s/nowhere", s.url);
    assert_int_equal(pull("stories260k", url, NULL, 0, &st, &err), WEFT_ERR_NOT_FOUND);
    assert_int_equal(st.retries, 0);

    server_stop(&s);
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
    unsetenv("WEFT_PULL_BACKOFF_MS");
}

static void test_unreachable(void **state) {
    (void)state;
    char tmp[256];
    make_tmp(tmp, sizeof(tmp));
    setenv("WEFT_CACHE", tmp, 1);
    weft_pull_stats st;
    weft_error err;
    /* Port 1 on the loopback: nothing listens, the connection is refused at once. */
    assert_int_equal(pull("acme/tiny", "", "http://127.0.0.1:1", 0, &st, &err), WEFT_ERR_IO);
    assert_non_null(strstr(err.message, "cannot reach 127.0.0.1: "));
    assert_non_null(strstr(err.message, "set WEFT_MODEL_MIRROR to a folder or URL"));
    assert_int_equal(pull("stories260k", "http://127.0.0.1:1/m", NULL, 0, &st, &err), WEFT_ERR_IO);
    assert_non_null(strstr(err.message, "cannot reach the mirror 127.0.0.1"));
    assert_int_equal(pull("stories260k", "/nonexistent/folder", NULL, 0, &st, &err),
                     WEFT_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "/nonexistent/folder"));
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
}

/* A pull of acme/tiny at revision rev from an endpoint where nothing listens. */
static weft_status pull_rev(const char *rev, weft_error *err) {
    weft_pull_options o;
    weft_pull_options_default(&o);
    o.id = "acme/tiny";
    o.mirror = "";
    o.endpoint = "http://127.0.0.1:1";
    o.revision = rev;
    o.progress = 0;
    weft_pull_stats st;
    weft_error_clear(err);
    return weft_pull_model(&o, &st, err);
}

/* A revision that is not a plain ref name is refused before anything is fetched, naming
 * --revision: path tricks, empty components, hidden names, other characters, and one too long
 * (which must not be cut to a different revision). Good names reach the source. */
static void test_bad_revision(void **state) {
    (void)state;
    char tmp[256], longrev[300];
    make_tmp(tmp, sizeof(tmp));
    setenv("WEFT_CACHE", tmp, 1);
    memset(longrev, 'a', 256);
    longrev[256] = '\0';
    const char *bad[] = {"..",      "../../x", "a/../b", "a..b", "/main", "main/", "a//b",
                         ".hidden", "a/.b",    "v1 0",   "a?b",  "a%2Fb", "a\\b",  longrev};
    weft_error err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pull_rev(bad[i], &err) != WEFT_ERR_INVALID)
            fail_msg("revision '%s' was not refused: %s", bad[i], err.message);
        assert_non_null(strstr(err.message, "--revision '"));
    }
    /* accepted names (and one at the length limit) go on to the unreachable source */
    longrev[255] = '\0';
    const char *good[] = {"main", "v1.0", "refs/pr/1", "release/2.x", "a-b_c.d", longrev};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        if (pull_rev(good[i], &err) != WEFT_ERR_IO)
            fail_msg("revision '%s': %s", good[i], err.message);
        assert_non_null(strstr(err.message, "cannot reach 127.0.0.1"));
    }
    rm_rf(tmp);
    unsetenv("WEFT_CACHE");
}

int main(void) {
    snprintf(shared_models, sizeof(shared_models), "%s/models", shared_dir());
    unsetenv("WEFT_MODEL_MIRROR");
    unsetenv("HF_ENDPOINT");
    atexit(kill_live_server);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_rule),    cmocka_unit_test(test_folder_mirror),
        cmocka_unit_test(test_folder_resume), cmocka_unit_test(test_corrupt_mirror),
        cmocka_unit_test(test_url_mirror),    cmocka_unit_test(test_hub_layout),
        cmocka_unit_test(test_unreachable),   cmocka_unit_test(test_bad_revision),
        cmocka_unit_test(test_retries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
