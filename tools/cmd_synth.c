/* `weft synth CONFIG OUTDIR [--seed N] [--dtype bf16|f16|f32] [--layers N]`: writes a random
 * checkpoint with the real tensor names and shapes of a config.json (models/configs/ holds the
 * published ones), for building and benchmarking engines without the real weights. The work is
 * in files/synth.c; this is argument handling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "files/safetensors.h"
#include "files/synth.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft synth CONFIG OUTDIR [--seed N] [--dtype bf16|f16|f32] [--layers N]\n"
               "                  [--shard-gb G]\n\n"
               "Writes OUTDIR/config.json, generation_config.json and random weights with the\n"
               "Hugging Face names and shapes CONFIG implies: N(0, 0.02), RMSNorm weights 1,\n"
               "reproducible from the seed (default 0). --dtype defaults to the config's dtype;\n"
               "--layers keeps only the first N layers (config.json is updated to match).\n"
               "Checkpoints above --shard-gb (default 4) are sharded with an index.\n");
}

int weft_cmd_synth(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    weft_synth_options o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--seed") || !strcmp(a, "--layers") || !strcmp(a, "--dtype") ||
            !strcmp(a, "--shard-gb")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft synth: %s needs a value\n", a);
                return 2;
            }
            const char *val = argv[++i];
            if (!strcmp(a, "--dtype")) {
                o.dtype = !strcmp(val, "bf16")  ? WEFT_DTYPE_BF16
                          : !strcmp(val, "f16") ? WEFT_DTYPE_F16
                          : !strcmp(val, "f32") ? WEFT_DTYPE_F32
                                                : 0;
                if (!o.dtype) {
                    fprintf(stderr, "weft synth: --dtype: expected bf16, f16 or f32, got '%s'\n",
                            val);
                    return 2;
                }
            } else if (!strcmp(a, "--seed")) {
                if (weft_cli_parse_u64("synth", a, val, &o.seed)) return 2;
            } else if (!strcmp(a, "--layers")) {
                if (weft_cli_parse_u32_range("synth", a, val, 1, 1u << 20, &o.layers)) return 2;
            } else {
                uint32_t gb;
                if (weft_cli_parse_u32_range("synth", a, val, 1, 1u << 20, &gb)) return 2;
                o.shard_bytes = gb * 1000ull * 1000 * 1000;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "weft synth: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 2) {
            pos[n_pos++] = a;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (n_pos != 2) {
        usage(stderr);
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    if (weft_synth_write(pos[0], pos[1], &o, &err) != WEFT_OK) return weft_cli_fail("synth", &err);
    printf("wrote %s\n", pos[1]);
    return 0;
}
