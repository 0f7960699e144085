/* libFuzzer target for candidate locks (plugin/lock.c), the JSON `weft serve` trusts to pin a
 * plugin set. Any byte string is parsed as a lock: it must be refused with a message or parse.
 * A lock that fails only because its "id" does not match its content (almost every mutated
 * lock) is parsed a second time with the id the message names, so that the fields after the
 * id check are reached too. Every lock that parses must survive a round trip: written as
 * JSON (both the people's form and the canonical one), parsed again, with the same id and no
 * difference reported by weft_lock_diff. With WEFT_FUZZ_VERBOSE set, refusals are printed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_common.h"
#include "plugin/lock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void count(void *ctx, const char *line) {
    fprintf(stderr, "diff: %s\n", line);
    ++*(uint32_t *)ctx;
}

static void round_trip(const weft_lock *l) {
    char *text = NULL;
    weft_error err = fuzz_error();
    if (weft_lock_to_json(l, 0, &text, &err) != WEFT_OK) __builtin_trap();
    weft_lock *again = NULL;
    err = fuzz_error();
    if (weft_lock_parse(text, strlen(text), "round trip", &again, &err) != WEFT_OK) {
        fprintf(stderr, "a parsed lock written back does not parse: %s\n", err.message);
        __builtin_trap();
    }
    free(text);
    uint32_t lines = 0, n = 0;
    err = fuzz_error();
    if (weft_lock_diff(l, again, count, &lines, &n, &err) != WEFT_OK || n || lines) {
        fprintf(stderr, "a lock and its round trip differ\n");
        __builtin_trap();
    }
    if (strcmp(l->id, again->id)) {
        fprintf(stderr, "a lock's round trip has another id: %s, %s\n", l->id, again->id);
        __builtin_trap();
    }
    char *c1 = NULL, *c2 = NULL;
    if (weft_lock_to_json(l, 1, &c1, &err) != WEFT_OK ||
        weft_lock_to_json(again, 1, &c2, &err) != WEFT_OK || strcmp(c1, c2))
        __builtin_trap();
    free(c1);
    free(c2);
    weft_lock_free(again);
}

/* The id the refusal names as the content's, or 0 when the refusal is about something else
 * (other messages may quote the input, which may hold the same words). */
static int expected_id(const weft_error *err, char id[WEFT_XXH128_HEX_LEN + 1]) {
    static const char head[] = "fuzz.lock: id differs from the lock's content: expected ";
    if (err->code != WEFT_ERR_MISMATCH || strncmp(err->message, head, sizeof(head) - 1)) return 0;
    const char *p = err->message + sizeof(head) - 1;
    size_t n = strspn(p, "0123456789abcdef");
    if (n != WEFT_XXH128_HEX_LEN) __builtin_trap(); /* the message names a whole id */
    memcpy(id, p, n);
    id[n] = '\0';
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    weft_lock *l = NULL;
    weft_error err = fuzz_error();
    if (weft_lock_parse((const char *)data, size, "fuzz.lock", &l, &err) == WEFT_OK) {
        round_trip(l);
        weft_lock_free(l);
        return 0;
    }
    fuzz_refused(&err);
    char id[WEFT_XXH128_HEX_LEN + 1];
    if (!expected_id(&err, id)) return 0;
    /* the same document with the id its content hashes to */
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!root || !json_is_object(root)) __builtin_trap(); /* it parsed up to the id check */
    json_object_set_new(root, "id", json_string(id));
    char *text = json_dumps(root, 0);
    json_decref(root);
    if (!text) return 0;
    err = fuzz_error();
    if (weft_lock_parse(text, strlen(text), "fuzz.lock", &l, &err) != WEFT_OK) {
        fprintf(stderr, "refused with the id its content hashes to: %s\n", err.message);
        __builtin_trap();
    }
    free(text);
    round_trip(l);
    weft_lock_free(l);
    return 0;
}
