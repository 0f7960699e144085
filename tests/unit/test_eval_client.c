/* The eval client (tools/eval/client.c): the SSE parser fed byte by byte and in odd pieces, its
 * refusals (malformed events, data after [DONE], a stream without [DONE], error events), and
 * the libcurl multi driver against a small HTTP server in this test (plain sockets and threads)
 * that streams events with pauses: event times must follow the pauses, and at most C requests
 * may be in flight, and exactly C at the peak. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "eval/client.c"

static const char stream_ok[] =
    ": a comment\r\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"Once\",\"finish_reason\":null}]}\r\n\r\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"
    "event: ignored\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\" upon\",\n"
    "data: \"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n"
    "data: [DONE]\n\n";

static void feed_in_pieces(weft_http_job *j, const char *s, size_t piece) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i += piece)
        weft_sse_feed(j, s + i, n - i < piece ? n - i : piece, 1.0 + (double)i);
    weft_sse_finish(j);
}

static void test_sse_pieces(void **state) {
    (void)state;
    size_t pieces[] = {1, 2, 3, 7, 64, 4096};
    for (size_t p = 0; p < 6; p++) {
        weft_http_job j;
        memset(&j, 0, sizeof(j));
        j.stream = 1;
        feed_in_pieces(&j, stream_ok, pieces[p]);
        assert_string_equal(j.error, "");
        assert_string_equal(j.text, "Once upon");
        assert_int_equal(j.n_chunks, 2); /* the empty delta carries no text */
        assert_int_equal(j.prompt_tokens, 5);
        assert_int_equal(j.completion_tokens, 3);
        assert_string_equal(j.finish_reason, "length");
        /* each event is stamped with the time of the piece that completed it */
        assert_true(j.t_first > 0);
        assert_true(pieces[p] >= 4096 ? j.chunk_t[1] == j.chunk_t[0] : j.chunk_t[1] > j.chunk_t[0]);
        weft_http_job_free(&j);
    }
}

static void expect_error(const char *stream, const char *needle) {
    weft_http_job j;
    memset(&j, 0, sizeof(j));
    j.stream = 1;
    feed_in_pieces(&j, stream, 5);
    if (!strstr(j.error, needle)) fail_msg("expected '%s' in '%s'", needle, j.error);
    weft_http_job_free(&j);
}

static void test_sse_refusals(void **state) {
    (void)state;
    expect_error("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", "without data: [DONE]");
    expect_error("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\ndata: {}\n\n",
                 "after data: [DONE]");
    expect_error("data: {\"choices\":[{\"text\":\n\ndata: [DONE]\n\n", "not a JSON object");
    expect_error("data: {\"error\":{\"message\":\"engine failed\"}}\n\ndata: [DONE]\n\n",
                 "engine failed");
    expect_error("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]", "middle of an event");
    expect_error("data: {\"choices\":{}}\n\ndata: [DONE]\n\n", "array");
}

/* ---- a small HTTP server --------------------------------------------------------------------- */
static atomic_int in_flight, peak, served;
static int listen_fd;

