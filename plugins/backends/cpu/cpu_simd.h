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

/* Lane shuffles of two vectors; indices 0-7 pick from a, 8-15 from b. */
#if defined(__clang__)
#define CPU_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define CPU_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (cpu_v8i){__VA_ARGS__})
#endif

CPU_INLINE cpu_v8f cpu_v8_zero(void) {
    cpu_v8f z = {0, 0, 0, 0, 0, 0, 0, 0};
    return z;
}
CPU_INLINE cpu_v8f cpu_v8_set1(float s) {
    return cpu_v8_zero() + s; /* a scalar operand broadcasts: one vbroadcastss, not 8 inserts */
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
CPU_INLINE cpu_v8f cpu_v8_max(cpu_v8f a, cpu_v8f b) {
    cpu_v8i gt = a > b;
    return (cpu_v8f)(((cpu_v8u)gt & (cpu_v8u)a) | (~(cpu_v8u)gt & (cpu_v8u)b));
}
/* e^x in eight lanes, within ~2 ulp of expf: x = n ln2 + r with |r| <= ln2/2 (ln2 split in a
 * high part exact in float and a low correction), e^r from Cephes' degree-5 minimax polynomial,
 * 2^n assembled in the exponent bits. Inputs below -87.3 give exactly 0 (softmax masks rely on
 * it), above 88.3 saturate near 2^127. Vectorised exp is what makes softmax and SiLU cheap:
 * libm's expf is a call per element. */
CPU_INLINE cpu_v8f cpu_v8_exp(cpu_v8f x) {
    const cpu_v8f lo = cpu_v8_set1(-87.3f), hi = cpu_v8_set1(88.3f);
    cpu_v8i under = x < lo;
    x = cpu_v8_max(x, lo);
    x = -cpu_v8_max(-x, -hi);
    /* Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick (exact for |t| < 2^22). */
    const cpu_v8f magic = cpu_v8_set1(12582912.0f);
    cpu_v8f n = (x * 1.44269504088896341f + magic) - magic;
    cpu_v8f r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    cpu_v8f p = cpu_v8_set1(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    cpu_v8f y = p * (r * r) + r + 1.0f;
    cpu_v8i e = (__builtin_convertvector(n, cpu_v8i) + 127) << 23;
    y = y * (cpu_v8f)e;
    return (cpu_v8f)((cpu_v8u)y & ~(cpu_v8u)under);
}
/* The horizontal sums of a, b, c and d in lanes 0..3 (lanes 4..7 are junk): a transpose-and-add
 * tree that costs about a third of four separate horizontal sums. */
CPU_INLINE cpu_v8f cpu_v8_sum4(cpu_v8f a, cpu_v8f b, cpu_v8f c, cpu_v8f d) {
    cpu_v8f ab =
        CPU_SHUFFLE(a, b, 0, 8, 1, 9, 4, 12, 5, 13) + CPU_SHUFFLE(a, b, 2, 10, 3, 11, 6, 14, 7, 15);
    cpu_v8f cd =
        CPU_SHUFFLE(c, d, 0, 8, 1, 9, 4, 12, 5, 13) + CPU_SHUFFLE(c, d, 2, 10, 3, 11, 6, 14, 7, 15);
    cpu_v8f s = CPU_SHUFFLE(ab, cd, 0, 1, 8, 9, 4, 5, 12, 13) +
                CPU_SHUFFLE(ab, cd, 2, 3, 10, 11, 6, 7, 14, 15);
    return s + CPU_SHUFFLE(s, s, 4, 5, 6, 7, 0, 1, 2, 3);
}
CPU_INLINE float cpu_v8_hmax(cpu_v8f v) {
    float m = v[0];
    for (int i = 1; i < 8; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}
CPU_INLINE float cpu_v8_sum(cpu_v8f v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

#endif
