/* Shared by the commands that open an engine (see engine_cli.h). */
#include "engine_cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error.h"

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* rel in the working directory, else in the source tree. */
static int find_default(const char *rel, char *buf, size_t cap) {
    if (is_file(rel)) {
        snprintf(buf, cap, "%s", rel);
        return 1;
    }
    snprintf(buf, cap, "%s/%s", WEFT_SOURCE_DIR, rel);
    return is_file(buf);
}

weft_status weft_cli_engine_target(const char *candidate, const char *model_dir,
                                   weft_engine_options *o, char *path_buf, size_t cap,
                                   weft_error *err) {
    o->model_dir = model_dir;
    if (candidate) {
        if (!is_file(candidate))
            return weft_error_set(err, WEFT_ERR_NOT_FOUND, candidate,
                                  "--candidate: no such file (expected a lock or a candidate "
                                  "manifest)");
        if (ends_with(candidate, ".yaml") || ends_with(candidate, ".yml")) {
            o->manifest_path = candidate;
        } else {
            if (model_dir)
                return weft_error_set(err, WEFT_ERR_INVALID, candidate,
                                      "--model cannot replace the model of a lock: a lock pins "
                                      "its model files; use a candidate manifest");
            o->lock_path = candidate;
        }
        return WEFT_OK;
    }
    if (!model_dir && find_default(WEFT_BASELINE_LOCK, path_buf, cap)) {
        o->lock_path = path_buf;
        return WEFT_OK;
    }
    if (find_default(WEFT_BASELINE_MANIFEST, path_buf, cap)) {
        o->manifest_path = path_buf;
        return WEFT_OK;
    }
    return weft_error_set(err, WEFT_ERR_NOT_FOUND, "cli",
                          "no candidate given and neither %s nor %s was found in the working "
                          "directory or in %s",
                          WEFT_BASELINE_LOCK, WEFT_BASELINE_MANIFEST, WEFT_SOURCE_DIR);
}

int weft_cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (!s || !*s || *s == '-') goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) goto bad;
    *out = v;
    return 0;
bad:
    fprintf(stderr, "weft %s: %s: expected a non-negative integer, got '%s'\n", cmd, opt,
            s ? s : "");
    return -1;
}

int weft_cli_parse_u32(const char *cmd, const char *opt, const char *s, uint32_t *out) {
    uint64_t v;
    if (weft_cli_parse_u64(cmd, opt, s, &v)) return -1;
    if (v > UINT32_MAX) {
        fprintf(stderr, "weft %s: %s: expected at most %u, got '%s'\n", cmd, opt, UINT32_MAX, s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int weft_cli_parse_f32(const char *cmd, const char *opt, const char *s, float *out) {
    char *end = NULL;
    errno = 0;
    float v = s && *s ? strtof(s, &end) : NAN;
    if (!s || !*s || errno || *end || !isfinite(v)) {
        fprintf(stderr, "weft %s: %s: expected a number, got '%s'\n", cmd, opt, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}
