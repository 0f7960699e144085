/* libFuzzer target for the readers of `weft eval run` results: `weft eval status` (terminal
 * tables) and `weft eval report` (one HTML page with inline SVG), which take result files that
 * runs, agents and people keep, compare and edit. The input is up to three results split at lines
 * "#--"; each is written to a file and both commands run on them, the report to a file. Either
 * command may refuse (exit 2, a message), but must not crash, and a report it writes must be a
 * whole page ("</html>" at its end) in which every '<' opens a tag this report writes: text from
 * a result (names, paths, reasons) is escaped, so it cannot open a tag of its own. Build as the
 * other targets (tests/fuzz/fuzz_tokenizer.c says how). */
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_common.h"

int weft_eval_status_main(int argc, char **argv);
int weft_eval_report_main(int argc, char **argv);

static char dir[4096];
static int quiet_fd = -1, saved_fd = -1; /* /dev/null, and stderr as it was */

/* The commands name every refusal on stderr, twice an input: hushed unless WEFT_FUZZ_VERBOSE,
 * with the sanitizers' reports sent to the real stderr all the time. */
static void hush(int on) {
    if (quiet_fd < 0) return;
    fflush(stderr);
    if (dup2(on ? quiet_fd : saved_fd, 2) < 0) __builtin_trap();
}

static void clean(void) {
    fuzz_empty_dir(dir);
    rmdir(dir);
}

/* The tags the report writes; anything else after a '<' came from a result unescaped. */
static int known_tag(const char *p) {
    static const char *const tags[] = {
        "!doctype", "html",    "head",  "meta",     "title",   "style",  "body",      "h1",   "h2",
        "h3",       "p",       "table", "thead",    "tbody",   "tr",     "th",        "td",   "svg",
        "rect",     "text",    "line",  "polyline", "circle",  "g",      "path",      "span", "div",
        "code",     "section", "ul",    "li",       "b",       "small",  "br",        "a",    "pre",
        "details",  "summary", "em",    "strong",   "caption", "figure", "figcaption"};
    if (*p == '/') p++;
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        size_t n = strlen(tags[i]);
        if (!strncasecmp(p, tags[i], n) &&
            (p[n] == ' ' || p[n] == '>' || p[n] == '/' || p[n] == '\n'))
            return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fuzz_private_dir(dir, sizeof(dir), "evalreport")) {
        atexit(clean);
        if (!freopen("/dev/null", "w", stdout)) __builtin_trap();
        if (!getenv("WEFT_FUZZ_VERBOSE")) {
            saved_fd = dup(2);
            quiet_fd = open("/dev/null", O_WRONLY);
            if (saved_fd < 0 || quiet_fd < 0) __builtin_trap();
            __sanitizer_set_report_fd((void *)(intptr_t)saved_fd);
        }
    }
    fuzz_empty_dir(dir);
    const uint8_t *part[3];
    size_t len[3];
    fuzz_split(data, size, part, len, 3);
    char paths[3][4200], out[4200];
    char *argv[8];
    int n = 0;
    argv[n++] = "report";
    for (int i = 0; i < 3 && part[i]; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/r%d.json", dir, i);
        fuzz_write_file(paths[i], part[i], len[i]);
        argv[n++] = paths[i];
    }
    snprintf(out, sizeof(out), "%s/report.html", dir);
    hush(1);
    int rs = weft_eval_status_main(n, argv);
    if (rs < 0 || rs > 2) __builtin_trap();
    argv[n++] = "-o";
    argv[n++] = out;
    int rr = weft_eval_report_main(n, argv);
    hush(0);
    if (rr == 0) {
        FILE *f = fopen(out, "rb");
        if (!f) __builtin_trap();
        static char page[64 << 20];
        size_t got = fread(page, 1, sizeof(page) - 1, f);
        fclose(f);
        page[got] = '\0';
        while (got && (page[got - 1] == '\n' || page[got - 1] == ' '))
            page[--got] = '\0';
        if (got < 7 || strcmp(page + got - 7, "</html>")) __builtin_trap();
        for (char *p = strchr(page, '<'); p; p = strchr(p + 1, '<'))
            if (!known_tag(p + 1)) {
                fprintf(stderr, "unexpected tag at: %.60s\n", p);
                __builtin_trap();
            }
    } else if (rr != 2 && rr != 1) {
        __builtin_trap();
    }
    return 0;
}
