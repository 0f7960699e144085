/* The weft CLI: dispatches `weft <command> ...` to one function per subcommand, each in its own
 * file under tools/ (cmd_<name>.c, or a folder for serve and eval). Commands are declared weak
 * so a build that lacks one says so instead of failing to link. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "util/error.h"

#define WEAK __attribute__((weak))
WEAK int weft_cmd_run(int argc, char **argv);
WEAK int weft_cmd_serve(int argc, char **argv);
WEAK int weft_cmd_pull(int argc, char **argv);
WEAK int weft_cmd_convert(int argc, char **argv);
WEAK int weft_cmd_synth(int argc, char **argv);
WEAK int weft_cmd_plugins(int argc, char **argv);
WEAK int weft_cmd_candidate(int argc, char **argv);
WEAK int weft_cmd_eval(int argc, char **argv);
WEAK int weft_cmd_plan(int argc, char **argv);
WEAK int weft_cmd_runs(int argc, char **argv);
WEAK int weft_cmd_bench(int argc, char **argv);
WEAK int weft_cmd_tokenize(int argc, char **argv);

static const struct {
    const char *name;
    int (**fn)(int, char **);
    const char *summary;
} commands[] = {
    {"run", NULL, "generate text from a prompt (default: CPU baseline on stories260K)"},
    {"serve", NULL, "OpenAI-compatible HTTP server for a frozen candidate (a lock)"},
    {"pull", NULL, "download a model from the hub or WEFT_MODEL_MIRROR"},
    {"convert", NULL, "convert a llama2.c checkpoint to the Hugging Face layout"},
    {"synth", NULL, "write random safetensors for a real model config"},
    {"plugins", NULL, "list and check plugin bundles"},
    {"candidate", NULL, "freeze, check, diff and print candidates"},
    {"eval", NULL, "probe the machine, compute limits, score candidates"},
    {"plan", NULL, "rank what to build next and check forecasts"},
    {"runs", NULL, "run records: candidates tried, forecasts, results"},
    {"bench", NULL, "decode and prefill benchmarks"},
    {"tokenize", NULL, "encode or decode text with a model's tokenizer"},
};

static int (*lookup(const char *name))(int, char **) {
    if (!strcmp(name, "run")) return weft_cmd_run;
    if (!strcmp(name, "serve")) return weft_cmd_serve;
    if (!strcmp(name, "pull")) return weft_cmd_pull;
    if (!strcmp(name, "convert")) return weft_cmd_convert;
    if (!strcmp(name, "synth")) return weft_cmd_synth;
    if (!strcmp(name, "plugins")) return weft_cmd_plugins;
    if (!strcmp(name, "candidate")) return weft_cmd_candidate;
    if (!strcmp(name, "eval")) return weft_cmd_eval;
    if (!strcmp(name, "plan")) return weft_cmd_plan;
    if (!strcmp(name, "runs")) return weft_cmd_runs;
    if (!strcmp(name, "bench")) return weft_cmd_bench;
    if (!strcmp(name, "tokenize")) return weft_cmd_tokenize;
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: weft <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        int (*fn)(int, char **) = lookup(commands[i].name);
        fprintf(f, "  %-10s %s%s\n", commands[i].name, commands[i].summary,
                fn ? "" : " (not in this build)");
    }
    fprintf(f, "\n`weft <command> --help` describes each command. `weft --version` prints the "
               "version and plugin ABI range.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        weft_cli_print_version(stdout);
        return 0;
    }
    weft_log_threshold(); /* reads WEFT_LOG now, so a value that is no level is named at once */
    int (*fn)(int, char **) = lookup(argv[1]);
    if (!fn) {
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
            if (!strcmp(commands[i].name, argv[1])) {
                fprintf(stderr, "weft: command '%s' is not in this build\n", argv[1]);
                return 2;
            }
        fprintf(stderr, "weft: unknown command '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    return fn(argc - 1, argv + 1);
}
