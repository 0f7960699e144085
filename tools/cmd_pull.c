/* `weft pull ID [--revision R] [--dir DIR] [--force]`: fetches a model into the model cache
 * (or DIR) from the hub or WEFT_MODEL_MIRROR and prints the folder it is in. The work is in
 * runtime/src/files/pull.c; this file only reads the command line. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "files/pull.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft pull ID [--revision R] [--dir DIR] [--force] [--quiet]\n"
               "\n"
               "Downloads a model and prints the folder it is in.\n"
               "  ID            a hub id (org/name) or an alias: stories260k\n"
               "  --revision R  branch, tag or commit on the hub (default main)\n"
               "  --dir DIR     put the files in DIR instead of the model cache\n"
               "  --force       fetch every file again, even if present and verified\n"
               "  --quiet       no progress bar (it is shown only when stderr is a terminal)\n"
               "\n"
               "Cache: ${WEFT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}/models/<name>, where\n"
               "org/name becomes org--name. WEFT_MODEL_MIRROR = a folder or an http(s) URL used\n"
               "instead of huggingface.co; HF_ENDPOINT changes the hub address; HF_TOKEN is sent\n"
               "to the hub for gated models. A busy answer (408, 429, 5xx) or a transfer cut\n"
               "off is retried WEFT_PULL_RETRIES times (default 4), after the server's\n"
               "Retry-After or WEFT_PULL_BACKOFF_MS (default 1000) doubled each time, resuming\n"
               "the .part. Layouts: docs/PULL.md.\n");
}

int weft_cmd_pull(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    weft_pull_options o;
    weft_pull_options_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "--revision") || !strcmp(a, "--dir")) && i + 1 < argc) {
            if (!strcmp(a, "--revision"))
                o.revision = argv[++i];
            else
                o.dir = argv[++i];
        } else if (!strncmp(a, "--revision=", 11)) {
            o.revision = a + 11;
        } else if (!strncmp(a, "--dir=", 6)) {
            o.dir = a + 6;
        } else if (!strcmp(a, "--force")) {
            o.force = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o.progress = 0;
        } else if (a[0] == '-') {
            fprintf(stderr, "weft pull: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (!o.id) {
            o.id = a;
        } else {
            fprintf(stderr, "weft pull: expected one model id, got '%s' and '%s'\n", o.id, a);
            return 2;
        }
    }
    if (!o.id) {
        usage(stderr);
        return 2;
    }
    weft_pull_stats stats;
    weft_error err;
    weft_error_clear(&err);
    if (weft_pull_model(&o, &stats, &err) != WEFT_OK) return weft_cli_fail("pull", &err);
    fprintf(stderr,
            "weft pull: %s: %u files (%u fetched, %u resumed, %u already present), "
            "%.1f MB transferred",
            o.id, stats.files, stats.fetched, stats.resumed, stats.skipped, stats.bytes / 1e6);
    if (stats.retries) fprintf(stderr, ", %u request(s) retried", stats.retries);
    fputc('\n', stderr);
    printf("%s\n", stats.dir);
    return 0;
}
