/* The HTTP side: a libmicrohttpd daemon with an internal thread pool. Each request gets a
 * serve_req. Routing, authentication and the Content-Length limit are decided on the first call
 * (before any body is read), the body is collected up to the limit, and the endpoint runs on the
 * final call. A request handed to the engine thread suspends its connection, which then costs no
 * thread while it waits; the engine thread resumes it when there is something to send (the
 * request is accepted, a token arrived, or it finished). Resuming happens only while the
 * request's lock is held and its `suspended` flag is set, so a resume never races a suspend or
 * a connection that libmicrohttpd already closed. Streams are chunked responses whose reader
 * drains the SSE buffer and suspends when it is empty. */
#include <microhttpd.h>

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/serve.h"
#include "util/error.h"

/* ---- request objects ----------------------------------------------------------------------- */
static serve_req *req_new(serve_server *s, struct MHD_Connection *conn) {
    serve_req *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    pthread_mutex_init(&r->lock, NULL);
    atomic_init(&r->refs, 1);
    r->srv = s;
    r->conn = conn;
    r->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
    r->t_arrival = serve_now();
    r->created = serve_unix_time();
    atomic_fetch_add(&s->live_reqs, 1);
    return r;
}

/* Atomic, so a reference can be taken with the request's lock held. */
void serve_req_ref(serve_req *r) {
    atomic_fetch_add(&r->refs, 1);
}

void serve_req_unref(serve_req *r) {
    if (!r) return;
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    if (r->counted) atomic_fetch_sub(&r->srv->inflight, 1);
    for (uint32_t i = 0; i < r->n_choices; i++) {
        serve_buf_free(&r->choices[i].text);
        free(r->choices[i].toks);
        free(r->choices[i].ends);
    }
    free(r->choices);
    serve_gen_free(&r->g);
    free(r->score_ids);
    json_decref(r->score_result);
    serve_buf_free(&r->body);
    serve_buf_free(&r->out);
    pthread_mutex_destroy(&r->lock);
    atomic_fetch_sub(&r->srv->live_reqs, 1);
    free(r);
}

/* Engine thread, r->lock held. */
void serve_http_wake(serve_req *r) {
    if (r->suspended && r->conn) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
}

/* ---- responses ------------------------------------------------------------------------------ */
static enum MHD_Result send_buffer(serve_server *s, struct MHD_Connection *conn, unsigned status,
                                   char *data, size_t len, const char *ctype,
                                   const char *extra_header, const char *extra_value) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, data ? data : (char *)"", data ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    if (extra_header) MHD_add_response_header(resp, extra_header, extra_value);
    enum MHD_Result rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    serve_metrics_http(&s->metrics, status);
    return rc;
}

static enum MHD_Result send_json(serve_server *s, struct MHD_Connection *conn, unsigned status,
                                 json_t *j, const char *hname, const char *hvalue) {
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) {
        /* Serialising failed (out of memory, or text that is not UTF-8): say so. */
        static const char fallback[] = "{\"error\":{\"message\":\"the response could not be "
                                       "serialised\",\"type\":\"server_error\",\"param\":null,"
                                       "\"code\":\"internal_error\"}}";
        text = strdup(fallback);
        status = 500;
    }
    return send_buffer(s, conn, status, text, text ? strlen(text) : 0, "application/json", hname,
                       hvalue);
}

