/* fake.no-optional: fills the pass and kv slots with only their required hooks; every hook
 * plugin.h marks "(optional)" is NULL, destroy included. It must load and create fine. The kv
 * hooks keep a real (tiny) slot table so a caller can exercise them: open hands out slots until
 * `slots` are in use, reserve refuses more than `max_tokens`. */
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define MAX_SLOTS 64

typedef struct noopt_state {
    int32_t n_slots;
    uint32_t max_tokens;
    uint64_t owner[MAX_SLOTS]; /* request id + 1; 0 = free */
    weft_kv_view view;
} noopt_state;

/* No destroy: the state is a static, which is exactly the case destroy = NULL exists for. */
static noopt_state the_state;

static weft_status noopt_create(const weft_host_services *host, const weft_options *opts, void **st,
                                weft_error *err) {
    memset(&the_state, 0, sizeof(the_state));
    the_state.n_slots = (int32_t)weft_sdk_option_int(opts, "slots", 4);
    if (the_state.n_slots < 1 || the_state.n_slots > MAX_SLOTS)
        return weft_sdk_error(err, WEFT_ERR_INVALID, "fake.no-optional",
                              "option slots: expected 1..%d, found %d", MAX_SLOTS,
                              (int)the_state.n_slots);
    the_state.max_tokens = 128;
    the_state.view.size = sizeof(the_state.view);
    snprintf(the_state.view.layout, sizeof(the_state.view.layout), "none");
    *st = &the_state;
    return WEFT_OK;
}

static weft_status noopt_pass(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                              weft_graph *g, weft_error *err) {
    return g ? WEFT_OK : weft_sdk_error(err, WEFT_ERR_INVALID, "fake.no-optional", "graph is NULL");
}

static weft_status noopt_init(void *st, const weft_kv_geometry *geo, const weft_device_service *dev,
                              weft_error *err) {
    noopt_state *s = st;
    if (!geo) return weft_sdk_error(err, WEFT_ERR_INVALID, "fake.no-optional", "no geometry");
    s->max_tokens = geo->max_seq;
    return WEFT_OK;
}

static weft_status noopt_open(void *st, uint64_t request_id, int32_t *slot, weft_error *err) {
    noopt_state *s = st;
    for (int32_t i = 0; i < s->n_slots; i++)
        if (!s->owner[i]) {
            s->owner[i] = request_id + 1;
            *slot = i;
            return WEFT_OK;
        }
    return WEFT_AGAIN;
}

static weft_status noopt_reserve(void *st, int32_t slot, uint32_t n_total, weft_error *err) {
    noopt_state *s = st;
    if (slot < 0 || slot >= s->n_slots || !s->owner[slot])
        return weft_sdk_error(err, WEFT_ERR_INVALID, "fake.no-optional", "slot %d is not open",
                              (int)slot);
    return n_total <= s->max_tokens ? WEFT_OK : WEFT_AGAIN;
}

static void noopt_close(void *st, int32_t slot) {
    noopt_state *s = st;
    if (slot >= 0 && slot < s->n_slots) s->owner[slot] = 0;
}

static const weft_kv_view *noopt_view(void *st) {
    return &((noopt_state *)st)->view;
}

static const weft_pass_vtable noopt_pass_vt = {sizeof(weft_pass_vtable), noopt_pass, NULL};
static const weft_kv_vtable noopt_kv_vt = {
    .size = sizeof(weft_kv_vtable),
    .init = noopt_init,
    .open = noopt_open,
    .reserve = noopt_reserve,
    .close = noopt_close,
    .view = noopt_view,
};

static const weft_plugin_descriptor noopt_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = "fake.no-optional",
    .version = "1.0.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS | WEFT_SLOT_KV,
    .create = noopt_create,
    .kv = &noopt_kv_vt,
    .pass = &noopt_pass_vt,
};

WEFT_SDK_ENTRY(noopt_desc, 1, 1)
