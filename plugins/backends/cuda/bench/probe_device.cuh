// What the standalone nvcc probes' kernels share (read_rate.cu, flow_bench.cu, graph_gap.cu):
// bf16 words unpacked to f32, the warp's sum, a shared-memory ring's mbarriers (set up, waited
// on), the global timer, and the hash their fill kernels draw random weights from.
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
// the global timer (ns)
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned saddr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
// a ring of n slots (one thread calls it): slot i's full[i] completes on one arrival (the
// producer's, with the copy's bytes) and empty[i] on `consumers` arrivals; fenced so the
// barriers are initialised before any copy or wait uses them
__device__ __forceinline__ void ring_init(unsigned long long *full, unsigned long long *empty,
                                          int n, unsigned consumers) {
    for (int i = 0; i < n; i++) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&full[i])));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(&empty[i])),
                     "r"(consumers));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
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
