/* `weft pull`: fetches a model into the model cache from the Hugging Face hub, from a mirror URL
 * or from a local mirror folder, resumably (FILE.part plus a Range request or an offset copy),
 * verified (hub LFS sha256 / X-Linked-Etag, git blob ids, SHA256SUMS, the pinned hashes of the
 * built-in aliases) and atomically (rename after verification). The cache layout, the mirror
 * layouts and the record <dir>/.weft-pull.json are described in docs/PULL.md.
 *
 * Cache rule (shared with the model resolver, keep in step):
 *   root  = $WEFT_CACHE, else $XDG_CACHE_HOME/weft, else $HOME/.cache/weft
 *   dir   = root/models/<name>, name = the alias ("stories260k") or the hub id with '/'
 *           replaced by "--" ("Qwen/Qwen3-0.6B" -> "Qwen--Qwen3-0.6B"). */
#ifndef WEFT_FILES_PULL_H
#define WEFT_FILES_PULL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

typedef struct weft_pull_options {
    const char *id;       /* hub id "org/name" (or "name") or an alias such as "stories260k" */
    const char *revision; /* NULL: "main" */
    const char *dir;      /* NULL: the cache folder of id */
    int force;            /* fetch again even files that are present and verified */
    const char *mirror;   /* NULL: $WEFT_MODEL_MIRROR; "" : none (use the hub) */
    const char *endpoint; /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    int progress;         /* -1: a progress bar when stderr is a terminal; 0 never; 1 always */
} weft_pull_options;

typedef struct weft_pull_stats {
    uint32_t files;   /* files in the model */
    uint32_t fetched; /* files transferred (fully or the rest of a .part) */
    uint32_t resumed; /* of those, continued from an existing .part */
    uint32_t skipped; /* already present and verified */
    uint32_t retries; /* requests made again after a busy answer or a cut-off transfer */
    uint64_t bytes;   /* bytes transferred in this call */
    char dir[4096];   /* where the model now is */
} weft_pull_stats;

void weft_pull_options_default(weft_pull_options *o);

/* The cache root (see above), without a trailing slash. */
weft_status weft_pull_cache_root(char *out, size_t cap, weft_error *err);
/* The folder name of id in the cache: the lower-case alias, or org--name. Refuses ids that are
 * not [A-Za-z0-9._-]+ with at most one '/' (no "..", no empty part). */
weft_status weft_pull_cache_name(const char *id, char *out, size_t cap, weft_error *err);
/* root/models/<name>. */
weft_status weft_pull_model_dir(const char *id, char *out, size_t cap, weft_error *err);

/* Fetches the model. stats (optional) says what was done. */
weft_status weft_pull_model(const weft_pull_options *o, weft_pull_stats *stats, weft_error *err);

#endif
