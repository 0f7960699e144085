/* The default executor: eager. Runs the nodes of a resolved graph in order, each through its
 * op implementation; with profiling on, each node is a range named by its op class so the
 * time per class (the planner's Amdahl fractions) can be read back. */
#include <stdlib.h>

#include "engine/providers.h"
#include "graph/graph.h"
#include "util/error.h"

typedef struct eager {
    const weft_profile_service *profile;
} eager;

typedef struct eager_prepared {
    const weft_graph *g;
    const weft_op_impl *const *impls;
    const char **classes; /* (n_nodes) op names, looked up once */
} eager_prepared;

void *weft_exec_eager_new(const weft_profile_service *profile) {
    eager *e = calloc(1, sizeof(*e));
    if (e) e->profile = profile;
    return e;
}

void weft_exec_eager_free(void *st) {
    free(st);
}

static weft_status eager_prepare(void *st, const weft_graph *g, const weft_op_impl *const *impls,
                                 weft_exec_ctx *ctx, void **prepared, weft_error *err) {
    (void)st;
    (void)ctx;
    if (!g || !impls || !prepared)
        return weft_error_set(err, WEFT_ERR_INVALID, "exec.eager", "prepare: missing argument");
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (!impls[i] || !impls[i]->run)
            return weft_error_set(err, WEFT_ERR_INVALID, "exec.eager",
                                  "prepare: node %s has no implementation", g->nodes[i].name);
    eager_prepared *p = calloc(1, sizeof(*p));
    const char **classes = calloc(g->n_nodes ? g->n_nodes : 1, sizeof(*classes));
    if (!p || !classes) {
        free(p);
        free(classes);
        return weft_error_set(err, WEFT_ERR_NOMEM, "exec.eager", "out of memory");
    }
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const char *name = weft_op_name(g->nodes[i].op);
        classes[i] = name ? name : "user";
    }
    p->g = g;
    p->impls = impls;
    p->classes = classes;
    *prepared = p;
    return WEFT_OK;
}

static weft_status eager_run(void *st, void *prepared, weft_exec_ctx *ctx, weft_error *err) {
    eager *e = st;
    eager_prepared *p = prepared;
    const weft_graph *g = p->g;
    const weft_profile_service *prof =
        e->profile && e->profile->enabled(e->profile->self) ? e->profile : NULL;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_op_impl *impl = p->impls[i];
        if (prof) prof->range_begin(prof->self, p->classes[i], ctx->stream);
        weft_status s = impl->run(impl->state, ctx, &g->nodes[i], err);
        if (prof) prof->range_end(prof->self, p->classes[i], ctx->stream);
        if (s != WEFT_OK) {
            if (err && !err->message[0])
                weft_error_set(err, s < 0 ? s : WEFT_ERR_INTERNAL, impl->provider,
                               "op failed (%s) without a message", weft_status_name(s));
            weft_error_prefix(err, "node %s", g->nodes[i].name);
            return s < 0 ? s : WEFT_ERR_INTERNAL;
        }
    }
    return WEFT_OK;
}

static void eager_release(void *st, void *prepared) {
    (void)st;
    eager_prepared *p = prepared;
    if (!p) return;
    free(p->classes);
    free(p);
}

const weft_executor_vtable weft_exec_eager_vtable = {
    .size = sizeof(weft_executor_vtable),
    .prepare = eager_prepare,
    .run = eager_run,
    .release = eager_release,
};
