/* A loaded candidate: the plugin set of a lock (or of a candidate manifest resolved on the
 * spot, for `weft run --model`), every library opened, negotiated and created with its
 * validated options. This is what the engine consumes; plugin/lock.c and plugin/loader.c
 * produce it. */
#ifndef WEFT_PLUGIN_CANDIDATE_H
#define WEFT_PLUGIN_CANDIDATE_H

#include <stddef.h>

#include "weft/plugin.h"

typedef struct weft_loaded_plugin {
    char name[64];
    char version[32];
    char bundle_dir[1024];
    const weft_plugin_descriptor *desc;
    void *state;       /* from desc->create */
    void *dl;          /* dlopen handle */
    weft_options opts; /* validated, defaults filled */
    int32_t order;     /* position in chains (passes run in this order) */
    /* appended by the loader (loader.h) */
    int fd;               /* the library's descriptor, open while loaded (-1 when closed) */
    char library[1280];   /* the library path as given */
    char sha256[72];      /* SHA-256 hex of the bytes that were loaded */
    uint32_t abi_version; /* negotiated */
    uint32_t kind;        /* weft_plugin_kind */
    uint32_t slots;       /* weft_slot bits */
    int32_t created;      /* 1 once create succeeded (destroy is then owed) */
} weft_loaded_plugin;

typedef struct weft_candidate {
    char id[40];          /* XXH3-128 hex of the canonical lock ("" when not from a lock) */
    char path[1024];      /* the lock or manifest it came from */
    char model_dir[1024]; /* resolved local model directory */
    char backend[32];     /* "cpu", "cuda" */
    size_t n_plugins;
    weft_loaded_plugin *plugins; /* backend first, then model, then techniques in chain order */
    /* serving defaults from the candidate manifest (0 = unset) */
    uint32_t max_model_len;
    uint32_t max_concurrency;
    uint32_t threads;
} weft_candidate;

/* Loads a lock written by `weft candidate freeze`: re-hashes every library on its open file
 * descriptor before loading that same file; any mismatch refuses, naming the file. */
weft_status weft_candidate_load_lock(const char *lock_path, const weft_host_services *host,
                                     weft_candidate **out, weft_error *err);
/* Resolves a candidate manifest and loads it without a lock (development path). model_dir,
 * when not NULL, replaces the manifest's model. */
weft_status weft_candidate_load_manifest(const char *manifest_path, const char *model_dir,
                                         const weft_host_services *host, weft_candidate **out,
                                         weft_error *err);
void weft_candidate_unload(weft_candidate *c);

/* The loaded plugin that fills `slot` (a weft_slot bit), or NULL: the first of a chain slot;
 * for another slot its provider, the last filler (a technique may layer on one it requires,
 * resolve.c). */
const weft_loaded_plugin *weft_candidate_slot(const weft_candidate *c, uint32_t slot);

#endif
