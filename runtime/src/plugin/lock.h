/* Locks: a resolved candidate frozen to exact files. A lock is a JSON document (docs/ABI.md,
 * "Locks", has the format) naming every plugin's exact version, ABI range, bundle, library and
 * manifest with their SHA-256, the validated options with defaults filled, the chain order,
 * the SHA-256 of every model file, the serving defaults, and a candidate id: the XXH3-128 of
 * the canonical lock (the document without "id", keys sorted, no whitespace). Freezing hashes
 * files; loading a lock re-checks its id so an edited lock is refused; `weft candidate check`
 * re-hashes every file and reports each difference; `weft candidate diff` compares two locks.
 * The loader (candidate.h) turns a lock into a running plugin set. */
#ifndef WEFT_PLUGIN_LOCK_H
#define WEFT_PLUGIN_LOCK_H

#include <stddef.h>
#include <stdint.h>

#include "plugin/manifest.h"
#include "plugin/resolve.h"
#include "util/hash.h"
#include "weft/plugin.h"

#define WEFT_LOCK_FORMAT 1
#define WEFT_LOCK_PATH_MAX (WEFT_MANIFEST_PATH_MAX + 256)

typedef struct weft_lock_file {
    char path[WEFT_LOCK_PATH_MAX];
    char sha256[WEFT_SHA256_HEX_LEN + 1];
} weft_lock_file;

typedef struct weft_lock_model_file {
    char name[256]; /* relative to the model dir */
    uint64_t bytes;
    char sha256[WEFT_SHA256_HEX_LEN + 1];
} weft_lock_model_file;

typedef struct weft_lock_plugin {
    char name[WEFT_MANIFEST_NAME_MAX];
    char version[WEFT_SEMVER_TEXT_MAX];
    uint32_t role;  /* weft_resolved_role */
    uint32_t kind;  /* weft_plugin_kind */
    uint32_t slots; /* weft_slot bits */
    uint32_t abi_min, abi_max;
    int32_t order; /* index in plugins[]: backend, model, then chain order */
    char bundle_dir[WEFT_MANIFEST_PATH_MAX];
    weft_lock_file library;
    weft_lock_file manifest;
    weft_options options; /* owned (weft_options_free) */
} weft_lock_plugin;

typedef struct weft_lock {
    uint32_t format;
    char id[WEFT_XXH128_HEX_LEN + 1];
    char candidate[WEFT_MANIFEST_NAME_MAX];
    weft_lock_file source;                  /* the candidate manifest it was frozen from */
    char model[WEFT_MANIFEST_PATH_MAX];     /* as the candidate wrote it */
    char model_dir[WEFT_MANIFEST_PATH_MAX]; /* resolved; "" when not local at freeze */
    uint32_t n_model_files;
    weft_lock_model_file *model_files; /* sorted by name */
    char backend[WEFT_MANIFEST_BACKEND_MAX];
    uint32_t n_plugins;
    weft_lock_plugin *plugins;
    uint32_t max_model_len, max_concurrency, threads; /* serving (0 = unset) */
    uint32_t has_mean_kl, has_p99_kl, has_ppl_ratio;  /* quality gate overrides */
    double mean_kl, p99_kl, ppl_ratio;
    char path[WEFT_LOCK_PATH_MAX]; /* where it was read from ("" when built in memory) */
} weft_lock;

/* Freezes a resolved candidate: hashes the candidate manifest, every plugin's library and
 * manifest, and the model files (through the hash cache) when model_dir is set. The id is
 * computed. */
weft_status weft_lock_freeze(const weft_resolved_candidate *c, weft_lock **out, weft_error *err);
/* The lock as JSON text (malloc'ed, NUL-terminated). canonical: without "id", keys sorted,
 * compact (what the id hashes); else indented for people, with "id". */
weft_status weft_lock_to_json(const weft_lock *l, int canonical, char **text, weft_error *err);
/* XXH3-128 hex of the canonical text. */
weft_status weft_lock_compute_id(const weft_lock *l, char id[WEFT_XXH128_HEX_LEN + 1],
                                 weft_error *err);
/* Writes the lock (recomputing l->id) to path, creating parent directories; atomic rename. */
weft_status weft_lock_write(weft_lock *l, const char *path, weft_error *err);
/* Parses a lock; refuses unknown formats, missing or mistyped fields (naming the field path,
 * e.g. "plugins[1].library.sha256") and an id that differs from the content's. */
weft_status weft_lock_parse(const char *text, size_t len, const char *name, weft_lock **out,
                            weft_error *err);
weft_status weft_lock_load(const char *path, weft_lock **out, weft_error *err);
void weft_lock_free(weft_lock *l);

/* One finding of check or diff, passed to the caller's report function. */
typedef void (*weft_lock_report_fn)(void *ctx, const char *line);

enum {
    WEFT_LOCK_CHECK_NO_CACHE = 1u << 0, /* re-hash model files even when the cache knows them */
};

/* Re-hashes every file the lock names and checks each plugin's ABI range against this
 * runtime's; reports one line per problem ("plugin x 1.0.0: library hash differs from lock:
 * expected A, found B (PATH)", "... missing file PATH"). *n_problems counts them. Returns
 * WEFT_OK when the check ran (problems or not); an error only when it could not run. */
weft_status weft_lock_check(const weft_lock *l, uint32_t flags, weft_lock_report_fn report,
                            void *ctx, uint32_t *n_problems, weft_error *err);
/* Reports what differs from a to b (plugins added or removed, versions, options, hashes,
 * model, serving); *n_diffs counts the lines. */
weft_status weft_lock_diff(const weft_lock *a, const weft_lock *b, weft_lock_report_fn report,
                           void *ctx, uint32_t *n_diffs, weft_error *err);

/* The default lock path for a candidate manifest: <its dir>/frozen/<candidate>.lock. */
void weft_lock_default_path(const char *manifest_path, const char *candidate, char *out,
                            size_t cap);

/* "backend", "model", "technique" for a weft_resolved_role; NULL when unknown. */
const char *weft_lock_role_name(uint32_t role);

#endif
