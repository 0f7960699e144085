/* Prometheus metrics in the text exposition format (version 0.0.4): latency histograms (time to
 * first token, inter-token latency, end to end, queue time), request gauges, token counters,
 * finish reasons, kv cache usage and the engine's own counters. Observations come from the
 * engine thread, reads from HTTP threads; one mutex guards them. Names are in docs/SERVE.md. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"

static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                     0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
static const double itl_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                    0.15,   0.2,   0.3,    0.4,   0.5,  0.75,  1.0,  2.5,   5.0};
static const double e2e_bounds[] = {0.01, 0.025, 0.05, 0.1,  0.25, 0.5,  1.0,   2.5,  5.0,
                                    10.0, 15.0,  20.0, 30.0, 40.0, 60.0, 120.0, 300.0};

static void hist_init(serve_hist *h, const double *b, uint32_t n) {
    memset(h, 0, sizeof(*h));
    h->n_bounds = n < SERVE_HIST_MAX ? n : SERVE_HIST_MAX;
    memcpy(h->bounds, b, sizeof(double) * h->n_bounds);
}

void serve_metrics_init(serve_metrics *m) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    hist_init(&m->ttft, ttft_bounds, sizeof(ttft_bounds) / sizeof(double));
    hist_init(&m->itl, itl_bounds, sizeof(itl_bounds) / sizeof(double));
    hist_init(&m->e2e, e2e_bounds, sizeof(e2e_bounds) / sizeof(double));
    hist_init(&m->queue, e2e_bounds, sizeof(e2e_bounds) / sizeof(double));
}

void serve_metrics_destroy(serve_metrics *m) {
    pthread_mutex_destroy(&m->lock);
}

/* Callers hold m->lock. */
void serve_metrics_observe(serve_metrics *m, serve_hist *h, double v) {
    (void)m;
    if (!(v >= 0)) v = 0;
    uint32_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void serve_metrics_http(serve_metrics *m, unsigned status) {
    unsigned cls = status / 100;
    if (cls > 5) cls = 5;
    pthread_mutex_lock(&m->lock);
    m->http_by_class[cls]++;
    pthread_mutex_unlock(&m->lock);
}

static void hist_text(serve_buf *b, const char *name, const char *help, const char *labels,
                      const serve_hist *h) {
    serve_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (uint32_t i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        serve_buf_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, h->bounds[i],
                         (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    serve_buf_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    size_t ll = strlen(labels);
    char lab[300] = "";
    if (ll > 1 && ll < sizeof(lab)) snprintf(lab, sizeof(lab), "{%.*s}", (int)(ll - 1), labels);
    serve_buf_printf(b, "%s_sum%s %.9g\n%s_count%s %llu\n", name, lab, h->sum, name, lab,
                     (unsigned long long)h->count);
}

static void scalar(serve_buf *b, const char *name, const char *type, const char *help,
                   const char *labels, double v) {
    serve_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s%s %.17g\n", name, help, name, type, name,
                     labels, v);
}

char *serve_metrics_text(serve_server *s) {
    serve_buf b = {0};
    serve_metrics *m = &s->metrics;
    char labels[320], lab1[320];
    /* Model names are ours (flag or directory name); escape quotes and backslashes anyway. */
    char esc[300];
    size_t k = 0;
    for (const char *p = s->model_name; *p && k + 2 < sizeof(esc); p++) {
        if (*p == '"' || *p == '\\') esc[k++] = '\\';
        if (*p == '\n') continue;
        esc[k++] = *p;
    }
    esc[k] = 0;
    snprintf(labels, sizeof(labels), "model_name=\"%s\",", esc);
    snprintf(lab1, sizeof(lab1), "{model_name=\"%s\"}", esc);

    int state = atomic_load(&s->state);
    uint32_t inflight = atomic_load(&s->inflight), running = atomic_load(&s->running);
    if (running > inflight) running = inflight;

    pthread_mutex_lock(&m->lock);
    /* Snapshots the engine thread publishes after each step (the engine is single-threaded). */
    weft_engine_stats es = m->engine_stats;
    weft_kv_stats kv = m->kv_stats;
    hist_text(&b, "weft_time_to_first_token_seconds",
              "Seconds from request arrival to its first generated token.", labels, &m->ttft);
    hist_text(&b, "weft_inter_token_latency_seconds",
              "Seconds between consecutive generated tokens of one choice.", labels, &m->itl);
    hist_text(&b, "weft_e2e_request_latency_seconds",
              "Seconds from request arrival to its last choice finishing.", labels, &m->e2e);
    hist_text(&b, "weft_request_queue_time_seconds",
              "Seconds from request arrival until the engine accepted it.", labels, &m->queue);
    scalar(&b, "weft_num_requests_running", "gauge",
           "Requests admitted to the engine that have produced a token and not finished.", lab1,
           running);
    scalar(&b, "weft_num_requests_waiting", "gauge",
           "Requests admitted and waiting for their first token.", lab1, inflight - running);
    scalar(&b, "weft_kv_cache_usage_ratio", "gauge",
           "Fraction of the kv cache pool holding tokens (0..1).", lab1,
           kv.capacity_tokens ? (double)kv.used_tokens / (double)kv.capacity_tokens : 0.0);
    scalar(&b, "weft_kv_cache_used_tokens", "gauge", "Tokens held in the kv cache.", lab1,
           (double)kv.used_tokens);
    scalar(&b, "weft_kv_cache_capacity_tokens", "gauge", "Tokens the kv cache pool can hold.", lab1,
           (double)kv.capacity_tokens);
    scalar(&b, "weft_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", lab1,
           (double)m->prompt_tokens);
    scalar(&b, "weft_generation_tokens_total", "counter", "Generated tokens.", lab1,
           (double)m->generation_tokens);
    scalar(&b, "weft_num_preemptions_total", "counter",
           "Requests the scheduler preempted (their kv cache dropped or swapped out).", lab1,
           (double)es.preemptions);
    scalar(&b, "weft_engine_steps_total", "counter", "Engine steps run.", lab1, (double)es.steps);
    scalar(&b, "weft_engine_graphs_built_total", "counter",
           "Step graphs built (one per batch shape bucket, on first use).", lab1,
           (double)es.graphs_built);
    scalar(&b, "weft_engine_step_seconds_total", "counter", "Seconds spent inside engine steps.",
           lab1, es.step_seconds);
    serve_buf_printf(&b, "# HELP weft_request_success_total Finished choices by finish reason.\n"
                         "# TYPE weft_request_success_total counter\n");
    static const char *reasons[5] = {"none", "stop", "length", "abort", "error"};
    for (int i = 1; i < 5; i++)
        serve_buf_printf(&b, "weft_request_success_total{%sfinished_reason=\"%s\"} %llu\n", labels,
                         reasons[i], (unsigned long long)m->finished[i]);
    scalar(&b, "weft_requests_cancelled_disconnect_total", "counter",
           "Requests cancelled because the client disconnected.", lab1,
           (double)m->cancelled_disconnect);
    serve_buf_printf(&b, "# HELP weft_http_responses_total HTTP responses by status class.\n"
                         "# TYPE weft_http_responses_total counter\n");
    for (int i = 1; i <= 5; i++)
        serve_buf_printf(&b, "weft_http_responses_total{%scode=\"%dxx\"} %llu\n", labels, i,
                         (unsigned long long)m->http_by_class[i]);
    pthread_mutex_unlock(&m->lock);
    scalar(&b, "weft_server_ready", "gauge", "1 once the server answers requests.", lab1,
           state == SERVE_READY ? 1 : 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    /* Bytes the process holds in malloc'ed blocks: unlike RSS, not moved by where glibc puts
     * its arenas, so a leak shows up as steady growth here (the load test watches it). */
    struct mallinfo2 mi = mallinfo2();
    scalar(&b, "weft_process_heap_bytes", "gauge", "Bytes in use in malloc'ed blocks (glibc).",
           lab1, (double)mi.uordblks + (double)mi.hblkhd);
#endif
    return b.data;
}
