/* What the fakes that act on the final hidden state share (fake.pass, fake.op, and in their own
 * folders fake.perturb-logits, fake.batch-divergent, fake.step-fails): a graph pass step that
 * puts a SCALE node named `node_name` on the input of the first LM_HEAD and rewires the head to
 * read it, and, for the fakes that run SCALE nodes themselves, the checks and pointers of a
 * node's f32 input and output and the registration of a cpu SCALE implementation. */
#ifndef WEFT_FAKE_HEAD_SCALE_H
#define WEFT_FAKE_HEAD_SCALE_H

#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

static inline weft_status fake_scale_before_head(const weft_graph_service *gs, weft_graph *g,
                                                 const char *plugin, const char *node_name,
                                                 const char *tensor_name, float factor,
                                                 weft_error *err) {
    if (!gs || !g) return weft_sdk_error(err, WEFT_ERR_INVALID, plugin, "no graph or service");
    uint32_t at = 0;
    while (at < g->n_nodes && g->nodes[at].op != WEFT_OP_LM_HEAD)
        at++;
    if (at == g->n_nodes || g->nodes[at].n_in < 1 || g->nodes[at].in[0] >= g->n_tensors)
        return weft_sdk_error(err, WEFT_ERR_INVALID, plugin, "no lm_head node with an input");
    uint32_t h = g->nodes[at].in[0];
    weft_tensor src = g->tensors[h]; /* tensor_add may move g->tensors */
    uint32_t y =
        gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, src.dtype, src.rank, src.shape, tensor_name, err);
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
    n.p.f[0] = factor;
    snprintf(n.name, sizeof(n.name), "%s", node_name);
    int32_t idx = gs->node_add(g, &n, at, err);
    if (idx < 0) return err ? err->code : WEFT_ERR_INTERNAL;
    /* the head is now at idx + 1; from there on, read the new tensor */
    if (gs->replace_uses(g, h, y, (uint32_t)idx + 1) < 0)
        return weft_sdk_error(err, WEFT_ERR_INTERNAL, plugin, "cannot rewire the lm_head input");
    return WEFT_OK;
}

/* The node's f32 input and output for this step (n floats each), checked against the graph. */
static inline weft_status fake_scale_io(const weft_exec_ctx *ctx, const weft_node *node,
                                        const char *plugin, const float **x, float **y, uint64_t *n,
                                        weft_error *err) {
    if (!ctx || !node || !ctx->graph || !ctx->data || node->n_in < 1 || node->n_out < 1)
        return weft_sdk_error(err, WEFT_ERR_INVALID, plugin, "incomplete context or node");
    const weft_graph *g = ctx->graph;
    uint32_t xi = node->in[0], yi = node->out[0];
    if (xi >= g->n_tensors || yi >= g->n_tensors)
        return weft_sdk_error(err, WEFT_ERR_INVALID, plugin, "tensor id out of range");
    const weft_tensor *t = &g->tensors[xi];
    if (t->dtype != WEFT_DTYPE_F32 || g->tensors[yi].dtype != WEFT_DTYPE_F32 || t->rank < 1 ||
        t->rank > WEFT_MAX_DIMS)
        return weft_sdk_error(err, WEFT_ERR_INVALID, plugin,
                              "expected f32 tensors of rank 1..%d, found dtype %u rank %u",
                              WEFT_MAX_DIMS, (unsigned)t->dtype, (unsigned)t->rank);
    uint64_t cols = 1;
    for (uint32_t d = 1; d < t->rank; d++)
        cols *= (uint64_t)t->shape[d];
    uint64_t rows = t->rank > 1 ? ctx->n_tokens : (uint64_t)t->shape[0];
    *n = rows * cols;
    if (ctx->data[xi].bytes < *n * 4 || ctx->data[yi].bytes < *n * 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, plugin, "buffers hold fewer than %llu floats",
                              (unsigned long long)*n);
    *x = ctx->data[xi].ptr;
    *y = ctx->data[yi].ptr;
    return WEFT_OK;
}

/* Registers run at priority for f32 SCALE nodes (those accepts takes, or all when it is NULL),
 * on the cpu backend only. */
static inline weft_status fake_scale_register(
    const char *plugin, const char *backend, const weft_ops_service *ops, void *state,
    weft_op_fn run, int32_t priority,
    int32_t (*accepts)(void *, const weft_graph *, const weft_node *), weft_error *err) {
    if (!backend || !ops || !ops->add)
        return weft_sdk_error(err, WEFT_ERR_INVALID, plugin, "register_ops: no backend or service");
    if (strcmp(backend, "cpu")) return WEFT_OK;
    weft_op_impl impl;
    memset(&impl, 0, sizeof(impl));
    impl.size = sizeof(impl);
    impl.op = WEFT_OP_SCALE;
    snprintf(impl.backend, sizeof(impl.backend), "cpu");
    impl.dtype = WEFT_DTYPE_F32;
    impl.priority = priority;
    impl.run = run;
    impl.state = state;
    impl.accepts = accepts;
    return ops->add(ops->self, &impl, err);
}

#endif
