// What the standalone nvcc probes (read_rate.cu, l2_prefetch_probe.cu, flow_bench.cu,
// x_broadcast.cu, graph_gap.cu) share on the host: CK(x) exits with the file, line, call and
// the runtime's message when a CUDA runtime call fails (a probe has nothing to recover). Their
// shared device helpers: probe_device.cuh.
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

#endif
