/* fake.op: registers an op implementation, for the engine's op-registry tests. On the cpu
 * backend it registers WEFT_OP_SCALE for f32 with a priority (option `priority`, default 100)
 * above any backend's plain kernel, and counts the nodes it ran, so a test can tell that the
 * registry picked it and that the executor called it: y = x * p.f[0] over the step's rows. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fake_head_scale.h"
#include "weft/sdk.h"

#define NAME "fake.op"

typedef struct op_state {
    int32_t priority;
    atomic_uint_fast64_t calls;
} op_state;

static weft_status op_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    op_state *s = host->alloc(sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    s->priority = (int32_t)weft_sdk_option_int(opts, "priority", 100);
    atomic_init(&s->calls, 0);
    *st = s;
    return WEFT_OK;
}

static void op_destroy(void *st) {
    free(st);
}

/* step: no allocation. Columns are the product of the dims after the first (rows). */
static weft_status scale_run(void *impl_state, const weft_exec_ctx *ctx, const weft_node *node,
                             weft_error *err) {
    op_state *s = impl_state;
    const float *xp = NULL;
    float *yp = NULL;
    uint64_t n = 0;
    weft_status st = fake_scale_io(ctx, node, NAME, &xp, &yp, &n, err);
    if (st) return st;
    float f = node->p.f[0];
    for (uint64_t i = 0; i < n; i++)
        yp[i] = xp[i] * f;
    atomic_fetch_add(&s->calls, 1);
    return WEFT_OK;
}

static weft_status op_register(void *st, const char *backend, const weft_ops_service *ops,
                               weft_error *err) {
    op_state *s = st;
    return fake_scale_register(NAME, backend, ops, s, scale_run, s->priority, NULL, err);
}

static const weft_opset_vtable op_vt = {sizeof(weft_opset_vtable), op_register};

static const weft_plugin_descriptor op_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "1.0.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_OPS,
    .create = op_create,
    .destroy = op_destroy,
    .opset = &op_vt,
};

WEFT_SDK_ENTRY(op_desc, 1, 1)

/* For tests: how many nodes this instance's implementation ran. */
WEFT_EXPORT uint64_t weft_fake_op_calls(const void *st) {
    return st ? (uint64_t)atomic_load(&((const op_state *)st)->calls) : 0;
}
