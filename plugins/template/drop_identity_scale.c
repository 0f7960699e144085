/* template.drop-identity-scale: the template technique. A graph pass that removes SCALE nodes
 * whose factor is 1 (within the `tolerance` option): their output is rewired to their input,
 * so every later reader reads the input directly and one kernel launch per node disappears.
 * With tolerance 0 the pass is exact (bit-identical outputs). A scale that writes a graph
 * output, or whose input and output differ in dtype or shape, is kept: removing it would
 * change what the step returns. The file shows the parts every technique has: options read
 * in create, state freed in destroy, a setup-class hook that validates what it is given, and
 * the exported entry through the SDK. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "template.drop-identity-scale"

typedef struct drop_state {
    const weft_host_services *host;
    double tolerance;
    uint32_t removed; /* nodes removed over the instance's life */
} drop_state;

/* setup */
static weft_status drop_create(const weft_host_services *host, const weft_options *opts, void **st,
                               weft_error *err) {
    drop_state *s = host->alloc(sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    s->host = host;
    s->tolerance = weft_sdk_option_float(opts, "tolerance", 0.0);
    s->removed = 0;
    if (!(s->tolerance >= 0.0 && s->tolerance <= 1e-3)) {
        host->free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option tolerance: expected 0..0.001, found %g", s->tolerance);
    }
    *st = s;
    return WEFT_OK;
}

static void drop_destroy(void *st) {
    drop_state *s = st;
    if (s) s->host->free(s);
}

static int same_shape(const weft_tensor *a, const weft_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (uint32_t d = 0; d < a->rank && d < WEFT_MAX_DIMS; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* setup: rewrites g in place through gs. */
static weft_status drop_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                            weft_graph *g, weft_error *err) {
    drop_state *s = st;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    uint32_t removed = 0, i = 0;
    while (i < g->n_nodes) {
        const weft_node *n = &g->nodes[i];
        int identity = n->op == WEFT_OP_SCALE && n->n_in == 1 && n->n_out == 1 &&
                       fabs((double)n->p.f[0] - 1.0) <= s->tolerance;
        uint32_t x = n->in[0], y = n->out[0];
        if (!identity || x >= g->n_tensors || y >= g->n_tensors ||
            g->tensors[y].kind == WEFT_TENSOR_OUTPUT ||
            !same_shape(&g->tensors[x], &g->tensors[y])) {
            i++;
            continue;
        }
        /* readers of y after this node read x instead; then the node goes */
        if (gs->replace_uses(g, y, x, i + 1) < 0 || gs->node_remove(g, i, err) < 0)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not remove scale node %u", i);
        removed++; /* node i is now the next one: do not advance */
    }
    s->removed += removed;
    if (removed)
        s->host->log(WEFT_LOG_INFO, NAME, "removed %u identity scale node(s)", (unsigned)removed);
    return WEFT_OK;
}

static const weft_pass_vtable drop_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = drop_run,
    .derive_weight = NULL, /* (optional): this pass derives no weights */
};

static const weft_plugin_descriptor drop_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,       /* must equal manifest.yaml's name */
    .version = "0.1.0", /* and its version */
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS, /* and its slots */
    .create = drop_create,
    .destroy = drop_destroy,
    .pass = &drop_pass,
};

WEFT_SDK_ENTRY(drop_desc, 1, 1)

/* For tests: how many nodes the instance removed. */
WEFT_EXPORT uint32_t template_drop_identity_scale_removed(const void *st) {
    return st ? ((const drop_state *)st)->removed : 0;
}
