/* fake.good: a well-formed feature plugin for loader tests. Its one hook is real enough to
 * check that create() saw the validated options: process_logits adds `bias` to the logit of
 * token `token`, and destroy() frees the state create() allocated (leak checkers see both). */
#include <stdlib.h>

#include "weft/sdk.h"

typedef struct good_state {
    int64_t token;
    double bias;
} good_state;

static weft_status good_create(const weft_host_services *host, const weft_options *opts, void **st,
                               weft_error *err) {
    good_state *s = host->alloc(sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, "fake.good", "out of memory");
    s->token = weft_sdk_option_int(opts, "token", 0);
    s->bias = weft_sdk_option_float(opts, "bias", 0.0);
    *st = s;
    return WEFT_OK;
}

static void good_destroy(void *st) {
    free(st);
}

static weft_status good_process(void *st, uint64_t request_id, float *logits, uint32_t vocab,
                                weft_error *err) {
    good_state *s = st;
    if (!logits || s->token < 0 || (uint64_t)s->token >= vocab)
        return weft_sdk_error(err, WEFT_ERR_INVALID, "fake.good",
                              "token %lld outside the vocabulary of %u", (long long)s->token,
                              (unsigned)vocab);
    logits[s->token] += (float)s->bias;
    return WEFT_OK;
}

static const weft_feature_vtable good_feature = {sizeof(weft_feature_vtable), good_process, NULL};

static const weft_plugin_descriptor good_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = "fake.good",
    .version = "1.0.0",
    .kind = WEFT_KIND_FEATURE,
    .slots = WEFT_SLOT_FEATURE,
    .create = good_create,
    .destroy = good_destroy,
    .feature = &good_feature,
};

WEFT_SDK_ENTRY(good_desc, 1, 1)
