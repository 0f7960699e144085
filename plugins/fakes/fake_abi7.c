/* fake.abi7: speaks only ABI 7, so negotiation with a v1 host must be refused with the
 * plugin's version named ("built for ABI 7, this runtime speaks 1..1"). */
#include "weft/sdk.h"

static weft_status abi7_create(const weft_host_services *host, const weft_options *opts, void **st,
                               weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static const weft_feature_vtable abi7_feature = {sizeof(weft_feature_vtable), NULL, NULL};

static const weft_plugin_descriptor abi7_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 7,
    .name = "fake.abi7",
    .version = "1.0.0",
    .kind = WEFT_KIND_FEATURE,
    .slots = WEFT_SLOT_FEATURE,
    .create = abi7_create,
    .feature = &abi7_feature,
};

WEFT_SDK_ENTRY(abi7_desc, 7, 7)
