/* The resolver: a candidate manifest plus the registry give a resolved candidate, the exact
 * bundles a candidate runs (backend, model plugin, techniques) with their manifests and
 * validated options, chains ordered by `after`. It opens no library: the loader (loader.c)
 * opens what this chose and re-checks what only a loaded backend can know (the GPU's SM).
 * Rules (docs/MANIFEST.md, "Resolution"): one provider per non-chain slot; requires and
 * conflicts with semver ranges; each technique's backends include the candidate's backend; a
 * platform entry matches this machine; ABI ranges meet the host's; options inside their
 * schema. Each refusal is one sentence saying what to change. */
#ifndef WEFT_PLUGIN_RESOLVE_H
#define WEFT_PLUGIN_RESOLVE_H

#include <stddef.h>
#include <stdint.h>

#include "plugin/manifest.h"
#include "plugin/registry.h"
#include "weft/plugin.h"

typedef enum weft_resolved_role {
    WEFT_ROLE_BACKEND = 1,
    WEFT_ROLE_MODEL = 2,
    WEFT_ROLE_TECHNIQUE = 3, /* techniques and features named under `techniques` */
} weft_resolved_role;

typedef struct weft_resolved_plugin {
    char name[WEFT_MANIFEST_NAME_MAX];
    char version[WEFT_SEMVER_TEXT_MAX];
    uint32_t role;  /* weft_resolved_role */
    uint32_t slots; /* = manifest->slots */
    char bundle_dir[WEFT_MANIFEST_PATH_MAX];
    char manifest_path[WEFT_MANIFEST_PATH_MAX];
    char library_path[WEFT_MANIFEST_PATH_MAX + 256]; /* bundle_dir/library (not opened) */
    weft_plugin_manifest *manifest;                  /* owned copy */
    weft_options options;                            /* owned; every schema option */
    int32_t order;                                   /* its index in plugins[] */
} weft_resolved_plugin;

typedef struct weft_resolved_candidate {
    char path[WEFT_MANIFEST_PATH_MAX]; /* the candidate manifest */
    char name[WEFT_MANIFEST_NAME_MAX];
    char backend[WEFT_MANIFEST_BACKEND_MAX];
    char model[WEFT_MANIFEST_PATH_MAX];     /* as written */
    char model_dir[WEFT_MANIFEST_PATH_MAX]; /* resolved; "" with WEFT_RESOLVE_NO_MODEL */
    char architecture[64];                  /* config.json architectures[0]; "" if not read */
    uint32_t n_plugins;
    /* backend first, then the model plugin, then techniques: those in a chain slot ordered so
     * that every `after` name comes earlier, ties kept in manifest order. */
    weft_resolved_plugin *plugins;
    uint32_t filled_slots; /* slot bits some plugin fills; the runtime default fills the rest */
    uint32_t max_model_len, max_concurrency, threads; /* serving (0 = unset) */
    uint32_t has_mean_kl, has_p99_kl, has_ppl_ratio;
    double mean_kl, p99_kl, ppl_ratio;
    weft_candidate_manifest *manifest; /* owned copy of the input */
} weft_resolved_candidate;

enum {
    /* Do not resolve the model directory: model_plugin must then be named explicitly. */
    WEFT_RESOLVE_NO_MODEL = 1u << 0,
};

typedef struct weft_resolve_options {
    uint32_t size;         /* sizeof(weft_resolve_options) */
    uint32_t flags;        /* WEFT_RESOLVE_* */
    const char *model_dir; /* replaces the manifest's model when not NULL (weft run --model) */
    const char *arch;      /* this machine's arch when not NULL (tests); else uname's */
} weft_resolve_options;

/* Resolves m against reg. opts may be NULL (defaults). *out is self-contained (copies of the
 * manifests), so reg may be freed afterwards. */
weft_status weft_resolve(const weft_candidate_manifest *m, const weft_registry *reg,
                         const weft_resolve_options *opts, weft_resolved_candidate **out,
                         weft_error *err);
/* Loads the candidate manifest at path and resolves it. */
weft_status weft_resolve_file(const char *path, const weft_registry *reg,
                              const weft_resolve_options *opts, weft_resolved_candidate **out,
                              weft_error *err);
void weft_resolved_free(weft_resolved_candidate *c);

/* The plugin of c that fills slot (a weft_slot bit), or NULL: the first of a chain slot, the
 * last filler of another (a technique layered on one it requires comes after it). */
const weft_resolved_plugin *weft_resolved_slot(const weft_resolved_candidate *c, uint32_t slot);

/* The model cache: ${WEFT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}/models. */
weft_status weft_model_cache_dir(char *buf, size_t cap, weft_error *err);
/* Resolves a candidate's model field to an existing directory: a path (absolute, or relative to
 * the directory of manifest_path; "./x", "../x" and anything with a "/" that exists count as
 * paths), else a cache name (<cache>/models/<name>, a hub id org/name as org--name).
 * manifest_path may be NULL (relative to the working directory). A missing model says how to
 * get it: "model stories260k not found in /root/.cache/weft/models: run `weft pull
 * stories260k`". */
weft_status weft_model_dir_resolve(const char *model, const char *manifest_path, char *out,
                                   size_t cap, weft_error *err);

/* This machine's architecture as manifests spell it ("x86_64", "aarch64"). */
const char *weft_host_arch(void);

#endif
