/* The program the persistent kernel (plugins/backends/cuda/kernels/core.cu, weft_persistent)
 * walks, and the table that maps a captured kernel of the cuda backend to its interpreter op.
 * The node layout and the op codes must equal core.cu's struct pk_node and PK_* enum (core.cu
 * is compiled by NVRTC from an embedded string and includes nothing): test_persistent_prog
 * checks the layout, the table is checked against each kernel's parameter sizes at build time
 * (cuFuncGetParamInfo), and a kernel missing from the table keeps the step on graph replay. */
#ifndef WEFT_PERSISTENT_PROG_H
#define WEFT_PERSISTENT_PROG_H

#include <stdint.h>
#include <string.h>

#define PK_THREADS 256
#define PK_ARGS 24

typedef struct pk_node {
    int32_t op, nvb, gx, gy, nt, wait; /* wait: index of the node waited for, -1 = none */
    uint32_t wait_nvb, reserved;       /* virtual blocks of that node */
    uint64_t pf[2][2];                 /* (address, bytes) ranges to prefetch into L2 */
    uint64_t a[PK_ARGS];               /* the kernel's arguments, one 8-byte slot each */
} pk_node;

enum {
    PK_EMBED = 1, PK_RMSNORM, PK_ADD_RMSNORM, PK_ROPE, PK_KV_STORE, PK_ATTENTION, PK_SWIGLU,
    PK_ADD, PK_SCALE, PK_ACTIVATION, PK_GATHER_ROWS, PK_SLICE_COLS, PK_TO_F32, PK_FROM_F32,
    PK_BIAS_ADD, PK_SPLIT_COLS, PK_QKV_ROPE, PK_GEMV_1, PK_GEMV_SWIGLU_1, PK_ATTENTION_SPLIT,
    PK_ATTENTION_COMBINE, PK_ROPE_ATTENTION
};

/* Thread counts a node may have: 'n' = a norm (any multiple of 32 up to 256, or 512 / 1024,
 * which 256 threads run with 2 or 4 virtual threads each), 'e' = any multiple of 32 up to 256,
 * a number = exactly that many. */
typedef struct pk_kernel {
    const char *name;
    int op;
    const char *sig; /* one letter per parameter: p pointer, i int, f float, l long */
    int threads;     /* 0 = 'e', -1 = 'n', else exact */
} pk_kernel;

static const pk_kernel pk_kernels[] = {
    {"weft_embed", PK_EMBED, "pppiii", 0},
    {"weft_rmsnorm", PK_RMSNORM, "pppiiif", -1},
    {"weft_add_rmsnorm", PK_ADD_RMSNORM, "pppppiif", -1},
    {"weft_add_rmsnorm_b", PK_ADD_RMSNORM, "pppppiif", -1}, /* the same op, batched loads */
    {"weft_rope", PK_ROPE, "ppppiiiii", 256},
    {"weft_kv_store", PK_KV_STORE, "ppppppiiii", 0},
    {"weft_attention", PK_ATTENTION, "ppppppiiiiiif", 128},
    {"weft_swiglu", PK_SWIGLU, "pppl", 256},
    {"weft_add", PK_ADD, "pppl", 256},
    {"weft_scale", PK_SCALE, "ppfl", 256},
    {"weft_activation", PK_ACTIVATION, "ppil", 256},
    {"weft_gather_rows", PK_GATHER_ROWS, "pppii", 0},
    {"weft_slice_cols", PK_SLICE_COLS, "ppiiii", 256},
    {"weft_to_f32", PK_TO_F32, "ppl", 256},
    {"weft_from_f32", PK_FROM_F32, "ppl", 256},
    {"weft_bias_add", PK_BIAS_ADD, "ppii", 256},
    {"weft_split_cols", PK_SPLIT_COLS, "pppppiiiiii", 256},
    {"weft_qkv_rope", PK_QKV_ROPE, "pipipipppppppiiiiiif", 0},
    {"weft_gemv_1", PK_GEMV_1, "ppppiiiii", 256},
    {"weft_gemv_swiglu_1", PK_GEMV_SWIGLU_1, "ppppiiii", 256},
    {"weft_attention_split", PK_ATTENTION_SPLIT, "ppppppiiiiiifi", 0},
    {"weft_attention_combine", PK_ATTENTION_COMBINE, "ppiiii", 0},
    {"weft_rope_attention", PK_ROPE_ATTENTION, "pppppppppppppiiiiifiiifi", 256},
    /* the cuda backend's option attn_cp form: the same body; the persistent kernels run it
     * without the copies (core.cu pk_run), so the same bits, in the plain kernel's code */
    {"weft_rope_attention_cp", PK_ROPE_ATTENTION, "pppppppppppppiiiiifiiifi", 256},
    /* the forms launched without clusters (merge: atomic), the ones a persistent block can run */
    {"weft_rope_attention_at", PK_ROPE_ATTENTION, "pppppppppppppiiiiifiiifi", 256},
    {"weft_rope_attention_cp_at", PK_ROPE_ATTENTION, "pppppppppppppiiiiifiiifi", 256},
};

