/* The default scheduler: serial. The request already running (prefilling or decoding) keeps
 * the engine until it finishes; otherwise the waiting request with the highest priority, then
 * the earliest arrival, starts. A prompt longer than the largest bucket is fed in chunks of
 * that size, then decoding proceeds one token per step. */
#include "engine/providers.h"
#include "util/error.h"

static weft_status serial_schedule(void *st, const weft_sched_request *reqs, uint32_t n_requests,
                                   const weft_sched_limits *limits, weft_sched_item *items,
                                   uint32_t *n_items, weft_error *err) {
    (void)st;
    *n_items = 0;
    if (!limits || limits->max_tokens == 0)
        return weft_error_set(err, WEFT_ERR_INVALID, "sched.serial", "no token budget");
    int32_t pick = -1;
    for (uint32_t i = 0; i < n_requests; i++)
        if (reqs[i].state == 1 || reqs[i].state == 2) {
            pick = (int32_t)i;
            break;
        }
    for (uint32_t i = 0; pick < 0 && i < n_requests; i++) {
        if (reqs[i].state != 0) continue;
        for (uint32_t j = i; j < n_requests; j++)
            if (reqs[j].state == 0 && (pick < 0 || reqs[j].priority > reqs[pick].priority ||
                                       (reqs[j].priority == reqs[pick].priority &&
                                        reqs[j].arrival_ns < reqs[pick].arrival_ns)))
                pick = (int32_t)j;
    }
    if (pick < 0) return WEFT_OK;
    const weft_sched_request *r = &reqs[pick];
    uint32_t pending = r->n_prompt + r->n_generated - r->n_computed;
    if (pending == 0) return WEFT_OK;
    items[0].index = (uint32_t)pick;
    items[0].action = 0;
    items[0].n_tokens = pending < limits->max_tokens ? pending : limits->max_tokens;
    items[0].reserved = 0;
    *n_items = 1;
    return WEFT_OK;
}

const weft_scheduler_vtable weft_sched_serial_vtable = {
    .size = sizeof(weft_scheduler_vtable),
    .schedule = serial_schedule,
};
