/* fake.perturb-logits: a wrong technique that greedy decoding cannot see. Its pass puts a SCALE
 * node (factor, default 1.6) on the final hidden state right before the first LM_HEAD, so every
 * logit is multiplied by the factor (the head is linear). The order of the logits, and so every
 * greedy token, stays the same, while the next-token distributions sharpen: the eval quality
 * gate (KL against reference logits) must fail it and the greedy gates must not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fake_head_scale.h"
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
    return fake_scale_before_head(gs, g, NAME, "perturb.scale", "perturb.hidden", p->factor, err);
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