static inline const pk_kernel *pk_kernel_find(const char *name) {
    for (size_t i = 0; i < sizeof(pk_kernels) / sizeof(pk_kernels[0]); i++)
        if (name && !strcmp(pk_kernels[i].name, name)) return &pk_kernels[i];
    return NULL;
}

static inline int pk_param_size(char c) {
    return c == 'p' || c == 'l' ? 8 : 4;
}

/* Whether a node of kernel k may run with nt threads in the persistent kernel's blocks. */
static inline int pk_threads_ok(const pk_kernel *k, unsigned nt) {
    if (nt == 0 || nt % 32) return 0;
    if (k->threads > 0) return nt == (unsigned)k->threads;
    if (k->threads < 0) return nt <= PK_THREADS || nt == 2 * PK_THREADS || nt == 4 * PK_THREADS;
    return nt <= PK_THREADS;
}

/* L2 prefetch plan: node j's weight ranges are prefetched from node src[j] on, the node right
 * after the previous weight-reading node (or that node itself when j follows it directly, as
 * a down projection follows gate|up), so the weights stream while the small nodes between two
 * products run. has_w[i] says node i reads weights; src[j] = -1 where nothing is prefetched.
 * Each source node gets the ranges of at most one weight node. */
static inline void pk_prefetch_plan(const int *has_w, int n, int *src) {
    int prev = -1;
    for (int j = 0; j < n; j++) {
        src[j] = -1;
        if (!has_w[j]) continue;
        int s = prev < 0 ? 0 : prev + 1 < j ? prev + 1 : prev;
        if (s < j) src[j] = s;
        prev = j;
    }
}

static inline int gemv_op(int op) {
    return op == PK_GEMV_1 || op == PK_GEMV_SWIGLU_1;
}

static inline int ranges_overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
    return a < b + bn && b < a + an;
}

/* Whether the one-row norm at node i can be folded into the product at node i + 1 (which then
 * computes it in every block, core.cu mk_norm): the product reads the norm's output and the
 * norm covers whole rows at a thread count the kernel runs. Returns the row length, 0 when it
 * cannot; *guard is set when the product's output overlaps one of the norm's buffers (the
 * memory plan reuses a dead input): the product's blocks then store nothing until every block
 * has finished the norm (block 0 writes r and y there, every block reads x and res). */
static inline uint32_t foldable_norm(const pk_node *prog, size_t n, size_t i, uint64_t asz, int *guard) {
    if (i + 1 >= n || !gemv_op(prog[i + 1].op) || prog[i].nvb != 1) return 0;
    const pk_node *nm = &prog[i], *g = &prog[i + 1];
    uint64_t x, res = 0, y, r = 0, D;
    if (nm->op == PK_ADD_RMSNORM) { /* x, res, w, y, r, T, D, eps */
        x = nm->a[0], res = nm->a[1], y = nm->a[3], r = nm->a[4], D = (uint32_t)nm->a[6];
        if ((uint32_t)nm->a[5] != 1) return 0;
    } else if (nm->op == PK_RMSNORM) { /* x, w, y, T, cols, group, eps */
        x = nm->a[0], y = nm->a[2], D = (uint32_t)nm->a[4];
        if ((uint32_t)nm->a[3] != 1 || (uint32_t)nm->a[5] != D) return 0;
    } else
        return 0;
    uint32_t nt = (uint32_t)nm->nt;
    if (!(nt <= PK_THREADS || nt == 2 * PK_THREADS || nt == 4 * PK_THREADS)) return 0;
    int sw = g->op == PK_GEMV_SWIGLU_1;
    uint64_t K = (uint32_t)g->a[sw ? 6 : 7], N = (uint32_t)g->a[sw ? 5 : 6];
    if (g->a[0] != y || K != D || D == 0) return 0;
    uint64_t out = g->a[3], outn = N * (!sw && g->a[4] ? 4 : asz), rb = D * asz;
    *guard = ranges_overlap(out, outn, x, rb) || ranges_overlap(out, outn, y, rb) ||
             (res && ranges_overlap(out, outn, res, rb)) || (r && ranges_overlap(out, outn, r, rb));
    return (uint32_t)D;
}

#endif
