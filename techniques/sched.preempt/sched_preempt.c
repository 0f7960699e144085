/* sched.preempt: continuous batching with chunked prefill, plus preemption by recompute. When
 * the kv provider refuses a running request room to grow (reserve -> WEFT_AGAIN, reported
 * through kv_denied), the next plan preempts the youngest, lowest-priority request holding cache
 * (action 1: the engine drops its cache); it waits again with its original arrival, so it is
 * restored before younger requests, by recomputing its prompt and generated tokens. Admission
 * then only needs room for what a step adds, not for every request's worst case, so more
 * requests share an oversubscribed pool. The planning rules live in
 * ../sched.continuous/sched_core.c. */
#include "sched_core.h"

#define NAME "sched.preempt"

static weft_status preempt_create(const weft_host_services *host, const weft_options *opts,
                                  void **st, weft_error *err) {
    sched_policy pol;
    memset(&pol, 0, sizeof(pol));
    pol.preempt = 1;
    pol.chunk_tokens = 256;
    pol.watermark_permille = 10;
    pol.lookahead_tokens = 64;
    weft_status s = sched_core_common_options(opts, NAME, &pol, err);
    if (s != WEFT_OK) return s;
    return sched_core_create(host, NAME, &pol, (sched_core **)st, err);
}

static void preempt_destroy(void *st) {
    sched_core_destroy(st);
}

static const weft_scheduler_vtable preempt_sched = {
    .size = sizeof(weft_scheduler_vtable),
    .schedule = sched_core_schedule,
    .kv_denied = sched_core_kv_denied,
};

static const weft_plugin_descriptor preempt_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_SCHEDULER,
    .create = preempt_create,
    .destroy = preempt_destroy,
    .scheduler = &preempt_sched,
};

WEFT_SDK_ENTRY(preempt_desc, 1, 1)
