/* sched.chunked-prefill: continuous batching (sched.continuous) plus a per-step prefill cap.
 * Running requests decode first; prompt tokens then fill the step up to chunk_tokens, so a long
 * prompt is fed over several steps, each carrying the running streams' next tokens too, instead
 * of one long step that stalls every stream. The planning rules live in
 * ../sched.continuous/sched_core.c. */
#include "sched_core.h"

#define NAME "sched.chunked-prefill"

static weft_status chunk_create(const weft_host_services *host, const weft_options *opts, void **st,
                                weft_error *err) {
    sched_policy pol;
    memset(&pol, 0, sizeof(pol));
    pol.chunk_tokens = 256;
    weft_status s = sched_core_common_options(opts, NAME, &pol, err);
    if (s != WEFT_OK) return s;
    if (pol.chunk_tokens == 0)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option chunk_tokens: expected at least 1 (without a cap use "
                              "sched.continuous), got 0");
    return sched_core_create(host, NAME, &pol, (sched_core **)st, err);
}

static void chunk_destroy(void *st) {
    sched_core_destroy(st);
}

static const weft_scheduler_vtable chunk_sched = {
    .size = sizeof(weft_scheduler_vtable),
    .schedule = sched_core_schedule,
    .kv_denied = sched_core_kv_denied,
};

static const weft_plugin_descriptor chunk_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_SCHEDULER,
    .create = chunk_create,
    .destroy = chunk_destroy,
    .scheduler = &chunk_sched,
};

WEFT_SDK_ENTRY(chunk_desc, 1, 1)
