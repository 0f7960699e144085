/* fake.crash-load: its constructor writes through a null pointer, so dlopen() itself crashes.
 * `weft plugins check` must survive it (the load runs in a child process) and report the
 * signal. Built without sanitizers (see CMakeLists.txt) so the crash is a plain SIGSEGV. */
#include "weft/sdk.h"

__attribute__((constructor)) static void crash_on_load(void) {
    volatile int *volatile nowhere = NULL;
    *nowhere = 1;
}

static weft_status crash_create(const weft_host_services *host, const weft_options *opts, void **st,
                                weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static const weft_feature_vtable crash_feature = {sizeof(weft_feature_vtable), NULL, NULL};

static const weft_plugin_descriptor crash_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = "fake.crash-load",
    .version = "1.0.0",
    .kind = WEFT_KIND_FEATURE,
    .slots = WEFT_SLOT_FEATURE,
    .create = crash_create,
    .feature = &crash_feature,
};

WEFT_SDK_ENTRY(crash_desc, 1, 1)
