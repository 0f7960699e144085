/* Bundle discovery over the plugin search path (see registry.h). Directories are read in name
 * order so the result, and which duplicate shadows which, does not depend on the file system.
 * Only manifests are read: a bundle whose library is missing or broken still lists, since
 * listing and resolving must work before (and without) loading anything. */
#define _GNU_SOURCE /* dladdr */
#include "plugin/registry.h"

#include <dlfcn.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error.h"

#define SRC "registry"

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static weft_status add_dir_name(weft_registry *reg, const char *dir, weft_error *err) {
    char **d = realloc(reg->dirs, (reg->n_dirs + 1) * sizeof(*d));
    if (!d) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    reg->dirs = d;
    if (!(d[reg->n_dirs] = strdup(dir)))
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    reg->n_dirs++;
    return WEFT_OK;
}

static const char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* Adds the bundle in dir (which holds manifest.yaml). */
static weft_status add_bundle(weft_registry *reg, const char *dir, uint32_t origin,
                              weft_error *err) {
    char real[PATH_MAX];
    const char *bdir = realpath(dir, real) ? real : dir;
    for (size_t i = 0; i < reg->n; i++)
        if (!strcmp(reg->entries[i].bundle_dir, bdir))
            return WEFT_OK; /* listed twice on the path */
    if (strlen(bdir) + sizeof("/manifest.yaml") > WEFT_MANIFEST_PATH_MAX) {
        weft_log(WEFT_LOG_WARN, SRC, "skipping %s: path longer than %d bytes", bdir,
                 WEFT_MANIFEST_PATH_MAX);
        return WEFT_OK;
    }
    weft_registry_entry *e = realloc(reg->entries, (reg->n + 1) * sizeof(*e));
    if (!e) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    reg->entries = e;
    e = &reg->entries[reg->n];
    memset(e, 0, sizeof(*e));
    snprintf(e->bundle_dir, sizeof(e->bundle_dir), "%s", bdir);
    snprintf(e->manifest_path, sizeof(e->manifest_path), "%s/manifest.yaml", bdir);
    e->origin = origin;
    e->shadowed_by = -1;
    weft_error_clear(&e->error);
    weft_status st = weft_plugin_manifest_load(e->manifest_path, &e->manifest, &e->error);
    if (st == WEFT_ERR_NOMEM) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    if (origin == WEFT_ORIGIN_SOURCE) {
        /* the source copy of a bundle found (built) earlier is no news: drop it quietly */
        for (size_t i = 0; i < reg->n; i++) {
            const weft_registry_entry *o = &reg->entries[i];
            int same =
                st ? !o->manifest && !strcmp(base_name(o->bundle_dir), base_name(bdir))
                   : o->manifest && !strcmp(o->manifest->name, e->manifest->name) &&
                         weft_semver_compare(&o->manifest->version, &e->manifest->version) == 0;
            if (same) {
                weft_plugin_manifest_free(e->manifest);
                e->manifest = NULL;
                return WEFT_OK;
            }
        }
    }
    if (st) {
        e->status = WEFT_BUNDLE_BROKEN;
        e->manifest = NULL;
    } else {
        e->status = WEFT_BUNDLE_OK;
        for (size_t i = 0; i < reg->n; i++) {
            const weft_registry_entry *o = &reg->entries[i];
            if (o->status == WEFT_BUNDLE_OK && !strcmp(o->manifest->name, e->manifest->name) &&
                weft_semver_compare(&o->manifest->version, &e->manifest->version) == 0) {
                e->status = WEFT_BUNDLE_SHADOWED;
                e->shadowed_by = (int32_t)i;
                break;
            }
        }
    }
    reg->n++;
    return WEFT_OK;
}

static int skip_name(const struct dirent *d) {
    return d->d_name[0] != '.';
}

