/* The runtime's default slot providers (ARCHITECTURE.md "Slots"), written against the same
 * vtables a technique plugin fills, so the engine drives defaults and techniques the same way:
 *   kv        contiguous: one (max_seq) cache per slot and layer, allocated via the device
 *   scheduler serial: one request at a time, its whole prompt (in bucket-sized chunks), then
 *             one decode token per step until it finishes
 *   executor  eager: node by node through each node's op implementation
 * The sampler default (host sampler over copied logits) lives in the engine's step loop, since
 * it needs the request's token history. */
#ifndef WEFT_ENGINE_PROVIDERS_H
#define WEFT_ENGINE_PROVIDERS_H

#include "weft/plugin.h"

extern const weft_kv_vtable weft_kv_contiguous_vtable;
void *weft_kv_contiguous_new(void);
void weft_kv_contiguous_free(void *st);

extern const weft_scheduler_vtable weft_sched_serial_vtable;

extern const weft_executor_vtable weft_exec_eager_vtable;
/* profile may be NULL (no per-node ranges). */
void *weft_exec_eager_new(const weft_profile_service *profile);
void weft_exec_eager_free(void *st);

#endif
