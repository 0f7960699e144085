/* Synthetic checkpoints: random weights with the exact Hugging Face tensor names and shapes of a
 * real config.json, so engines for large models can be built, benchmarked and checked for
 * memory use without downloading the weights. Values are reproducible from a seed alone. */
#ifndef WEFT_FILES_SYNTH_H
#define WEFT_FILES_SYNTH_H

#include <stdint.h>

#include "weft/plugin.h"

typedef struct weft_synth_options {
    uint64_t seed;
    uint32_t dtype;       /* F32, F16 or BF16; 0 = the config's dtype */
    uint32_t layers;      /* 0 = the config's num_hidden_layers */
    uint64_t shard_bytes; /* 0 = 4 GB; a checkpoint larger than this is sharded with an index */
    uint32_t threads;     /* 0 = online CPUs (at most 16) */
} weft_synth_options;

/* One tensor of the checkpoint a config implies. */
typedef struct weft_synth_tensor {
    char name[96];
    uint32_t rank;
    int64_t shape[2];
    uint32_t ones; /* RMSNorm weights start at 1 */
} weft_synth_tensor;

/* The tensor list (HF names, in model order) for cfg, with n_layers layers; raw_json is the
 * config text (for fields weft_model_config lacks: Qwen3-MoE's mlp_only_layers and
 * decoder_sparse_step). *out is malloc'ed. */
weft_status weft_synth_tensors(const weft_model_config *cfg, const char *raw_json,
                               weft_synth_tensor **out, size_t *n, weft_error *err);

/* Value i of the tensor `name` for a seed: N(0, 0.02) from a counter-based generator, so any
 * chunk of any tensor can be produced independently. */
float weft_synth_value(uint64_t seed, const char *name, uint64_t i);

/* Writes OUTDIR/config.json (the input, with num_hidden_layers and dtype updated when the
 * options change them), generation_config.json, and model.safetensors or shards plus
 * model.safetensors.index.json. */
weft_status weft_synth_write(const char *config_path, const char *outdir,
                             const weft_synth_options *opts, weft_error *err);

#endif
