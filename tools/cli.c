/* Helpers shared by the CLI's subcommands (see cli.h). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
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

/* The unsigned decimal integer that is all of s, or -1 (empty, signed, spaced, trailing text,
 * past 64 bits). */
static int read_u64(const char *s, uint64_t *out) {
    if (!s || !isdigit((unsigned char)s[0])) return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int weft_cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out) {
    if (read_u64(s, out) == 0) return 0;
    fprintf(stderr, "weft %s: %s: expected a non-negative integer, got '%s'\n", cmd, opt,
            s ? s : "");
    return -1;
}

int weft_cli_parse_u32(const char *cmd, const char *opt, const char *s, uint32_t *out) {
    uint64_t v;
    if (weft_cli_parse_u64(cmd, opt, s, &v)) return -1;
    if (v > UINT32_MAX) {
        fprintf(stderr, "weft %s: %s: expected at most %u, got '%s'\n", cmd, opt, UINT32_MAX, s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int weft_cli_parse_u32_range(const char *cmd, const char *opt, const char *s, uint32_t lo,
                             uint32_t hi, uint32_t *out) {
    uint64_t v;
    if (read_u64(s, &v) || v < lo || v > hi) {
        fprintf(stderr, "weft %s: %s: expected an integer from %u to %u, got '%s'\n", cmd, opt, lo,
                hi, s ? s : "");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* The finite number that is all of s, or -1. A leading digit or '.' keeps out signs, spaces and
 * the words strtod also reads (inf, nan). */
static int read_f64(const char *s, double *out) {
    if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.')) return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int weft_cli_parse_f32(const char *cmd, const char *opt, const char *s, float *out) {
    double v;
    if (read_f64(s, &v) || v > 3.4e38) {
        fprintf(stderr, "weft %s: %s: expected a non-negative number, got '%s'\n", cmd, opt,
                s ? s : "");
        return -1;
    }
    *out = (float)v;
    return 0;
}

int weft_cli_parse_f64_range(const char *cmd, const char *opt, const char *s, double lo, double hi,
                             double *out) {
    double v;
    if (read_f64(s, &v) || v < lo || v > hi) {
        if (isinf(hi))
            fprintf(stderr, "weft %s: %s: expected a number >= %g, got '%s'\n", cmd, opt, lo,
                    s ? s : "");
        else
            fprintf(stderr, "weft %s: %s: expected a number from %g to %g, got '%s'\n", cmd, opt,
                    lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
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
