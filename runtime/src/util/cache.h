/* The root of weft's on-disk cache, shared by the model cache, the hash cache and probes:
 * ${WEFT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}, without a trailing slash. (CUDA plugins
 * apply the same rule in plugins/sdk/cuda_module.c: plugins do not link libweft.) */
#ifndef WEFT_UTIL_CACHE_H
#define WEFT_UTIL_CACHE_H

#include <stddef.h>

#include "weft/plugin.h"

weft_status weft_cache_root(char *out, size_t cap, weft_error *err);
/* root + "/" + sub; WEFT_ERR_INVALID when it does not fit. */
weft_status weft_cache_path(const char *sub, char *out, size_t cap, weft_error *err);

#endif
