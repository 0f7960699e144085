/* Eight-lane float vectors for the cpu kernels, written with the GCC/Clang vector extension
 * rather than intrinsics so one source compiles to SSE2 on the baseline and to AVX2 + FMA in
 * the x86-64-v3 clone (CPU_HOT), and to NEON elsewhere. 16-bit weights are widened in
 * registers: bf16 is a shift, f16 the same branch-free decoding as cpu_f16_to_f32. */
#ifndef WEFT_CPU_SIMD_H
#define WEFT_CPU_SIMD_H

#include "cpu.h"

typedef float cpu_v8f __attribute__((vector_size(32)));
typedef uint32_t cpu_v8u __attribute__((vector_size(32)));
typedef int32_t cpu_v8i __attribute__((vector_size(32)));
typedef uint16_t cpu_v8h __attribute__((vector_size(16)));

CPU_INLINE cpu_v8f cpu_v8_zero(void) {
    cpu_v8f z = {0, 0, 0, 0, 0, 0, 0, 0};
    return z;
}
CPU_INLINE cpu_v8f cpu_v8_set1(float s) {
    cpu_v8f v = {s, s, s, s, s, s, s, s};
    return v;
}
CPU_INLINE cpu_v8f cpu_v8_ld(const float *p) {
    cpu_v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}
CPU_INLINE void cpu_v8_st(float *p, cpu_v8f v) {
    memcpy(p, &v, sizeof(v));
}
CPU_INLINE cpu_v8f cpu_v8_ld_bf16(const uint16_t *p) {
    cpu_v8h h;
    memcpy(&h, p, sizeof(h));
    cpu_v8u u = __builtin_convertvector(h, cpu_v8u) << 16;
    return (cpu_v8f)u;
}
CPU_INLINE cpu_v8f cpu_v8_ld_f16(const uint16_t *p) {
    cpu_v8h h;
    memcpy(&h, p, sizeof(h));
    cpu_v8u x = __builtin_convertvector(h, cpu_v8u);
    cpu_v8u sign = (x & 0x8000u) << 16;
    cpu_v8u em = x & 0x7fffu;
    cpu_v8u infnan = (cpu_v8u)(em >= 0x7c00u);
    cpu_v8u normal = (em << 13) + 0x38000000u + (infnan & 0x38000000u);
    cpu_v8f sub = __builtin_convertvector((cpu_v8i)em, cpu_v8f) * 0x1p-24f;
    cpu_v8u is_sub = (cpu_v8u)(em < 0x400u);
    cpu_v8u bits = (is_sub & (cpu_v8u)sub) | (~is_sub & normal);
    return (cpu_v8f)(bits | sign);
}
/* Eight elements of a float-like array starting at element i; dtype is a constant at every
 * call site so the branch folds away. */
CPU_INLINE cpu_v8f cpu_v8_load(const void *p, int64_t i, uint32_t dtype) {
    if (dtype == WEFT_DTYPE_F32) return cpu_v8_ld((const float *)p + i);
    if (dtype == WEFT_DTYPE_BF16) return cpu_v8_ld_bf16((const uint16_t *)p + i);
    return cpu_v8_ld_f16((const uint16_t *)p + i);
}
CPU_INLINE float cpu_v8_sum(cpu_v8f v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

#endif
