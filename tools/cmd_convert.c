/* `weft convert llama2c MODEL.bin TOKENIZER.bin OUTDIR`: turns a llama2.c checkpoint and its
 * tokenizer into a Hugging Face model directory that every other weft command (and
 * transformers) can load. The work is in files/llama2c.c; this is argument handling. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "files/llama2c.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft convert llama2c MODEL.bin TOKENIZER.bin OUTDIR\n\n"
               "Converts a llama2.c checkpoint (legacy version 0 export) and its tokenizer\n"
               "(tok*.bin) into a Hugging Face directory: config.json, generation_config.json,\n"
               "model.safetensors (fp32, q/k rows permuted to the half-split RoPE layout),\n"
               "tokenizer.json and tokenizer_config.json. OUTDIR is created if missing.\n");
}

int weft_cmd_convert(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "llama2c")) {
        fprintf(stderr, "weft convert: unknown source format '%s' (supported: llama2c)\n", argv[1]);
        return 2;
    }
    if (argc != 5) {
        usage(stderr);
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    if (weft_llama2c_convert(argv[2], argv[3], argv[4], &err) != WEFT_OK)
        return weft_cli_fail("convert", &err);
    printf("wrote %s/{config.json, generation_config.json, model.safetensors, tokenizer.json, "
           "tokenizer_config.json}\n",
           argv[4]);
    return 0;
}
