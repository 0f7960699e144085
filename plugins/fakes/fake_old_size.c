/* fake.old-size: returns a descriptor whose size field is smaller than ABI v1's, as a plugin
 * built against a truncated or pre-release header would. The host must refuse it before
 * reading any member past that size. */
#include <stddef.h>

#include "weft/sdk.h"

static weft_status old_create(const weft_host_services *host, const weft_options *opts, void **st,
                              weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static const weft_feature_vtable old_feature = {sizeof(weft_feature_vtable), NULL, NULL};

static const weft_plugin_descriptor old_desc = {
    .size = (uint32_t)offsetof(weft_plugin_descriptor, backend),
    .abi_version = 1,
    .name = "fake.old-size",
    .version = "1.0.0",
    .kind = WEFT_KIND_FEATURE,
    .slots = WEFT_SLOT_FEATURE,
    .create = old_create,
    .feature = &old_feature,
};

WEFT_SDK_ENTRY(old_desc, 1, 1)
