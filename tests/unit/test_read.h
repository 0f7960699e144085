/* For unit tests that read a data file whole (test_chat, test_lock, test_pull,
 * test_tokenizer_vectors): the runtime's own reader, so a test file gets the same checks a
 * model file does. */
#ifndef WEFT_TEST_READ_H
#define WEFT_TEST_READ_H

#include <stddef.h>

#include "util/file.h"

/* path's bytes, NUL-terminated after them, and their count into *len (len may be NULL); NULL
 * when the file cannot be read (missing, not a regular file, unreadable). */
static inline char *test_read_file(const char *path, size_t *len) {
    char *text;
    size_t n = 0;
    weft_error err = {.size = sizeof(err)};
    if (weft_file_read(path, 0, "a test file", NULL, &text, &n, &err)) return NULL;
    if (len) *len = n;
    return text;
}

#endif
