/* `weft serve LOCK`: flags (each also from a WEFT_* environment variable; the command line
 * wins), the lock check, start-up (HTTP first, so /health can say 503 while the engine loads),
 * signal handling and the drain: SIGTERM or SIGINT stops accepting connections, waits for
 * in-flight requests up to --shutdown-timeout, cancels what is left, and exits 0. An engine that
 * fails to load or fails later makes the process exit 1. */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "serve/serve.h"
#include "util/error.h"

#pragma weak weft_chat_template_free

#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 8000
#define DEFAULT_SHUTDOWN_TIMEOUT 30.0
#define DEFAULT_HTTP_THREADS 4

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft serve LOCK [options]\n"
            "\n"
            "Serves the frozen candidate LOCK over an OpenAI-compatible HTTP API:\n"
            "POST /v1/completions, /v1/chat/completions, /v1/score, /tokenize, /detokenize;\n"
            "GET /v1/models, /health, /metrics. Make a lock from a candidate manifest with\n"
            "  weft candidate freeze MANIFEST -o LOCK\n"
            "\n"
            "options (each also from the environment variable shown; the command line wins):\n"
            "  --host H                address to bind (WEFT_HOST, default %s: loopback only)\n"
            "  --port P                TCP port, 0 = any free one (WEFT_PORT, default %d)\n"
            "  --api-key K             require \"Authorization: Bearer K\" on every endpoint but\n"
            "                          /health (WEFT_API_KEY, default: none)\n"
            "  --served-model-name N   the model's name in the API (WEFT_SERVED_MODEL_NAME,\n"
            "                          default: the model directory's name)\n"
            "  --max-model-len L       context length (WEFT_MAX_MODEL_LEN, default: the\n"
            "                          candidate's, else the model's, at most 4096)\n"
            "  --max-concurrency C     requests the engine runs at once (WEFT_MAX_CONCURRENCY,\n"
            "                          default: the candidate's, else 1); more wait FCFS\n"
            "  --shutdown-timeout S    seconds SIGTERM waits for in-flight requests before\n"
            "                          cancelling them (WEFT_SHUTDOWN_TIMEOUT, default %g)\n"
            "  --threads N             engine worker threads (WEFT_THREADS, default: the "
            "candidate's)\n"
            "  --http-threads N        HTTP thread pool size (WEFT_HTTP_THREADS, default %d)\n"
            "  --max-body-bytes N      largest request body (WEFT_MAX_BODY_BYTES, default %u)\n"
            "  --max-waiting N         requests admitted at once, beyond which new ones get 503\n"
            "                          (WEFT_MAX_WAITING, default %d)\n"
            "\n"
            "LOCK may also come from WEFT_LOCK. Logs go to stderr (WEFT_LOG=info for more).\n",
            DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_HTTP_THREADS,
            SERVE_MAX_BODY_DEFAULT, SERVE_MAX_WAITING_DEFAULT);
}

typedef struct flag {
    const char *name;
    const char *env;
    const char *value; /* from the command line, else the environment, else NULL */
} flag;

enum {
    F_HOST,
    F_PORT,
    F_API_KEY,
    F_NAME,
    F_MAX_LEN,
    F_MAX_CONC,
    F_SHUTDOWN,
    F_THREADS,
    F_HTTP_THREADS,
    F_MAX_BODY,
    F_MAX_WAITING,
    F_COUNT
};

/* The lock must be a lock: a manifest (YAML) or anything else gets the command that makes one. */
static int check_lock_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "weft serve: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int c;
    do
        c = fgetc(f);
    while (c != EOF && isspace(c));
    fclose(f);
    if (c != '{') {
        fprintf(stderr,
                "weft serve: %s is not a lock (a lock is the JSON file `weft candidate freeze` "
                "writes).\nweft serve loads only locks; make one from a candidate manifest with\n"
                "  weft candidate freeze %s -o %s.lock\n",
                path, path, path);
        return -1;
    }
    return 0;
}

