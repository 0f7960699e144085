/* cuda_mk_bench: how fast exec.persistent's streaming kernel (core.cu weft_megakernel) moves a
 * product's weights, without the rest of a decode step. A program of R GEMV nodes of one decode
 * shape, each reading its own copy of the weights from a 2 GiB pool (so every node reads HBM),
 * runs as one launch of 132 (one per SM) blocks, the weight ring sized as the technique sizes
 * it; printed: microseconds per node and GB/s, with the nodes independent ("free": the
 * producer streams and the consumers multiply with no node waits) and chained as a decode step
 * chains them ("chain": each node waits for the one before), and
 * ("no-math": free, the consumers only wait for each chunk and release it: the stream alone).
 *   cuda_mk_bench [shapes: a name part | all] [R]
 * Built with the backend's own sources (internal API), as cuda_gemv_bench. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../../techniques/exec.persistent/persistent_prog.h"
#include "bench_util.h"

typedef struct shape {
    const char *name;
    int N, K, swiglu;
} shape;

static const shape shapes[] = {
    {"qwen06b.qkv", 4096, 1024, 0},     {"qwen06b.o", 1024, 2048, 0},
    {"qwen06b.gate|up", 3072, 1024, 1}, {"qwen06b.down", 1024, 3072, 0},
    {"qwen06b.head", 151936, 1024, 0},  {"llama1b.qkv", 3072, 2048, 0},
    {"llama1b.gate|up", 8192, 2048, 1}, {"llama1b.down", 2048, 8192, 0},
    {"qwen8b.qkv", 6144, 4096, 0},      {"qwen8b.gate|up", 12288, 4096, 1},
    {"qwen8b.down", 4096, 12288, 0},
};

/* One launch of the program (R nodes); each launch is the next epoch of the arrival counters. */
typedef struct mk_ctx {
    CUfunction mk;
    CUdeviceptr prog, done;
    int R;
    unsigned sms, smem, off, ring, vs_off, epoch;
} mk_ctx;
static void issue_mk(cuda_backend *b, void *ctx, int i) {
    mk_ctx *c = ctx;
    (void)i;
    c->epoch++;
    CUdeviceptr stamps = 0;
    void *args[] = {&c->prog, &c->R, &c->done, &c->epoch, &c->off, &c->ring, &c->vs_off, &stamps};
    CKB(cuLaunchKernel(c->mk, c->sms, 1, 1, 288, 1, 1, c->smem, b->stream, args, NULL));
}

int main(int argc, char **argv) {
    const char *sel = argc > 1 ? argv[1] : "all";
    int R = argc > 2 ? atoi(argv[2]) : 32;
    if (R < 1 || R > 4096) R = 32;
    cuda_backend *b = bench_backend();
    CUfunction mk;
    TRYB(cuda_kernel_get(b, WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, "weft_megakernel", &mk, &err));
    CUdevice dev;
    int sms = 0, optin = 0, stat = 0;
    CKB(cuCtxGetDevice(&dev));
    CKB(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CKB(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    CKB(cuFuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, mk));
    const uint64_t pool_bytes = 2ull << 30;
    CUdeviceptr pool, x, y, done, prog;
    CKB(cuMemAlloc(&pool, pool_bytes));
    CKB(cuMemAlloc(&x, 16384 * 2));
    CKB(cuMemAlloc(&y, 151936ull * 2));
    CKB(cuMemAlloc(&done, 8192 * 4));
    CKB(cuMemAlloc(&prog, 4096 * sizeof(pk_node)));
    bench_fill(b, pool, (long)(pool_bytes / 2), 1);
    bench_fill(b, x, 16384, 1);
    printf("device %s, %d SMs, weft_megakernel: %d bytes of static shared memory\n", b->name, sms,
           stat);
    printf("%-16s %6s %5s %2s %6s | %9s %7s | %9s %7s | %9s %7s\n", "shape", "N", "K", "S",
           "ringKB", "free us", "GB/s", "chain us", "GB/s", "no-math", "GB/s");
    pk_node *h = calloc((size_t)R, sizeof(pk_node));
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        const shape *s = &shapes[si];
        if (strcmp(sel, "all") && !strstr(s->name, sel)) continue;
        int S = cuda_gemv_split(NULL, s->K), rows = 8 / S;
        uint64_t mbytes = (uint64_t)s->N * s->K * 2, wbytes = mbytes * (s->swiglu ? 2 : 1);
        int copies = (int)(pool_bytes / wbytes);
        uint32_t off = ((uint32_t)s->K * 2 + 127u) & ~127u;
        uint32_t ring = ((uint32_t)(optin - stat - (int)off - 1024)) & ~127u;
        uint32_t smem = off + ring, vs_off = off;
        CKB(cuFuncSetAttribute(mk, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
        double us[3];
        for (int mode = 0; mode < 3; mode++) { /* free, chain, free without the arithmetic */
            int chain = mode == 1;
            for (int i = 0; i < R; i++) {
                pk_node *nd = &h[i];
                memset(nd, 0, sizeof(*nd));
                CUdeviceptr w = pool + (uint64_t)(i % copies) * wbytes;
                nd->nvb = (s->N + rows - 1) / rows;
                nd->gx = nd->nvb;
                nd->gy = mode == 2 ? -1 : 1;
                nd->nt = 256;
                nd->wait = chain && i ? i - 1 : -1;
                nd->wait_nvb = chain && i ? (uint32_t)h[i - 1].nvb : 0;
                if (!s->swiglu) { /* x, w, bias, y, out_f32, T, N, K, S */
                    nd->op = PK_GEMV_1;
                    uint64_t a[9] = {x, w, 0, y, 0, 1, (uint64_t)s->N, (uint64_t)s->K, (uint64_t)S};
                    memcpy(nd->a, a, sizeof(a));
                } else { /* x, wg, wu, y, T, F, K, S */
                    nd->op = PK_GEMV_SWIGLU_1;
                    uint64_t a[8] = {
                        x, w, w + mbytes, y, 1, (uint64_t)s->N, (uint64_t)s->K, (uint64_t)S};
                    memcpy(nd->a, a, sizeof(a));
                }
            }
            CKB(cuMemcpyHtoD(prog, h, (size_t)R * sizeof(pk_node)));
            CKB(cuMemsetD32(done, 0, 8192));
            CKB(cuStreamSynchronize(CU_STREAM_LEGACY)); /* landed before the compute stream */
            mk_ctx c = {.mk = mk,
                        .prog = prog,
                        .done = done,
                        .R = R,
                        .sms = (unsigned)sms,
                        .smem = smem,
                        .off = off,
                        .ring = ring,
                        .vs_off = vs_off};
            us[mode] = time_calls(b, issue_mk, &c, 1, 0) / R;
        }
        printf("%-16s %6d %5d %2d %6u | %9.2f %7.0f | %9.2f %7.0f | %9.2f %7.0f\n", s->name, s->N,
               s->K, S, ring >> 10, us[0], wbytes / us[0] / 1e3, us[1], wbytes / us[1] / 1e3, us[2],
               wbytes / us[2] / 1e3);
    }
    free(h);
    bench_close(b);
    return 0;
}
