/* fake.pass: a graph pass that adds a node, for the engine's graph tests. Before the first
 * LM_HEAD node it inserts a SCALE node (y = x * factor) on the LM_HEAD's hidden-state input and
 * rewires the LM_HEAD to read y. With factor 1 the logits are unchanged (the pass is exact);
 * with factor 2 every logit doubles (lm_head is linear), which a test can assert. It uses only
 * the graph service it is handed. */
#include <stdlib.h>
#include <string.h>

#include "fake_head_scale.h"
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
    (void)cfg;
    pass_state *s = st;
    weft_status rc =
        fake_scale_before_head(gs, g, NAME, "fake.pass.scale", "fake.pass.scaled", s->factor, err);
    if (rc == WEFT_OK) s->runs++;
    return rc;
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
