/* The HTTP client of `weft eval`: talks to an OpenAI-compatible server (weft serve or any other)
 * with libcurl. Single requests (GET, POST of a JSON body) for the gates, and a libcurl multi
 * driver that keeps up to C requests in flight and time-stamps every server-sent event as it
 * arrives, for the speed cases. Times are CLOCK_MONOTONIC seconds.
 *
 * Usage:
 *     weft_client c; weft_client_init(&c, "http://127.0.0.1:8000", NULL, &err);
 *     json_t *resp; long http; weft_client_post(&c, "/v1/completions", body, &http, &resp, &err);
 *     weft_http_job jobs[n]; ... jobs[i].path, jobs[i].body, jobs[i].stream = 1;
 *     weft_client_run_many(&c, jobs, n, 8, &err);   then jobs[i].t_first, .chunk_t, .usage...
 */
#ifndef WEFT_TOOLS_EVAL_CLIENT_H
#define WEFT_TOOLS_EVAL_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "weft/plugin.h"

typedef struct weft_client {
    char base[512];   /* "http://127.0.0.1:8000", no trailing slash */
    char auth[320];   /* "Authorization: Bearer KEY" or "" */
    double timeout_s; /* whole-request limit (0 = none) */
} weft_client;

weft_status weft_client_init(weft_client *c, const char *url, const char *api_key, weft_error *err);
double weft_client_now(void);

/* GET path; *body is the raw answer (malloc'ed, NUL-terminated; may be NULL). */
weft_status weft_client_get(const weft_client *c, const char *path, long *http, char **body,
                            weft_error *err);
/* POST a JSON body; *resp is the parsed answer (NULL when it was not JSON). A transport failure
 * is an error; an HTTP error status is not (check *http). */
weft_status weft_client_post(const weft_client *c, const char *path, json_t *body, long *http,
                             json_t **resp, weft_error *err);

/* One request of a batch. Fill path, body (borrowed) and stream; the rest is the outcome. */
typedef struct weft_http_job {
    const char *path;
    json_t *body;
    int stream; /* SSE: time every event; the JSON chunks are folded into text/usage below */
    /* outcome */
    long http;
    double t_start, t_first, t_end; /* t_first: the first event that carried text */
    double *chunk_t;                /* (n_chunks) arrival time of each event that carried text */
    uint32_t n_chunks, cap_chunks;
    uint32_t prompt_tokens, completion_tokens; /* from "usage" (0 when absent) */
    char *text; /* generated text of choice 0 (stream: concatenated deltas), NUL-terminated */
    size_t text_len;
    char finish_reason[24];
    json_t *response; /* non-stream: the parsed body */
    char error[512];  /* "" when it succeeded (HTTP 200, well-formed stream ending in [DONE]) */
    /* private: parser state */
    char *buf;
    size_t buf_len, buf_cap;
    int done_seen, have_data;
    char *ev; /* data lines of the event being read */
    size_t ev_len, ev_cap;
    void *easy;
    char *post; /* the serialised body */
    void *headers;
} weft_http_job;

/* Runs jobs[0..n) with at most `concurrency` in flight, starting them in index order. Returns
 * an error only when the client itself fails (no memory, libcurl); each job's own failure is
 * in its error field. */
weft_status weft_client_run_many(const weft_client *c, weft_http_job *jobs, size_t n,
                                 uint32_t concurrency, weft_error *err);
void weft_http_job_free(weft_http_job *j);

/* Feeds bytes of a server-sent event stream into the job's parser (exposed for tests). */
void weft_sse_feed(weft_http_job *j, const char *data, size_t n, double t);
/* Finishes the parse at the end of the body (an unterminated last event is an error). */
void weft_sse_finish(weft_http_job *j);

#endif
