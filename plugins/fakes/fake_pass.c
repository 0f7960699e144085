/* fake.pass: a graph pass that adds a node, for the engine's graph tests. Before the first
 * LM_HEAD node it inserts a SCALE node (y = x * factor) on the LM_HEAD's hidden-state input and
 * rewires the LM_HEAD to read y. With factor 1 the logits are unchanged (the pass is exact);
 * with factor 2 every logit doubles (lm_head is linear), which a test can assert. It uses only
 * the graph service it is handed. */
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fake.pass"

typedef struct pass_state {
    float factor;
    uint32_t runs; /* how many graphs this pass rewrote */
} pass_state;

static weft_status pass_create(const weft_host_services *host, const weft_options *opts, void **st,
                               weft_error *err) {
    pass_state *s = host->alloc(sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    s->factor = (float)weft_sdk_option_float(opts, "factor", 1.0);
    s->runs = 0;
    *st = s;
    return WEFT_OK;
}

static void pass_destroy(void *st) {
    free(st);
}

static weft_status pass_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                            weft_graph *g, weft_error *err) {
    pass_state *s = st;
    if (!gs || !g) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "graph or service is NULL");
    uint32_t head = g->n_nodes;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == WEFT_OP_LM_HEAD) {
            head = i;
            break;
        }
    if (head == g->n_nodes)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "expected an lm_head node in the graph, found none in %u nodes",
                              (unsigned)g->n_nodes);
    uint32_t x = g->nodes[head].in[0];
    if (g->nodes[head].n_in < 1 || x >= g->n_tensors)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "lm_head node %u has no valid input",
                              (unsigned)head);
    /* Copy what we need: tensor_add may grow (move) the tensor array. */
    weft_tensor xt = g->tensors[x];
    char name[WEFT_NAME_MAX];
    snprintf(name, sizeof(name), "fake.pass.scaled");
    uint32_t y = gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, xt.dtype, xt.rank, xt.shape, name, err);
    if (y == WEFT_TENSOR_NONE) return err ? err->code : WEFT_ERR_INTERNAL;
    weft_node n;
    memset(&n, 0, sizeof(n));
    n.op = WEFT_OP_SCALE;
    n.layer = -1;
    n.n_in = 1;
    n.n_out = 1;
    for (int k = 0; k < WEFT_NODE_MAX_IN; k++)
        n.in[k] = WEFT_TENSOR_NONE;
    n.in[0] = x;
    n.out[0] = y;
    n.p.f[0] = s->factor;
    snprintf(n.name, sizeof(n.name), "fake.pass.scale");
    int32_t at = gs->node_add(g, &n, head, err);
    if (at < 0) return err ? err->code : WEFT_ERR_INTERNAL;
    /* The lm_head moved to at + 1; only it and later nodes read the scaled tensor. */
    if (gs->replace_uses(g, x, y, (uint32_t)at + 1) < 0)
        return weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME, "replace_uses failed");
    s->runs++;
    return WEFT_OK;
}

static const weft_pass_vtable pass_vt = {sizeof(weft_pass_vtable), pass_run, NULL};

static const weft_plugin_descriptor pass_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "1.0.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = pass_create,
    .destroy = pass_destroy,
    .pass = &pass_vt,
};

WEFT_SDK_ENTRY(pass_desc, 1, 1)

/* For tests: how many graphs the instance rewrote. */
WEFT_EXPORT uint32_t weft_fake_pass_runs(const void *st) {
    return st ? ((const pass_state *)st)->runs : 0;
}
