/* Shared by the commands that open an engine (see engine_cli.h). */
#include "engine_cli.h"

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
