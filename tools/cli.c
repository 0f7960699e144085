/* Helpers shared by the CLI's subcommands (see cli.h). */
#include "cli.h"

#include <string.h>
#include <time.h>

#include "util/error.h"

void weft_cli_print_version(FILE *f) {
    fprintf(f, "weft %s (plugin ABI %d..%d)\n", WEFT_VERSION_STRING, WEFT_ABI_VERSION_MIN,
            WEFT_ABI_VERSION);
}

int weft_cli_fail(const char *cmd, const weft_error *err) {
    if (err && err->message[0])
        fprintf(stderr, "weft %s: %s: %s\n", cmd, err->source[0] ? err->source : "error",
                err->message);
    else
        fprintf(stderr, "weft %s: failed (%s)\n", cmd, weft_status_name(err ? err->code : -10));
    return 1;
}

int weft_cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

double weft_cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int weft_cli_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
