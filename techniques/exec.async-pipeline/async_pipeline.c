/* exec.async-pipeline: the decoder slot's plain decoder (one token per request per step, no
 * drafts) that lets the engine run one step ahead of the host. The engine asks its pipeline hook
 * before it launches a plain decode step whose tokens the sampler can leave on the device; this
 * plugin answers from its options and counts what it was asked, and turns on the engine's
 * measurement of the device's idle time between steps (backend events), which it reports when
 * the engine closes. The mechanism itself (ids fed device-to-device, tokens collected one step
 * late, drains) is the engine's and the sampler's; README.md explains the split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "exec.async-pipeline"
#define VERSION "0.1.0"

typedef struct ap_state {
    const weft_host_services *host;
    int enabled, measure;
    uint32_t min_rows;
    uint64_t asked, ahead, started, declined_small;
    uint64_t last_steps;
    double busy_s, idle_s;
} ap_state;

static weft_status ap_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    if (!host || !st) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "create: NULL argument");
    int64_t mr = weft_sdk_option_int(opts, "min_rows", 1);
    if (mr < 1 || mr > 65536)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option min_rows: expected 1..65536 rows, found %lld",
                              (long long)mr);
    ap_state *s = calloc(1, sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    s->host = host;
    s->enabled = weft_sdk_option_bool(opts, "enabled", 1);
    s->measure = weft_sdk_option_bool(opts, "measure_idle", 0);
    s->min_rows = (uint32_t)mr;
    *st = s;
    return WEFT_OK;
}

static void ap_destroy(void *st) {
    ap_state *s = st;
    if (!s) return;
    if (s->host->log && s->asked) {
        double all = s->busy_s + s->idle_s;
        s->host->log(WEFT_LOG_INFO, NAME,
                     "%llu decode steps asked: %llu launched ahead of the host, %llu started a "
                     "pipeline, %llu below min_rows; device idle between steps %.3f ms of "
                     "%.3f ms (%.2f%%)",
                     (unsigned long long)s->asked, (unsigned long long)s->ahead,
                     (unsigned long long)s->started, (unsigned long long)s->declined_small,
                     s->idle_s * 1e3, all * 1e3, all > 0 ? 100.0 * s->idle_s / all : 0.0);
    }
    free(s);
}

/* The plain decoder proposes nothing: every step is one token per request. */
static weft_status ap_draft(void *st, uint64_t request_id, const int32_t *history, uint32_t n,
                            int32_t *draft, uint32_t max_draft, uint32_t *n_draft,
                            weft_error *err) {
    (void)st, (void)request_id, (void)history, (void)n, (void)draft, (void)max_draft;
    if (!n_draft) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "draft: n_draft is NULL");
    *n_draft = 0;
    return WEFT_OK;
}

static void ap_accepted(void *st, uint64_t request_id, uint32_t n_accepted) {
    (void)st, (void)request_id, (void)n_accepted;
}

static int32_t ap_pipeline(void *st, weft_pipeline_step *step) {
    ap_state *s = st;
    if (!s || !step || step->size < sizeof(weft_pipeline_step)) return 0;
    step->measure = (uint32_t)s->measure;
    s->asked++;
    s->busy_s = step->device_busy_s;
    s->idle_s = step->device_idle_s;
    s->last_steps = step->steps;
    if (!s->enabled) return 0;
    if (step->n_rows < s->min_rows) {
        s->declined_small++;
        return 0;
    }
    if (step->in_flight)
        s->ahead++;
    else
        s->started++;
    return 1;
}

static const weft_decoder_vtable ap_vtable = {
    .size = sizeof(weft_decoder_vtable),
    .draft = ap_draft,
    .accepted = ap_accepted,
    .pipeline = ap_pipeline,
};

static const weft_plugin_descriptor ap_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = VERSION,
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_DECODER,
    .create = ap_create,
    .destroy = ap_destroy,
    .decoder = &ap_vtable,
};

WEFT_SDK_ENTRY(ap_desc, 1, 1)
