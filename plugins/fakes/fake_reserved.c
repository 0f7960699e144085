/* fake.reserved: sets a reserved descriptor member; reserved members must be zero so that a
 * later ABI version can give them a meaning, and the host refuses this one naming the index. */
#include "weft/sdk.h"

static weft_status reserved_create(const weft_host_services *host, const weft_options *opts,
                                   void **st, weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static const weft_feature_vtable reserved_feature = {sizeof(weft_feature_vtable), NULL, NULL};

static const weft_plugin_descriptor reserved_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = "fake.reserved",
    .version = "1.0.0",
    .kind = WEFT_KIND_FEATURE,
    .slots = WEFT_SLOT_FEATURE,
    .create = reserved_create,
    .feature = &reserved_feature,
    .reserved = {0, 0, 0xdeadbeef},
};

WEFT_SDK_ENTRY(reserved_desc, 1, 1)
