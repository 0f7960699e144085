/* The backend's option trace: where a replayed decode graph spends its time, kernel by kernel.
 *
 * With the option on, core.cu is compiled with WEFT_TRACE: every kernel's first thread stamps the
 * global timer into a ring in its module once it has passed its wait for the kernel before it
 * (pdl_enter), i.e. right after that kernel completed. The host keeps the names of the kernels
 * launched during the latest stream capture, in launch order. When the backend closes, the last
 * len(names) stamps of all modules, merged in time order, are the last replay of that graph
 * (the decode step, for a decode benchmark): the gap from one stamp to the next is the earlier
 * kernel's time on the step's critical path. Kernels of other plugins (the device sampler, kv
 * techniques) stamp nothing; their time falls into the gap of the backend kernel before them.
 * Printed to stderr, one line per kernel and a table by kernel name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define TRACE_RING 16384 /* core.cu WEFT_TRACE_RING */

void cuda_trace_launch(cuda_backend *b, const char *name) {
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (cuStreamIsCapturing(b->stream, &cs) != CUDA_SUCCESS ||
        cs != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        b->trace_capturing = 0;
        return;
    }
    if (!b->trace_capturing) b->trace_n = 0; /* a new capture: its kernels replace the last's */
    b->trace_capturing = 1;
    if (b->trace_n == b->trace_cap) {
        size_t cap = b->trace_cap ? 2 * b->trace_cap : 512;
        void *p = realloc(b->trace_names, cap * sizeof(*b->trace_names));
        if (!p) return; /* tracing is best effort; the report then says it has no names */
        b->trace_names = p;
        b->trace_cap = cap;
    }
    snprintf(b->trace_names[b->trace_n++], sizeof(b->trace_names[0]), "%s", name);
}

