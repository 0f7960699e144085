// sampling.cu: exec.device-sampling's kernels, compiled by NVRTC for the device's exact
// architecture. They follow docs/SAMPLING.md step by step (greedy; temperature, top-k, top-p,
// min-p; one Philox-4x32-10 draw over the survivors in ascending id order) so that a row gives
// the token the host sampler gives, up to floating-point summation order. Only a 16-byte result
// per row (token, log-probability, status) leaves the device.
//
// Numbers: weights w = exp((z - zmax) / T) and every mass are doubles, as on the host; a
// candidate's order key is the bit pattern of its w (a positive double orders like its bits),
// ties broken by the smaller id. Boundaries (top-k, top-p) are found by radix descent over that
// key: 8 passes of 8 bits, then up to 4 passes over the id for ties. No sort.

typedef unsigned int u32;
typedef unsigned long long u64;
#define NEG_INF __int_as_float(0xff800000)
#define POS_INF __int_as_float(0x7f800000)
#define BIG_ID 0x7fffffff

// status codes of ds_result.status
#define DS_OK 0
#define DS_BAD_LOGIT 1 // NaN or +inf in the row
#define DS_EMPTY 2     // every logit is -inf

struct ds_result {
    int token;
    float logprob;
    int status;
    int bad_index;
};

struct ds_part {
    double s;
    float m;
    int idx;
    int bad;
    int pad;
};

// One logit into the running (m, idx, bad) of a thread: the largest value, its smallest index
// (a thread visits ascending indices, so a later equal value never replaces it), and NaN or
// +inf marking bad with its index + 1 (the first a thread meets).
__device__ __forceinline__ void max_push(float v, int i, float &m, int &idx, int &bad) {
    if (v != v || v == POS_INF) {
        if (!bad) bad = i + 1;
    } else if (v > m) {
        m = v;
        idx = i;
    }
}

// (m, idx) from another thread or block into this one: the larger value, ties to the smaller
// index; bad keeps the smallest nonzero mark, so the result does not depend on the order.
__device__ __forceinline__ void max_merge(float &m, int &idx, int &bad, float m2, int idx2,
                                          int bad2) {
    if (m2 > m || (m2 == m && idx2 < idx)) {
        m = m2;
        idx = idx2;
    }
    if (bad2 && (!bad || bad2 < bad)) bad = bad2;
}

