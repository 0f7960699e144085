/* libFuzzer target for `weft pull` from a mirror folder (files/pull.c): the verification that
 * stands between a mirror's bytes and the model cache. A private directory holds a mirror with
 * the model folder fz/model (config.json, tokenizer.json and two shards, fixed) and a destination.
 * The input, split at lines "#--", gives the SHA256SUMS beside the model, the SHA256SUMS at the
 * mirror's root (paths under it, e.g. "fz/model/config.json") and model.safetensors.index.json
 * (an empty part leaves the file out). Every pull must refuse with a message or leave in the
 * destination only files byte-equal to the mirror's, with config.json among them, nothing
 * written outside it, and no file kept whose SHA-256 a SUMS line for its name contradicts.
 * WEFT_FUZZ_VERBOSE prints refusals. */
#include <ctype.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files/pull.h"
#include "fuzz_common.h"
#include "util/hash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[512], mirror[600], model[700], dest[600];
static const char *const fixed[] = {"config.json", "tokenizer.json", "model-1.safetensors",
                                    "model-2.safetensors"};
static const char *const parts[] = {"SHA256SUMS", "../../SHA256SUMS",
                                    "model.safetensors.index.json"};

static void write_file(const char *dir, const char *name, const void *data, size_t n) {
    char p[1400];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    fuzz_write_file(p, data, n);
}

static void remove_all(void) {
    char p[800];
    fuzz_empty_dir(dest);
    rmdir(dest);
    fuzz_empty_dir(model);
    rmdir(model);
    snprintf(p, sizeof(p), "%s/fz", mirror);
    rmdir(p);
    fuzz_empty_dir(mirror);
    rmdir(mirror);
    rmdir(root);
}

static void setup(void) {
    if (!fuzz_private_dir(root, sizeof(root), "pull")) return;
    atexit(remove_all);
    snprintf(mirror, sizeof(mirror), "%s/mirror", root);
    snprintf(model, sizeof(model), "%s/fz/model", mirror);
    snprintf(dest, sizeof(dest), "%s/dest", root);
    char p[800];
    snprintf(p, sizeof(p), "%s/fz", mirror);
    if (mkdir(mirror, 0755) || mkdir(p, 0755) || mkdir(model, 0755)) __builtin_trap();
    static const char cfg[] = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8}";
    static const char tok[] = "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    static const uint8_t s1[] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    static const uint8_t s2[] = {16,  0,   0,   0,   0,   0,   0,   0,   '{', '"', 'a', '"',
                                 ':', '{', '}', '}', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
    write_file(model, fixed[0], cfg, sizeof(cfg) - 1);
    write_file(model, fixed[1], tok, sizeof(tok) - 1);
    write_file(model, fixed[2], s1, sizeof(s1));
    write_file(model, fixed[3], s2, sizeof(s2));
}

static int hex64(const char *s) {
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* The hash a SUMS text gives for name (under prefix when set), or 0: "<64 hex> [ *]<path>" a
 * line (hex in either case), trailing CR and spaces trimmed, '#' lines skipped; the last such
 * line counts, and *conflict is set when two lines for name disagree. */
static int sums_for(const char *text, size_t len, const char *prefix, const char *name,
                    char out[65], int *conflict) {
    int found = 0;
    const char *s = text, *end = text + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        size_t ll = (size_t)(le - s);
        while (ll && (s[ll - 1] == '\r' || s[ll - 1] == ' '))
            ll--;
        if (ll >= 66 && ll < 1023 && s[0] != '#' && hex64(s) && s[64] == ' ') {
            const char *path = s + 65, *pe = s + ll;
            if (*path == ' ' || *path == '*') path++;
            size_t pl = prefix ? strlen(prefix) : 0;
            int ok = 1;
            if (pl) {
                ok = (size_t)(pe - path) > pl && !memcmp(path, prefix, pl) && path[pl] == '/';
                path += ok ? pl + 1 : 0;
            }
            if (ok && (size_t)(pe - path) == strlen(name) && !memcmp(path, name, strlen(name))) {
                if (found && strncasecmp(out, s, 64)) *conflict = 1;
                memcpy(out, s, 64);
                out[64] = '\0';
                found = 1;
            }
        }
        s = nl ? nl + 1 : end;
    }
    return found;
}

static int same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    const uint8_t *text[3];
    size_t tlen[3];
    fuzz_split(data, size, text, tlen, 3);
    for (int i = 0; i < 3; i++) {
        char p[1400];
        snprintf(p, sizeof(p), "%s/%s", model, parts[i]);
        unlink(p);
        if (tlen[i]) write_file(model, parts[i], text[i], tlen[i]);
    }
    fuzz_empty_dir(dest);
    weft_pull_options o;
    weft_pull_options_default(&o);
    o.id = "fz/model";
    o.dir = dest;
    o.mirror = mirror;
    o.force = 1;
    o.progress = 0;
    weft_pull_stats stats;
    weft_error err = fuzz_error();
    weft_status st = weft_pull_model(&o, &stats, &err);
    /* nothing beside mirror/ and dest/ in the private directory, whatever happened */
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "mirror") &&
            strcmp(e->d_name, "dest"))
            __builtin_trap();
    if (d) closedir(d);
    if (st != WEFT_OK) {
        fuzz_refused(&err);
        return 0;
    }
    /* accepted: every file kept equals the mirror's and agrees with every SUMS line naming it */
    int have_config = 0;
    d = opendir(dest);
    if (!d) __builtin_trap();
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, ".weft-pull.json") ||
            !strcmp(n, ".weft-pull.lock"))
            continue;
        char got[1400], src[1400], sha[65], want[65];
        snprintf(got, sizeof(got), "%s/%s", dest, n);
        snprintf(src, sizeof(src), "%s/%s", model, n);
        if (!same_bytes(got, src)) {
            fprintf(stderr, "fuzz_pull: %s differs from the mirror's\n", n);
            __builtin_trap();
        }
        have_config |= !strcmp(n, "config.json");
        weft_error he = fuzz_error();
        if (weft_hash_sha256_file(got, sha, &he) != WEFT_OK) __builtin_trap();
        int conflict = 0;
        if ((tlen[0] && sums_for((const char *)text[0], tlen[0], NULL, n, want, &conflict) &&
             strcasecmp(sha, want)) ||
            (tlen[1] && sums_for((const char *)text[1], tlen[1], "fz/model", n, want, &conflict) &&
             strcasecmp(sha, want)) ||
            conflict) {
            fprintf(stderr, "fuzz_pull: %s kept against a SHA256SUMS line\n", n);
            __builtin_trap();
        }
    }
    closedir(d);
    if (!have_config) __builtin_trap();
    return 0;
}
