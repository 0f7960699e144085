/* `weft candidate graph LOCK`: the final step graph of a candidate (model graph after every
 * pass), one node per line with the plugin whose op implementation runs it, then the graph
 * hash that is part of the candidate's identity. `weft candidate` dispatches here. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "engine/engine.h"
#include "engine_cli.h"
#include "util/error.h"

int weft_cmd_candidate_graph(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f, "usage: weft candidate graph [--tokens N] [--model DIR] LOCK|MANIFEST\n"
               "\n"
               "Prints the final step graph of a candidate for the bucket of N tokens (default 1,\n"
               "the decode graph): one node per line with the plugin implementing it, then the\n"
               "graph hash.\n");
}

int weft_cmd_candidate_graph(int argc, char **argv) {
    const char *path = NULL, *model = NULL;
    uint32_t tokens = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokens")) {
            if (weft_cli_parse_u32("candidate graph", a, val, &tokens)) return 2;
            i++;
        } else if (!strcmp(a, "--model")) {
            if (!val) {
                fprintf(stderr, "weft candidate graph: --model needs a value\n");
                return 2;
            }
            model = val;
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "weft candidate graph: unknown option %s\n", a);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "weft candidate graph: one LOCK expected\n");
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_engine_options o;
    weft_engine_options_default(&o);
    char buf[1100];
    if (weft_cli_engine_target(path, model, &o, buf, sizeof(buf), &err) != WEFT_OK)
        return weft_cli_fail("candidate graph", &err);
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK) return weft_cli_fail("candidate graph", &err);
    int rc = 0;
    if (weft_engine_print_graph(e, tokens, stdout, NULL, &err) != WEFT_OK)
        rc = weft_cli_fail("candidate graph", &err);
    weft_engine_close(e);
    return rc;
}
