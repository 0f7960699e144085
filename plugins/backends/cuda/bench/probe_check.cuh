// What the standalone nvcc probes (read_rate.cu, l2_prefetch_probe.cu, flow_bench.cu,
// x_broadcast.cu, graph_gap.cu, stale_reads.cu) share on the host: CK(x) exits with the file,
// line, call and the runtime's message when a CUDA runtime call fails (a probe has nothing to
// recover); launch_config fills a launch of grid x block on stream s, as a programmatic
// dependent launch when pdl is set (at: the attribute's storage). Their shared device helpers:
// probe_device.cuh.
#ifndef WEFT_CUDA_PROBE_CHECK_CUH
#define WEFT_CUDA_PROBE_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline cudaLaunchConfig_t launch_config(dim3 grid, dim3 block, cudaStream_t s, int pdl,
                                               cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    if (pdl) {
        at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at->val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
    }
    return cfg;
}

#endif
