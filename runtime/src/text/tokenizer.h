/* Tokenizer from a Hugging Face tokenizer.json: byte-level BPE (GPT-2 / Llama-3 / Qwen pre-split
 * regexes through PCRE2), sentencepiece-style BPE with byte fallback (Llama 2 family), added and
 * special tokens, normalizers and decoders; plus streaming detokenization. */
#ifndef WEFT_TEXT_TOKENIZER_H
#define WEFT_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

typedef struct weft_tokenizer weft_tokenizer;

weft_status weft_tokenizer_load(const char *path, weft_tokenizer **out, weft_error *err);
/* From tokenizer.json text; name is used in errors. */
weft_status weft_tokenizer_parse(const char *json, size_t len, const char *name,
                                 weft_tokenizer **out, weft_error *err);
void weft_tokenizer_free(weft_tokenizer *tok);

/* add_special: apply the post-processor (BOS etc.) as HF `add_special_tokens=True` does.
 * parse_special: special/added tokens written in text become their ids (HF default); when 0
 * they are tokenized as plain text. *ids is malloc'ed. */
weft_status weft_tokenizer_encode(const weft_tokenizer *tok, const char *text, size_t len,
                                  int add_special, int parse_special, int32_t **ids, size_t *n,
                                  weft_error *err);
/* *text is malloc'ed and NUL-terminated. Invalid ids are an error naming the id. */
weft_status weft_tokenizer_decode(const weft_tokenizer *tok, const int32_t *ids, size_t n,
                                  int skip_special, char **text, size_t *len, weft_error *err);

uint32_t weft_tokenizer_vocab_size(const weft_tokenizer *tok); /* highest id + 1 */
const char *weft_tokenizer_token(const weft_tokenizer *tok, int32_t id); /* raw piece or NULL */
int32_t weft_tokenizer_find(const weft_tokenizer *tok, const char *piece); /* -1 if none */
int weft_tokenizer_is_special(const weft_tokenizer *tok, int32_t id);
int32_t weft_tokenizer_bos(const weft_tokenizer *tok); /* -1 if the post-processor adds none */

/* Streaming detokenizer: push ids one at a time; out receives only complete UTF-8 text. */
typedef struct weft_detok weft_detok;
weft_detok *weft_detok_new(const weft_tokenizer *tok, int skip_special);
/* Before the first push: the ids that precede the stream (the prompt's last few), whose text is
 * context only, so a continuation decodes as it would after them (a sentencepiece "▁upon" after
 * "Once" is " upon", not "upon"). */
weft_status weft_detok_prime(weft_detok *d, const int32_t *ids, size_t n, weft_error *err);
/* Appends id; *out (malloc'ed, may be "") is the newly complete text. */
weft_status weft_detok_push(weft_detok *d, int32_t id, char **out, size_t *len, weft_error *err);
/* Whatever is left (incomplete bytes are emitted as U+FFFD). */
weft_status weft_detok_flush(weft_detok *d, char **out, size_t *len, weft_error *err);
void weft_detok_free(weft_detok *d);

#endif