// Reduces (m, idx, bad) over the block; every thread gets the result. blockDim.x % 32 == 0.
// Floats and ints only: the exponentials come after, once the maximum is known.
__device__ void block_max(float &m, int &idx, int &bad) {
    __shared__ float sm[32];
    __shared__ int si[32], sb[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        max_merge(m, idx, bad, __shfl_xor_sync(0xffffffffu, m, o),
                  __shfl_xor_sync(0xffffffffu, idx, o), __shfl_xor_sync(0xffffffffu, bad, o));
    __syncthreads();
    if (lane == 0) {
        sm[warp] = m;
        si[warp] = idx;
        sb[warp] = bad;
    }
    __syncthreads();
    m = sm[0];
    idx = si[0];
    bad = sb[0];
    for (int w = 1; w < nw; w++) max_merge(m, idx, bad, sm[w], si[w], sb[w]);
}

// Sum of v over the block in a fixed order (warp trees, then warps in order); every thread gets
// it. T: double (masses) or u32 (counts).
template <typename T> __device__ T block_sum(T v) {
    __shared__ T part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    T t = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += part[w];
    return t;
}

// The row's result from its maximum m at idx, s = sum of exp(z - m) in double, and bad. The
// log-softmax of the chosen token is z[idx] - m - log(s) in double, as the host sampler reports
// it, and z[idx] == m exactly: -log(s).
__device__ __forceinline__ void finish(ds_result *out, int idx, double s, int bad) {
    out->bad_index = bad ? bad - 1 : -1;
    if (bad) {
        out->status = DS_BAD_LOGIT;
        out->token = -1;
        out->logprob = 0.f;
    } else if (idx == BIG_ID) {
        out->status = DS_EMPTY;
        out->token = -1;
        out->logprob = 0.f;
    } else {
        out->status = DS_OK;
        out->token = idx;
        out->logprob = (float)(-log(s));
    }
}

#define GREEDY_KEEP 8 // logits a thread holds in registers between the two passes

// Greedy over one row per blockIdx.y: the largest logit, ties to the smallest id, with its
// log-probability. Each block takes a strided slice: its maximum first (floats only), then the
// sum of exp(z - that maximum) in double, each term independent of the others. The last block
// to finish (a counter per row, reset by that block) merges the partials the same way: their
// maximum M, then the sum of s_b exp(m_b - M) in a fixed order, so the result does not depend
// on which block finished last. ids (sample_async; may be null): the row's token id also goes
// there, as ds_ids would write it. out may be pinned host memory (sample_async's slot, through
// its device address).
extern "C" __global__ void ds_greedy(const float *logits, long ld, int V, ds_part *parts,
                                     u32 *done, ds_result *out, int *ids) {
#if __CUDA_ARCH__ >= 900
    // launched with option pdl: wait here until the kernel that wrote the logits has completed
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    int row = blockIdx.y;
    const float *z = logits + (long)row * ld;
    const int first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x;
    float zr[GREEDY_KEEP];
#pragma unroll
    for (int k = 0; k < GREEDY_KEEP; k++) {
        long i = first + (long)k * step;
        zr[k] = i < V ? z[i] : NEG_INF;
    }
    float m = NEG_INF;
    int idx = BIG_ID, bad = 0;
#pragma unroll
    for (int k = 0; k < GREEDY_KEEP; k++)
        if (first + (long)k * step < V) max_push(zr[k], first + k * step, m, idx, bad);
    for (long i = first + (long)GREEDY_KEEP * step; i < V; i += step)
        max_push(z[i], (int)i, m, idx, bad);
    block_max(m, idx, bad);
    double s = 0.0;
    if (!bad && m > NEG_INF) { // every value is finite or -inf (exp(-inf) = 0)
        const double md = (double)m;
#pragma unroll
        for (int k = 0; k < GREEDY_KEEP; k++) s += exp((double)zr[k] - md);
        for (long i = first + (long)GREEDY_KEEP * step; i < V; i += step)
            s += exp((double)z[i] - md);
    }
    s = block_sum<double>(s);
    __shared__ int last;
    if (threadIdx.x == 0) {
        ds_part *p = &parts[(long)row * gridDim.x + blockIdx.x];
        p->m = m;
        p->idx = idx;
        p->s = s;
        p->bad = bad;
        __threadfence();
        last = atomicAdd(&done[row], 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // thread j holds partial j (the usual case: blocks <= threads) and reads any further ones
    // (j + blockDim.x, ...) again for the sums
    const ds_part *pr = &parts[(long)row * gridDim.x];
    const u32 b0 = threadIdx.x;
    float m0 = NEG_INF;
    int i0 = BIG_ID, bad0 = 0;
    double s0 = 0.0;
    if (b0 < gridDim.x) {
        m0 = __ldcg(&pr[b0].m);
        i0 = __ldcg(&pr[b0].idx);
        bad0 = __ldcg(&pr[b0].bad);
        s0 = __ldcg(&pr[b0].s);
    }
    m = m0;
    idx = i0;
    bad = bad0;
    for (u32 b = b0 + blockDim.x; b < gridDim.x; b += blockDim.x)
        max_merge(m, idx, bad, __ldcg(&pr[b].m), __ldcg(&pr[b].idx), __ldcg(&pr[b].bad));
    block_max(m, idx, bad);
    s = 0.0;
    if (!bad && m > NEG_INF) {
        const double md = (double)m;
        if (m0 > NEG_INF) s = s0 * exp((double)m0 - md);
        for (u32 b = b0 + blockDim.x; b < gridDim.x; b += blockDim.x) {
            float mb = __ldcg(&pr[b].m);
            if (mb > NEG_INF) s += __ldcg(&pr[b].s) * exp((double)mb - md);
        }
    }
    s = block_sum<double>(s);
    if (threadIdx.x == 0) {
        finish(&out[row], idx, s, bad);
        // (the token finish stored, or 0 where it stored none; out may be pinned host memory, so
        // it is not read back)
        if (ids) ids[row] = bad || idx == BIG_ID ? 0 : idx;
        done[row] = 0;
    }
}

// ---- Philox-4x32-10, mapping of docs/SAMPLING.md ------------------------------------------
__device__ float philox_uniform(u64 seed, u64 counter) {
    u32 c0 = (u32)counter, c1 = (u32)(counter >> 32), c2 = 0, c3 = 0; // lane 0
    u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        u32 lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        u32 lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return (float)(c0 >> 8) * (1.0f / 16777216.0f);
}

// ---- block helpers for the sampled kernel (blockDim.x == 1024) -----------------------------
// Exclusive prefix sum over the block in thread order; *total receives the sum.
__device__ double block_scan_d(double v, double *total) {
    __shared__ double wsum[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    double incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        double t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
    __syncthreads();
    if (lane == 31) wsum[warp] = incl;
    __syncthreads();
    double before = 0.0, all = 0.0;
    for (int w = 0; w < nw; w++) {
        if (w < warp) before += wsum[w];
        all += wsum[w];
    }
    *total = all;
    return before + incl - v;
}

// A boundary of a best-first prefix: key (bits of w) and the largest id kept among equal keys.
struct bound {
    u64 key;
    int id;
};
__device__ __forceinline__ bool at_least(u64 key, int id, bound b) {
    return key > b.key || (key == b.key && id <= b.id);
}

// Filters already decided, as a predicate over (key, id).
struct filt {
    int use_k, use_p;
    bound bk, bp;
    double min_p;
    int use_min;
};
__device__ __forceinline__ bool in_k(const filt &f, u64 key, int id) {
    return !f.use_k || at_least(key, id, f.bk);
}
__device__ __forceinline__ bool survives(const filt &f, u64 key, int id) {
    if (key == 0) return false; // w == 0: not a candidate
    if (f.use_k && !at_least(key, id, f.bk)) return false;
    if (f.use_p && !at_least(key, id, f.bp)) return false;
    if (f.use_min && __longlong_as_double((long long)key) < f.min_p) return false;
    return true;
}

// Among candidates with key == K inside the top-k set (when in_topk), the id of rank r (1-based,
// ascending ids): radix descent over 32-bit ids.
__device__ int select_tie_id(const u64 *keys, int V, u64 K, u32 r, const filt &f, int in_topk,
                             u32 *hist) {
    __shared__ u32 chosen, rank_left;
    u32 prefix = 0, mask = 0;
    if (threadIdx.x == 0) rank_left = r;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            u64 key = keys[i];
            if (key != K || ((u32)i & mask) != prefix) continue;
            if (in_topk && !in_k(f, key, i)) continue;
            atomicAdd(&hist[((u32)i >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u32 left = rank_left, d = 0;
            for (; d < 255; d++) {
                if (left <= hist[d]) break;
                left -= hist[d];
            }
            chosen = d;
            rank_left = left;
        }
        __syncthreads();
        prefix |= chosen << shift;
        mask |= 255u << shift;
    }
    return (int)prefix;
}

// One row per block, 1024 threads. keys: scratch of V u64 (bits of w; 0 = not a candidate).
extern "C" __global__ void ds_sample(const float *logits, int V, u64 *keys, float temperature,
                                     int top_k, float top_p, float min_p, u64 seed, u64 counter,
                                     ds_result *out) {
    const float *z = logits;
    __shared__ u32 hist[256];
    __shared__ double hmass[256];
    __shared__ u32 s_digit;
    __shared__ double s_acc;
    __shared__ int s_found, s_token, s_last;

    // 1. max, log-sum-exp (for the reported log-probability) and validity
    float m = NEG_INF;
    int idx = BIG_ID, bad = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) max_push(z[i], i, m, idx, bad);
    block_max(m, idx, bad);
    if (bad || idx == BIG_ID) {
        if (threadIdx.x == 0) finish(out, idx, 0.0, bad);
        return;
    }
    const double m0 = (double)m;
    double s = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += exp((double)z[i] - m0);
    const double lse0 = log(block_sum<double>(s));

    // 2. weights as order keys; candidates are w > 0
    const double inv_t = 1.0 / (double)temperature;
    u32 n_local = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = z[i];
        double w = v > NEG_INF ? exp(((double)v - m0) * inv_t) : 0.0;
        u64 key = (u64)__double_as_longlong(w);
        keys[i] = key;
        n_local += key != 0;
    }
    __syncthreads();
    const u32 n_cand = block_sum<u32>(n_local);

    filt f;
    f.use_k = top_k > 0 && (u32)top_k < n_cand;
    f.use_p = top_p < 1.0f;
    f.use_min = min_p > 0.0f;
    f.min_p = (double)min_p;
    f.bk.key = 0;
    f.bk.id = BIG_ID;
    f.bp = f.bk;

    // 3. top-k boundary: the k-th best in (w desc, id asc)
    if (f.use_k) {
        u64 prefix = 0, mask = 0;
        __shared__ u32 rank_left;
        if (threadIdx.x == 0) rank_left = (u32)top_k;
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
            __syncthreads();
            for (int i = threadIdx.x; i < V; i += blockDim.x) {
                u64 key = keys[i];
                if (key == 0 || (key & mask) != prefix) continue;
                atomicAdd(&hist[(u32)(key >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                u32 left = rank_left;
                int d = 255;
                for (; d > 0; d--) {
                    if (left <= hist[d]) break;
                    left -= hist[d];
                }
                s_digit = (u32)d;
                rank_left = left;
            }
            __syncthreads();
            prefix |= (u64)s_digit << shift;
            mask |= 255ull << shift;
        }
        u32 r = rank_left;
        __syncthreads();
        f.bk.key = prefix;
        f.bk.id = select_tie_id(keys, V, prefix, r, f, 0, hist);
        __syncthreads();
    }

    // 4. top-p boundary over the top-k survivors: the shortest best-first prefix whose mass
    //    reaches top_p times their mass; if rounding keeps it out of reach, nothing is cut
    if (f.use_p) {
        double local = 0.0;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            u64 key = keys[i];
            if (key && in_k(f, key, i)) local += __longlong_as_double((long long)key);
        }
        const double target = (double)top_p * block_sum<double>(local);
        u64 prefix = 0, mask = 0;
        if (threadIdx.x == 0) {
            s_acc = 0.0;
            s_found = 1;
        }
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int d = threadIdx.x; d < 256; d += blockDim.x) {
                hist[d] = 0;
                hmass[d] = 0.0;
            }
            __syncthreads();
            for (int i = threadIdx.x; i < V; i += blockDim.x) {
                u64 key = keys[i];
                if (key == 0 || (key & mask) != prefix || !in_k(f, key, i)) continue;
                u32 d = (u32)(key >> shift) & 255u;
                atomicAdd(&hist[d], 1u);
                atomicAdd(&hmass[d], __longlong_as_double((long long)key));
            }
            __syncthreads();
            if (threadIdx.x == 0 && s_found) {
                double acc = s_acc;
                int d = 255, hit = 0;
                for (; d >= 0; d--) {
                    if (!hist[d]) continue;
                    if (acc + hmass[d] >= target) {
                        hit = 1;
                        break;
                    }
                    acc += hmass[d];
                }
                if (!hit) s_found = 0;
                s_digit = hit ? (u32)d : 0u;
                s_acc = acc;
            }
            __syncthreads();
            if (!s_found) break;
            prefix |= (u64)s_digit << shift;
            mask |= 255ull << shift;
        }
        if (s_found) {
            // ties at the boundary key: ascending ids, each adding the same w, until the target
            // is reached (added one by one, as a sequential walk does)
            __shared__ u32 s_r;
            double wk = __longlong_as_double((long long)prefix);
            u32 local_n = 0;
            for (int i = threadIdx.x; i < V; i += blockDim.x)
                local_n += keys[i] == prefix && in_k(f, prefix, i);
            u32 n_ties = block_sum<u32>(local_n);
            if (threadIdx.x == 0) {
                double acc = s_acc;
                u32 r = 1;
                for (; r < n_ties; r++) {
                    if (acc + wk >= target) break;
                    acc += wk;
                }
                s_r = r;
            }
            __syncthreads();
            f.bp.key = prefix;
            f.bp.id = select_tie_id(keys, V, prefix, s_r, f, 1, hist);
        } else {
            f.use_p = 0;
        }
        __syncthreads();
    }

    // 5-6. min-p is a threshold inside survives(); the draw walks survivors in id order:
    //      each thread owns a contiguous slice, a block scan gives each slice's start mass
    const int chunk = (V + (int)blockDim.x - 1) / (int)blockDim.x;
    const int lo = threadIdx.x * chunk, hi = lo + chunk < V ? lo + chunk : V;
    double mine = 0.0;
    int last_id = -1;
    for (int i = lo; i < hi; i++) {
        u64 key = keys[i];
        if (survives(f, key, i)) {
            mine += __longlong_as_double((long long)key);
            last_id = i;
        }
    }
    if (threadIdx.x == 0) {
        s_token = BIG_ID;
        s_last = -1;
    }
    __syncthreads();
    if (last_id >= 0) atomicMax(&s_last, last_id);
    double total;
    const double before = block_scan_d(mine, &total);
    const double target = (double)philox_uniform(seed, counter) * total;
    if (mine > 0.0 && before <= target && target < before + mine) {
        double acc = before;
        for (int i = lo; i < hi; i++) {
            u64 key = keys[i];
            if (!survives(f, key, i)) continue;
            acc += __longlong_as_double((long long)key);
            if (acc > target) {
                atomicMin(&s_token, i); // rounding may let two slices claim it: the first wins
                break;
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int tok = s_token != BIG_ID ? s_token : s_last; // rounding shortfall: the last survivor
        out->status = DS_OK;
        out->bad_index = -1;
        out->token = tok;
        out->logprob = (float)((double)z[tok] - m0 - lse0);
    }
}

// exec.async-pipeline: the sampled ids of n rows as one i32 array (the next step's in.tokens is
// copied from it on the device). A row that failed (token -1) feeds id 0: its request ends with
// the error when the host collects the row, and its next row is dropped.
extern "C" __global__ void ds_ids(const ds_result *res, int n, int *ids) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ids[i] = res[i].token >= 0 ? res[i].token : 0;
}
