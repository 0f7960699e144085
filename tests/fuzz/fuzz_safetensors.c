/* libFuzzer target: any byte string as a safetensors image. Parsing must either fail with a
 * message or yield tensors whose every byte lies inside the image; touching the first and last
 * byte of each lets ASan catch an offset the checks missed. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "files/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    weft_safetensors *st = NULL;
    weft_error err;
    memset(&err, 0, sizeof(err));
    err.size = sizeof(err);
    if (weft_safetensors_parse(data, size, "fuzz", &st, &err) != WEFT_OK) {
        if (!err.message[0]) __builtin_trap(); /* every refusal says why */
        return 0;
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < weft_safetensors_count(st); i++) {
        const weft_st_tensor *t = weft_safetensors_at(st, i);
        if (t->bytes != weft_dtype_bytes(t->dtype, t->rank, t->shape)) __builtin_trap();
        if (t->bytes) sink ^= t->data[0] ^ t->data[t->bytes - 1];
        if (weft_safetensors_find(st, t->name) != t) __builtin_trap();
    }
    (void)sink;
    weft_safetensors_close(st);
    return 0;
}
