/* weft-cpu-bench: decode and prefill speed of the cpu backend on stories260K, with no engine in
 * between (bench/cpu_stories.h builds the step graph and runs it node by node). It loads the
 * built plugin, greedy-decodes from BOS and reports tokens per second; the figures go into
 * docs/BACKEND_CPU.md. Speed targets are checked here, never in unit tests.
 *
 *   weft-cpu-bench [--threads N] [--tokens N] [--repeat N] [--prefill N] [--model PATH]
 *                  [--plugin PATH] [--profile]                                              */
#include <dlfcn.h>
#include <stdarg.h>
#include <time.h>

#include "cpu_stories.h"

#define BENCH_MAX_IMPLS 128

typedef struct bench_ops {
    weft_op_impl impls[BENCH_MAX_IMPLS];
    uint32_t n;
} bench_ops;

static weft_status bench_add(void *self, const weft_op_impl *impl, weft_error *err) {
    bench_ops *o = self;
    if (o->n == BENCH_MAX_IMPLS) return WEFT_ERR_NOMEM;
    o->impls[o->n++] = *impl;
    return WEFT_OK;
}

static const weft_op_impl *bench_find(void *self, uint32_t op, const char *backend, uint32_t dtype,
                                      const char *layout, const weft_graph *g,
                                      const weft_node *node) {
    bench_ops *o = self;
    for (uint32_t i = 0; i < o->n; i++)
        if (o->impls[i].op == op && o->impls[i].dtype == dtype &&
            strcmp(o->impls[i].backend, backend) == 0 && strcmp(o->impls[i].layout, layout) == 0)
            return &o->impls[i];
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process: on a shared machine wall time includes other jobs' turns,
 * CPU time does not (with one thread it is the time our work needed). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    long threads = 1, tokens = 256, repeat = 5, prefill = 0, profile = 0;
    char model[1024];
    const char *shared = getenv("WEFT_SHARED_DIR");
    snprintf(model, sizeof(model), "%s/models/stories260K/stories260K.bin",
             shared ? shared : WEFT_SHARED_DIR);
    const char *plugin = WEFT_BUILD_PLUGIN_DIR "/cpu/libweft-cpu.so";
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            threads = atol(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--tokens") == 0)
            tokens = atol(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--repeat") == 0)
            repeat = atol(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--prefill") == 0)
            prefill = atol(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--model") == 0)
            snprintf(model, sizeof(model), "%s", argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--plugin") == 0)
            plugin = argv[++i];
        else if (strcmp(argv[i], "--profile") == 0)
            profile = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--threads N] [--tokens N] [--repeat N] [--prefill N] "
                    "[--model PATH] [--plugin PATH] [--profile]\n",
                    argv[0]);
            return 2;
        }
    }
    if (threads < 0 || tokens < 1 || repeat < 1 || prefill < 0) {
        fprintf(stderr, "weft-cpu-bench: counts must be positive\n");
        return 2;
    }
    char msg[600];
    stories_model m;
    if (stories_load(model, &m, msg, sizeof(msg))) {
        fprintf(stderr, "weft-cpu-bench: %s\n", msg);
        return 1;
    }
    if (tokens > m.seq_len) tokens = m.seq_len;
    if (prefill > m.seq_len) prefill = m.seq_len;
    void *dl = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        fprintf(stderr, "weft-cpu-bench: %s\n", dlerror());
        return 1;
    }
    weft_plugin_entry_fn entry = (weft_plugin_entry_fn)dlsym(dl, WEFT_PLUGIN_ENTRY_NAME);
    const weft_plugin_descriptor *d = NULL;
    uint32_t chosen = 0;
    weft_error err;
    memset(&err, 0, sizeof(err));
    err.size = sizeof(err);
    weft_option opt = {.key = "threads", .type = WEFT_OPTION_INT, .i = threads};
    weft_options opts = {1, &opt};
    void *st = NULL;
    static bench_ops table;
    weft_ops_service ops = {sizeof(ops), 1, &table, bench_add, bench_find};
    if (!entry || entry(1, 1, &chosen, &d, &err) || d->create(NULL, &opts, &st, &err) ||
        d->backend->register_ops(st, &ops, &err)) {
        fprintf(stderr, "weft-cpu-bench: plugin setup failed: %s\n", err.message);
        return 1;
    }
    weft_device_info info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    d->backend->device_info(st, &info, &err);
    uint32_t bucket = prefill > 1 ? (uint32_t)prefill : 1;
    static stories_engine e;
    if (stories_build(&e, &m, d->backend, st, &ops, bucket, (uint32_t)m.seq_len, msg,
                      sizeof(msg))) {
        fprintf(stderr, "weft-cpu-bench: %s\n", msg);
        return 1;
    }
    printf(
        "model stories260K (dim %d, %d layers, %d/%d heads, hidden %d, vocab %d), %u nodes/step\n",
        m.dim, m.n_layers, m.n_heads, m.n_kv, m.hidden, m.vocab, e.g.n_nodes);
    printf("device %s, threads %u\n", info.name, info.compute_units);
    double *times = calloc((size_t)repeat, sizeof(double));
    double *ctimes = calloc((size_t)repeat, sizeof(double));
    int32_t *seq = calloc((size_t)m.seq_len + 1, sizeof(int32_t));
    if (!times || !ctimes || !seq) return 1;
    if (prefill > 0) {
        /* A prompt of prefill tokens (greedy output of an earlier run would do; any ids do). */
        for (long i = 0; i < prefill; i++)
            seq[i] = (int32_t)(1 + (i * 37) % (m.vocab - 1));
        for (long r = 0; r < repeat + 1; r++) {
            const float *lg;
            double t0 = now_s();
            if (stories_step(&e, seq, (uint32_t)prefill, 0, 0, &lg, msg, sizeof(msg))) {
                fprintf(stderr, "weft-cpu-bench: %s\n", msg);
                return 1;
            }
            if (r > 0) times[r - 1] = now_s() - t0; /* the first run warms caches */
        }
        qsort(times, (size_t)repeat, sizeof(double), cmp_double);
        printf("prefill %ld tokens: best %.1f tok/s, median %.1f tok/s\n", prefill,
               prefill / times[0], prefill / times[repeat / 2]);
    }
    /* Decode: greedy from BOS, one token per step through the bucket's first row. */
    for (long r = 0; r < repeat + 1; r++) {
        int32_t tok = 1;
        double t0 = now_s(), c0 = cpu_s();
        for (long pos = 0; pos < tokens; pos++) {
            const float *lg;
            if (stories_step(&e, &tok, 1, (int32_t)pos, 0, &lg, msg, sizeof(msg))) {
                fprintf(stderr, "weft-cpu-bench: %s\n", msg);
                return 1;
            }
            tok = stories_argmax(lg, (uint32_t)m.vocab);
            seq[pos + 1] = tok;
        }
        if (r > 0) times[r - 1] = now_s() - t0, ctimes[r - 1] = cpu_s() - c0;
    }
    qsort(times, (size_t)repeat, sizeof(double), cmp_double);
    qsort(ctimes, (size_t)repeat, sizeof(double), cmp_double);
    printf("decode %ld tokens from BOS: wall best %.0f tok/s (%.1f us/token), median %.0f tok/s; "
           "cpu-time median %.0f tok/s (%.1f us/token)\n",
           tokens, tokens / times[0], 1e6 * times[0] / tokens, tokens / times[repeat / 2],
           tokens / ctimes[repeat / 2], 1e6 * ctimes[repeat / 2] / tokens);
    if (profile) {
        /* One more decode pass with every node timed (the timing itself adds ~2% per node). */
        static const char *const names[WEFT_OP_BUILTIN_COUNT] = {
            "none",       "embed", "linear",      "rmsnorm", "rope",   "attention",
            "swiglu",     "add",   "activation",  "lm_head", "sample", "moe",
            "all_reduce", "scale", "add_rmsnorm", "copy",    "split"};
        memset(e.op_ns, 0, sizeof(e.op_ns));
        e.profile = 1;
        int32_t tok = 1;
        double t0 = now_s();
        for (long pos = 0; pos < tokens; pos++) {
            const float *lg;
            if (stories_step(&e, &tok, 1, (int32_t)pos, 0, &lg, msg, sizeof(msg))) return 1;
            tok = stories_argmax(lg, (uint32_t)m.vocab);
        }
        double total = (now_s() - t0) * 1e9, in_ops = 0;
        for (int o = 0; o < WEFT_OP_BUILTIN_COUNT; o++)
            in_ops += e.op_ns[o];
        printf("profile (decode, us/token):");
        for (int o = 0; o < WEFT_OP_BUILTIN_COUNT; o++)
            if (e.op_ns[o] > 0) printf(" %s %.1f", names[o], e.op_ns[o] / 1e3 / tokens);
        printf(" | outside ops %.1f\n", (total - in_ops) / 1e3 / tokens);
        e.profile = 0;
    }
    printf("first tokens:");
    for (long i = 1; i <= 12 && i <= tokens; i++)
        printf(" %d", seq[i]);
    printf("\n");
    stories_free(&e);
    d->destroy(st);
    free(times);
    free(ctimes);
    free(seq);
    free(m.data);
    return 0;
}
