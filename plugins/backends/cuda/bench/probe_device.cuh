// What the standalone nvcc probes' kernels share (read_rate.cu, flow_bench.cu): bf16 words
// unpacked to f32, the warp's sum, the wait on an mbarrier of a shared-memory ring, and the hash
// their fill kernels draw random weights from.
#ifndef WEFT_CUDA_PROBE_DEVICE_CUH
#define WEFT_CUDA_PROBE_DEVICE_CUH

#include <cuda_runtime.h>
#include <stddef.h>

typedef unsigned short bf16_t;

// eight bf16 values (one 16-byte load) as f32, in order
__device__ __forceinline__ void unpack8(uint4 q, float *f) {
    const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}
// the sum over the warp, in every lane (xor butterfly)
__device__ __forceinline__ float wsum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ unsigned saddr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
// wait until the phase of parity `parity` of the mbarrier at shared address bar has completed
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    unsigned ok = 0;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!ok);
}
// element i of a fill with seed: a value in [-0.5, 0.5), 16 bits of a hash of i
__device__ __forceinline__ float probe_uniform(size_t i, unsigned seed) {
    unsigned h = (unsigned)i * 2654435761u ^ seed ^ (unsigned)(i >> 32) * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (h & 0xffff) / 65536.0f - 0.5f;
}

#endif