static void msleep(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int send_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *conn_main(void *arg) {
    int fd = (int)(intptr_t)arg;
    char req[8192];
    size_t len = 0;
    /* headers, then Content-Length bytes of body */
    for (;;) {
        ssize_t r = recv(fd, req + len, sizeof(req) - 1 - len, 0);
        if (r <= 0) break;
        len += (size_t)r;
        req[len] = 0;
        char *e = strstr(req, "\r\n\r\n");
        if (!e) continue;
        const char *cl = strstr(req, "Content-Length: ");
        size_t want = cl ? (size_t)atoi(cl + 16) : 0;
        if (len - (size_t)(e + 4 - req) >= want) break;
    }
    int now = atomic_fetch_add(&in_flight, 1) + 1;
    int p = atomic_load(&peak);
    while (now > p && !atomic_compare_exchange_weak(&peak, &p, now)) {
    }
    if (!strncmp(req, "POST /v1/stream", 15)) {
        const char *hdr = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                          "Connection: close\r\n\r\n";
        send_all(fd, hdr, strlen(hdr));
        for (int i = 0; i < 3; i++) {
            msleep(40);
            char ev[128];
            snprintf(ev, sizeof(ev), "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i);
            send_all(fd, ev, strlen(ev));
        }
        const char *end = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,"
                          "\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        send_all(fd, end, strlen(end));
    } else if (!strncmp(req, "POST /v1/bad", 12)) {
        const char *body = "{\"error\":{\"message\":\"max_tokens too large\",\"type\":"
                           "\"invalid_request_error\"}}";
        char hdr[256];
        snprintf(hdr, sizeof(hdr),
                 "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                 strlen(body));
        send_all(fd, hdr, strlen(hdr));
        send_all(fd, body, strlen(body));
    } else {
        /* echo the request body back inside a completion */
        const char *b = strstr(req, "\r\n\r\n");
        char body[4096];
        snprintf(body, sizeof(body),
                 "{\"choices\":[{\"index\":0,\"text\":\"echo\",\"finish_reason\":\"stop\"}],"
                 "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},\"got\":%s}",
                 b && b[4] ? b + 4 : "null");
        char hdr[256];
        snprintf(hdr, sizeof(hdr),
                 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                 strlen(body));
        send_all(fd, hdr, strlen(hdr));
        send_all(fd, body, strlen(body));
    }
    atomic_fetch_sub(&in_flight, 1);
    atomic_fetch_add(&served, 1);
    shutdown(fd, SHUT_WR);
    close(fd);
    return NULL;
}

static void *accept_main(void *arg) {
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) return NULL;
        pthread_t t;
        pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}

static char base_url[64];

static int server_up(void **state) {
    (void)state;
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    if (bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) || listen(listen_fd, 64) ||
        getsockname(listen_fd, (struct sockaddr *)&a, &l))
        return -1;
    snprintf(base_url, sizeof(base_url), "http://127.0.0.1:%u/", ntohs(a.sin_port));
    pthread_t t;
    pthread_create(&t, NULL, accept_main, NULL);
    pthread_detach(t);
    return 0;
}

static void test_run_many_concurrency(void **state) {
    (void)state;
    weft_client c;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_client_init(&c, base_url, "k", &err), WEFT_OK);
    assert_string_equal(c.auth, "Authorization: Bearer k");
    enum { N = 12, C = 4 };
    weft_http_job jobs[N];
    memset(jobs, 0, sizeof(jobs));
    json_t *body = json_pack("{s:s}", "model", "m");
    for (int i = 0; i < N; i++) {
        jobs[i].path = "/v1/stream";
        jobs[i].body = body;
        jobs[i].stream = 1;
    }
    atomic_store(&peak, 0);
    double t0 = weft_client_now();
    assert_int_equal(weft_client_run_many(&c, jobs, N, C, &err), WEFT_OK);
    double wall = weft_client_now() - t0;
    assert_int_equal(atomic_load(&peak), C);
    /* 12 requests of ~120 ms, 4 at a time: about 3 waves, far less than 12 serial ones */
    assert_true(wall > 0.3 && wall < 1.2);
    for (int i = 0; i < N; i++) {
        assert_string_equal(jobs[i].error, "");
        assert_int_equal(jobs[i].http, 200);
        assert_string_equal(jobs[i].text, "t0t1t2");
        assert_int_equal(jobs[i].n_chunks, 3);
        assert_int_equal(jobs[i].completion_tokens, 3);
        double ttft = jobs[i].t_first - jobs[i].t_start;
        double gap = jobs[i].chunk_t[2] - jobs[i].chunk_t[1];
        assert_true(ttft >= 0.035 && ttft < 0.5);
        assert_true(gap >= 0.030 && gap < 0.5);
        assert_true(jobs[i].t_end >= jobs[i].chunk_t[2]);
        weft_http_job_free(&jobs[i]);
    }
    json_decref(body);
}

static void test_post_and_errors(void **state) {
    (void)state;
    weft_client c;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_client_init(&c, base_url, NULL, &err), WEFT_OK);
    json_t *body = json_pack("{s:s, s:i}", "prompt", "hi \"there\"", "max_tokens", 3);
    json_t *resp = NULL;
    long http = 0;
    assert_int_equal(weft_client_post(&c, "/v1/completions", body, &http, &resp, &err), WEFT_OK);
    assert_int_equal(http, 200);
    assert_true(json_equal(json_object_get(resp, "got"), body));
    json_decref(resp);
    /* an HTTP error is the job's, not the client's */
    weft_http_job j;
    memset(&j, 0, sizeof(j));
    j.path = "/v1/bad";
    j.body = body;
    assert_int_equal(weft_client_run_many(&c, &j, 1, 1, &err), WEFT_OK);
    assert_int_equal(j.http, 400);
    assert_non_null(strstr(j.error, "HTTP 400: max_tokens too large"));
    weft_http_job_free(&j);
    /* a stream request answered with an error body is not parsed as SSE */
    memset(&j, 0, sizeof(j));
    j.path = "/v1/bad";
    j.body = body;
    j.stream = 1;
    assert_int_equal(weft_client_run_many(&c, &j, 1, 1, &err), WEFT_OK);
    assert_non_null(strstr(j.error, "max_tokens too large"));
    weft_http_job_free(&j);
    json_decref(body);
    /* nobody listening: a transport error on the job */
    weft_client dead;
    assert_int_equal(weft_client_init(&dead, "http://127.0.0.1:1", NULL, &err), WEFT_OK);
    memset(&j, 0, sizeof(j));
    j.path = "/health";
    assert_int_equal(weft_client_run_many(&dead, &j, 1, 1, &err), WEFT_OK);
    assert_non_null(strstr(j.error, "transport"));
    weft_http_job_free(&j);
    assert_int_equal(weft_client_init(&dead, "ftp://x", NULL, &err), WEFT_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_pieces),
        cmocka_unit_test(test_sse_refusals),
        cmocka_unit_test(test_run_many_concurrency),
        cmocka_unit_test(test_post_and_errors),
    };
    return cmocka_run_group_tests(tests, server_up, NULL);
}
