/* The cuda backend's probe (weft eval probe): measured device-to-device copy bandwidth (bytes
 * read plus written), dense bf16 and fp8 e4m3 GEMM rates through cuBLASLt on random data at a
 * large shape, the host round trip of a 4-byte copy and the host cost of a kernel launch. Each
 * figure is the median of timed repeats after warm-up, timed with CUDA events. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"

/* Checks a driver call; on failure the function's status s holds the error and it leaves
 * through its clean-up at `done`. */
#define CK(call, what)                                                                             \
    do {                                                                                           \
        s = cuda_check((call), #call, what, err);                                                  \
        if (s) goto done;                                                                          \
    } while (0)

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static weft_status fill(cuda_backend *b, CUdeviceptr p, long n, int fp8, weft_error *err) {
    CUfunction f;
    weft_status s = cuda_kernel_get(b, WEFT_DTYPE_BF16, WEFT_DTYPE_BF16,
                                    fp8 ? "weft_fill_random_fp8" : "weft_fill_random", &f, err);
    if (s) return s;
    unsigned long long seed = (unsigned long long)p;
    void *args[] = {&p, &n, &seed};
    return cuda_launch(b, f, "weft_fill_random", (unsigned)b->sm_count * 8, 1, 256, args, err);
}

/* fp8 GEMM D(bf16) = A^T B with A, B e4m3, the TN layout Hopper's fp8 path requires. */
static weft_status gemm_fp8_time(cuda_backend *b, int M, int N, int K, CUdeviceptr A,
                                 CUdeviceptr B, CUdeviceptr D, int reps, float *ms,
                                 weft_error *err) {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    CUevent e0 = NULL, e1 = NULL;
    weft_status s = WEFT_OK;
    cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    uint64_t ws = b->lt_ws_bytes;
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)) ||
        cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, M, K) ||
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, N, K) ||
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, M, N, M) ||
        cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof(ws))) {
        s = cuda_fail(err, WEFT_ERR_DEVICE, "cuBLASLt fp8 descriptor setup failed");
        goto done;
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(b->lt, op, la, lb, ld, ld, pref, 1, &res, &found) ||
        !found) {
        s = cuda_fail(err, WEFT_ERR_UNSUPPORTED, "cuBLASLt has no fp8 e4m3 algorithm here");
        goto done;
    }
    float alpha = 1.f, beta = 0.f;
    CK(cuEventCreate(&e0, 0), "creating events");
    CK(cuEventCreate(&e1, 0), "creating events");
    for (int r = -3; r < reps; r++) {
        CK(cuEventRecord(e0, b->stream), "recording");
        if (cublasLtMatmul(b->lt, op, &alpha, (void *)(uintptr_t)A, la, (void *)(uintptr_t)B, lb,
                           &beta, (void *)(uintptr_t)D, ld, (void *)(uintptr_t)D, ld, &res.algo,
                           (void *)(uintptr_t)b->lt_ws, b->lt_ws_bytes, b->stream)) {
            s = cuda_fail(err, WEFT_ERR_DEVICE, "cublasLtMatmul (fp8) failed");
            goto done;
        }
        CK(cuEventRecord(e1, b->stream), "recording");
        CK(cuEventSynchronize(e1), "waiting");
        if (r >= 0) CK(cuEventElapsedTime(&ms[r], e0, e1), "reading events");
    }
done:
    if (e0) cuEventDestroy(e0);
    if (e1) cuEventDestroy(e1);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
}

