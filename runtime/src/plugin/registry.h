/* The plugin registry: every bundle (a directory holding manifest.yaml) found on the search
 * path, with its parsed manifest. Search order: extra directories given by the caller (the
 * CLI's --path), then WEFT_PLUGIN_PATH (colon-separated), then the build tree
 * (WEFT_BUILD_PLUGIN_DIR), then the install prefix (WEFT_INSTALL_PLUGIN_DIR), and last the
 * bundle directories of the source tree libweft was built from (plugins/backends, models,
 * techniques, plugins), so that bundles whose code is not built yet still list; a source
 * bundle already found earlier (same name and version, or the same directory name when broken)
 * is skipped silently rather than listed as shadowed. Each directory is either a bundle itself
 * or holds bundles one level down. The first bundle found for a
 * name+version wins; later ones with the same name and version are listed as shadowed. The
 * registry reads manifests only: it never opens a library, and a broken manifest is listed
 * as broken with its error instead of failing discovery. */
#ifndef WEFT_PLUGIN_REGISTRY_H
#define WEFT_PLUGIN_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "plugin/manifest.h"
#include "plugin/semver.h"
#include "weft/plugin.h"

typedef enum weft_bundle_status {
    WEFT_BUNDLE_OK = 0,
    WEFT_BUNDLE_BROKEN = 1,   /* the manifest did not parse: see error */
    WEFT_BUNDLE_SHADOWED = 2, /* same name+version found earlier: see shadowed_by */
} weft_bundle_status;

typedef enum weft_registry_origin {
    WEFT_ORIGIN_EXTRA = 1,   /* a directory the caller passed */
    WEFT_ORIGIN_ENV = 2,     /* WEFT_PLUGIN_PATH */
    WEFT_ORIGIN_BUILD = 3,   /* WEFT_BUILD_PLUGIN_DIR */
    WEFT_ORIGIN_INSTALL = 4, /* WEFT_INSTALL_PLUGIN_DIR */
    WEFT_ORIGIN_SOURCE = 5,  /* the source tree libweft was built from (bundles not built) */
} weft_registry_origin;

typedef struct weft_registry_entry {
    char bundle_dir[WEFT_MANIFEST_PATH_MAX];    /* absolute when it could be made so */
    char manifest_path[WEFT_MANIFEST_PATH_MAX]; /* bundle_dir/manifest.yaml */
    uint32_t status;                            /* weft_bundle_status */
    uint32_t origin;                            /* weft_registry_origin */
    weft_plugin_manifest *manifest;             /* NULL when broken */
    int32_t shadowed_by;                        /* entry index, -1 unless shadowed */
    weft_error error;                           /* broken: why */
} weft_registry_entry;

typedef struct weft_registry {
    size_t n;
    weft_registry_entry *entries; /* in discovery order */
    size_t n_dirs;
    char **dirs; /* the search path actually used, in order (for messages) */
} weft_registry;

/* Flags of weft_registry_discover. */
enum {
    WEFT_REGISTRY_NO_ENV = 1u << 0,     /* ignore WEFT_PLUGIN_PATH */
    WEFT_REGISTRY_NO_BUILD = 1u << 1,   /* skip the build tree */
    WEFT_REGISTRY_NO_INSTALL = 1u << 2, /* skip the install prefix */
    WEFT_REGISTRY_NO_SOURCE = 1u << 3,  /* skip the source tree's bundles */
    WEFT_REGISTRY_ONLY_EXTRA = (1u << 0) | (1u << 1) | (1u << 2) | (1u << 3),
};

/* Builds the registry. extra (n_extra dirs, may be NULL) are searched first. A directory that
 * does not exist is skipped silently (the build tree may not exist yet); only running out of
 * memory fails. */
weft_status weft_registry_discover(const char *const *extra, size_t n_extra, uint32_t flags,
                                   weft_registry **out, weft_error *err);
void weft_registry_free(weft_registry *reg);

/* The highest-version ok entry named name that satisfies range (NULL = any), or NULL. */
const weft_registry_entry *weft_registry_find(const weft_registry *reg, const char *name,
                                              const weft_semver_range *range);
/* 1 when any entry (ok, broken or shadowed) has this name. Broken entries carry no name
 * unless their manifest got far enough: this checks ok and shadowed entries. */
int weft_registry_has_name(const weft_registry *reg, const char *name);
/* Writes up to 3 known plugin names close to name ("kv.paged, kv.int8"), or "" when none is
 * close; returns the number written. Only ok entries, optionally only of kind (0 = any). */
int weft_registry_suggest(const weft_registry *reg, const char *name, uint32_t kind, char *buf,
                          size_t cap);
/* "ok", "broken", "shadowed". */
const char *weft_bundle_status_name(uint32_t status);
const char *weft_registry_origin_name(uint32_t origin);

#endif
