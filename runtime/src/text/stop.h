/* Stop strings that match across token boundaries. Text is fed as it is detokenized; the
 * stopper holds back the longest suffix that could still begin a stop string (plus a trailing
 * incomplete UTF-8 character) and releases it once it cannot. The match that completes first
 * wins; at the same end the longer one; see docs/SAMPLING.md. Empty stop strings are ignored.
 * weft_stopper_new returns NULL on NULL stops with n > 0 or out of memory. */
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
/* The index (in the list given to weft_stopper_new) of the stop string that matched, or -1. */
int weft_stopper_which(const weft_stopper *s);

#endif
