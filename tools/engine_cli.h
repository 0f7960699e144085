/* Choosing what an engine-driving command (run, bench, candidate graph) opens: --candidate
 * LOCK|MANIFEST, --model DIR, or the CPU baseline (manifests/frozen/baseline-cpu.lock when it
 * exists, else manifests/baseline-cpu.yaml resolved on the spot), looked up in the working
 * directory first, then in the source tree the CLI was built from. */
#ifndef WEFT_TOOLS_ENGINE_CLI_H
#define WEFT_TOOLS_ENGINE_CLI_H

#include "engine/engine.h"

#define WEFT_BASELINE_LOCK "manifests/frozen/baseline-cpu.lock"
#define WEFT_BASELINE_MANIFEST "manifests/baseline-cpu.yaml"

/* Fills o->lock_path / manifest_path / model_dir from the user's choice (either may be NULL).
 * path_buf (>= 1024 bytes) holds a default path found on disk. */
weft_status weft_cli_engine_target(const char *candidate, const char *model_dir,
                                   weft_engine_options *o, char *path_buf, size_t cap,
                                   weft_error *err);

#endif
