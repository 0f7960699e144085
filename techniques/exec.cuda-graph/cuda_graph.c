/* exec.cuda-graph: the executor slot on the cuda backend. A decode step (every row a logit row:
 * n_logits == n_tokens, at most `max_tokens` rows) is captured once per (rows, logit rows) shape
 * after `warmup` eager runs of that shape, and replayed with one cuGraphLaunch from then on:
 * a batch-1 decode step is one graph launch instead of ~15 launches per layer. The mechanism,
 * and why a capture stays valid, is cg_core.c (shared with exec.persistent); this bundle is that
 * mechanism with no hooks. */
#include <stdlib.h>

#include "cg_core.h"

#define NAME "exec.cuda-graph"
#define VERSION "0.1.0"

static weft_status cg_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    if (!host || !st) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "create: NULL argument");
    cg_core *c = calloc(1, sizeof(*c));
    if (!c) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    weft_status r = cg_core_init(c, NAME, host, opts, err);
    if (r) {
        free(c);
        return r;
    }
    *st = c;
    return WEFT_OK;
}

static void cg_destroy(void *st) {
    free(st);
}

static weft_status cg_prepare(void *st, const weft_graph *g, const weft_op_impl *const *impls,
                              weft_exec_ctx *ctx, void **prepared, weft_error *err) {
    return cg_core_prepare(st, g, impls, ctx, prepared, err);
}

static weft_status cg_run(void *st, void *prepared, weft_exec_ctx *ctx, weft_error *err) {
    return cg_core_run(st, prepared, ctx, err);
}

static void cg_release(void *st, void *prepared) {
    cg_core_release(st, prepared);
}

static const weft_executor_vtable cg_vtable = {
    .size = sizeof(weft_executor_vtable),
    .prepare = cg_prepare,
    .run = cg_run,
    .release = cg_release,
};

static const weft_plugin_descriptor cg_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = VERSION,
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_EXECUTOR,
    .create = cg_create,
    .destroy = cg_destroy,
    .executor = &cg_vtable,
};

WEFT_SDK_ENTRY(cg_desc, 1, 1)
