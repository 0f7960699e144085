/* llama2.c checkpoints (legacy version 0 export: a 7 x int32 header then fp32 weights) and
 * tokenizer files (tok*.bin), and their conversion to the Hugging Face layout (config.json,
 * model.safetensors with q/k rows permuted to the half-split RoPE layout, tokenizer.json,
 * tokenizer_config.json, generation_config.json). docs/MODEL_FILES.md explains the formats and
 * the conversion. */
#ifndef WEFT_FILES_LLAMA2C_H
#define WEFT_FILES_LLAMA2C_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

typedef struct weft_llama2c_model {
    /* header, as in the file except vocab_size made positive */
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    int32_t shared_classifier; /* header vocab_size > 0: the classifier is the embedding */
    int32_t head_size;         /* dim / n_heads */
    /* fp32 views into the mapping, llama2.c's layout; kv_dim = n_kv_heads * head_size */
    const float *token_embedding; /* (vocab, dim) */
    const float *rms_att;         /* (layer, dim) */
    const float *wq;              /* (layer, dim, dim) rows interleaved-pair RoPE layout */
    const float *wk;              /* (layer, kv_dim, dim) same */
    const float *wv;              /* (layer, kv_dim, dim) */
    const float *wo;              /* (layer, dim, dim) */
    const float *rms_ffn;         /* (layer, dim) */
    const float *w1;              /* (layer, hidden, dim) gate */
    const float *w2;              /* (layer, dim, hidden) down */
    const float *w3;              /* (layer, hidden, dim) up */
    const float *rms_final;       /* (dim) */
    const float *wcls;            /* (vocab, dim); == token_embedding when shared */
    void *map;
    size_t map_len;
} weft_llama2c_model;

/* Maps and validates a checkpoint: header values, their ratios, and the file length against
 * the sizes they imply. */
weft_status weft_llama2c_open(const char *path, weft_llama2c_model *m, weft_error *err);
void weft_llama2c_close(weft_llama2c_model *m);

typedef struct weft_llama2c_vocab {
    uint32_t n;
    uint32_t max_token_length;
    char **pieces; /* NUL-terminated (pieces may not contain NUL: refused) */
    uint32_t *lens;
    float *scores;
} weft_llama2c_vocab;

/* Reads a tok*.bin holding exactly n tokens. */
weft_status weft_llama2c_vocab_load(const char *path, uint32_t n, weft_llama2c_vocab *v,
                                    weft_error *err);
void weft_llama2c_vocab_free(weft_llama2c_vocab *v);

/* Reorders the rows of a q or k weight (n_heads * head_size rows of cols floats) from
 * llama2.c's interleaved pairs to Hugging Face's half-split layout: within each head, HF row
 * i * (head_size/2) + j is llama2.c row 2j + i (the even rows, then the odd rows). */
void weft_llama2c_permute_rows(const float *src, float *dst, uint32_t n_heads, uint32_t head_size,
                               uint32_t cols);
/* The llama2.c row that becomes HF row r of a q/k weight. */
uint32_t weft_llama2c_permuted_source_row(uint32_t r, uint32_t head_size);

/* Writes OUTDIR/{config.json, generation_config.json, model.safetensors, tokenizer.json,
 * tokenizer_config.json}; OUTDIR is created when missing. */
weft_status weft_llama2c_convert(const char *model_path, const char *tokenizer_path,
                                 const char *outdir, weft_error *err);

#endif
