/* sched.continuous: iteration-level (continuous) batching. Every step plans afresh: each
 * running request decodes one token, finished requests have left, and waiting requests join
 * while the step's token budget, the sequence budget and the kv pool allow; all of it runs as
 * one ragged batch (one forward pass, per-request positions and kv slots). A prompt joins whole
 * (no per-step prefill cap; sched.chunked-prefill adds one), and admission reserves every
 * request's worst case so a running request is never refused kv (sched.preempt relaxes that).
 * The planning rules live in sched_core.c, shared with the other two scheduling bundles. */
#include "sched_core.h"

#define NAME "sched.continuous"

static weft_status cont_create(const weft_host_services *host, const weft_options *opts, void **st,
                               weft_error *err) {
    sched_policy pol;
    memset(&pol, 0, sizeof(pol));
    weft_status s = sched_core_common_options(opts, NAME, &pol, err);
    if (s != WEFT_OK) return s;
    return sched_core_create(host, NAME, &pol, (sched_core **)st, err);
}

static void cont_destroy(void *st) {
    sched_core_destroy(st);
}

static const weft_scheduler_vtable cont_sched = {
    .size = sizeof(weft_scheduler_vtable),
    .schedule = sched_core_schedule,
    .kv_denied = sched_core_kv_denied,
};

static const weft_plugin_descriptor cont_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_SCHEDULER,
    .create = cont_create,
    .destroy = cont_destroy,
    .scheduler = &cont_sched,
};

WEFT_SDK_ENTRY(cont_desc, 1, 1)
