/* Helpers shared by the CLI's subcommands: version banner, error printing, option values. */
#ifndef WEFT_TOOLS_CLI_H
#define WEFT_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "weft/plugin.h"

void weft_cli_print_version(FILE *f);
/* Prints "weft <cmd>: <source>: <message>" to stderr and returns the exit code for err. */
int weft_cli_fail(const char *cmd, const weft_error *err);
/* True when argv[i] is --help or -h. */
int weft_cli_wants_help(int argc, char **argv);

/* Option values. Each parses the whole of s (digits first: no sign, no space, nothing after the
 * number) and returns 0, or -1 with "weft <cmd>: <opt>: expected ..., got '<s>'" on stderr.
 * Integers are decimal; numbers are what strtod reads, finite (hi may be INFINITY). */
int weft_cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
int weft_cli_parse_u32(const char *cmd, const char *opt, const char *s, uint32_t *out);
int weft_cli_parse_u32_range(const char *cmd, const char *opt, const char *s, uint32_t lo,
                             uint32_t hi, uint32_t *out);
int weft_cli_parse_f32(const char *cmd, const char *opt, const char *s, float *out);
int weft_cli_parse_f64_range(const char *cmd, const char *opt, const char *s, double lo, double hi,
                             double *out);

/* Seconds on the monotonic clock. */
double weft_cli_now_s(void);
/* qsort comparator: ascending doubles. */
int weft_cli_cmp_double(const void *a, const void *b);

#endif
