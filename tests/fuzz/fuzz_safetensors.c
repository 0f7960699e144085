/* libFuzzer target: any byte string as a safetensors image. Parsing must either fail with a
 * message or yield tensors whose every byte lies inside the image; touching the first and last
 * byte of each lets ASan catch an offset the checks missed. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "files/safetensors.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    weft_safetensors *st = NULL;
    weft_error err = fuzz_error();
    if (weft_safetensors_parse(data, size, "fuzz", &st, &err) != WEFT_OK) {
        fuzz_refused(&err);
        return 0;
    }
    fuzz_touch_tensors(st);
    weft_safetensors_close(st);
    return 0;
}
