/* fake.step-fails: a technique that breaks the engine after a while, as a lost device would. Its
 * pass puts a SCALE node named "step-fails.copy" (factor 1) on the final hidden state before the
 * first lm_head; its cpu op copies that state for the first `after` executions (one a step) and
 * fails every later one with WEFT_ERR_INTERNAL. `weft serve` must then end every request with an
 * error, report failed on /health and exit 1 (docs/SERVE.md), not serve errors forever. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fake.step-fails"
#define NODE_NAME "step-fails.copy"

typedef struct step_fails {
    long long after; /* executions that succeed */
    long long runs;  /* executions so far (the engine runs one step at a time) */
} step_fails;

static weft_status sf_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    step_fails *s = host->alloc(sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    s->after = weft_sdk_option_int(opts, "after", 4);
    s->runs = 0;
    *st = s;
    return WEFT_OK;
}

static void sf_destroy(void *st) {
    free(st);
}

static weft_status sf_pass_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                               weft_graph *g, weft_error *err) {
    (void)st;
    (void)cfg;
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
    weft_tensor src = g->tensors[h]; /* tensor_add may move g->tensors */
    uint32_t y = gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, src.dtype, src.rank, src.shape,
                                "step-fails.hidden", err);
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
    n.p.f[0] = 1.0f;
    snprintf(n.name, sizeof(n.name), NODE_NAME);
    int32_t idx = gs->node_add(g, &n, at, err);
    if (idx < 0) return err ? err->code : WEFT_ERR_INTERNAL;
    if (gs->replace_uses(g, h, y, (uint32_t)idx + 1) < 0)
        return weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME, "cannot rewire the lm_head input");
    return WEFT_OK;
}

static const weft_pass_vtable sf_pass = {sizeof(weft_pass_vtable), sf_pass_run, NULL};

static int32_t sf_accepts(void *state, const weft_graph *g, const weft_node *node) {
    (void)state;
    (void)g;
    return node && !strcmp(node->name, NODE_NAME);
}

/* step: no allocation. */
static weft_status sf_copy(void *state, const weft_exec_ctx *ctx, const weft_node *node,
                           weft_error *err) {
    step_fails *s = state;
    if (!ctx || !node || !ctx->graph || !ctx->data || node->n_in < 1 || node->n_out < 1)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "incomplete context or node");
    if (++s->runs > s->after)
        return weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                              "injected failure: step %lld (the option after is %lld)", s->runs,
                              s->after);
    const weft_graph *g = ctx->graph;
    uint32_t xi = node->in[0], yi = node->out[0];
    if (xi >= g->n_tensors || yi >= g->n_tensors)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "tensor id out of range");
    const weft_tensor *x = &g->tensors[xi];
    if (x->dtype != WEFT_DTYPE_F32 || x->rank < 1 || x->rank > WEFT_MAX_DIMS)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "expected an f32 tensor");
    uint64_t cols = 1;
    for (uint32_t d = 1; d < x->rank; d++)
        cols *= (uint64_t)x->shape[d];
    uint64_t rows = x->rank > 1 ? ctx->n_tokens : (uint64_t)x->shape[0];
    uint64_t n = rows * cols;
    if (ctx->data[xi].bytes < n * 4 || ctx->data[yi].bytes < n * 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "buffers hold fewer than %llu floats",
                              (unsigned long long)n);
    memcpy(ctx->data[yi].ptr, ctx->data[xi].ptr, n * 4);
    return WEFT_OK;
}

static weft_status sf_register(void *st, const char *backend, const weft_ops_service *ops,
                               weft_error *err) {
    if (!backend || !ops || !ops->add)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "register_ops: no backend or service");
    if (strcmp(backend, "cpu")) return WEFT_OK;
    weft_op_impl impl;
    memset(&impl, 0, sizeof(impl));
    impl.size = sizeof(impl);
    impl.op = WEFT_OP_SCALE;
    snprintf(impl.backend, sizeof(impl.backend), "cpu");
    impl.dtype = WEFT_DTYPE_F32;
    impl.priority = 1000;
    impl.run = sf_copy;
    impl.state = st;
    impl.accepts = sf_accepts;
    return ops->add(ops->self, &impl, err);
}

static const weft_opset_vtable sf_ops = {sizeof(weft_opset_vtable), sf_register};

static const weft_plugin_descriptor sf_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "1.0.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS | WEFT_SLOT_OPS,
    .create = sf_create,
    .destroy = sf_destroy,
    .pass = &sf_pass,
    .opset = &sf_ops,
};

WEFT_SDK_ENTRY(sf_desc, 1, 1)
