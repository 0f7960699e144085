/* Whole-file reads for the host's parsers (manifests, config.json, tokenizer files, chat
 * templates): one place that opens, checks and bounds a file before any parser sees it. */
#ifndef WEFT_UTIL_FILE_H
#define WEFT_UTIL_FILE_H

#include <stddef.h>

#include <jansson.h>

#include "weft/plugin.h"

/* Reads the regular file at path whole into *text (malloc'd, NUL-terminated after *len bytes;
 * the caller frees it). max_bytes bounds the file (0: no bound); `what` names what the file
 * should be in the too-large message ("a manifest"). Errors carry `source` and a message
 * starting with the path (source NULL: the path as the source, the message without it):
 * WEFT_ERR_NOT_FOUND for a missing file, WEFT_ERR_IO when it cannot be opened or read, is not a
 * regular file or changed size while read, WEFT_ERR_FORMAT when it is larger than max_bytes,
 * WEFT_ERR_NOMEM. On error *text is NULL and *len 0. */
/* A JSON document, read by weft_file_read (same bound, errors and source) and parsed by jansson
 * with flags; a parse error is WEFT_ERR_FORMAT "path:line:column: text". On success *out holds
 * the caller's reference. */
weft_status weft_file_read_json(const char *path, size_t max_bytes, size_t flags,
                                const char *source, json_t **out, weft_error *err);

weft_status weft_file_read(const char *path, size_t max_bytes, const char *what, const char *source,
                           char **text, size_t *len, weft_error *err);

/* For a file that may be absent: st is a read's status with its error in fe (a scratch record,
 * so that err stays clear when the file is merely missing). WEFT_ERR_NOT_FOUND becomes WEFT_OK
 * (the read left *text or *out NULL); any other error is copied into err and returned. */
weft_status weft_file_absent_ok(weft_status st, const weft_error *fe, weft_error *err);

/* What a JSON value is, for messages about a field of the wrong type: "an object", "an array",
 * "a string", "an integer", "a number", "a boolean", "null", or "nothing" for NULL (an absent
 * field). */
const char *weft_json_kind(const json_t *v);

#endif
