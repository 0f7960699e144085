/* libFuzzer target: any byte string as config.json. Parsing must fail with a message or give a
 * config whose sizes are consistent (heads divisible by kv heads, positive sizes). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "files/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    weft_model_config cfg;
    weft_error err;
    memset(&err, 0, sizeof(err));
    err.size = sizeof(err);
    if (weft_config_parse((const char *)data, size, "config.json", &cfg, &err) != WEFT_OK) {
        if (!err.message[0]) __builtin_trap();
        return 0;
    }
    if (!cfg.vocab_size || !cfg.hidden_size || !cfg.n_layers || !cfg.n_heads || !cfg.n_kv_heads ||
        !cfg.head_dim || cfg.n_heads % cfg.n_kv_heads || cfg.n_eos > 8 || !(cfg.rms_eps > 0))
        __builtin_trap();
    return 0;
}
