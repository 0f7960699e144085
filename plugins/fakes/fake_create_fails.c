/* fake.create-fails: loads and negotiates cleanly, then refuses in create() with its own
 * message, which the host must pass on ("create failed: refusing to start: <reason>"). */
#include "weft/sdk.h"

static weft_status fails_create(const weft_host_services *host, const weft_options *opts, void **st,
                                weft_error *err) {
    *st = NULL;
    return weft_sdk_error(err, WEFT_ERR_DEVICE, "fake.create-fails", "refusing to start: %s",
                          weft_sdk_option_string(opts, "reason", "(no reason option)"));
}

static const weft_feature_vtable fails_feature = {sizeof(weft_feature_vtable), NULL, NULL};

static const weft_plugin_descriptor fails_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = "fake.create-fails",
    .version = "1.0.0",
    .kind = WEFT_KIND_FEATURE,
    .slots = WEFT_SLOT_FEATURE,
    .create = fails_create,
    .feature = &fails_feature,
};

WEFT_SDK_ENTRY(fails_desc, 1, 1)