static enum MHD_Result send_error(serve_server *s, serve_req *r, struct MHD_Connection *conn,
                                  const serve_err *e) {
    if (r) {
        r->responded = 1;
        pthread_mutex_lock(&s->metrics.lock);
        s->metrics.rejected++;
        pthread_mutex_unlock(&s->metrics.lock);
    }
    weft_log(WEFT_LOG_DEBUG, "serve", "%u %s: %s", e->status, e->code, e->message);
    if (e->status == 401)
        return send_json(s, conn, e->status, serve_err_json(e), "WWW-Authenticate", "Bearer");
    if (e->status == 405)
        return send_json(s, conn, e->status, serve_err_json(e), "Allow", e->param);
    return send_json(s, conn, e->status, serve_err_json(e), NULL, NULL);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    serve_req *r = cls;
    (void)pos;
    pthread_mutex_lock(&r->lock);
    if (r->out_off == r->out.len) {
        r->out.len = r->out_off = 0;
        serve_stream_pump(r);
    }
    if (r->out_off < r->out.len) {
        size_t n = r->out.len - r->out_off;
        if (n > max) n = max;
        memcpy(buf, r->out.data + r->out_off, n);
        r->out_off += n;
        pthread_mutex_unlock(&r->lock);
        return (ssize_t)n;
    }
    if (r->stream_ended || !r->conn) {
        pthread_mutex_unlock(&r->lock);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* Nothing yet: park the connection until the engine thread has more. */
    r->suspended = 1;
    MHD_suspend_connection(r->conn);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

static void stream_free(void *cls) {
    serve_req_unref(cls);
}

static enum MHD_Result send_stream(serve_server *s, serve_req *r, struct MHD_Connection *conn) {
    serve_req_ref(r);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                  stream_reader, r, stream_free);
    if (!resp) {
        serve_req_unref(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    enum MHD_Result rc = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    serve_metrics_http(&s->metrics, 200);
    return rc;
}

static enum MHD_Result send_reply(serve_server *s, serve_req *r, struct MHD_Connection *conn,
                                  serve_reply *rep) {
    r->responded = 1;
    if (rep->text)
        return send_buffer(s, conn, rep->status, rep->text, strlen(rep->text), rep->ctype, NULL,
                           NULL);
    return send_json(s, conn, rep->status, rep->json, NULL, NULL);
}

/* ---- routing and auth ----------------------------------------------------------------------- */
typedef struct route {
    const char *path;
    const char *method; /* GET routes also answer HEAD */
    int prefix;         /* path is a prefix (/v1/models/{id}) */
} route;

static const route routes[] = {
    {"/health", "GET", 0},     {"/metrics", "GET", 0},         {"/v1/models", "GET", 0},
    {"/v1/models/", "GET", 1}, {"/v1/completions", "POST", 0}, {"/v1/chat/completions", "POST", 0},
    {"/v1/score", "POST", 0},  {"/tokenize", "POST", 0},       {"/detokenize", "POST", 0},
};

static const route *find_route(const char *url) {
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const route *rt = &routes[i];
        if (rt->prefix ? !strncmp(url, rt->path, strlen(rt->path)) && url[strlen(rt->path)]
                       : !strcmp(url, rt->path))
            return rt;
    }
    return NULL;
}

/* Constant-time comparison of the bearer token with the key. */
static int auth_ok(const serve_server *s, struct MHD_Connection *conn) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    const char *tok = h + 7;
    size_t a = strlen(tok), b = strlen(s->cfg.api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++)
        diff |= (unsigned char)tok[i] ^ (unsigned char)s->cfg.api_key[i % (b ? b : 1)];
    return diff == 0;
}

static int first_call_checks(serve_server *s, struct MHD_Connection *conn, const char *url,
                             const char *method, serve_req *r, serve_err *err) {
    const route *rt = find_route(url);
    if (!rt) {
        char shown[128];
        snprintf(shown, sizeof(shown), "%s", url);
        return serve_err_set(err, 404, "not_found", NULL, "no such endpoint: %s %s", method, shown);
    }
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (strcmp(method, rt->method) && !(is_get && !strcmp(rt->method, "GET")))
        return serve_err_set(err, 405, "method_not_allowed",
                             !strcmp(rt->method, "GET") ? "GET, HEAD" : "POST",
                             "%s does not accept %s; use %s", rt->path, method, rt->method);
    r->path = rt->path;
    snprintf(r->url, sizeof(r->url), "%s", url);
    if (s->cfg.api_key && s->cfg.api_key[0] && strcmp(rt->path, "/health") && !auth_ok(s, conn))
        return serve_err_set(err, 401, "invalid_api_key", NULL,
                             "missing or wrong API key: send \"Authorization: Bearer <key>\"");
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end = NULL;
        unsigned long long n = strtoull(cl, &end, 10);
        if (end && !*end && n > s->cfg.max_body)
            return serve_err_set(err, 413, "request_too_large", NULL,
                                 "the request body is %llu bytes; the limit is %u", n,
                                 s->cfg.max_body);
    }
    return 0;
}

/* ---- the access handler --------------------------------------------------------------------- */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    serve_server *s = cls;
    (void)version;
    serve_req *r = *con_cls;
    if (!r) {
        r = req_new(s, conn);
        if (!r) return MHD_NO;
        *con_cls = r;
        serve_err err = {0};
        if (first_call_checks(s, conn, url, method, r, &err)) return send_error(s, r, conn, &err);
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!r->too_large) {
            if (r->body.len + *upload_data_size > s->cfg.max_body) {
                r->too_large = 1;
                serve_buf_free(&r->body);
            } else if (serve_buf_append(&r->body, upload_data, *upload_data_size)) {
                r->too_large = 1;
                serve_buf_free(&r->body);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->responded) return MHD_YES;
    serve_reply rep;
    memset(&rep, 0, sizeof(rep));
    pthread_mutex_lock(&r->lock);
    if (r->phase == PHASE_NEW) {
        if (r->too_large) {
            pthread_mutex_unlock(&r->lock);
            serve_err err;
            serve_err_set(&err, 413, "request_too_large", NULL,
                          "the request body exceeds the limit of %u bytes", s->cfg.max_body);
            return send_error(s, r, conn, &err);
        }
        serve_handle(s, r, method, &rep);
    } else {
        serve_handle_resumed(s, r, &rep);
    }
    if (rep.suspend) {
        r->suspended = 1;
        MHD_suspend_connection(conn);
        pthread_mutex_unlock(&r->lock);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->lock);
    if (rep.stream) {
        r->responded = 1;
        return send_stream(s, r, conn);
    }
    return send_reply(s, r, conn, &rep);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    serve_server *s = cls;
    serve_req *r = *con_cls;
    (void)conn;
    (void)toe;
    if (!r) return;
    *con_cls = NULL;
    pthread_mutex_lock(&r->lock);
    int pending = r->phase == PHASE_QUEUED || r->phase == PHASE_ACCEPTED;
    r->conn = NULL;
    r->fd = -1;
    r->suspended = 0;
    if (pending) r->client_gone = 1;
    pthread_mutex_unlock(&r->lock);
    if (pending) {
        pthread_mutex_lock(&s->metrics.lock);
        s->metrics.cancelled_disconnect++;
        pthread_mutex_unlock(&s->metrics.lock);
        serve_bridge_cancel(s, r);
    }
    serve_req_unref(r);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    weft_log_v(WEFT_LOG_DEBUG, "serve.http", fmt, ap);
}

int serve_http_start(serve_server *s, char *errbuf, size_t cap) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof(port), "%u", s->cfg.port);
    int gai = getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        snprintf(errbuf, cap, "--host %s: %s", s->cfg.host, gai_strerror(gai));
        return -1;
    }
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)s->cfg.http_threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)2048, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)300,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        snprintf(errbuf, cap, "could not listen on %s:%u (in use, or not an address of this host)",
                 s->cfg.host, s->cfg.port);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (di && di->port) s->cfg.port = di->port;
    return 0;
}

void serve_http_quiesce(serve_server *s) {
    if (!s->daemon) return;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void serve_http_stop(serve_server *s) {
    if (!s->daemon) return;
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
