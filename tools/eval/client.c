/* The libcurl client of `weft eval` (client.h). Speed numbers come from here, so the timing is
 * taken where the bytes arrive: the write callback stamps each server-sent event with the
 * monotonic clock before parsing it, and a request's start is stamped when libcurl is handed
 * it. The SSE parser is written for OpenAI-style streams (`data: {json}` events, `data: [DONE]`
 * at the end) and is strict: a malformed event, data after [DONE] or a stream that ends without
 * [DONE] fails the request, because a garbled stream must never look like a fast one. */
#include "eval/client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"

double weft_client_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

weft_status weft_client_init(weft_client *c, const char *url, const char *api_key,
                             weft_error *err) {
    memset(c, 0, sizeof(*c));
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0))
        return weft_error_set(err, WEFT_ERR_INVALID, "--url",
                              "expected http://HOST:PORT, found '%s'", url ? url : "(null)");
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    if (n >= sizeof(c->base))
        return weft_error_set(err, WEFT_ERR_INVALID, "--url", "longer than %zu bytes",
                              sizeof(c->base) - 1);
    memcpy(c->base, url, n);
    c->base[n] = 0;
    /* a client pointed at ".../v1" still gets paths like "/v1/completions" right */
    if (n >= 3 && !strcmp(c->base + n - 3, "/v1")) c->base[n - 3] = 0;
    if (api_key && *api_key)
        snprintf(c->auth, sizeof(c->auth), "Authorization: Bearer %s", api_key);
    c->timeout_s = 600;
    pthread_once(&curl_once, curl_init_once);
    return WEFT_OK;
}

/* ---- growing buffers ----------------------------------------------------------------------- */
static int buf_add(char **buf, size_t *len, size_t *cap, const char *data, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < *len + n + 1)
            nc *= 2;
        char *p = realloc(*buf, nc);
        if (!p) return -1;
        *buf = p;
        *cap = nc;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static void job_fail(weft_http_job *j, const char *fmt, const char *detail) {
    if (j->error[0]) return; /* keep the first cause */
    snprintf(j->error, sizeof(j->error), fmt, detail ? detail : "");
}

static void job_text(weft_http_job *j, const char *s, size_t n, double t) {
    char *p = realloc(j->text, j->text_len + n + 1);
    if (!p) {
        job_fail(j, "out of memory%s", NULL);
        return;
    }
    j->text = p;
    memcpy(j->text + j->text_len, s, n);
    j->text_len += n;
    j->text[j->text_len] = 0;
    if (t <= 0) return;
    if (j->n_chunks == j->cap_chunks) {
        uint32_t nc = j->cap_chunks ? j->cap_chunks * 2 : 64;
        double *q = realloc(j->chunk_t, nc * sizeof(double));
        if (!q) {
            job_fail(j, "out of memory%s", NULL);
            return;
        }
        j->chunk_t = q;
        j->cap_chunks = nc;
    }
    j->chunk_t[j->n_chunks++] = t;
    if (j->t_first <= 0) j->t_first = t;
}

/* Folds one JSON object (a stream chunk or a whole response) into the job. */
static void job_absorb(weft_http_job *j, json_t *o, double t) {
    json_t *e = json_object_get(o, "error");
    if (e) {
        const char *m = json_string_value(json_object_get(e, "message"));
        job_fail(j, "server error: %s", m ? m : json_string_value(e));
        return;
    }
    json_t *choices = json_object_get(o, "choices");
    if (choices && !json_is_array(choices)) {
        job_fail(j, "expected \"choices\" to be an array%s", NULL);
        return;
    }
    size_t i;
    json_t *ch;
    json_array_foreach(choices, i, ch) {
        json_t *idx = json_object_get(ch, "index");
        if (idx && json_integer_value(idx) != 0) continue;
        const char *s = json_string_value(json_object_get(ch, "text"));
        if (!s) {
            json_t *d = json_object_get(ch, "delta");
            if (!d) d = json_object_get(ch, "message");
            s = json_string_value(json_object_get(d, "content"));
        }
        if (s) {
            size_t n = strlen(s);
            if (n > 0 || !j->stream) job_text(j, s, n, j->stream ? t : 0);
        }
        const char *f = json_string_value(json_object_get(ch, "finish_reason"));
        if (f) snprintf(j->finish_reason, sizeof(j->finish_reason), "%s", f);
    }
    json_t *u = json_object_get(o, "usage");
    if (json_is_object(u)) {
        j->prompt_tokens = (uint32_t)json_integer_value(json_object_get(u, "prompt_tokens"));
        j->completion_tokens =
            (uint32_t)json_integer_value(json_object_get(u, "completion_tokens"));
    }
}

