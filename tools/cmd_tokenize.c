/* `weft tokenize`: encodes text to ids (or decodes ids to text) with a model's tokenizer, for
 * checking a tokenizer by hand and for scripts. Ids are printed space-separated on one line;
 * --pieces prints one "id<TAB>piece" line per token instead. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "text/tokenizer.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft tokenize (--model DIR | --tokenizer FILE) [--decode] [--no-special]\n"
            "                     [--pieces] TEXT | IDS\n"
            "\n"
            "  --model DIR       a model directory with tokenizer.json\n"
            "  --tokenizer FILE  a tokenizer.json, or a vocab GGUF (tokenizer.ggml.model llama)\n"
            "  --decode          the arguments are ids (space or comma separated); print text\n"
            "  --no-special      encode: add no BOS/EOS and treat special tokens written in the\n"
            "                    text as plain text; decode: leave special tokens out\n"
            "  --pieces          encode: print one \"id<TAB>piece\" line per token (a piece's\n"
            "                    backslash, tab, newline and other control bytes escaped as\n"
            "                    \\\\, \\t, \\n, \\xNN)\n"
            "TEXT is the remaining arguments joined by spaces; \"-\" reads it from stdin.\n");
}

static char *read_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
            cap *= 2;
        }
    }
    *len = n;
    return buf;
}

/* A piece on one line: backslash, tab, newline, carriage return and the other control bytes
 * escaped, so that every token is exactly one "id<TAB>piece" line. */
static void print_piece(const char *p) {
    for (; p && *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '\\')
            fputs("\\\\", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02X", c);
        else
            fputc(c, stdout);
    }
}

static int parse_ids(int argc, char **argv, int first, int32_t **ids, size_t *n) {
    size_t cap = 64;
    *ids = malloc(cap * sizeof(**ids));
    *n = 0;
    if (!*ids) return -1;
    for (int i = first; i < argc; i++) {
        const char *p = argv[i];
        while (*p) {
            while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '[' || *p == ']')
                p++;
            if (!*p) break;
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v > INT32_MAX) {
                fprintf(stderr, "weft tokenize: expected a token id, got \"%s\"\n", p);
                return -1;
            }
            if (*n == cap) {
                int32_t *g = realloc(*ids, cap * 2 * sizeof(*g));
                if (!g) return -1;
                *ids = g;
                cap *= 2;
            }
            (*ids)[(*n)++] = (int32_t)v;
            p = end;
        }
    }
    return 0;
}

int weft_cmd_tokenize(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *path = NULL;
    int decode = 0, no_special = 0, pieces = 0, i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--model") || !strcmp(argv[i], "--tokenizer")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft tokenize: %s needs a value\n", argv[i]);
                return 2;
            }
            if (path) {
                fprintf(stderr, "weft tokenize: give one --model DIR or --tokenizer FILE, not "
                                "two\n");
                return 2;
            }
            path = argv[++i];
        } else if (!strcmp(argv[i], "--decode")) {
            decode = 1;
        } else if (!strcmp(argv[i], "--no-special")) {
            no_special = 1;
        } else if (!strcmp(argv[i], "--pieces")) {
            pieces = 1;
        } else if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "weft tokenize: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            break;
        }
    }
    if (!path) {
        fprintf(stderr, "weft tokenize: --model DIR or --tokenizer FILE is required\n");
        usage(stderr);
        return 2;
    }
    if (i >= argc) {
        fprintf(stderr, "weft tokenize: no %s given%s\n", decode ? "IDS" : "TEXT",
                decode ? "" : " (\"-\" reads the text from stdin)");
        return 2;
    }
    if (decode && pieces) {
        fprintf(stderr, "weft tokenize: --pieces lists an encoding's tokens; it does not apply to "
                        "--decode\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_tokenizer *tok;
    if (weft_tokenizer_load(path, &tok, &err)) return weft_cli_fail("tokenize", &err);
    int rc = 0;
    if (decode) {
        int32_t *ids;
        size_t n;
        if (parse_ids(argc, argv, i, &ids, &n)) {
            free(ids);
            weft_tokenizer_free(tok);
            return 2;
        }
        char *text;
        size_t len;
        if (weft_tokenizer_decode(tok, ids, n, no_special, &text, &len, &err)) {
            rc = weft_cli_fail("tokenize", &err);
        } else {
            fwrite(text, 1, len, stdout);
            fputc('\n', stdout);
            free(text);
        }
        free(ids);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (i + 1 == argc && !strcmp(argv[i], "-")) {
            text = read_stdin(&len);
        } else {
            size_t total = 1;
            for (int j = i; j < argc; j++)
                total += strlen(argv[j]) + 1;
            text = calloc(total, 1);
            for (int j = i; text && j < argc; j++) {
                if (j > i) text[len++] = ' ';
                memcpy(text + len, argv[j], strlen(argv[j]));
                len += strlen(argv[j]);
            }
        }
        int32_t *ids = NULL;
        size_t n = 0;
        if (!text) {
            fprintf(stderr, "weft tokenize: out of memory\n");
            rc = 1;
        } else if (weft_tokenizer_encode(tok, text, len, !no_special, !no_special, &ids, &n,
                                         &err)) {
            rc = weft_cli_fail("tokenize", &err);
        } else if (pieces) {
            for (size_t k = 0; k < n; k++) {
                printf("%d\t", ids[k]);
                print_piece(weft_tokenizer_token(tok, ids[k]));
                fputc('\n', stdout);
            }
        } else {
            for (size_t k = 0; k < n; k++)
                printf(k ? " %d" : "%d", ids[k]);
            printf("\n");
        }
        free(ids);
        free(text);
    }
    weft_tokenizer_free(tok);
    return rc;
}
