/* fake.wrong-name: its manifest says fake.wrong-name, its descriptor says fake.other. The
 * host must refuse it: the manifest is what was resolved and locked. */
#include "weft/sdk.h"

static weft_status wrong_create(const weft_host_services *host, const weft_options *opts, void **st,
                                weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static const weft_feature_vtable wrong_feature = {sizeof(weft_feature_vtable), NULL, NULL};

static const weft_plugin_descriptor wrong_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = "fake.other",
    .version = "1.0.0",
    .kind = WEFT_KIND_FEATURE,
    .slots = WEFT_SLOT_FEATURE,
    .create = wrong_create,
    .feature = &wrong_feature,
};

WEFT_SDK_ENTRY(wrong_desc, 1, 1)
