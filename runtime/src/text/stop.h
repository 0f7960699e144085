/* Stop strings that match across token boundaries. Text is fed as it is detokenized; the
 * stopper holds back the shortest suffix that could still begin a stop string and releases
 * it once it cannot. */
#ifndef WEFT_TEXT_STOP_H
#define WEFT_TEXT_STOP_H

#include <stddef.h>

#include "weft/plugin.h"

typedef struct weft_stopper weft_stopper;

weft_stopper *weft_stopper_new(const char *const *stops, size_t n);
/* Appends text. *emit (malloc'ed, may be empty) is safe to show now. *stopped becomes 1 when a
 * stop string matched: emit then ends just before it and later feeds are ignored. */
weft_status weft_stopper_feed(weft_stopper *s, const char *text, size_t len, char **emit,
                              size_t *emit_len, int *stopped, weft_error *err);
/* End of generation: releases what was held back. */
weft_status weft_stopper_flush(weft_stopper *s, char **emit, size_t *emit_len, weft_error *err);
void weft_stopper_free(weft_stopper *s);

#endif
