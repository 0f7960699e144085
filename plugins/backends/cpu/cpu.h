/* Internal interface of the cpu backend plugin: the instance state, the thread pool, the
 * element conversions every kernel shares, and the helpers that validate a node against the
 * graph and the step's buffers. Nothing here is exported from the shared object (the bundle is
 * built with hidden visibility); only weft_plugin_negotiate is. */
#ifndef WEFT_CPU_H
#define WEFT_CPU_H

#include <stdint.h>
#include <string.h>

#include "weft/plugin.h"

#define CPU_SOURCE "cpu"
#define CPU_ALIGN 64
#define CPU_MAX_ELEMS ((int64_t)1 << 46) /* elements of any one tensor */

/* Hot loops are compiled twice when the compiler can dispatch at load time: a baseline x86-64
 * version and an x86-64-v3 (AVX2 + FMA) one, chosen by the dynamic loader. The plugin keeps
 * portable baseline flags otherwise. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(WEFT_CPU_NO_CLONES) && \
    (!defined(__clang__) || __clang_major__ >= 14)
#define CPU_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CPU_HOT
#endif
#define CPU_INLINE static inline __attribute__((always_inline))

/* ---- thread pool (cpu_pool.c) ------------------------------------------------------------ */
/* fn(arg, task, worker): worker is in [0, threads) and is stable for the call, so kernels can
 * index per-worker scratch. */
typedef void (*cpu_task_fn)(void *arg, uint32_t task, uint32_t worker);
typedef struct cpu_pool cpu_pool;

/* setup: n_threads counts the calling thread; 1 starts no worker at all. */
weft_status cpu_pool_create(uint32_t n_threads, cpu_pool **out, weft_error *err);
void cpu_pool_destroy(cpu_pool *pool);
uint32_t cpu_pool_threads(const cpu_pool *pool);
/* step: runs fn for every task in [0, n_tasks) and returns when all are done. The caller works
 * too. A call made while the pool is busy (a nested or concurrent call) runs inline. */
void cpu_pool_run(cpu_pool *pool, cpu_task_fn fn, void *arg, uint32_t n_tasks);

/* ---- the instance ------------------------------------------------------------------------- */
typedef struct cpu_backend {
    const weft_host_services *host;
    cpu_pool *pool;
    uint32_t threads;
} cpu_backend;

/* ---- errors ------------------------------------------------------------------------------ */
/* Fills err (when not NULL) with source "cpu" and returns code. */
weft_status cpu_error(weft_error *err, weft_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, prefixed with the node's name and op so a graph problem can be found. err may be NULL
 * (accepts() validates without a message). */
weft_status cpu_node_error(weft_error *err, const weft_node *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- dtypes ------------------------------------------------------------------------------ */
size_t cpu_dtype_size(uint32_t dtype); /* 0 for block formats and unknown ids */
const char *cpu_dtype_name(uint32_t dtype);
const char *cpu_op_name(uint32_t op);

CPU_INLINE float cpu_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
CPU_INLINE uint32_t cpu_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
CPU_INLINE float cpu_bf16_to_f32(uint16_t h) {
    return cpu_bits_f32((uint32_t)h << 16);
}
/* Round to nearest even; NaN stays a (quiet) NaN. */
CPU_INLINE uint16_t cpu_f32_to_bf16(float f) {
    uint32_t u = cpu_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
/* IEEE half to single without branches on the value class, so loops over it vectorise:
 * normals rebias the exponent, subnormals are an exact integer times 2^-24, and inf/NaN get
 * the exponent rebiased twice, which lands on 0xff. */
CPU_INLINE float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t normal = (em << 13) + 0x38000000u + (em >= 0x7c00u ? 0x38000000u : 0u);
    float sub = (float)em * 0x1p-24f;
    uint32_t bits = em < 0x400u ? cpu_f32_bits(sub) : normal;
    return cpu_bits_f32(bits | sign);
}
/* Round to nearest even, overflow to inf, underflow through subnormals to zero. */
CPU_INLINE uint16_t cpu_f32_to_f16(float f) {
    uint32_t u = cpu_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: subnormal half */
        /* The value in units of 2^-24, rounded to nearest even by the FPU itself. */
        float m = cpu_bits_f32(a) * 0x1p24f;
        float r = __builtin_rintf(m); /* default rounding mode is nearest even */
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t e = (a >> 23) - 112u; /* rebias 127 -> 15 */
    uint32_t mant = a & 0x7fffffu;
    uint32_t h = (e << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carries into the exponent */
    return (uint16_t)(sign | h);
}
/* Element i of a float-like array of the given dtype (f32, bf16 or f16). */
CPU_INLINE float cpu_load(const void *p, int64_t i, uint32_t dtype) {
    if (dtype == WEFT_DTYPE_F32) return ((const float *)p)[i];
    if (dtype == WEFT_DTYPE_BF16) return cpu_bf16_to_f32(((const uint16_t *)p)[i]);
    return cpu_f16_to_f32(((const uint16_t *)p)[i]);
}
CPU_INLINE void cpu_store(void *p, int64_t i, uint32_t dtype, float v) {
    if (dtype == WEFT_DTYPE_F32)
        ((float *)p)[i] = v;
    else if (dtype == WEFT_DTYPE_BF16)
        ((uint16_t *)p)[i] = cpu_f32_to_bf16(v);
    else
        ((uint16_t *)p)[i] = cpu_f32_to_f16(v);
}
CPU_INLINE int cpu_is_float(uint32_t dtype) {
    return dtype == WEFT_DTYPE_F32 || dtype == WEFT_DTYPE_BF16 || dtype == WEFT_DTYPE_F16;
}

/* ---- node checks ------------------------------------------------------------------------- */
/* The tensor behind input/output slot `id`, or NULL with err filled (absent, out of range). */
const weft_tensor *cpu_tensor(const weft_graph *g, const weft_node *node, uint32_t id,
                              const char *what, weft_error *err);
/* Elements of one row: the product of shape[1..rank-1] (1 for rank 1). -1 when a dimension is
 * negative or the product overflows. */
int64_t cpu_row_elems(const weft_tensor *t);
/* Checks dtype and rank (rank 0 = any) and that shape[0] >= rows when rows > 0. */
weft_status cpu_check(const weft_tensor *t, const weft_node *node, const char *what, uint32_t dtype,
                      uint32_t rank, weft_error *err);

/* Common step preamble: ctx, graph and data present, n_tokens within the bucket. */
weft_status cpu_check_ctx(const weft_exec_ctx *ctx, const weft_node *node, weft_error *err);
/* The host pointer of tensor id's buffer after checking it holds at least `bytes`. */
void *cpu_data(const weft_exec_ctx *ctx, const weft_node *node, uint32_t id, uint64_t bytes,
               const char *what, weft_error *err);

/* ---- op registration (one file per family) ------------------------------------------------ */
/* Adds one implementation for backend "cpu". */
weft_status cpu_add_impl(const weft_ops_service *ops, cpu_backend *b, uint32_t op, uint32_t dtype,
                         const char *layout, weft_op_fn run,
                         int32_t (*accepts)(void *, const weft_graph *, const weft_node *),
                         weft_error *err);
weft_status cpu_register_linear(cpu_backend *b, const weft_ops_service *ops, weft_error *err);
weft_status cpu_register_attention(cpu_backend *b, const weft_ops_service *ops, weft_error *err);
weft_status cpu_register_elementwise(cpu_backend *b, const weft_ops_service *ops, weft_error *err);

#endif
