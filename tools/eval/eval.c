/* `weft eval`: dispatches to probe, limits, and (with the eval suite) run, status, report. */
#include <stdio.h>
#include <string.h>

#include "eval/eval.h"

__attribute__((weak)) int weft_eval_parity_main(int argc, char **argv);
__attribute__((weak)) int weft_eval_run_main(int argc, char **argv);
__attribute__((weak)) int weft_eval_status_main(int argc, char **argv);
__attribute__((weak)) int weft_eval_report_main(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f, "usage: weft eval <probe|limits|parity|run|status|report> [options]\n"
               "  probe    measure the device once (copy bandwidth, GEMM rates, round trip)\n"
               "  limits   the decode, prefill and time-to-first-token floors of a model\n"
               "  parity   a candidate's logits and greedy output against a reference file\n"
               "  run      the fixed suite against a candidate through its API\n"
               "  status   a result as a table\n"
               "  report   results as a self-contained HTML page\n"
               "`weft eval <sub> --help` describes each.\n");
}

int weft_cmd_eval(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    int (*fn)(int, char **) = NULL;
    if (!strcmp(argv[1], "probe")) fn = weft_eval_probe_main;
    else if (!strcmp(argv[1], "limits")) fn = weft_eval_limits_main;
    else if (!strcmp(argv[1], "parity")) fn = weft_eval_parity_main;
    else if (!strcmp(argv[1], "run")) fn = weft_eval_run_main;
    else if (!strcmp(argv[1], "status")) fn = weft_eval_status_main;
    else if (!strcmp(argv[1], "report")) fn = weft_eval_report_main;
    else {
        fprintf(stderr, "weft eval: unknown subcommand '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    if (!fn) {
        fprintf(stderr, "weft eval %s: not in this build\n", argv[1]);
        return 2;
    }
    return fn(argc - 1, argv + 1);
}