/* One complete event: the data lines joined by \n. */
static void sse_event(weft_http_job *j, const char *data, size_t n, double t) {
    if (j->done_seen) {
        job_fail(j, "malformed stream: an event after data: [DONE]%s", NULL);
        return;
    }
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        j->done_seen = 1;
        return;
    }
    json_error_t je;
    json_t *o = json_loadb(data, n, 0, &je);
    if (!json_is_object(o)) {
        char what[200];
        snprintf(what, sizeof(what), "%.*s", (int)(n < 120 ? n : 120), data);
        job_fail(j, "malformed stream: an event that is not a JSON object: %s", what);
        json_decref(o);
        return;
    }
    job_absorb(j, o, t);
    json_decref(o);
}

/* The SSE grammar, as far as OpenAI-style servers use it: lines end in \n or \r\n; an empty line
 * ends an event; "data:" lines (one optional space after the colon) accumulate, joined by \n;
 * comments (":") and other fields are ignored. */
static void sse_line(weft_http_job *j, const char *line, size_t len, double t) {
    if (len == 0) {
        if (j->have_data) sse_event(j, j->ev ? j->ev : "", j->ev_len, t);
        j->ev_len = 0;
        j->have_data = 0;
        return;
    }
    if (line[0] == ':') return;
    if (len >= 5 && !memcmp(line, "data:", 5)) {
        const char *v = line + 5;
        size_t vn = len - 5;
        if (vn && *v == ' ') v++, vn--;
        if ((j->have_data && buf_add(&j->ev, &j->ev_len, &j->ev_cap, "\n", 1)) ||
            buf_add(&j->ev, &j->ev_len, &j->ev_cap, v, vn))
            job_fail(j, "out of memory%s", NULL);
        j->have_data = 1;
    }
}

void weft_sse_feed(weft_http_job *j, const char *data, size_t n, double t) {
    if (buf_add(&j->buf, &j->buf_len, &j->buf_cap, data, n)) {
        job_fail(j, "out of memory%s", NULL);
        return;
    }
    size_t start = 0;
    for (;;) {
        char *nl = memchr(j->buf + start, '\n', j->buf_len - start);
        if (!nl) break;
        size_t len = (size_t)(nl - (j->buf + start));
        size_t ll = len;
        if (ll > 0 && j->buf[start + ll - 1] == '\r') ll--;
        sse_line(j, j->buf + start, ll, t);
        start += len + 1;
    }
    memmove(j->buf, j->buf + start, j->buf_len - start);
    j->buf_len -= start;
    j->buf[j->buf_len] = 0;
}

void weft_sse_finish(weft_http_job *j) {
    if (j->buf_len > 0 || j->have_data)
        job_fail(j, "malformed stream: it ended in the middle of an event%s", NULL);
    else if (!j->done_seen)
        job_fail(j, "malformed stream: it ended without data: [DONE]%s", NULL);
}

/* ---- libcurl ------------------------------------------------------------------------------- */
static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    weft_http_job *j = user;
    size_t n = size * nmemb;
    double t = weft_client_now();
    if (j->stream && !j->http) {
        long code = 0;
        curl_easy_getinfo((CURL *)j->easy, CURLINFO_RESPONSE_CODE, &code);
        j->http = code;
    }
    if (j->stream && j->http == 200)
        weft_sse_feed(j, data, n, t);
    else if (buf_add(&j->buf, &j->buf_len, &j->buf_cap, data, n))
        job_fail(j, "out of memory%s", NULL);
    return n;
}

static weft_status job_setup(const weft_client *c, weft_http_job *j, weft_error *err) {
    CURL *h = curl_easy_init();
    if (!h) return weft_error_set(err, WEFT_ERR_NOMEM, "libcurl", "curl_easy_init failed");
    j->easy = h;
    char url[1024];
    snprintf(url, sizeof(url), "%s%s", c->base, j->path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, j);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    if (c->timeout_s > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(c->timeout_s * 1e3));
    struct curl_slist *hd = NULL;
    if (c->auth[0]) hd = curl_slist_append(hd, c->auth);
    if (j->body) {
        j->post = json_dumps(j->body, JSON_COMPACT);
        if (!j->post) return weft_error_set(err, WEFT_ERR_NOMEM, "eval", "cannot serialise a body");
        hd = curl_slist_append(hd, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, j->post);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(j->post));
    }
    if (j->stream) hd = curl_slist_append(hd, "Accept: text/event-stream");
    /* "Expect: 100-continue" would add a round trip to every large POST */
    hd = curl_slist_append(hd, "Expect:");
    j->headers = hd;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    return WEFT_OK;
}