/* dir is a bundle, or holds bundles one level down. */
static weft_status scan_dir(weft_registry *reg, const char *dir, uint32_t origin, weft_error *err) {
    if (!dir[0] || !is_dir(dir)) return WEFT_OK;
    weft_status st = add_dir_name(reg, dir, err);
    if (st) return st;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/manifest.yaml", dir);
    if (is_file(path)) return add_bundle(reg, dir, origin, err);
    struct dirent **names = NULL;
    int n = scandir(dir, &names, skip_name, alphasort);
    if (n < 0) {
        weft_log(WEFT_LOG_WARN, SRC, "cannot read plugin directory %s", dir);
        return WEFT_OK;
    }
    for (int i = 0; i < n; i++) {
        char sub[PATH_MAX];
        int w = snprintf(sub, sizeof(sub), "%s/%s", dir, names[i]->d_name);
        if (!st && w > 0 && (size_t)w < sizeof(sub) - 16 && is_dir(sub)) {
            snprintf(path, sizeof(path), "%s/manifest.yaml", sub);
            if (is_file(path)) st = add_bundle(reg, sub, origin, err);
        }
        free(names[i]);
    }
    free(names);
    return st;
}

weft_status weft_registry_discover(const char *const *extra, size_t n_extra, uint32_t flags,
                                   weft_registry **out, weft_error *err) {
    if (!out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no output given");
    *out = NULL;
    weft_registry *reg = calloc(1, sizeof(*reg));
    if (!reg) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n_extra && !st; i++)
        if (extra && extra[i]) st = scan_dir(reg, extra[i], WEFT_ORIGIN_EXTRA, err);
    const char *env = getenv("WEFT_PLUGIN_PATH");
    if (!st && env && !(flags & WEFT_REGISTRY_NO_ENV)) {
        char *copy = strdup(env);
        if (!copy) st = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        char *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok && !st;
             tok = strtok_r(NULL, ":", &save))
            st = scan_dir(reg, tok, WEFT_ORIGIN_ENV, err);
        free(copy);
    }
#ifdef WEFT_BUILD_PLUGIN_DIR
    if (!st && !(flags & WEFT_REGISTRY_NO_BUILD))
        st = scan_dir(reg, WEFT_BUILD_PLUGIN_DIR, WEFT_ORIGIN_BUILD, err);
#endif
    /* A relocated install (or the portable GPU bundle): <dir of libweft.so>/weft/plugins. */
    if (!st && !(flags & WEFT_REGISTRY_NO_INSTALL)) {
        Dl_info info;
        char dir[PATH_MAX];
        if (dladdr((void *)weft_registry_discover, &info) && info.dli_fname) {
            snprintf(dir, sizeof(dir), "%s", info.dli_fname);
            char *slash = strrchr(dir, '/');
            if (slash) {
                snprintf(slash, sizeof(dir) - (size_t)(slash - dir), "/weft/plugins");
                int known = 0;
#ifdef WEFT_BUILD_PLUGIN_DIR
                known |= !strcmp(dir, WEFT_BUILD_PLUGIN_DIR);
#endif
#ifdef WEFT_INSTALL_PLUGIN_DIR
                known |= !strcmp(dir, WEFT_INSTALL_PLUGIN_DIR);
#endif
                if (!known) st = scan_dir(reg, dir, WEFT_ORIGIN_INSTALL, err);
            }
        }
    }
#ifdef WEFT_INSTALL_PLUGIN_DIR
    if (!st && !(flags & WEFT_REGISTRY_NO_INSTALL))
        st = scan_dir(reg, WEFT_INSTALL_PLUGIN_DIR, WEFT_ORIGIN_INSTALL, err);
#endif
#ifdef WEFT_SOURCE_DIR
    static const char *const source_dirs[] = {"plugins/backends", "models", "techniques",
                                              "plugins"};
    for (size_t i = 0; !st && !(flags & WEFT_REGISTRY_NO_SOURCE) && i < 4; i++) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/%s", WEFT_SOURCE_DIR, source_dirs[i]);
        st = scan_dir(reg, dir, WEFT_ORIGIN_SOURCE, err);
    }
#endif
    if (st) {
        weft_registry_free(reg);
        return st;
    }
    *out = reg;
    return WEFT_OK;
}

