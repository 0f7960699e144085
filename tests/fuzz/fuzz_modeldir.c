/* libFuzzer target for the small JSON files of a model directory that weft reads besides
 * config.json: generation_config.json (sampling defaults, bos and eos ids) and
 * tokenizer_config.json (the chat template and its special tokens). The input holds up to three
 * files separated by the line "#--", written in that order as config.json,
 * generation_config.json and tokenizer_config.json of a private directory (an empty or missing
 * part is a file left out). Each loader must refuse with a message or give values within their
 * documented bounds; a template that loads is rendered over a two-message conversation under small
 * limits. Files live under $TMPDIR (or /tmp), removed at exit; WEFT_FUZZ_VERBOSE prints refusals.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/config.h"
#include "fuzz_common.h"
#include "text/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[512];
static const char *const names[] = {"config.json", "generation_config.json",
                                    "tokenizer_config.json"};

static void path_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static void remove_all(void) {
    char p[700];
    for (int i = 0; i < 3; i++) {
        path_of(p, sizeof(p), names[i]);
        unlink(p);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fuzz_private_dir(dir, sizeof(dir), "modeldir")) atexit(remove_all);
    const uint8_t *part[3];
    size_t len[3];
    fuzz_split(data, size, part, len, 3);
    for (int i = 0; i < 3; i++) {
        char p[700];
        path_of(p, sizeof(p), names[i]);
        unlink(p);
        if (len[i]) fuzz_write_file(p, part[i], len[i]); /* an empty part: the file left out */
    }

    weft_model_config cfg;
    char *raw = NULL;
    weft_error err = fuzz_error();
    if (weft_config_load(dir, &cfg, &raw, &err) == WEFT_OK) {
        if (!cfg.vocab_size || !cfg.n_heads || cfg.n_heads % cfg.n_kv_heads) __builtin_trap();
        free(raw);
    } else {
        fuzz_refused(&err);
    }

    weft_generation_config gen;
    err = fuzz_error();
    if (weft_generation_config_load(dir, &gen, &err) == WEFT_OK) {
        if (gen.n_eos > sizeof(gen.eos_token_ids) / sizeof(gen.eos_token_ids[0])) __builtin_trap();
        for (uint32_t i = 0; i < gen.n_eos; i++)
            if (gen.eos_token_ids[i] < 0) __builtin_trap();
        if (gen.bos_token_id < -1) __builtin_trap();
        if (gen.has_temperature && !(gen.temperature >= 0)) __builtin_trap();
        if (gen.has_top_p && !(gen.top_p > 0 && gen.top_p <= 1)) __builtin_trap();
        if (gen.has_min_p && !(gen.min_p >= 0 && gen.min_p <= 1)) __builtin_trap();
        if (gen.has_repetition_penalty && !(gen.repetition_penalty > 0)) __builtin_trap();
    } else {
        fuzz_refused(&err);
    }

    weft_chat_template *t = NULL;
    err = fuzz_error();
    if (weft_chat_template_load(dir, &t, &err) == WEFT_OK) {
        weft_chat_limits lim = {1u << 20, 16u << 20, 5000};
        weft_chat_template_set_limits(t, &lim);
        char *out = NULL;
        err = fuzz_error();
        if (weft_chat_render(t,
                             "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                             "{\"role\":\"user\",\"content\":\"Hi \\u00e9\"}]",
                             1, "{\"strftime_now\":\"2024-07-26T12:30:45\"}", &out,
                             &err) == WEFT_OK)
            free(out);
        else
            fuzz_refused(&err);
        weft_chat_template_free(t);
    } else if (err.code != WEFT_ERR_NOT_FOUND) {
        fuzz_refused(&err);
    }
    return 0;
}
