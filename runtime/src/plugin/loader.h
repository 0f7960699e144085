/* The loader: one plugin library from a path to a created instance, checked at each step.
 * The library is opened once (open(2)); its SHA-256 is verified on that descriptor when a lock
 * gives one; the same file is then dlopen()ed through /proc/self/fd/N, so nothing can swap the
 * file between the check and the load. The entry function negotiates the ABI version, and the
 * descriptor it returns is checked against the manifest (name, version, kind, slots), the ABI
 * rules (size, reserved zero, a sane vtable for each declared slot and no other, required
 * hooks present) before create() runs with validated options. Each refusal names the plugin
 * and says what was expected and what was found. candidate.h builds on this. */
#ifndef WEFT_PLUGIN_LOADER_H
#define WEFT_PLUGIN_LOADER_H

#include <stdint.h>

#include "plugin/candidate.h"
#include "weft/plugin.h"

/* What the manifest (and, for a lock, the lock) says the library must be. */
typedef struct weft_plugin_expect {
    const char *name;          /* the manifest's name (required) */
    const char *version;       /* the manifest's version text (required) */
    uint32_t kind;             /* weft_plugin_kind (required) */
    uint32_t slots;            /* weft_slot bits (required) */
    uint32_t abi_min, abi_max; /* the manifest's ABI range; 0, 0 = not checked */
    const char *sha256;        /* SHA-256 hex from a lock; NULL = not checked (development) */
} weft_plugin_expect;

/* The size of weft_plugin_descriptor as ABI v1 defined it (the smallest a plugin may return). */
#define WEFT_DESCRIPTOR_V1_SIZE ((uint32_t)sizeof(weft_plugin_descriptor))

/* Opens, verifies, loads and negotiates library; checks the descriptor against ex. On success
 * p holds the descriptor, the dl handle and the open descriptor; create is not called yet. On
 * failure p is left closed (nothing to release). */
weft_status weft_plugin_open(const char *library, const weft_plugin_expect *ex,
                             weft_loaded_plugin *p, weft_error *err);
/* Calls create with a copy of opts (kept in p->opts for the plugin's lifetime). */
weft_status weft_plugin_instantiate(weft_loaded_plugin *p, const weft_host_services *host,
                                    const weft_options *opts, weft_error *err);
/* destroy (when created), dlclose, close the descriptor, free the options. Idempotent. */
void weft_plugin_close(weft_loaded_plugin *p);

/* Checks a descriptor against ex and the ABI rules, without loading anything (the loader's
 * own check, exposed for tests and `weft plugins check`). negotiated is the version the entry
 * function chose. */
weft_status weft_plugin_check_descriptor(const weft_plugin_descriptor *d, uint32_t negotiated,
                                         const weft_plugin_expect *ex, weft_error *err);

/* "plugin NAME VERSION" as refusals start, into buf. */
const char *weft_plugin_label(const weft_plugin_expect *ex, char *buf, size_t cap);

#endif
