/* OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} with string codes. The
 * type follows the HTTP status the way OpenAI's API does; the code names the exact problem so
 * clients can branch on it (context_length_exceeded, model_not_found, ...). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "serve/serve.h"

static const char *type_for(unsigned status) {
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "invalid_request_error";
    case 429:
        return "rate_limit_error";
    case 503:
        return "service_unavailable_error";
    default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

int serve_err_set(serve_err *e, unsigned status, const char *code, const char *param,
                  const char *fmt, ...) {
    if (!e) return -1;
    e->status = status;
    snprintf(e->type, sizeof(e->type), "%s", type_for(status));
    snprintf(e->code, sizeof(e->code), "%s", code ? code : "");
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -1;
}

json_t *serve_err_json(const serve_err *e) {
    json_t *inner = json_object();
    /* Messages may quote request text cut at a byte limit: keep the JSON valid UTF-8. */
    char msg[sizeof(e->message)];
    snprintf(msg, sizeof(msg), "%s", e->message);
    size_t n = strlen(msg);
    while (n && !serve_utf8_valid(msg, n))
        msg[--n] = 0;
    json_object_set_new(inner, "message", json_string(msg));
    json_object_set_new(inner, "type", json_string(e->type[0] ? e->type : "server_error"));
    json_object_set_new(inner, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(inner, "code", e->code[0] ? json_string(e->code) : json_null());
    return json_pack("{s:o}", "error", inner);
}