static int wait_signal(const sigset_t *set, double seconds) {
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

int weft_cmd_serve(int argc, char **argv) {
    flag flags[F_COUNT] = {
        [F_HOST] = {"--host", "WEFT_HOST", NULL},
        [F_PORT] = {"--port", "WEFT_PORT", NULL},
        [F_API_KEY] = {"--api-key", "WEFT_API_KEY", NULL},
        [F_NAME] = {"--served-model-name", "WEFT_SERVED_MODEL_NAME", NULL},
        [F_MAX_LEN] = {"--max-model-len", "WEFT_MAX_MODEL_LEN", NULL},
        [F_MAX_CONC] = {"--max-concurrency", "WEFT_MAX_CONCURRENCY", NULL},
        [F_SHUTDOWN] = {"--shutdown-timeout", "WEFT_SHUTDOWN_TIMEOUT", NULL},
        [F_THREADS] = {"--threads", "WEFT_THREADS", NULL},
        [F_HTTP_THREADS] = {"--http-threads", "WEFT_HTTP_THREADS", NULL},
        [F_MAX_BODY] = {"--max-body-bytes", "WEFT_MAX_BODY_BYTES", NULL},
        [F_MAX_WAITING] = {"--max-waiting", "WEFT_MAX_WAITING", NULL},
    };
    const char *lock = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a, '=');
            size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
            int k = 0;
            for (; k < F_COUNT; k++)
                if (strlen(flags[k].name) == nlen && !strncmp(flags[k].name, a, nlen)) break;
            if (k == F_COUNT) {
                fprintf(stderr, "weft serve: unknown option %s (see weft serve --help)\n", a);
                return 2;
            }
            if (eq) {
                flags[k].value = eq + 1;
            } else {
                if (i + 1 >= argc) {
                    fprintf(stderr, "weft serve: %s needs a value\n", a);
                    return 2;
                }
                flags[k].value = argv[++i];
            }
        } else if (!lock) {
            lock = a;
        } else {
            fprintf(stderr, "weft serve: unexpected argument '%s' (one LOCK only)\n", a);
            return 2;
        }
    }
    if (!lock) lock = getenv("WEFT_LOCK");
    for (int k = 0; k < F_COUNT; k++)
        if (!flags[k].value) flags[k].value = getenv(flags[k].env);
    if (!lock || !lock[0]) {
        fprintf(stderr, "weft serve: missing LOCK (a file from `weft candidate freeze MANIFEST "
                        "-o LOCK`)\n\n");
        usage(stderr);
        return 2;
    }

    serve_server *s = calloc(1, sizeof(*s));
    if (!s) return 1;
    serve_config *c = &s->cfg;
    c->lock = lock;
    c->host = flags[F_HOST].value && flags[F_HOST].value[0] ? flags[F_HOST].value : DEFAULT_HOST;
    c->port = DEFAULT_PORT;
    c->api_key =
        flags[F_API_KEY].value && flags[F_API_KEY].value[0] ? flags[F_API_KEY].value : NULL;
    c->served_model_name = flags[F_NAME].value;
    c->shutdown_timeout = DEFAULT_SHUTDOWN_TIMEOUT;
    c->http_threads = DEFAULT_HTTP_THREADS;
    c->max_body = SERVE_MAX_BODY_DEFAULT;
    c->max_waiting = SERVE_MAX_WAITING_DEFAULT;
    int bad = 0;
    if (flags[F_PORT].value)
        bad |= weft_cli_parse_u32_range("serve", "--port", flags[F_PORT].value, 0, 65535, &c->port);
    if (flags[F_MAX_LEN].value)
        bad |= weft_cli_parse_u32_range("serve", "--max-model-len", flags[F_MAX_LEN].value, 2,
                                        1u << 20, &c->max_model_len);
    if (flags[F_MAX_CONC].value)
        bad |= weft_cli_parse_u32_range("serve", "--max-concurrency", flags[F_MAX_CONC].value, 1,
                                        4096, &c->max_concurrency);
    if (flags[F_THREADS].value)
        bad |= weft_cli_parse_u32_range("serve", "--threads", flags[F_THREADS].value, 1, 1024,
                                        &c->threads);
    if (flags[F_HTTP_THREADS].value)
        bad |= weft_cli_parse_u32_range("serve", "--http-threads", flags[F_HTTP_THREADS].value, 1,
                                        256, &c->http_threads);
    if (flags[F_MAX_BODY].value)
        bad |= weft_cli_parse_u32_range("serve", "--max-body-bytes", flags[F_MAX_BODY].value, 1024,
                                        1u << 30, &c->max_body);
    if (flags[F_MAX_WAITING].value)
        bad |= weft_cli_parse_u32_range("serve", "--max-waiting", flags[F_MAX_WAITING].value, 1,
                                        1u << 20, &c->max_waiting);
    if (flags[F_SHUTDOWN].value)
        bad |= weft_cli_parse_f64_range("serve", "--shutdown-timeout", flags[F_SHUTDOWN].value, 0,
                                        86400, &c->shutdown_timeout);
    if (c->served_model_name && (strlen(c->served_model_name) == 0 ||
                                 strlen(c->served_model_name) >= sizeof(s->model_name))) {
        fprintf(stderr, "weft serve: --served-model-name: expected 1 to %zu bytes\n",
                sizeof(s->model_name) - 1);
        bad = 1;
    }
    if (bad || check_lock_file(lock)) {
        free(s);
        return 2;
    }

    /* Signals are taken by this thread alone (sigtimedwait); every thread started below
     * inherits the blocked mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    atomic_init(&s->state, SERVE_LOADING);
    atomic_init(&s->exit_code, 0);
    pthread_mutex_init(&s->qlock, NULL);
    pthread_cond_init(&s->qcond, NULL);
    serve_metrics_init(&s->metrics);

    char errbuf[512];
    if (serve_http_start(s, errbuf, sizeof(errbuf))) {
        fprintf(stderr, "weft serve: %s\n", errbuf);
        serve_metrics_destroy(&s->metrics);
        free(s);
        return 1;
    }
    fprintf(stderr, "weft serve: listening on http://%s:%u (loading %s)\n", c->host, c->port, lock);
    if (serve_bridge_start(s)) {
        fprintf(stderr, "weft serve: could not start the engine thread\n");
        serve_http_stop(s);
        free(s);
        return 1;
    }

    int announced = 0, sig = 0;
    for (;;) {
        sig = wait_signal(&set, 0.05);
        if (sig) break;
        int st = atomic_load(&s->state);
        if (st == SERVE_FAILED) break;
        if (st == SERVE_READY && !announced) {
            announced = 1;
            fprintf(stderr,
                    "weft serve: ready: model '%s' (candidate %s, %s, max_model_len %u)%s\n",
                    s->model_name, s->candidate_id[0] ? s->candidate_id : "-", s->backend,
                    s->max_model_len, c->api_key ? ", API key required" : "");
        }
    }
    if (atomic_load(&s->state) == SERVE_FAILED) {
        fprintf(stderr, "weft serve: %s\n", s->load_error);
    } else {
        fprintf(stderr, "weft serve: %s: draining (up to %g s)\n", strsignal(sig),
                c->shutdown_timeout);
    }
    /* Stop accepting; a request on a kept-alive connection now gets 503. */
    int expected = SERVE_READY;
    if (!atomic_compare_exchange_strong(&s->state, &expected, SERVE_DRAINING)) {
        expected = SERVE_LOADING;
        atomic_compare_exchange_strong(&s->state, &expected, SERVE_DRAINING);
    }
    serve_http_quiesce(s);
    double deadline = serve_now() + c->shutdown_timeout;
    while (atomic_load(&s->inflight) > 0 && serve_now() < deadline) {
        if (wait_signal(&set, 0.01)) break; /* a second signal: stop waiting */
    }
    if (atomic_load(&s->inflight) > 0) {
        fprintf(stderr, "weft serve: cancelling %u request(s) still in flight\n",
                atomic_load(&s->inflight));
        serve_bridge_cancel_all(s);
        double hard = serve_now() + 10.0;
        while (atomic_load(&s->inflight) > 0 && serve_now() < hard)
            wait_signal(&set, 0.01);
    }
    serve_bridge_stop(s);
    /* Let responses that just finished reach their clients before connections close. */
    double flush = serve_now() + 2.0;
    while (atomic_load(&s->live_reqs) > 0 && serve_now() < flush)
        wait_signal(&set, 0.005);
    serve_http_stop(s);
    int code = atomic_load(&s->exit_code);
    if (s->chat && weft_chat_template_free) weft_chat_template_free(s->chat);
    weft_engine_close(s->engine);
    serve_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->qlock);
    pthread_cond_destroy(&s->qcond);
    free(s->cancels);
    free(s);
    fprintf(stderr, "weft serve: stopped\n");
    return code;
}