static int cmp_u64(const void *a, const void *b) {
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

/* The blocks of weft_rope_attention's latest launch (core.cu BLOCK_START): when each started
 * and finished its scores and sums, relative to t0 (block (0, 0, 0) passing its wait), as a
 * histogram in microseconds, live (non-empty) splits and empty ones apart, and how many live
 * blocks each SM ran. */
enum { ATTN_BLOCKS = 1024 }; /* core.cu WEFT_TRACE_BLOCKS */
/* the attention's per-block stamps (start, scores and sums done) and SMs of its latest launch:
 * the count read (at most ATTN_BLOCKS), 0 when the module has none */
static unsigned attn_blocks(CUmodule mod, unsigned long long (*blk)[2], unsigned *sm) {
    unsigned n = 0;
    CUdeviceptr pb, ps, pn;
    size_t sb, ss, sn;
    if (cuModuleGetGlobal(&pb, &sb, mod, "weft_trace_blk") != CUDA_SUCCESS ||
        cuModuleGetGlobal(&ps, &ss, mod, "weft_trace_blk_sm") != CUDA_SUCCESS ||
        cuModuleGetGlobal(&pn, &sn, mod, "weft_trace_blk_n") != CUDA_SUCCESS ||
        sb != ATTN_BLOCKS * sizeof(*blk) || ss != ATTN_BLOCKS * sizeof(*sm) ||
        cuMemcpyDtoH(&n, pn, sizeof(n)) || cuMemcpyDtoH(blk, pb, sb) || cuMemcpyDtoH(sm, ps, ss))
        return 0;
    return n > ATTN_BLOCKS ? ATTN_BLOCKS : n;
}

static void report_blocks(CUmodule mod, unsigned long long t0) {
    enum { BINS = 24 };
    static unsigned long long blk[ATTN_BLOCKS][2];
    static unsigned sm[ATTN_BLOCKS];
    unsigned n = attn_blocks(mod, blk, sm);
    if (!n) return;
    unsigned hist[2][BINS] = {{0}}, per_sm[256] = {0}, live = 0, sms = 0, most = 0;
    double last_start = -1e9, last_done = -1e9;
    for (unsigned i = 0; i < n; i++) {
        int is_live = blk[i][1] != 0;
        double st = ((double)blk[i][0] - (double)t0) / 1e3;
        int bin = st < 0 ? 0 : st >= BINS - 1 ? BINS - 1 : (int)st + 1;
        hist[is_live][bin]++;
        if (st > last_start) last_start = st;
        if (!is_live) continue;
        live++;
        double dn = ((double)blk[i][1] - (double)t0) / 1e3;
        if (dn > last_done) last_done = dn;
        if (sm[i] < 256 && per_sm[sm[i]]++ == 0) sms++;
    }
    for (int i = 0; i < 256; i++)
        if (per_sm[i] > most) most = per_sm[i];
    fprintf(stderr,
            "weft_rope_attention blocks of the latest launch: %u (%u live on %u SMs, at most %u "
            "an SM); last start %.2f us, last scores-and-sums done %.2f us after block 0's wait\n",
            n, live, sms, most, last_start, last_done);
    fprintf(stderr, "  started (us after block 0's wait): live / empty\n");
    for (int j = 0; j < BINS; j++)
        if (hist[0][j] || hist[1][j])
            fprintf(stderr, "    %s%2d: %4u / %4u\n", j == 0 ? "<" : j == BINS - 1 ? ">=" : " ",
                    j == 0 ? 0 : j - 1, hist[1][j], hist[0][j]);
}

/* the looped plain GEMV's block stamps (core.cu GEMV_MARK) of the latest launch of each site:
 * every stamp's spread over the blocks, in us after block 0 passed its wait */
static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void report_gemv_late(unsigned long long (*st)[6], const unsigned *sm, unsigned nb,
                             const unsigned *per_sm, const unsigned char *attn, double t0);
static void report_gemv(CUmodule mod) {
    enum { NB = 1024, NS = 6 };
    static unsigned long long st[2][NB][NS];
    static unsigned sm[2][NB];
    static double v[NB];
    unsigned n[2][3];
    CUdeviceptr ps, pm, pn;
    size_t ss, sms, sn;
    if (cuModuleGetGlobal(&ps, &ss, mod, "weft_trace_gemv") != CUDA_SUCCESS ||
        cuModuleGetGlobal(&pm, &sms, mod, "weft_trace_gemv_sm") != CUDA_SUCCESS ||
        cuModuleGetGlobal(&pn, &sn, mod, "weft_trace_gemv_n") != CUDA_SUCCESS || ss != sizeof(st) ||
        sms != sizeof(sm) || sn != sizeof(n) || cuMemcpyDtoH(st, ps, sizeof(st)) ||
        cuMemcpyDtoH(sm, pm, sizeof(sm)) || cuMemcpyDtoH(n, pn, sizeof(n)))
        return;
    /* the SMs where a live block of the fused attention's latest launch ran */
    static unsigned long long ablk[ATTN_BLOCKS][2];
    static unsigned asm_[ATTN_BLOCKS];
    const unsigned an = attn_blocks(mod, ablk, asm_);
    unsigned char attn[256] = {0};
    for (unsigned i = 0; i < an; i++)
        if (ablk[i][1] != 0 && asm_[i] < 256) attn[asm_[i]] = 1;
    static const char *const label[NS] = {
        "started",           "passed its wait",        "x in shared memory", "first group summed",
        "last group stored", "warp 0's first batch in"};
    for (int site = 0; site < 2; site++) {
        unsigned nb = n[site][0] < NB ? n[site][0] : NB;
        if (!nb) continue;
        const double t0 = (double)st[site][0][1];
        unsigned per_sm[256] = {0}, sms_used = 0, most = 0, early = 0;
        for (unsigned i = 0; i < nb; i++) {
            if (sm[site][i] < 256 && per_sm[sm[site][i]]++ == 0) sms_used++;
            early += (double)st[site][i][0] < t0;
        }
        for (int i = 0; i < 256; i++)
            if (per_sm[i] > most) most = per_sm[i];
        fprintf(stderr,
                "GEMV blocks (%s), latest launch of N %u K %u: %u blocks on %u SMs (at most %u "
                "an SM), %u started before block 0 passed its wait\n",
                site ? "looped, K > N, or after the join" : "after the attention, or looped square",
                n[site][1], n[site][2], nb, sms_used, most, early);
        fprintf(stderr, "  %-22s %8s %8s %8s %8s %8s (us after block 0's wait)\n", "block", "min",
                "p10", "median", "p90", "max");
        for (int j = 0; j < NS; j++) {
            for (unsigned i = 0; i < nb; i++)
                v[i] = ((double)st[site][i][j] - t0) / 1e3;
            qsort(v, nb, sizeof(v[0]), cmp_dbl);
            fprintf(stderr, "  %-22s %8.2f %8.2f %8.2f %8.2f %8.2f\n", label[j], v[0], v[nb / 10],
                    v[nb / 2], v[nb * 9 / 10], v[nb - 1]);
        }
        for (unsigned i = 0; i < nb; i++)
            v[i] = ((double)st[site][i][5] - (double)st[site][i][0]) / 1e3;
        qsort(v, nb, sizeof(v[0]), cmp_dbl);
        fprintf(stderr, "  %-22s %8.2f %8.2f %8.2f %8.2f %8.2f (a block's span)\n",
                "start -> first batch in", v[0], v[nb / 10], v[nb / 2], v[nb * 9 / 10], v[nb - 1]);
        /* each block's own spans: wait -> x, x -> first group, first group -> last */
        static const char *const span[3] = {"wait -> x", "x -> first group", "first group -> last"};
        for (int j = 0; j < 3; j++) {
            for (unsigned i = 0; i < nb; i++)
                v[i] = ((double)st[site][i][j + 2] - (double)st[site][i][j + 1]) / 1e3;
            qsort(v, nb, sizeof(v[0]), cmp_dbl);
            fprintf(stderr, "  %-22s %8.2f %8.2f %8.2f %8.2f %8.2f (a block's span)\n", span[j],
                    v[0], v[nb / 10], v[nb / 2], v[nb * 9 / 10], v[nb - 1]);
        }
        report_gemv_late(st[site], sm[site], nb, per_sm, attn, t0);
    }
}

/* The six blocks of a GEMV launch (its nb stamps st, SMs sm, blocks an SM per_sm) that stored
 * their rows last, each with its SM, its stamps after t0 (block 0's wait) and whether a live
 * block of the fused attention's latest launch ran on that SM (attn, by SM): which blocks make
 * the tail. */
static void report_gemv_late(unsigned long long (*st)[6], const unsigned *sm, unsigned nb,
                             const unsigned *per_sm, const unsigned char *attn, double t0) {
    unsigned pick[6];
    int np = 0;
    for (int k = 0; k < 6 && k < (int)nb; k++) { /* the k-th latest store, by selection */
        unsigned best = nb;
        for (unsigned i = 0; i < nb; i++) {
            int taken = 0;
            for (int j = 0; j < np; j++)
                taken |= pick[j] == i;
            if (!taken && (best == nb || st[i][4] > st[best][4])) best = i;
        }
        pick[np++] = best;
    }
    fprintf(stderr,
            "  the last %d blocks to store (us after block 0's wait): block, SM (its "
            "blocks; a live attention block there), wait, x, summed, stored\n",
            np);
    for (int j = 0; j < np; j++) {
        const unsigned i = pick[j], m = sm[i];
        fprintf(stderr, "    %5u  SM %3u (%u%s)  %6.2f %6.2f %6.2f %6.2f\n", i, m,
                m < 256 ? per_sm[m] : 0, m < 256 && attn[m] ? ", attention" : "",
                ((double)st[i][1] - t0) / 1e3, ((double)st[i][2] - t0) / 1e3,
                ((double)st[i][3] - t0) / 1e3, ((double)st[i][4] - t0) / 1e3);
    }
}

/* The most live blocks an SM of each of the k launches before launch n (core.cu BLOCK_LIVE),
 * oldest first, and each packing's launches with their mean time from block (0, 0, 0) passing
 * its wait to the merge done (stages 8 and 6 of t): whether the launches whose live blocks share
 * SMs are the slow ones. */
static void report_packing(CUmodule mod, unsigned long long t[64][9], unsigned n, size_t k) {
    unsigned pack[64];
    CUdeviceptr pp;
    size_t pb;
    if (cuModuleGetGlobal(&pp, &pb, mod, "weft_trace_pack") != CUDA_SUCCESS || pb != sizeof(pack) ||
        cuMemcpyDtoH(pack, pp, sizeof(pack)) != CUDA_SUCCESS)
        return;
    enum { MAXP = 8 };
    if (k > 32) k = 32; /* a slot is cleared 32 launches after its own */
    double us[MAXP + 1] = {0};
    unsigned cnt[MAXP + 1] = {0};
    char seq[65];
    size_t ns = 0;
    for (size_t i = k; i-- > 0;) {
        unsigned slot = (n - 1 - (unsigned)i) % 64, p = pack[slot] > MAXP ? MAXP : pack[slot];
        seq[ns++] = p < 10 ? (char)('0' + p) : '+';
        cnt[p]++;
        us[p] += ((double)t[slot][6] - (double)t[slot][8]) / 1e3;
    }
    seq[ns] = 0;
    fprintf(stderr,
            "weft_rope_attention live blocks an SM, most of each of its last %zu launches "
            "(oldest first): %s\n",
            k, seq);
    for (unsigned p = 0; p <= MAXP; p++)
        if (cnt[p])
            fprintf(stderr, "  at most %u%s an SM: %u launches, wait -> merge done %.2f us\n", p,
                    p == MAXP ? " or more" : "", cnt[p], us[p] / cnt[p]);
}

/* The stages of weft_rope_attention's last `launches` launches (core.cu STAGE_MARK, marks in the
 * kernel's order below): mean time from the last block reaching one mark to the last block
 * reaching the next. */
static void report_stages(cuda_backend *b, size_t launches) {
    static const int order[8] = {0, 1, 7, 2, 3, 4, 5, 6};
    static const char *const label[7] = {"launch -> wait passed (max over blocks)",
                                         "wait -> q|k|v rows read (cp form: issued)",
                                         "-> K/V staged (their loads issued pre-wait)",
                                         "-> qk-norm and RoPE done",
                                         "-> scores, softmax, sums written",
                                         "-> fence and arrival counted",
                                         "-> merge done (last block)"};
    for (size_t m = 0; m < b->n_modules && launches; m++) {
        CUdeviceptr st, cnt;
        size_t sb, cb;
        unsigned n = 0;
        unsigned long long t[64][9];
        if (cuModuleGetGlobal(&st, &sb, b->modules[m].mod, "weft_trace_stage") != CUDA_SUCCESS ||
            cuModuleGetGlobal(&cnt, &cb, b->modules[m].mod, "weft_trace_launch") != CUDA_SUCCESS ||
            sb != sizeof(t) || cuMemcpyDtoH(&n, cnt, sizeof(n)) != CUDA_SUCCESS ||
            cuMemcpyDtoH(t, st, sizeof(t)) != CUDA_SUCCESS || n == 0)
            continue;
        size_t k = launches < n ? launches : n;
        if (k > 64) k = 64;
        double sum[7] = {0}, late = 0;
        for (size_t i = 0; i < k; i++) {
            const unsigned long long *r = t[(n - 1 - i) % 64];
            for (int j = 0; j < 7; j++)
                sum[j] += ((double)r[order[j + 1]] - (double)r[order[j]]) / 1e3;
            late += ((double)r[0] - (double)r[8]) / 1e3;
        }
        report_blocks(b->modules[m].mod, t[(n - 1) % 64][8]);
        fprintf(stderr, "weft_rope_attention stages (mean of its last %zu launches, us):\n", k);
        /* negative when every block was resident before the first passed its wait (PDL) */
        fprintf(stderr, "  %-45s %7.2f\n", "first block's wait passed -> last block started",
                late / k);
        for (int j = 0; j < 7; j++)
            fprintf(stderr, "  %-45s %7.2f\n", label[j], sum[j] / k);
        report_packing(b->modules[m].mod, t, n, k);
    }
}

typedef struct by_name {
    const char *name;
    unsigned count;
    double us;
} by_name;

void cuda_trace_report(cuda_backend *b) {
    size_t k = b->trace_n;
    if (!k) {
        fprintf(stderr, "cuda trace: no captured graph to report\n");
        return;
    }
    unsigned long long *all = NULL;
    size_t n_all = 0;
    for (size_t m = 0; m < b->n_modules; m++) {
        CUdeviceptr ring, count;
        size_t rb, cb;
        unsigned cnt = 0;
        if (cuModuleGetGlobal(&ring, &rb, b->modules[m].mod, "weft_trace_ring") != CUDA_SUCCESS ||
            cuModuleGetGlobal(&count, &cb, b->modules[m].mod, "weft_trace_count") != CUDA_SUCCESS ||
            cuMemcpyDtoH(&cnt, count, sizeof(cnt)) != CUDA_SUCCESS)
            continue;
        size_t have = cnt < TRACE_RING ? cnt : TRACE_RING;
        unsigned long long *ringh = malloc(TRACE_RING * sizeof(*ringh));
        void *grown = realloc(all, (n_all + have + 1) * sizeof(*all));
        if (!ringh || !grown || cuMemcpyDtoH(ringh, ring, TRACE_RING * sizeof(*ringh))) {
            free(ringh);
            if (grown) all = grown;
            continue;
        }
        all = grown;
        for (size_t i = 0; i < have; i++)
            all[n_all++] = ringh[(cnt - have + i) % TRACE_RING];
        free(ringh);
    }
    if (n_all < k) {
        fprintf(stderr, "cuda trace: %zu stamps for a graph of %zu kernels; nothing to report\n",
                n_all, k);
        free(all);
        return;
    }
    qsort(all, n_all, sizeof(*all), cmp_u64);
    const unsigned long long *t = all + n_all - k;
    by_name *agg = calloc(k, sizeof(*agg));
    size_t n_agg = 0;
    double total = (double)(t[k - 1] - t[0]) / 1e3;
    fprintf(stderr,
            "cuda trace: last replay of the last captured graph, %zu kernels, %.1f us from "
            "the first kernel's start to the last's (the last kernel's own time not counted)\n",
            k, total);
    /* the replay before it, when the ring still holds its last stamp: from that stamp to this
     * replay's first is the last kernel's own time plus all that runs between two replays on
     * the stream (the sampler's kernels, the next step's input copies, the graph's launch) */
    if (n_all > k)
        fprintf(stderr, "cuda trace: %.1f us from the previous replay's last kernel's start to "
                        "this replay's first (that kernel's own time and everything between two "
                        "replays)\n", (double)(t[0] - t[-1]) / 1e3);
    for (size_t i = 0; i + 1 < k; i++) {
        double us = (double)(t[i + 1] - t[i]) / 1e3;
        fprintf(stderr, "  %4zu %-40s %8.2f us\n", i, b->trace_names[i], us);
        size_t j = 0;
        while (j < n_agg && strcmp(agg[j].name, b->trace_names[i]))
            j++;
        if (j == n_agg && agg) agg[n_agg++].name = b->trace_names[i];
        if (agg) {
            agg[j].count++;
            agg[j].us += us;
        }
    }
    fprintf(stderr, "cuda trace by kernel (count, total us, mean us, share):\n");
    for (size_t a = 0; a < n_agg; a++)
        for (size_t c = a + 1; c < n_agg; c++)
            if (agg[c].us > agg[a].us) {
                by_name x = agg[a];
                agg[a] = agg[c];
                agg[c] = x;
            }
    for (size_t a = 0; a < n_agg; a++)
        fprintf(stderr, "  %-40s %5u %9.1f %8.2f %5.1f%%\n", agg[a].name, agg[a].count, agg[a].us,
                agg[a].us / agg[a].count, total > 0 ? 100.0 * agg[a].us / total : 0.0);
    size_t ra = 0;
    for (size_t i = 0; i < k; i++)
        ra += !strncmp(b->trace_names[i], "weft_rope_attention", 19); /* and its _cp form */
    report_stages(b, ra);
    for (size_t m = 0; m < b->n_modules; m++)
        report_gemv(b->modules[m].mod);
    free(agg);
    free(all);
}
