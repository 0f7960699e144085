/* weft-chat-bench: how long chat templates take to render, one render each, at the default
 * limits of weft_chat_template_load (or the ones given), over an empty conversation. For the
 * worst case of the untrusted-template bounds (docs/CHAT_TEMPLATES.md): run it over
 * the .jinja files of tests/data/chat/hostile, templates built to spend as much CPU as the limits allow.
 *   weft-chat-bench [--iterations N] [--memory BYTES] FILE...
 * Prints one line a file: seconds, the status, and the error that ended the render. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/chat.h"
#include "util/file.h"

int main(int argc, char **argv) {
    weft_chat_limits lim = {0, 0, 0}; /* 0: the defaults */
    int first = 1;
    for (; first + 1 < argc && argv[first][0] == '-'; first += 2) {
        char *end;
        unsigned long long v = strtoull(argv[first + 1], &end, 10);
        if (*end || !v) {
            fprintf(stderr, "weft-chat-bench: %s: expected a positive integer, got '%s'\n",
                    argv[first], argv[first + 1]);
            return 2;
        }
        if (!strcmp(argv[first], "--iterations")) lim.max_iterations = v;
        else if (!strcmp(argv[first], "--memory")) lim.max_memory_bytes = (size_t)v;
        else {
            fprintf(stderr, "weft-chat-bench: unknown option %s\n", argv[first]);
            return 2;
        }
    }
    if (first >= argc) {
        fprintf(stderr, "usage: weft-chat-bench [--iterations N] [--memory BYTES] FILE...\n");
        return 2;
    }
    int bad = 0;
    for (int i = first; i < argc; i++) {
        size_t n = 0;
        char *src;
        weft_error err = {sizeof err, 0, "", ""};
        if (weft_file_read(argv[i], 0, "a template", NULL, &src, &n, &err)) {
            fprintf(stderr, "weft-chat-bench: %s: %s\n", err.source, err.message);
            bad = 1;
            continue;
        }
        weft_chat_template *t = NULL;
        if (weft_chat_template_parse(src, n, argv[i], &t, &err) != WEFT_OK) {
            printf("%s: does not parse: %s\n", argv[i], err.message);
            free(src);
            bad = 1;
            continue;
        }
        weft_chat_template_set_limits(t, &lim);
        char *out = NULL;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        weft_status st = weft_chat_render(t, "[]", 0, NULL, &out, &err);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        printf("%8.3f s  status %d  %s  %s\n", s, (int)st, argv[i], st ? err.message : "(rendered)");
        free(out);
        weft_chat_template_free(t);
        free(src);
    }
    return bad;
}
