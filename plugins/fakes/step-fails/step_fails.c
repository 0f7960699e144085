/* fake.step-fails: a technique that breaks the engine after a while, as a lost device would. Its
 * pass puts a SCALE node named "step-fails.copy" (factor 1) on the final hidden state before the
 * first lm_head; its cpu op copies that state for the first `after` executions (one a step) and
 * fails every later one with WEFT_ERR_INTERNAL. `weft serve` must then end every request with an
 * error, report failed on /health and exit 1 (docs/SERVE.md), not serve errors forever. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fake_head_scale.h"
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
    return fake_scale_before_head(gs, g, NAME, NODE_NAME, "step-fails.hidden", 1.0f, err);
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
    if (++s->runs > s->after)
        return weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                              "injected failure: step %lld (the option after is %lld)", s->runs,
                              s->after);
    const float *x = NULL;
    float *y = NULL;
    uint64_t n = 0;
    weft_status st = fake_scale_io(ctx, node, NAME, &x, &y, &n, err);
    if (st) return st;
    memcpy(y, x, n * 4);
    return WEFT_OK;
}

static weft_status sf_register(void *st, const char *backend, const weft_ops_service *ops,
                               weft_error *err) {
    return fake_scale_register(NAME, backend, ops, st, sf_copy, 1000, sf_accepts, err);
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
