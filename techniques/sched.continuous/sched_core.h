/* The scheduler core shared by the three scheduling bundles (sched.continuous,
 * sched.chunked-prefill, sched.preempt). The scheduler slot holds one provider, so the bundles
 * are layered rather than chained: each is the previous one plus one mechanism, selected by the
 * policy its descriptor passes here. docs/perf/sched.md and each bundle's README describe the
 * planning rules; sched_core.c implements them. */
#ifndef WEFT_SCHED_CORE_H
#define WEFT_SCHED_CORE_H

#include "weft/sdk.h"

typedef struct sched_policy {
    uint32_t max_step_tokens; /* token budget of a step; 0 = the engine's (largest bucket) */
    uint32_t max_running;     /* sequences in a step; 0 = the engine's (kv slots) */
    /* Prompt (and recompute) tokens per step across all requests; 0 = no cap: a prefill takes
     * whatever budget the decodes leave (sched.continuous). */
    uint32_t chunk_tokens;
    /* With a cap: more prompt tokens per decode in the step, so the cap grows with the number of
     * running streams (their per-step cost is what a chunk is weighed against). A step without
     * decodes has no cap: no running stream's latency is at stake. */
    uint32_t chunk_per_decode;
    /* Preempt the youngest requests when the kv pool refuses growth, and admit requests by
     * what their next chunk needs rather than their worst case (sched.preempt). */
    int preempt;
    /* sched.preempt: kv tokens kept free when admitting, in thousandths of the pool. */
    uint32_t watermark_permille;
    /* sched.preempt: generated tokens of every request the pool must have room for when a
     * request is admitted (0 = only the prompts; the max_total of each = sched.continuous's
     * conservative rule). Damps admit-then-preempt cycles. */
    uint32_t lookahead_tokens;
} sched_policy;

typedef struct sched_core sched_core;

/* setup: name is the plugin's (for messages); the policy is copied. */
weft_status sched_core_create(const weft_host_services *host, const char *name,
                              const sched_policy *pol, sched_core **out, weft_error *err);
void sched_core_destroy(sched_core *c);

/* The scheduler vtable hooks, with the core as state. */
weft_status sched_core_schedule(void *st, const weft_sched_request *reqs, uint32_t n_requests,
                                const weft_sched_limits *limits, weft_sched_item *items,
                                uint32_t *n_items, weft_error *err);
void sched_core_kv_denied(void *st, uint64_t request_id);

/* Reads the options every bundle shares (max_step_tokens, max_running) into pol. */
weft_status sched_core_common_options(const weft_options *opts, const char *name, sched_policy *pol,
                                      weft_error *err);

#endif
