/* Chat templates: the Jinja subset that real templates (Qwen3, Llama-3) use, rendered in C. */
#ifndef WEFT_TEXT_CHAT_H
#define WEFT_TEXT_CHAT_H

#include <stddef.h>

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

#endif
