/* Runs the pass chain of a candidate over a graph (see passes.h). Passes run in the order the
 * resolver gave them (manifests' `after` constraints become weft_loaded_plugin.order); the graph
 * is validated after each one, so the pass that broke an invariant is the one named. */
#include "graph/passes.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "util/error.h"

static int is_pass(const weft_loaded_plugin *p) {
    return p->desc && (p->desc->slots & WEFT_SLOT_PASS) && p->desc->pass && p->desc->pass->run;
}

weft_status weft_passes_run(const weft_candidate *c, const weft_model_config *cfg, weft_graph *g,
                            uint32_t *n_run, weft_error *err) {
    if (n_run) *n_run = 0;
    if (!c || !g) return weft_error_set(err, WEFT_ERR_INVALID, "passes", "missing argument");
    const weft_graph_service *gs = weft_graph_service_get();
    /* Stable order by `order`: an insertion-ordered pick of the next smallest. */
    size_t n = c->n_plugins;
    uint8_t *done = calloc(n ? n : 1, 1);
    if (!done) return weft_error_set(err, WEFT_ERR_NOMEM, "passes", "out of memory");
    weft_status st = WEFT_OK;
    for (;;) {
        const weft_loaded_plugin *next = NULL;
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            const weft_loaded_plugin *p = &c->plugins[i];
            if (done[i] || !is_pass(p)) continue;
            if (!next || p->order < next->order) {
                next = p;
                at = i;
            }
        }
        if (!next) break;
        done[at] = 1;
        weft_error_clear(err);
        st = next->desc->pass->run(next->state, cfg, gs, g, err);
        if (st < 0) {
            if (err && !err->message[0])
                weft_error_set(err, st, next->name, "pass failed (%s) without a message",
                               weft_status_name(st));
            else
                weft_error_prefix(err, "pass %s", next->name);
            break;
        }
        st = weft_graph_validate(g, err);
        if (st != WEFT_OK) {
            weft_error_prefix(err, "after pass %s", next->name);
            break;
        }
        if (n_run) (*n_run)++;
    }
    free(done);
    return st < 0 ? st : WEFT_OK;
}

const weft_loaded_plugin *weft_passes_deriver(const weft_candidate *c, const char *deriver) {
    if (!c || !deriver || !deriver[0]) return NULL;
    for (size_t i = 0; i < c->n_plugins; i++)
        if (is_pass(&c->plugins[i]) && !strcmp(c->plugins[i].name, deriver)) return &c->plugins[i];
    return NULL;
}
