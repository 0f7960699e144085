/* NVRTC compilation of a technique's kernel source for the current device's exact architecture,
 * cached on disk as a cubin under an XXH3-128 key of (source, options, NVRTC version, device
 * name, architecture), the same scheme and directory as the cuda backend's
 * (${WEFT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/weft}/kernels/), then loaded with the driver API.
 * The caller's CUcontext must be current. */
#ifndef WEFT_EXEC_NVRTC_MODULE_H
#define WEFT_EXEC_NVRTC_MODULE_H

#include <cuda.h>

#include "weft/plugin.h"

/* name: the source's file name for messages ("sampling.cu"); source: NUL-terminated text. */
weft_status exec_nvrtc_load(const char *plugin, const char *name, const char *source,
                            CUdevice dev, CUmodule *out, weft_error *err);

#endif
