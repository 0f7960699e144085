/* Chat templates: the Jinja subset that real templates (Qwen3, Llama-3) use, rendered in C. */
#ifndef WEFT_TEXT_CHAT_H
#define WEFT_TEXT_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

typedef struct weft_chat_template weft_chat_template;

/* From template source text; name is used in errors (line and column are reported). */
weft_status weft_chat_template_parse(const char *source, size_t len, const char *name,
                                     weft_chat_template **out, weft_error *err);
/* From DIR/tokenizer_config.json (chat_template, bos_token, eos_token); WEFT_ERR_NOT_FOUND when
 * the model has no template. */
weft_status weft_chat_template_load(const char *dir, weft_chat_template **out, weft_error *err);
void weft_chat_template_free(weft_chat_template *t);

/* Renders with `messages` (a JSON array of {"role","content",...}), add_generation_prompt, and
 * extra variables (a JSON object, may be NULL: bos_token, eos_token, enable_thinking, tools...).
 * Variables from tokenizer_config.json (bos_token, eos_token) are set when loaded from a dir.
 * *out is malloc'ed. */
weft_status weft_chat_render(const weft_chat_template *t, const char *messages_json,
                             int add_generation_prompt, const char *extra_json, char **out,
                             weft_error *err);

/* Bounds for rendering untrusted templates. A zero field keeps its default (16 MiB of output,
 * 256 MiB of working memory, one million loop iterations and calls). */
typedef struct weft_chat_limits {
    size_t max_output_bytes;
    size_t max_memory_bytes;
    uint64_t max_iterations;
} weft_chat_limits;
void weft_chat_template_set_limits(weft_chat_template *t, const weft_chat_limits *limits);

/* extra_json keys with a meaning beyond being a template variable:
 *   "strftime_now": "YYYY-MM-DD[THH:MM[:SS]]" fixes the clock that the strftime_now() global
 *                   reads (as a naive datetime), for reproducible renders; without it the
 *                   local time is used. It does not become a variable.
 * `tools` and `documents` are none unless extra_json sets them, as in transformers. */

#endif
