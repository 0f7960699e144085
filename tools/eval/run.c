/* `weft eval run`: the fixed suite against one candidate through its OpenAI-compatible API. With
 * --lock it starts `weft serve` itself (a child on a free loopback port, its output in
 * RESULT.serve.log), waits for /health, runs, and stops it with SIGTERM; with --url it drives a
 * server someone else runs. The order is fixed so every candidate sees the same history: the
 * first halves of the gates (cold prompt-cache turn, serial then batched greedy outputs), the
 * speed cases, then the second halves (sampling, quality, retrieval, warm turn, the greedy set
 * again). Everything measured goes into one JSON result (docs/EVAL.md has the schema); the
 * exit status is 0 when the result counts (no gate failed), 1 when a gate failed or the run
 * could not finish, 2 on bad usage. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"
#include "eval/eval.h"
#include "eval/run.h"
#include "files/safetensors.h"
#include "util/error.h"

/* ---- notes and logging --------------------------------------------------------------------- */
void weft_eval_log(weft_eval_ctx *x, const char *fmt, ...) {
    if (!x->verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "weft eval run: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void weft_eval_note(weft_eval_ctx *x, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_array_append_new(x->notes, json_string(buf));
    fprintf(stderr, "weft eval run: note: %s\n", buf);
}

void weft_eval_gate_add(weft_eval_ctx *x, const char *name, const char *status, json_t *detail,
                        const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_t *g = json_pack("{s:s, s:s, s:s}", "name", name, "status", status, "reason", buf);
    if (detail) json_object_set_new(g, "detail", detail);
    json_array_append_new(x->gates, g);
    fprintf(stderr, "weft eval run: gate %-16s %-9s %s\n", name, status, buf);
}

/* ---- the corpus ---------------------------------------------------------------------------- */
/* Plain narrative prose (written for weft) so that small story models see text like their
 * training data: prompts for the speed cases are slices of its token ids, the greedy and
 * retrieval prompts are pieces of it. */
static const char corpus_text[] =
    "Once there was a small town by a wide river. Every morning the baker opened his shop "
    "before the sun came up, and the smell of warm bread drifted down the street. A girl named "
    "Mira lived next door with her grandmother and a grey cat called Pebble. Mira liked to sit "
    "on the steps and count the boats that went by. Some boats were red, some were blue, and "
    "one old boat had a yellow sail with a patch in the middle. One day the yellow boat did not "
    "come. Mira waited on the steps until lunch, and then she waited until the bells rang for "
    "tea. Her grandmother said that boats are late for many reasons, and that worry never made "
    "a boat go faster. So Mira walked to the river with Pebble in her arms. The water was calm "
    "and the reeds were tall. She saw a heron standing on one leg, and a family of ducks "
    "swimming in a line. Far away, near the bend, she saw a small yellow shape. It was the "
    "boat, stuck on a sandbank, and an old man was pushing it with a long pole. Mira ran along "
    "the bank and called out to him. He waved and laughed and said that the river had moved "
    "the sand again in the night. Mira found a rope on the path and threw one end to the man. "
    "Together they pulled, and slowly the boat slid back into the deep water. The man thanked "
    "her and gave her a round shell with stripes like a little tiger. That evening Mira put the "
    "shell on her window. When the moon came out, the shell shone softly, and Pebble curled up "
    "beside it and purred. The next morning the yellow boat came by on time, and the old man "
    "rang a bell three times just for her. From then on, every boat that passed rang its bell "
    "when it saw Mira on the steps, and the whole town learned to listen for the bells. The "
    "baker said it was the best way to start the day, better even than warm bread. Mira smiled, "
    "because she knew that a small kind act can travel a long way down a river.";

const char *weft_eval_corpus_text(void) {
    return corpus_text;
}

void weft_eval_corpus_piece(size_t i, size_t words, char *buf, size_t cap) {
    /* count words, start at word (i * 7) mod total, copy `words` words, wrapping */
    size_t total = 0;
    for (const char *p = corpus_text; *p;) {
        while (*p == ' ')
            p++;
        if (!*p) break;
        total++;
        while (*p && *p != ' ')
            p++;
    }
    size_t start = total ? (i * 7) % total : 0, w = 0, len = 0, idx = 0;
    if (cap) buf[0] = 0;
    while (w < words && total) {
        const char *p = corpus_text;
        for (; *p && w < words;) {
            while (*p == ' ')
                p++;
            if (!*p) break;
            const char *e = p;
            while (*e && *e != ' ')
                e++;
            if (idx >= start) {
                size_t n = (size_t)(e - p);
                if (len + n + 2 < cap) {
                    if (len) buf[len++] = ' ';
                    memcpy(buf + len, p, n);
                    len += n;
                    buf[len] = 0;
                }
                w++;
            }
            idx++;
            p = e;
        }
        start = 0;
        idx = 0;
    }
}

void weft_eval_corpus_ids(const weft_eval_ctx *x, size_t offset, size_t n, int32_t *out) {
    for (size_t i = 0; i < n; i++)
        out[i] = x->corpus[(offset + i) % x->n_corpus];
}

json_t *weft_eval_completion(const weft_eval_ctx *x, const int32_t *ids, size_t n_ids,
                             const char *text, uint32_t max_tokens, double temperature,
                             int64_t seed, int stream) {
    json_t *b = json_object();
    json_object_set_new(b, "model", json_string(x->model_name));
    if (ids) {
        json_t *a = json_array();
        for (size_t i = 0; i < n_ids; i++)
            json_array_append_new(a, json_integer(ids[i]));
        json_object_set_new(b, "prompt", a);
    } else {
        json_object_set_new(b, "prompt", json_string(text));
    }
    json_object_set_new(b, "max_tokens", json_integer(max_tokens));
    json_object_set_new(b, "temperature", json_real(temperature));
    /* pin the sampler so a model's generation_config cannot change what is measured */
    json_object_set_new(b, "top_p", json_real(1.0));
    json_object_set_new(b, "top_k", json_integer(0));
    json_object_set_new(b, "min_p", json_real(0.0));
    json_object_set_new(b, "repetition_penalty", json_real(1.0));
    if (seed >= 0) json_object_set_new(b, "seed", json_integer(seed));
    if (stream) {
        json_object_set_new(b, "stream", json_true());
        json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    return b;
}

weft_status weft_eval_tokenize(weft_eval_ctx *x, const char *text, int32_t **ids, size_t *n,
                               weft_error *err) {
    json_t *b = json_pack("{s:s, s:s}", "model", x->model_name, "prompt", text);
    json_t *r = NULL;
    long http = 0;
    weft_status st = weft_client_post(&x->client, "/tokenize", b, &http, &r, err);
    json_decref(b);
    if (st) return st;
    json_t *t = json_object_get(r, "tokens");
    if (http != 200 || !json_is_array(t)) {
        json_decref(r);
        return weft_error_set(err, WEFT_ERR_FORMAT, "/tokenize",
                              "expected HTTP 200 with a \"tokens\" array, found HTTP %ld", http);
    }
    size_t k = json_array_size(t);
    *ids = malloc((k ? k : 1) * sizeof(int32_t));
    if (!*ids) {
        json_decref(r);
        return weft_error_set(err, WEFT_ERR_NOMEM, "/tokenize", "out of memory");
    }
    for (size_t i = 0; i < k; i++)
        (*ids)[i] = (int32_t)json_integer_value(json_array_get(t, i));
    *n = k;
    json_decref(r);
    return WEFT_OK;
}

/* ---- the server child ---------------------------------------------------------------------- */
typedef struct serve_child {
    pid_t pid;
    uint32_t port;
    char log[1100];
} serve_child;

static uint32_t free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    uint32_t port = 0;
    if (!bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static weft_status serve_start(const char *weft, const char *lock, char **extra, int n_extra,
                               const char *log, double timeout_s, serve_child *c,
                               weft_client *client, weft_error *err) {
    memset(c, 0, sizeof(*c));
    snprintf(c->log, sizeof(c->log), "%s", log);
    for (int attempt = 0; attempt < 3; attempt++) {
        c->port = free_port();
        if (!c->port)
            return weft_error_set(err, WEFT_ERR_IO, "eval run", "cannot find a free port: %s",
                                  strerror(errno));
        char port[16];
        snprintf(port, sizeof(port), "%u", c->port);
        char **argv = calloc((size_t)n_extra + 10, sizeof(char *));
        if (!argv) return weft_error_set(err, WEFT_ERR_NOMEM, "eval run", "out of memory");
        int k = 0;
        argv[k++] = (char *)weft;
        argv[k++] = "serve";
        argv[k++] = (char *)lock;
        argv[k++] = "--host";
        argv[k++] = "127.0.0.1";
        argv[k++] = "--port";
        argv[k++] = port;
        for (int i = 0; i < n_extra; i++)
            argv[k++] = extra[i];
        argv[k] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0) {
            free(argv);
            return weft_error_set(err, WEFT_ERR_IO, log, "cannot open the server log: %s",
                                  strerror(errno));
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(fd);
            free(argv);
            return weft_error_set(err, WEFT_ERR_IO, "eval run", "fork: %s", strerror(errno));
        }
        if (pid == 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
            int nul = open("/dev/null", O_RDONLY);
            if (nul >= 0) dup2(nul, 0);
            execv(weft, argv);
            fprintf(stderr, "weft eval run: cannot run %s: %s\n", weft, strerror(errno));
            _exit(127);
        }
        close(fd);
        free(argv);
        c->pid = pid;
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%u", c->port);
        weft_status st = weft_client_init(client, url, NULL, err);
        if (st) return st;
        double t0 = weft_client_now();
        int exited = 0, status = 0;
        while (weft_client_now() - t0 < timeout_s) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) {
                exited = 1;
                break;
            }
            long http = 0;
            char *body = NULL;
            weft_error e2;
            weft_error_clear(&e2);
            weft_client c2 = *client;
            c2.timeout_s = 5;
            if (weft_client_get(&c2, "/health", &http, &body, &e2) == WEFT_OK && http == 200) {
                free(body);
                return WEFT_OK;
            }
            free(body);
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (!exited) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            c->pid = 0;
            return weft_error_set(err, WEFT_ERR_IO, log,
                                  "weft serve did not answer /health with 200 within %.0f s "
                                  "(its output is in this file)",
                                  timeout_s);
        }
        c->pid = 0;
        /* a port taken between our probe and its bind: try another; anything else is fatal */
        FILE *f = fopen(log, "r");
        int port_clash = 0;
        if (f) {
            char line[512];
            while (fgets(line, sizeof(line), f))
                if (strstr(line, "in use") || strstr(line, "EADDRINUSE")) port_clash = 1;
            fclose(f);
        }
        if (!port_clash)
            return weft_error_set(err, WEFT_ERR_IO, log,
                                  "weft serve exited with status %d before it was healthy (its "
                                  "output is in this file)",
                                  WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    return weft_error_set(err, WEFT_ERR_IO, log, "weft serve could not bind a port in 3 tries");
}

/* SIGTERM, then up to 30 s for the drain, then SIGKILL. Returns the exit status (-1 killed). */
static int serve_stop(serve_child *c) {
    if (!c->pid) return 0;
    kill(c->pid, SIGTERM);
    int status = 0;
    double t0 = weft_client_now();
    for (;;) {
        pid_t w = waitpid(c->pid, &status, WNOHANG);
        if (w == c->pid) break;
        if (weft_client_now() - t0 > 30) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            c->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    c->pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- what the server says about itself ----------------------------------------------------- */
static json_t *server_info(weft_eval_ctx *x, weft_error *err) {
    long http = 0;
    char *body = NULL;
    if (weft_client_get(&x->client, "/v1/models", &http, &body, err)) return NULL;
    json_error_t je;
    json_t *o = body ? json_loads(body, 0, &je) : NULL;
    free(body);
    json_t *d0 = json_array_get(json_object_get(o, "data"), 0);
    if (http != 200 || !json_is_object(d0)) {
        json_decref(o);
        weft_error_set(err, WEFT_ERR_FORMAT, "/v1/models",
                       "expected HTTP 200 with data[0] a model object, found HTTP %ld", http);
        return NULL;
    }
    json_t *m = json_deep_copy(d0);
    json_decref(o);
    return m;
}

static uint32_t json_u32(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint32_t)json_integer_value(v) : 0;
}

static void iso_now(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int lock_drafts(const weft_lock *l) {
    if (!l) return 0;
    for (uint32_t i = 0; i < l->n_plugins; i++)
        if (l->plugins[i].slots & (WEFT_SLOT_DECODER | WEFT_SLOT_DRAFTER)) return 1;
    return 0;
}

/* ---- summary --------------------------------------------------------------------------------
 * The headline numbers the planner reads: decode from the shortest prompt at concurrency 1,
 * prefill and time to first token from the longest prompt at concurrency 1. */
static json_t *kpi_of(json_t *cs, const char *kpi) {
    return json_object_get(json_object_get(cs, "kpis"), kpi);
}

static json_t *summary(weft_eval_ctx *x, json_t *cases) {
    json_t *s = json_object(), *k = json_object();
    json_t *dec = NULL, *pre = NULL;
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        if (json_integer_value(json_object_get(cs, "concurrency")) != 1) continue;
        json_int_t p = json_integer_value(json_object_get(cs, "prompt_tokens"));
        if (!dec || p < json_integer_value(json_object_get(dec, "prompt_tokens"))) dec = cs;
        if (!pre || p > json_integer_value(json_object_get(pre, "prompt_tokens"))) pre = cs;
    }
    struct {
        const char *name, *kpi;
        json_t *cs;
    } h[] = {{"decode", "decode_tps_stream", dec},
             {"prefill", "prefill_tps", pre},
             {"ttft", "ttft_s", pre}};
    for (int j = 0; j < 3; j++) {
        json_t *v = h[j].cs ? kpi_of(h[j].cs, h[j].kpi) : NULL;
        if (!v) continue;
        json_t *o = json_pack("{s:s, s:s}", "case",
                              json_string_value(json_object_get(h[j].cs, "name")), "kpi", h[j].kpi);
        const char *keys[] = {"value", "limit", "fraction", "noise", "unit"};
        for (int q = 0; q < 5; q++) {
            json_t *e = json_object_get(v, keys[q]);
            if (e) json_object_set(o, keys[q], e);
        }
        json_object_set_new(k, h[j].name, o);
    }
    json_object_set_new(s, "kpis", k);
    json_t *failed = json_array();
    json_array_foreach(x->gates, i, cs) {
        if (!strcmp(json_string_value(json_object_get(cs, "status")), "fail"))
            json_array_append(failed, json_object_get(cs, "name"));
    }
    json_object_set_new(s, "counts", json_boolean(json_array_size(failed) == 0));
    json_object_set_new(s, "failed_gates", failed);
    return s;
}

/* ---- main ---------------------------------------------------------------------------------- */
static void usage(FILE *f) {
    fprintf(f, "usage: weft eval run (--url URL | --lock LOCK) [--model DIR] -o RESULT.json\n"
               "       [--probe FILE] [--reference FILE] [--baseline RESULT.json] [--quick]\n"
               "       [--no-speed] [--no-gates] [--api-key K] [--served-model-name N] [--seed N]\n"
               "       [--serve-arg ARG]... [--startup-timeout S] [--weft PATH] [-v]\n"
               "  --url URL          a running OpenAI-compatible server\n"
               "  --lock LOCK        start `weft serve LOCK` on a free loopback port for the run\n"
               "  --model DIR        the model directory (config.json for limits; default: the "
               "lock's)\n"
               "  --probe FILE       `weft eval probe` output (default: the cached probe of the "
               "backend)\n"
               "  --reference FILE   reference logits for the quality gate (safetensors with "
               "input_ids\n"
               "                     and logits; default: DIR/reference.safetensors)\n"
               "  --baseline RESULT  a result of the reference candidate (retrieval and "
               "speculative\n"
               "                     gates compare against its recorded answers)\n"
               "  --quick            the short profile tests use (fewer cases, tokens, repeats)\n"
               "  --no-speed         gates only;  --no-gates: speed cases only (the result does "
               "not count)\n"
               "  --serve-arg ARG    passed to weft serve (repeat for each word)\n"
               "  --case P,G,C       run only this speed case (repeatable; for cross-checks)\n"
               "  --requests N       requests per repeat of each case\n"
               "Exit status: 0 the result counts, 1 a gate failed or the run failed, 2 usage.\n");
}

int weft_eval_run_main(int argc, char **argv) {
    static const struct option opts[] = {{"url", required_argument, 0, 'u'},
                                         {"lock", required_argument, 0, 'l'},
                                         {"model", required_argument, 0, 'm'},
                                         {"probe", required_argument, 0, 'p'},
                                         {"reference", required_argument, 0, 'r'},
                                         {"baseline", required_argument, 0, 'b'},
                                         {"quick", no_argument, 0, 'q'},
                                         {"no-speed", no_argument, 0, 'S'},
                                         {"no-gates", no_argument, 0, 'G'},
                                         {"api-key", required_argument, 0, 'k'},
                                         {"served-model-name", required_argument, 0, 'n'},
                                         {"seed", required_argument, 0, 's'},
                                         {"serve-arg", required_argument, 0, 'a'},
                                         {"startup-timeout", required_argument, 0, 't'},
                                         {"weft", required_argument, 0, 'w'},
                                         {"output", required_argument, 0, 'o'},
                                         {"verbose", no_argument, 0, 'v'},
                                         {"help", no_argument, 0, 'h'},
                                         {"case", required_argument, 0, 'C'},
                                         {"requests", required_argument, 0, 'R'},
                                         {0, 0, 0, 0}};
    const char *url = NULL, *lock_path = NULL, *model = NULL, *probe = NULL, *ref = NULL;
    const char *baseline = NULL, *api_key = NULL, *served = NULL, *out = NULL, *weft = NULL;
    int quick = 0, no_speed = 0, no_gates = 0, verbose = 0, c;
    uint32_t seed = 1234;
    double startup = 300;
    char *extra[64];
    int n_extra = 0;
    uint32_t custom[8][3] = {{0}}, n_custom = 0, requests = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "u:l:m:p:r:b:qSGk:n:s:a:t:w:o:vhC:R:", opts, NULL)) != -1) {
        switch (c) {
        case 'u':
            url = optarg;
            break;
        case 'l':
            lock_path = optarg;
            break;
        case 'm':
            model = optarg;
            break;
        case 'p':
            probe = optarg;
            break;
        case 'r':
            ref = optarg;
            break;
        case 'b':
            baseline = optarg;
            break;
        case 'q':
            quick = 1;
            break;
        case 'S':
            no_speed = 1;
            break;
        case 'G':
            no_gates = 1;
            break;
        case 'k':
            api_key = optarg;
            break;
        case 'n':
            served = optarg;
            break;
        case 'w':
            weft = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'v':
            verbose = 1;
            break;
        case 's':
            if (weft_cli_parse_u32("eval run", "--seed", optarg, &seed)) return 2;
            break;
        case 't':
            if (weft_cli_parse_f64_range("eval run", "--startup-timeout", optarg, 0, 86400,
                                         &startup))
                return 2;
            break;
        case 'a':
            if (n_extra == 64) {
                fprintf(stderr, "weft eval run: --serve-arg: at most 64\n");
                return 2;
            }
            extra[n_extra++] = optarg;
            break;
        case 'C': {
            unsigned a = 0, b = 0, k = 0;
            char tail = 0;
            if (n_custom == 8 || sscanf(optarg, "%u,%u,%u%c", &a, &b, &k, &tail) != 3 || !a || !b ||
                !k || a > (1u << 20) || b > (1u << 20) || k > 1024) {
                fprintf(stderr,
                        "weft eval run: --case: expected PROMPT,GEN,CONCURRENCY (at most "
                        "8 cases), got '%s'\n",
                        optarg);
                return 2;
            }
            custom[n_custom][0] = a, custom[n_custom][1] = b, custom[n_custom][2] = k;
            n_custom++;
            break;
        }
        case 'R':
            if (weft_cli_parse_u32_range("eval run", "--requests", optarg, 1, 100000, &requests))
                return 2;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft eval run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!!url == !!lock_path) {
        fprintf(stderr, "weft eval run: give exactly one of --url URL or --lock LOCK\n");
        usage(stderr);
        return 2;
    }
    if (!out) {
        fprintf(stderr, "weft eval run: -o RESULT.json is required\n");
        return 2;
    }

    weft_error err;
    weft_error_clear(&err);
    weft_eval_ctx x;
    memset(&x, 0, sizeof(x));
    x.quick = quick;
    memcpy(x.custom, custom, sizeof(custom));
    x.n_custom = n_custom;
    x.requests = requests;
    x.verbose = verbose;
    x.seed = seed;
    x.notes = json_array();
    x.gates = json_array();
    x.greedy = json_object();
    x.mean_kl = WEFT_EVAL_MEAN_KL;
    x.p99_kl = WEFT_EVAL_P99_KL;
    x.ppl_ratio = WEFT_EVAL_PPL_RATIO;
    int rc = 1;
    weft_lock *lock = NULL;
    serve_child child;
    memset(&child, 0, sizeof(child));
    json_t *result = NULL, *cases = json_array(), *info = NULL;
    char refbuf[1200], selfexe[1024];

    if (lock_path && weft_lock_load(lock_path, &lock, &err)) {
        rc = weft_cli_fail("eval run", &err);
        goto done;
    }
    x.lock = lock;
    if (!model && lock && lock->model_dir[0]) model = lock->model_dir;
    if (baseline && !(x.baseline = weft_eval_result_load(baseline, &err))) {
        fprintf(stderr, "weft eval run: --baseline %s\n", err.message);
        goto done;
    }
    /* quality thresholds: a candidate may tighten, never loosen */
    if (lock) {
        double *th[] = {&x.mean_kl, &x.p99_kl, &x.ppl_ratio};
        const double ov[] = {lock->mean_kl, lock->p99_kl, lock->ppl_ratio};
        const uint32_t has[] = {lock->has_mean_kl, lock->has_p99_kl, lock->has_ppl_ratio};
        const char *nm[] = {"mean_kl", "p99_kl", "ppl_ratio"};
        for (int i = 0; i < 3; i++) {
            if (!has[i]) continue;
            if (ov[i] <= *th[i])
                *th[i] = ov[i];
            else
                weft_eval_note(&x,
                               "the candidate's quality.%s %g is above the default %g and "
                               "was ignored: a candidate may only lower a quality gate",
                               nm[i], ov[i], *th[i]);
        }
    }
    if (model) {
        if (weft_config_load(model, &x.cfg, NULL, &err) == WEFT_OK) {
            x.have_config = 1;
            weft_safetensors *st = NULL;
            uint32_t dt = x.cfg.dtype;
            if (weft_safetensors_open_dir(model, &st, &err) == WEFT_OK) {
                for (size_t i = 0; i < weft_safetensors_count(st); i++) {
                    const weft_st_tensor *t = weft_safetensors_at(st, i);
                    x.weight_bytes += (double)t->bytes;
                    if (i == 0) dt = t->dtype;
                }
                weft_safetensors_close(st);
            }
            size_t es = weft_dtype_size(dt);
            x.dtype_bytes = es ? (uint32_t)es : 2;
        } else {
            weft_eval_note(&x, "no limits: %s: %s", err.source, err.message);
        }
        weft_error_clear(&err);
    } else {
        weft_eval_note(&x, "no --model directory: limits and the default reference are unknown");
    }
    const char *backend = lock ? lock->backend : "cuda";
    if (!probe) {
        weft_probe_default_path(backend, x.probe_path, sizeof(x.probe_path));
        probe = x.probe_path;
    } else {
        snprintf(x.probe_path, sizeof(x.probe_path), "%s", probe);
    }
    if (weft_probe_load(probe, &x.probe, &err) == WEFT_OK)
        x.have_probe = 1;
    else
        weft_eval_note(&x, "no probe, so no limits: %s: %s", err.source, err.message);
    weft_error_clear(&err);
    if (!ref && model) {
        snprintf(refbuf, sizeof(refbuf), "%s/reference.safetensors", model);
        ref = refbuf;
    }
    x.reference_path = ref;

    if (lock_path) {
        if (!weft) {
            ssize_t n = readlink("/proc/self/exe", selfexe, sizeof(selfexe) - 1);
            if (n <= 0) {
                fprintf(stderr, "weft eval run: cannot find the weft executable; pass --weft\n");
                goto done;
            }
            selfexe[n] = 0;
            weft = selfexe;
        }
        char log[1100];
        snprintf(log, sizeof(log), "%s.serve.log", out);
        unlink(log);
        fprintf(stderr, "weft eval run: starting %s serve %s (log %s)\n", weft, lock_path, log);
        if (serve_start(weft, lock_path, extra, n_extra, log, startup, &child, &x.client, &err)) {
            rc = weft_cli_fail("eval run", &err);
            goto done;
        }
        if (api_key)
            snprintf(x.client.auth, sizeof(x.client.auth), "Authorization: Bearer %s", api_key);
    } else if (weft_client_init(&x.client, url, api_key, &err)) {
        rc = weft_cli_fail("eval run", &err);
        goto done;
    }

    info = server_info(&x, &err);
    if (!info) {
        rc = weft_cli_fail("eval run", &err);
        goto done;
    }
    const char *mid = json_string_value(json_object_get(info, "id"));
    snprintf(x.model_name, sizeof(x.model_name), "%s", served ? served : mid ? mid : "");
    x.max_model_len = json_u32(info, "max_model_len");
    if (!x.max_model_len && x.have_config) x.max_model_len = x.cfg.max_position;
    if (!x.max_model_len) {
        x.max_model_len = 2048;
        weft_eval_note(&x, "the server does not report max_model_len and there is no config: "
                           "assuming 2048");
    }
    if (lock && lock->max_model_len && lock->max_model_len < x.max_model_len)
        x.max_model_len = lock->max_model_len;
    x.vocab =
        x.have_config ? x.cfg.vocab_size : json_u32(json_object_get(info, "weft"), "vocab_size");

    if (weft_eval_tokenize(&x, corpus_text, &x.corpus, &x.n_corpus, &err) == WEFT_OK &&
        x.n_corpus > 16) {
        x.corpus_from_tokenizer = 1;
    } else {
        /* a server without a tokenizer still takes ids: a fixed pseudo-random sequence */
        weft_eval_note(&x, "no /tokenize (%s): speed prompts are pseudo-random token ids",
                       err.message[0] ? err.message : "too few tokens");
        weft_error_clear(&err);
        free(x.corpus);
        uint32_t V = x.vocab ? x.vocab : 256;
        x.n_corpus = 4096;
        x.corpus = malloc(x.n_corpus * sizeof(int32_t));
        if (!x.corpus) goto done;
        uint64_t s = 0x9e3779b97f4a7c15ull ^ x.seed;
        for (size_t i = 0; i < x.n_corpus; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x.corpus[i] = (int32_t)(3 + (s >> 33) % (V > 3 ? V - 3 : 1));
        }
    }

    int drafts = lock_drafts(lock);
    if (!no_gates && weft_eval_gates_before(&x, &err)) {
        rc = weft_cli_fail("eval run", &err);
        goto done;
    }
    if (!no_speed && weft_eval_speed(&x, cases, &err)) {
        rc = weft_cli_fail("eval run", &err);
        goto done;
    }
    if (!no_gates && weft_eval_gates_after(&x, &err)) {
        rc = weft_cli_fail("eval run", &err);
        goto done;
    }
    if (no_gates)
        weft_eval_gate_add(&x, "gates", "fail", NULL,
                           "--no-gates: no gate ran, so this result cannot count");
    (void)drafts;

    /* the result document */
    char created[32];
    iso_now(created, sizeof(created));
    struct utsname un;
    uname(&un);
    char host[300];
    snprintf(host, sizeof(host), "%s %s %s", un.sysname, un.release, un.machine);
    curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
    char abi[16];
    snprintf(abi, sizeof(abi), "%d..%d", WEFT_ABI_VERSION_MIN, WEFT_ABI_VERSION);
    json_t *cand = json_object();
    json_object_set_new(cand, "id", json_string(lock ? lock->id : ""));
    json_object_set_new(cand, "name", json_string(lock ? lock->candidate : x.model_name));
    json_object_set_new(cand, "lock", lock_path ? json_string(lock_path) : json_null());
    json_object_set_new(cand, "url", json_string(x.client.base));
    json_object_set_new(cand, "backend", json_string(lock ? lock->backend : ""));
    json_object_set_new(cand, "drafts", json_boolean(drafts));
    json_t *plugins = json_array();
    for (uint32_t i = 0; lock && i < lock->n_plugins; i++)
        json_array_append_new(plugins, json_pack("{s:s, s:s, s:s}", "name", lock->plugins[i].name,
                                                 "version", lock->plugins[i].version, "role",
                                                 weft_lock_role_name(lock->plugins[i].role)
                                                     ? weft_lock_role_name(lock->plugins[i].role)
                                                     : ""));
    json_object_set_new(cand, "plugins", plugins);
    if (!lock) {
        /* weft serve says which candidate it serves (/v1/models data[0].weft) */
        json_t *w = json_object_get(info, "weft");
        const char *v = json_string_value(json_object_get(w, "candidate_id"));
        if (v) json_object_set_new(cand, "id", json_string(v));
        v = json_string_value(json_object_get(w, "backend"));
        if (v) json_object_set_new(cand, "backend", json_string(v));
    }
    json_t *mdl =
        json_pack("{s:s, s:s, s:i, s:i}", "dir", model ? model : "", "served_name", x.model_name,
                  "max_model_len", (int)x.max_model_len, "vocab", (int)x.vocab);
    json_t *probe_j = json_null();
    if (x.have_probe) {
        probe_j =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:f}", "path", x.probe_path,
                      "device", x.probe.device, "arch", x.probe.arch, "backend", x.probe.backend,
                      "date", x.probe.date, "copy_bytes_per_s", x.probe.r.copy_bytes_per_s,
                      "gemm_bf16_flops", x.probe.r.gemm_bf16_flops, "gemm_f32_flops",
                      x.probe.r.gemm_f32_flops, "host_roundtrip_s", x.probe.r.host_roundtrip_s);
    }
    json_t *quality_th = json_pack("{s:f, s:f, s:f}", "mean_kl", x.mean_kl, "p99_kl", x.p99_kl,
                                   "ppl_ratio", x.ppl_ratio);
    result = json_object();
    json_object_set_new(result, "format", json_string(WEFT_EVAL_RESULT_FORMAT));
    json_object_set_new(result, "version", json_integer(WEFT_EVAL_RESULT_VERSION));
    json_object_set_new(result, "created", json_string(created));
    json_object_set_new(result, "profile", json_string(quick ? "quick" : "full"));
    json_object_set_new(result, "candidate", cand);
    json_object_set_new(result, "model", mdl);
    json_object_set_new(result, "server", json_incref(info));
    json_object_set_new(result, "probe", probe_j);
    json_object_set_new(result, "quality_thresholds", quality_th);
    json_object_set_new(result, "versions",
                        json_pack("{s:s, s:s, s:s, s:s, s:s}", "weft", WEFT_VERSION_STRING, "abi",
                                  abi, "libcurl", cv ? cv->version : "", "jansson", JANSSON_VERSION,
                                  "host", host));
    json_object_set_new(result, "notes", json_incref(x.notes));
    json_object_set_new(result, "cases", json_incref(cases));
    json_object_set_new(result, "gates", json_incref(x.gates));
    json_object_set_new(result, "greedy", json_incref(x.greedy));
    json_object_set_new(result, "summary", summary(&x, cases));
    if (json_dump_file(result, out, JSON_INDENT(2))) {
        fprintf(stderr, "weft eval run: %s: cannot write the result\n", out);
        goto done;
    }
    int counts = json_is_true(json_object_get(json_object_get(result, "summary"), "counts"));
    fprintf(stderr, "weft eval run: wrote %s: %s\n", out,
            counts ? "every gate passed, the result counts"
                   : "a gate failed, the result does not count");
    rc = counts ? 0 : 1;

done:
    weft_eval_gates_free();
    if (child.pid) {
        int st = serve_stop(&child);
        if (st != 0) {
            fprintf(stderr,
                    "weft eval run: weft serve exited with status %d on SIGTERM (see "
                    "%s)\n",
                    st, child.log);
            if (rc == 0) rc = 1;
        }
    }
    json_decref(result);
    json_decref(cases);
    json_decref(info);
    json_decref(x.notes);
    json_decref(x.gates);
    json_decref(x.greedy);
    json_decref(x.baseline);
    free(x.corpus);
    weft_lock_free(lock);
    return rc;
}
