/* SHA-256 (OpenSSL EVP), XXH3-128 hex and the on-disk SHA-256 cache for large files (hash.h).
 * A cache entry is one small text file named by the XXH3-128 of the file's absolute path; it
 * holds the identity (device, inode, size, mtime in ns) the hash was computed for, so a stale
 * entry is recognised and recomputed instead of trusted. */
#include "util/hash.h"

#include "util/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <xxhash.h>

#include "util/error.h"

static void to_hex(const unsigned char *b, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int weft_hash_is_hex(const char *s, size_t n) {
    if (!s || strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

weft_status weft_hash_sha256_fd(int fd, const char *what, char hex[WEFT_SHA256_HEX_LEN + 1],
                                weft_error *err) {
    const char *src = what ? what : "runtime";
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return weft_error_set(err, WEFT_ERR_NOMEM, src, "cannot allocate a SHA-256 context");
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return weft_error_set(err, WEFT_ERR_INTERNAL, src, "SHA-256 initialisation failed");
    }
    size_t cap = 1u << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        EVP_MD_CTX_free(ctx);
        return weft_error_set(err, WEFT_ERR_NOMEM, src, "cannot allocate a 1 MiB read buffer");
    }
    off_t off = 0;
    weft_status st = WEFT_OK;
    for (;;) {
        ssize_t n = pread(fd, buf, cap, off);
        if (n < 0) {
            if (errno == EINTR) continue;
            st = weft_error_set(err, WEFT_ERR_IO, src, "read failed at byte %lld: %s",
                                (long long)off, strerror(errno));
            break;
        }
        if (n == 0) break;
        if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) {
            st = weft_error_set(err, WEFT_ERR_INTERNAL, src, "SHA-256 update failed");
            break;
        }
        off += n;
    }
    if (st == WEFT_OK) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32)
            st = weft_error_set(err, WEFT_ERR_INTERNAL, src, "SHA-256 finalisation failed");
        else
            to_hex(md, 32, hex);
    }
    free(buf);
    EVP_MD_CTX_free(ctx);
    return st;
}

weft_status weft_hash_sha256_file(const char *path, char hex[WEFT_SHA256_HEX_LEN + 1],
                                  weft_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, path,
                              "cannot open: %s", strerror(errno));
    weft_status st = weft_hash_sha256_fd(fd, path, hex, err);
    close(fd);
    return st;
}

void weft_hash_sha256_buf(const void *data, size_t len, char hex[WEFT_SHA256_HEX_LEN + 1]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    /* EVP_Digest only fails on allocation failure; an all-zero digest then cannot match any
     * real file, which is the safe direction for an integrity check. */
    if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32) memset(md, 0, 32);
    to_hex(md, 32, hex);
}

void weft_hash_xxh3_128_hex(const void *data, size_t len, char hex[WEFT_XXH128_HEX_LEN + 1]) {
    XXH128_hash_t h = XXH3_128bits(data, len);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    to_hex(c.digest, sizeof(c.digest), hex);
}

/* ---- the cache ------------------------------------------------------------------------- */
int weft_hash_cache_dir(char *buf, size_t len) {
    return weft_cache_path("hashes", buf, len, NULL) == WEFT_OK ? 0 : -1;
}

static int mkdirs(const char *dir) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp)) return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

typedef struct file_identity {
    unsigned long long dev, ino, size, mtime_ns;
} file_identity;

static file_identity identity_of(const struct stat *s) {
    file_identity id = {(unsigned long long)s->st_dev, (unsigned long long)s->st_ino,
                        (unsigned long long)s->st_size,
                        (unsigned long long)s->st_mtim.tv_sec * 1000000000ull +
                            (unsigned long long)s->st_mtim.tv_nsec};
    return id;
}

static int entry_path(const char *abs, char *out, size_t len) {
    char dir[PATH_MAX - 64], key[WEFT_XXH128_HEX_LEN + 1];
    if (weft_hash_cache_dir(dir, sizeof(dir)) != 0) return -1;
    weft_hash_xxh3_128_hex(abs, strlen(abs), key);
    int n = snprintf(out, len, "%s/%s", dir, key);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

static int cache_read(const char *abs, const file_identity *id, char *hex) {
    char path[PATH_MAX];
    if (entry_path(abs, path, sizeof(path)) != 0) return 0;
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    char line[PATH_MAX + 64], stored[WEFT_SHA256_HEX_LEN + 2];
    file_identity got;
    int ok =
        fgets(line, sizeof(line), f) && !strcmp(line, "weft-hash-cache 1\n") &&
        fscanf(f, "%llu %llu %llu %llu\n", &got.dev, &got.ino, &got.size, &got.mtime_ns) == 4 &&
        fscanf(f, "%65s\n", stored) == 1 && fgets(line, sizeof(line), f);
    fclose(f);
    if (!ok) return 0;
    line[strcspn(line, "\n")] = '\0';
    if (strcmp(line, abs) != 0 || memcmp(&got, id, sizeof(got)) != 0 ||
        !weft_hash_is_hex(stored, WEFT_SHA256_HEX_LEN))
        return 0;
    memcpy(hex, stored, WEFT_SHA256_HEX_LEN + 1);
    return 1;
}

static void cache_write(const char *abs, const file_identity *id, const char *hex) {
    char path[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX + 32];
    if (weft_hash_cache_dir(dir, sizeof(dir)) != 0 || mkdirs(dir) != 0) return;
    if (entry_path(abs, path, sizeof(path)) != 0) return;
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f) return;
    int ok = fprintf(f, "weft-hash-cache 1\n%llu %llu %llu %llu\n%s\n%s\n", id->dev, id->ino,
                     id->size, id->mtime_ns, hex, abs) > 0;
    ok = (fclose(f) == 0) && ok;
    /* rename is atomic: a reader sees the old entry or the whole new one, never half. */
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

weft_status weft_hash_sha256_file_cached(const char *path, char hex[WEFT_SHA256_HEX_LEN + 1],
                                         int *hit, weft_error *err) {
    if (hit) *hit = 0;
    char abs[PATH_MAX];
    if (!realpath(path, abs))
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, path,
                              "cannot resolve path: %s", strerror(errno));
    int fd = open(abs, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, path,
                              "cannot open: %s", strerror(errno));
    struct stat before, after;
    if (fstat(fd, &before) != 0) {
        close(fd);
        return weft_error_set(err, WEFT_ERR_IO, path, "cannot stat: %s", strerror(errno));
    }
    file_identity id = identity_of(&before);
    if (S_ISREG(before.st_mode) && cache_read(abs, &id, hex)) {
        close(fd);
        if (hit) *hit = 1;
        return WEFT_OK;
    }
    weft_status st = weft_hash_sha256_fd(fd, path, hex, err);
    /* Only a file that did not change while it was read gets an entry. */
    if (st == WEFT_OK && S_ISREG(before.st_mode) && fstat(fd, &after) == 0) {
        file_identity id2 = identity_of(&after);
        if (!memcmp(&id, &id2, sizeof(id))) cache_write(abs, &id, hex);
    }
    close(fd);
    return st;
}