weft_status cuda_probe(void *st, weft_probe_result *out, weft_error *err) {
    cuda_backend *b = st;
    weft_status s = WEFT_OK;
    enum { REPS = 20 };
    float ms[REPS];
    CUdeviceptr x = 0, y = 0, z = 0;
    CUevent e0 = NULL, e1 = NULL;
    if (!out) return cuda_fail(err, WEFT_ERR_INVALID, "probe: out is NULL");
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    CK(cuEventCreate(&e0, 0), "creating events");
    CK(cuEventCreate(&e1, 0), "creating events");

    /* copy bandwidth: 2 GiB buffers, several times the 60 MB L2 */
    const size_t bytes = 2ull << 30;
    CK(cuMemAlloc(&x, bytes), "allocating probe buffers");
    CK(cuMemAlloc(&y, bytes), "allocating probe buffers");
    if ((s = fill(b, x, (long)(bytes / 2), 0, err))) goto done;
    for (int r = -3; r < REPS; r++) {
        CK(cuEventRecord(e0, b->stream), "recording");
        CK(cuMemcpyDtoDAsync(y, x, bytes, b->stream), "timing a device copy");
        CK(cuEventRecord(e1, b->stream), "recording");
        CK(cuEventSynchronize(e1), "waiting");
        if (r >= 0) CK(cuEventElapsedTime(&ms[r], e0, e1), "reading events");
    }
    qsort(ms, REPS, sizeof(float), cmp_f);
    out->copy_bytes = bytes;
    out->copy_bytes_per_s = 2.0 * (double)bytes / (ms[REPS / 2] * 1e-3);

    /* bf16 GEMM 8192^3 through the backend's own path (cuda_gemm, as linear layers run) */
    const int G = 8192;
    size_t gb = (size_t)G * G * 2;
    CK(cuMemAlloc(&z, gb), "allocating probe buffers");
    if ((s = fill(b, x, (long)G * G, 0, err)) || (s = fill(b, y, (long)G * G, 0, err))) goto done;
    for (int r = -3; r < REPS / 2; r++) {
        CK(cuEventRecord(e0, b->stream), "recording");
        if ((s = cuda_gemm(b, x, WEFT_DTYPE_BF16, y, WEFT_DTYPE_BF16, 0, z, WEFT_DTYPE_BF16, G, G,
                           G, err)))
            goto done;
        CK(cuEventRecord(e1, b->stream), "recording");
        CK(cuEventSynchronize(e1), "waiting");
        if (r >= 0) CK(cuEventElapsedTime(&ms[r], e0, e1), "reading events");
    }
    qsort(ms, REPS / 2, sizeof(float), cmp_f);
    out->gemm_shape[0] = out->gemm_shape[1] = out->gemm_shape[2] = (uint64_t)G;
    out->gemm_bf16_flops = 2.0 * G * (double)G * G / (ms[REPS / 4] * 1e-3);

    /* fp8 e4m3 GEMM, same shape */
    if ((s = fill(b, x, (long)G * G, 1, err)) || (s = fill(b, y, (long)G * G, 1, err))) goto done;
    if (gemm_fp8_time(b, G, G, G, x, y, z, REPS / 2, ms, err) == WEFT_OK) {
        qsort(ms, REPS / 2, sizeof(float), cmp_f);
        out->gemm_fp8_flops = 2.0 * G * (double)G * G / (ms[REPS / 4] * 1e-3);
    } else {
        snprintf(out->notes, sizeof(out->notes), "fp8: %s", err ? err->message : "failed");
        if (err) err->code = 0;
    }

    /* host round trip of 4 bytes, and the host cost of one launch */
    {
        int v = 7, w = 0;
        double t[64];
        for (int r = 0; r < 64; r++) {
            double t0 = now_s();
            CK(cuMemcpyHtoD(x, &v, 4), "round trip");
            CK(cuMemcpyDtoH(&w, x, 4), "round trip");
            t[r] = now_s() - t0;
        }
        for (int i = 1; i < 64; i++) /* insertion sort for the median */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                double q = t[j];
                t[j] = t[j - 1];
                t[j - 1] = q;
            }
        out->host_roundtrip_s = t[32];
        CUfunction f;
        if ((s = cuda_kernel_get(b, WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, "weft_noop", &f, err)))
            goto done;
        int arg = 0;
        void *args[] = {&arg};
        double t0 = now_s();
        for (int r = 0; r < 1000; r++)
            if ((s = cuda_launch_ex(b, f, "weft_noop", 1, 1, 1, 32, 0, 0, args, err)))
                goto done; /* a plain launch: the probe reports the ordinary launch cost */
        out->launch_s = (now_s() - t0) / 1000;
        CK(cuStreamSynchronize(b->stream), "waiting");
    }
done:
    if (x) cuMemFree(x);
    if (y) cuMemFree(y);
    if (z) cuMemFree(z);
    if (e0) cuEventDestroy(e0);
    if (e1) cuEventDestroy(e1);
    return s;
}
