/* Content hashes for the host. SHA-256 guards integrity (plugin libraries, manifests, model
 * files pinned by a lock); XXH3-128 names content cheaply (candidate ids, cache keys). Model
 * files are large, so their SHA-256 goes through a small on-disk cache keyed by the file's path,
 * device, inode, size and modification time in nanoseconds: a 16 GB checkpoint is hashed once,
 * and a rewrite of the file changes its key. Libraries are never served from the cache: the
 * loader hashes the exact descriptor it is about to load. */
#ifndef WEFT_UTIL_HASH_H
#define WEFT_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

#define WEFT_SHA256_HEX_LEN 64 /* hex digits; buffers need one more for the NUL */
#define WEFT_XXH128_HEX_LEN 32

/* SHA-256 of everything readable from fd, read with pread from offset 0 (the file position is
 * left alone). what names the file in error messages. */
weft_status weft_hash_sha256_fd(int fd, const char *what, char hex[WEFT_SHA256_HEX_LEN + 1],
                                weft_error *err);
/* Opens path read-only and hashes it. */
weft_status weft_hash_sha256_file(const char *path, char hex[WEFT_SHA256_HEX_LEN + 1],
                                  weft_error *err);
void weft_hash_sha256_buf(const void *data, size_t len, char hex[WEFT_SHA256_HEX_LEN + 1]);
void weft_hash_xxh3_128_hex(const void *data, size_t len, char hex[WEFT_XXH128_HEX_LEN + 1]);

/* The cache directory: ${WEFT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}/hashes. Returns 0,
 * or -1 when no base directory is known (then the cache is not used). */
int weft_hash_cache_dir(char *buf, size_t len);
/* SHA-256 of a file through the cache. *hit (optional) says whether the cached value was used.
 * A cache that cannot be read or written is skipped silently: the hash is still correct. */
weft_status weft_hash_sha256_file_cached(const char *path, char hex[WEFT_SHA256_HEX_LEN + 1],
                                         int *hit, weft_error *err);

/* True when s is exactly n lowercase hex digits. */
int weft_hash_is_hex(const char *s, size_t n);

#endif
