/* fake.batch-divergent: a wrong technique that only batching reveals. It fills three slots:
 *   scheduler: runs every live request in each step (running ones first, then waiting ones, in
 *              arrival order) within the step's token and sequence budgets, so that concurrent
 *              requests really share steps;
 *   pass:      puts a SCALE node named "batch-divergent.scale" (factor 1) before the lm_head;
 *   ops:       a cpu f32 implementation for exactly that node: a copy while the step holds one
 *              request, the negated hidden state (so the least likely token wins) when it holds
 *              more than one.
 * One request at a time it is exact; the eval batched-equals-serial gate must fail it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fake_head_scale.h"
#include "weft/sdk.h"

#define NAME "fake.batch-divergent"
#define NODE_NAME "batch-divergent.scale"

typedef struct divergent {
    int unused;
} divergent;

static weft_status dv_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    (void)opts;
    divergent *d = host->alloc(sizeof(*d));
    if (!d) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    d->unused = 0;
    *st = d;
    return WEFT_OK;
}

static void dv_destroy(void *st) {
    free(st);
}

/* ---- scheduler ----------------------------------------------------------------------------- */
static int earlier(const weft_sched_request *a, const weft_sched_request *b) {
    return a->arrival_ns < b->arrival_ns;
}

static weft_status dv_schedule(void *st, const weft_sched_request *reqs, uint32_t n,
                               const weft_sched_limits *lim, weft_sched_item *items,
                               uint32_t *n_items, weft_error *err) {
    (void)st;
    *n_items = 0;
    if (!lim || !lim->max_tokens)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "schedule: no token budget");
    uint32_t budget = lim->max_tokens, seqs = lim->max_seqs ? lim->max_seqs : 1;
    /* two passes: requests already running (state 1, 2), then waiting ones (state 0); within a
     * pass, by arrival (selection of the earliest not yet taken) */
    for (int pass = 0; pass < 2; pass++) {
        for (;;) {
            int32_t pick = -1;
            for (uint32_t i = 0; i < n; i++) {
                int running = reqs[i].state == 1 || reqs[i].state == 2;
                if (pass == 0 ? !running : reqs[i].state != 0) continue;
                int taken = 0;
                for (uint32_t k = 0; k < *n_items; k++)
                    taken |= items[k].index == i;
                if (taken) continue;
                if (pick < 0 || earlier(&reqs[i], &reqs[pick])) pick = (int32_t)i;
            }
            if (pick < 0 || budget == 0 || *n_items >= seqs || *n_items >= n) break;
            const weft_sched_request *r = &reqs[pick];
            uint32_t pending = r->n_prompt + r->n_generated - r->n_computed;
            weft_sched_item *it = &items[*n_items];
            it->index = (uint32_t)pick;
            it->action = 0;
            it->n_tokens = pending < budget ? pending : budget;
            it->reserved = 0; /* an item with nothing to compute is dropped below */
            budget -= it->n_tokens;
            (*n_items)++;
        }
    }
    /* drop items with nothing to do */
    uint32_t w = 0;
    for (uint32_t k = 0; k < *n_items; k++)
        if (items[k].n_tokens) items[w++] = items[k];
    *n_items = w;
    return WEFT_OK;
}

static const weft_scheduler_vtable dv_sched = {sizeof(weft_scheduler_vtable), dv_schedule, NULL};

/* ---- pass ---------------------------------------------------------------------------------- */
static weft_status dv_pass_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                               weft_graph *g, weft_error *err) {
    (void)st;
    (void)cfg;
    return fake_scale_before_head(gs, g, NAME, NODE_NAME, "batch-divergent.hidden", 1.0f, err);
}

static const weft_pass_vtable dv_pass = {sizeof(weft_pass_vtable), dv_pass_run, NULL};

/* ---- ops ----------------------------------------------------------------------------------- */
static int32_t dv_accepts(void *state, const weft_graph *g, const weft_node *node) {
    (void)state;
    (void)g;
    return node && !strcmp(node->name, NODE_NAME);
}

/* step: no allocation. */
static weft_status dv_scale(void *state, const weft_exec_ctx *ctx, const weft_node *node,
                            weft_error *err) {
    (void)state;
    const float *xp = NULL;
    float *yp = NULL;
    uint64_t n = 0;
    weft_status st = fake_scale_io(ctx, node, NAME, &xp, &yp, &n, err);
    if (st) return st;
    float f = (ctx->batch && ctx->batch->n_seqs > 1) ? -node->p.f[0] : node->p.f[0];
    for (uint64_t i = 0; i < n; i++)
        yp[i] = xp[i] * f;
    return WEFT_OK;
}

static weft_status dv_register(void *st, const char *backend, const weft_ops_service *ops,
                               weft_error *err) {
    return fake_scale_register(NAME, backend, ops, st, dv_scale, 1000, dv_accepts, err);
}

static const weft_opset_vtable dv_ops = {sizeof(weft_opset_vtable), dv_register};

static const weft_plugin_descriptor dv_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "1.0.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_SCHEDULER | WEFT_SLOT_PASS | WEFT_SLOT_OPS,
    .create = dv_create,
    .destroy = dv_destroy,
    .scheduler = &dv_sched,
    .pass = &dv_pass,
    .opset = &dv_ops,
};

WEFT_SDK_ENTRY(dv_desc, 1, 1)
