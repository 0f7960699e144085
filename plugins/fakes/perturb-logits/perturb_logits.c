/* fake.perturb-logits: a wrong technique that greedy decoding cannot see. Its pass puts a SCALE
 * node (factor, default 1.6) on the final hidden state right before the first LM_HEAD, so every
 * logit is multiplied by the factor (the head is linear). The order of the logits, and so every
 * greedy token, stays the same, while the next-token distributions sharpen: the eval quality
 * gate (KL against reference logits) must fail it and the greedy gates must not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fake.perturb-logits"

typedef struct perturb {
    float factor;
} perturb;

static weft_status perturb_create(const weft_host_services *host, const weft_options *opts,
                                  void **st, weft_error *err) {
    perturb *p = host->alloc(sizeof(*p));
    if (!p) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    p->factor = (float)weft_sdk_option_float(opts, "factor", 1.6);
    *st = p;
    return WEFT_OK;
}

static void perturb_destroy(void *st) {
    free(st);
}

/* setup: runs once per graph (bucket). */
static weft_status perturb_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                               weft_graph *g, weft_error *err) {
    (void)cfg;
    const perturb *p = st;
    if (!gs || !g) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "no graph or service");
    uint32_t at = 0;
    while (at < g->n_nodes && g->nodes[at].op != WEFT_OP_LM_HEAD)
        at++;
    if (at == g->n_nodes)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "the graph has no lm_head node");
    const weft_node *head = &g->nodes[at];
    if (head->n_in < 1 || head->in[0] >= g->n_tensors)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "lm_head node %u has no input",
                              (unsigned)at);
    uint32_t h = head->in[0];
    /* tensor_add may move g->tensors: copy the shape first */
    weft_tensor src = g->tensors[h];
    uint32_t y = gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, src.dtype, src.rank, src.shape,
                                "perturb.hidden", err);
    if (y == WEFT_TENSOR_NONE) return err ? err->code : WEFT_ERR_INTERNAL;
    weft_node n;
    memset(&n, 0, sizeof(n));
    for (int i = 0; i < WEFT_NODE_MAX_IN; i++)
        n.in[i] = WEFT_TENSOR_NONE;
    n.op = WEFT_OP_SCALE;
    n.layer = -1;
    n.n_in = 1;
    n.n_out = 1;
    n.in[0] = h;
    n.out[0] = y;
    n.p.f[0] = p->factor;
    snprintf(n.name, sizeof(n.name), "perturb.scale");
    int32_t idx = gs->node_add(g, &n, at, err);
    if (idx < 0) return err ? err->code : WEFT_ERR_INTERNAL;
    /* the head is now at idx + 1; from there on, read the scaled state */
    if (gs->replace_uses(g, h, y, (uint32_t)idx + 1) < 0)
        return weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME, "cannot rewire the lm_head input");
    return WEFT_OK;
}

static const weft_pass_vtable perturb_pass = {sizeof(weft_pass_vtable), perturb_run, NULL};

static const weft_plugin_descriptor perturb_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "1.0.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = perturb_create,
    .destroy = perturb_destroy,
    .pass = &perturb_pass,
};

WEFT_SDK_ENTRY(perturb_desc, 1, 1)
