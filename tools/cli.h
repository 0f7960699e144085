/* Helpers shared by the CLI's subcommands: version banner and error printing. */
#ifndef WEFT_TOOLS_CLI_H
#define WEFT_TOOLS_CLI_H

#include <stdio.h>

#include "weft/plugin.h"

void weft_cli_print_version(FILE *f);
/* Prints "weft <cmd>: <source>: <message>" to stderr and returns the exit code for err. */
int weft_cli_fail(const char *cmd, const weft_error *err);
/* True when argv[i] is --help or -h. */
int weft_cli_wants_help(int argc, char **argv);

/* Seconds on the monotonic clock. */
double weft_cli_now_s(void);
/* qsort comparator: ascending doubles. */
int weft_cli_cmp_double(const void *a, const void *b);

#endif
