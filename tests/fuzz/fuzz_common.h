/* Helpers the file-based fuzz targets share: a cleared weft_error, the rule that every refusal
 * carries a message (printed with WEFT_FUZZ_VERBOSE set, to see what a seed reaches), and a
 * private directory under $TMPDIR (or /tmp) whose removal at exit the target arranges; and the
 * checks every accepted safetensors set must pass. */
#ifndef WEFT_FUZZ_COMMON_H
#define WEFT_FUZZ_COMMON_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/safetensors.h"
#include "weft/plugin.h"

static inline weft_error fuzz_error(void) {
    weft_error e;
    memset(&e, 0, sizeof(e));
    e.size = sizeof(e);
    return e;
}

static inline void fuzz_refused(const weft_error *err) {
    if (!err->message[0]) __builtin_trap(); /* every refusal says why */
    if (getenv("WEFT_FUZZ_VERBOSE")) fprintf(stderr, "refused: %s\n", err->message);
}

/* Creates DIR (cap bytes) as $TMPDIR/weft-fuzz-<what>-XXXXXX once; later calls keep it. Returns
 * 1 on the call that created it, so the caller can register its clean-up then. */
static inline int fuzz_private_dir(char *dir, size_t cap, const char *what) {
    if (dir[0]) return 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, cap, "%s/weft-fuzz-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", what);
    if (!mkdtemp(dir)) __builtin_trap();
    return 1;
}

/* Writes n bytes (none: an empty file) to path; a target that cannot write its own files stops. */
static inline void fuzz_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) __builtin_trap();
}

/* Removes every entry of DIR (files only; the targets make no deeper trees there). */
static inline void fuzz_empty_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4200];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
}

/* Splits an input at the lines "#--" into n parts: part[i] and len[i] (NULL and 0 for a part the
 * input does not reach), for targets whose input is several files. */
static inline void fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len,
                              int n) {
    static const char sep[] = "\n#--\n";
    const size_t k = sizeof(sep) - 1;
    const uint8_t *at = data, *end = data + size;
    for (int i = 0; i < n; i++) {
        part[i] = at;
        len[i] = 0;
        if (!at) continue;
        const uint8_t *cut = NULL;
        for (const uint8_t *q = at; !cut && (size_t)(end - q) >= k; q++)
            if (!memcmp(q, sep, k)) cut = q;
        len[i] = (size_t)((cut ? cut : end) - at);
        at = cut ? cut + k : NULL;
    }
}

/* Every tensor of an accepted safetensors set: its byte count matches its dtype and shape, its
 * first and last byte can be read (ASan or the mapping's end catch an offset the checks missed),
 * and it is found again by name. */
static inline void fuzz_touch_tensors(const weft_safetensors *st) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < weft_safetensors_count(st); i++) {
        const weft_st_tensor *t = weft_safetensors_at(st, i);
        if (t->bytes != weft_dtype_bytes(t->dtype, t->rank, t->shape)) __builtin_trap();
        if (t->bytes) sink ^= t->data[0] ^ t->data[t->bytes - 1];
        if (weft_safetensors_find(st, t->name) != t) __builtin_trap();
    }
    (void)sink;
}

#endif
