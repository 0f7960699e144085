/* config.json and generation_config.json of a Hugging Face model directory. Reads both the
 * transformers 5 form (rope_parameters) and the older top-level rope_theta / rope_scaling. */
#ifndef WEFT_FILES_CONFIG_H
#define WEFT_FILES_CONFIG_H

#include <stddef.h>

#include "weft/plugin.h"

/* Parses config.json text. path is used in error messages ("config.json: field
 * num_key_value_heads: expected a positive integer, got -1"). */
weft_status weft_config_parse(const char *json, size_t len, const char *path,
                              weft_model_config *cfg, weft_error *err);
/* Loads DIR/config.json; *raw (optional) receives the text (free()). */
weft_status weft_config_load(const char *dir, weft_model_config *cfg, char **raw,
                             weft_error *err);

typedef struct weft_generation_config {
    int has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    float temperature, top_p, min_p, repetition_penalty;
    int32_t top_k;
    int32_t bos_token_id; /* -1 none */
    int32_t eos_token_ids[8];
    uint32_t n_eos;
    uint32_t max_new_tokens; /* 0 = unset */
} weft_generation_config;

/* Loads DIR/generation_config.json; a missing file gives defaults (nothing set), not an error. */
weft_status weft_generation_config_load(const char *dir, weft_generation_config *gen,
                                        weft_error *err);

#endif