void weft_registry_free(weft_registry *reg) {
    if (!reg) return;
    for (size_t i = 0; i < reg->n; i++)
        weft_plugin_manifest_free(reg->entries[i].manifest);
    free(reg->entries);
    for (size_t i = 0; i < reg->n_dirs; i++)
        free(reg->dirs[i]);
    free(reg->dirs);
    free(reg);
}

const weft_registry_entry *weft_registry_find(const weft_registry *reg, const char *name,
                                              const weft_semver_range *range) {
    if (!reg || !name) return NULL;
    /* Built bundles first: a source-tree manifest (library not built) is chosen only when no
     * built bundle matches, so resolution never prefers an unbuilt library. */
    const weft_registry_entry *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (size_t i = 0; i < reg->n; i++) {
            const weft_registry_entry *e = &reg->entries[i];
            if (e->status != WEFT_BUNDLE_OK || strcmp(e->manifest->name, name)) continue;
            if ((e->origin == WEFT_ORIGIN_SOURCE) != (pass == 1)) continue;
            if (range && !weft_semver_satisfies(range, &e->manifest->version)) continue;
            if (!best || weft_semver_compare(&e->manifest->version, &best->manifest->version) > 0)
                best = e;
        }
    return best;
}

int weft_registry_has_name(const weft_registry *reg, const char *name) {
    if (!reg || !name) return 0;
    for (size_t i = 0; i < reg->n; i++)
        if (reg->entries[i].manifest && !strcmp(reg->entries[i].manifest->name, name)) return 1;
    return 0;
}

/* Levenshtein distance over at most 63 characters. */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63) la = 63;
    if (lb > 63) lb = 63;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

int weft_registry_suggest(const weft_registry *reg, const char *name, uint32_t kind, char *buf,
                          size_t cap) {
    if (!buf || !cap) return 0;
    buf[0] = '\0';
    if (!reg || !name) return 0;
    const char *picked[3] = {NULL, NULL, NULL};
    size_t score[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    size_t len = strlen(name);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    for (size_t i = 0; i < reg->n; i++) {
        const weft_registry_entry *e = &reg->entries[i];
        if (e->status != WEFT_BUNDLE_OK) continue;
        if (kind && e->manifest->kind != kind) continue;
        const char *cand = e->manifest->name;
        size_t d = edit_distance(name, cand);
        /* "paged" for "kv.paged": the part after the family prefix matches */
        const char *dot = strchr(cand, '.');
        if (d > limit && ((dot && !strcmp(dot + 1, name)) || (len >= 3 && strstr(cand, name))))
            d = limit;
        if (d > limit) continue;
        int dup = 0;
        for (int k = 0; k < 3; k++)
            if (picked[k] && !strcmp(picked[k], cand)) dup = 1;
        if (dup) continue;
        for (int k = 0; k < 3; k++) {
            if (d < score[k]) {
                for (int m = 2; m > k; m--) {
                    picked[m] = picked[m - 1];
                    score[m] = score[m - 1];
                }
                picked[k] = cand;
                score[k] = d;
                break;
            }
        }
    }
    int n = 0;
    size_t used = 0;
    for (int k = 0; k < 3 && picked[k]; k++) {
        int w = snprintf(buf + used, cap - used, "%s%s", n ? ", " : "", picked[k]);
        if (w < 0 || (size_t)w >= cap - used) break;
        used += (size_t)w;
        n++;
    }
    return n;
}

const char *weft_bundle_status_name(uint32_t status) {
    switch (status) {
    case WEFT_BUNDLE_OK:
        return "ok";
    case WEFT_BUNDLE_BROKEN:
        return "broken";
    case WEFT_BUNDLE_SHADOWED:
        return "shadowed";
    default:
        return "unknown";
    }
}

const char *weft_registry_origin_name(uint32_t origin) {
    switch (origin) {
    case WEFT_ORIGIN_EXTRA:
        return "path";
    case WEFT_ORIGIN_ENV:
        return "WEFT_PLUGIN_PATH";
    case WEFT_ORIGIN_BUILD:
        return "build";
    case WEFT_ORIGIN_INSTALL:
        return "install";
    case WEFT_ORIGIN_SOURCE:
        return "source";
    default:
        return "unknown";
    }
}
