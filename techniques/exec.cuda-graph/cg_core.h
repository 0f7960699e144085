/* The capture-and-replay executor shared by exec.cuda-graph and exec.persistent (compiled into
 * both bundles): decode-shaped steps (every row a logit row, at most max_tokens rows) are
 * captured once per (rows, logit rows, KV-length bucket) shape after `warmup` eager runs and
 * replayed with one cuGraphLaunch; a hash of every buffer address a capture bakes in is checked
 * each run and the captures are dropped when it changes; prefill steps and shapes whose capture
 * fails run eagerly. Hooks let a technique turn a capture into something else (exec.persistent:
 * a program for one persistent kernel) and run that instead of the replay. cg_core.c holds the
 * mechanism and why a capture stays valid. */
#ifndef WEFT_CG_CORE_H
#define WEFT_CG_CORE_H

#include <cuda.h>

#include "weft/sdk.h"

/* batch sizes up to max_tokens times the KV-length buckets of a cache (7 up to 32,768) */
#define CG_MAX_SHAPES 128

enum { CG_SHAPE_WARM = 0, CG_SHAPE_CAPTURED = 1, CG_SHAPE_EAGER = 2 };

typedef struct cg_shape {
    uint32_t n_tokens, n_logits;
    int64_t kv_len; /* the KV-length bucket (weft_sdk_kv_bucket; 0: no host positions) */
    uint32_t state, runs;
    CUgraphExec exec;
    void *ext; /* what the hooks made of this shape's capture (owned by the hooks) */
} cg_shape;

/* Optional (any may be NULL). */
typedef struct cg_hooks {
    /* after a capture succeeded, with the captured graph (destroyed after the call) */
    void (*captured)(void *self, cg_shape *sh, CUgraph graph);
    /* a captured shape's step: *ran = 1 when the hook ran it, else the graph is replayed */
    weft_status (*run)(void *self, cg_shape *sh, weft_exec_ctx *ctx, int *ran, weft_error *err);
    /* drops what captured() made of sh (sh->ext) */
    void (*drop)(void *self, cg_shape *sh);
    void *self;
} cg_hooks;

typedef struct cg_core {
    const char *name; /* the technique, for messages */
    const weft_host_services *host;
    const weft_profile_service *profile;
    CUcontext ctx;
    uint32_t max_tokens, warmup;
    int enabled;
    uint64_t captures, replays, eager_runs, invalidations;
    cg_hooks hooks;
} cg_core;

/* create: the options max_tokens (1..4096, default 8), warmup (1..100, default 1) and enabled
 * (default true), and the profile service. */
weft_status cg_core_init(cg_core *c, const char *name, const weft_host_services *host,
                         const weft_options *opts, weft_error *err);

/* The executor's prepare, run and release over c. */
weft_status cg_core_prepare(cg_core *c, const weft_graph *g, const weft_op_impl *const *impls,
                            weft_exec_ctx *ctx, void **prepared, weft_error *err);
weft_status cg_core_run(cg_core *c, void *prepared, weft_exec_ctx *ctx, weft_error *err);
void cg_core_release(cg_core *c, void *prepared);

/* A CUDA driver result as a weft_status with its name in err ("<what> failed (<name>)"). */
weft_status cg_core_check(const cg_core *c, CUresult r, const char *what, weft_error *err);

/* The profile service when profiling is on, else NULL. */
const weft_profile_service *cg_core_profile(const cg_core *c);

#endif