static void job_done(weft_http_job *j, CURLcode rc) {
    j->t_end = weft_client_now();
    long code = 0;
    curl_easy_getinfo((CURL *)j->easy, CURLINFO_RESPONSE_CODE, &code);
    j->http = code;
    if (rc != CURLE_OK) {
        job_fail(j, "transport: %s", curl_easy_strerror(rc));
        return;
    }
    if (j->stream && code == 200) {
        weft_sse_finish(j);
        return;
    }
    json_error_t je;
    json_t *o = j->buf_len ? json_loadb(j->buf, j->buf_len, 0, &je) : NULL;
    if (code != 200) {
        const char *m = NULL;
        json_t *e = json_object_get(o, "error");
        if (e) m = json_string_value(json_object_get(e, "message"));
        char what[400];
        snprintf(what, sizeof(what), "HTTP %ld: %.300s", code,
                 m ? m : (j->buf ? j->buf : "(empty body)"));
        job_fail(j, "%s", what);
        j->response = o;
        return;
    }
    if (!json_is_object(o)) {
        job_fail(j, "expected a JSON object in the response, found: %.200s",
                 j->buf ? j->buf : "(empty body)");
        json_decref(o);
        return;
    }
    j->response = o;
    if (!j->stream) job_absorb(j, o, 0);
}

static void job_release(weft_http_job *j) {
    if (j->easy) curl_easy_cleanup((CURL *)j->easy);
    j->easy = NULL;
    curl_slist_free_all((struct curl_slist *)j->headers);
    j->headers = NULL;
    free(j->post);
    j->post = NULL;
}

void weft_http_job_free(weft_http_job *j) {
    if (!j) return;
    job_release(j);
    free(j->chunk_t);
    free(j->text);
    free(j->buf);
    free(j->ev);
    json_decref(j->response);
    j->chunk_t = NULL;
    j->text = NULL;
    j->buf = NULL;
    j->ev = NULL;
    j->response = NULL;
}

weft_status weft_client_run_many(const weft_client *c, weft_http_job *jobs, size_t n,
                                 uint32_t concurrency, weft_error *err) {
    if (concurrency == 0) concurrency = 1;
    CURLM *m = curl_multi_init();
    if (!m) return weft_error_set(err, WEFT_ERR_NOMEM, "libcurl", "curl_multi_init failed");
    /* keep one connection per in-flight request so concurrency is real, not pipelined */
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)concurrency);
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)concurrency);
    size_t next = 0, active = 0;
    weft_status st = WEFT_OK;
    while (next < n || active > 0) {
        while (active < concurrency && next < n) {
            weft_http_job *j = &jobs[next++];
            if ((st = job_setup(c, j, err))) goto out;
            j->t_start = weft_client_now();
            if (curl_multi_add_handle(m, (CURL *)j->easy) != CURLM_OK) {
                st = weft_error_set(err, WEFT_ERR_INTERNAL, "libcurl", "curl_multi_add_handle");
                goto out;
            }
            active++;
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc != CURLM_OK) {
            st = weft_error_set(err, WEFT_ERR_IO, "libcurl", "curl_multi_perform: %s",
                                curl_multi_strerror(mc));
            goto out;
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            weft_http_job *j = NULL;
            for (size_t i = 0; i < next; i++)
                if (jobs[i].easy == msg->easy_handle) j = &jobs[i];
            if (!j) continue;
            job_done(j, msg->data.result);
            curl_multi_remove_handle(m, (CURL *)j->easy);
            job_release(j);
            active--;
        }
        if (active > 0 && running > 0) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
out:
    for (size_t i = 0; i < next; i++)
        if (jobs[i].easy) {
            curl_multi_remove_handle(m, (CURL *)jobs[i].easy);
            job_release(&jobs[i]);
        }
    curl_multi_cleanup(m);
    return st;
}

weft_status weft_client_get(const weft_client *c, const char *path, long *http, char **body,
                            weft_error *err) {
    weft_http_job j;
    memset(&j, 0, sizeof(j));
    j.path = path;
    weft_status st = weft_client_run_many(c, &j, 1, 1, err);
    *http = j.http;
    if (body) {
        *body = j.buf;
        j.buf = NULL;
    }
    if (!st && j.http == 0)
        st = weft_error_set(err, WEFT_ERR_IO, path, "GET %s%s: %s", c->base, path, j.error);
    weft_http_job_free(&j);
    return st;
}

weft_status weft_client_post(const weft_client *c, const char *path, json_t *body, long *http,
                             json_t **resp, weft_error *err) {
    weft_http_job j;
    memset(&j, 0, sizeof(j));
    j.path = path;
    j.body = body;
    weft_status st = weft_client_run_many(c, &j, 1, 1, err);
    *http = j.http;
    if (!st && j.http == 0)
        st = weft_error_set(err, WEFT_ERR_IO, path, "POST %s%s: %s", c->base, path, j.error);
    if (resp) {
        *resp = j.response;
        j.response = NULL;
    }
    weft_http_job_free(&j);
    return st;
}
