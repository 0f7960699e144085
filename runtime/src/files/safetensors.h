/* safetensors reading (mmap, single file or sharded with model.safetensors.index.json) and
 * writing. Every header length, dtype, shape and offset is validated before use: a file that
 * lies about its sizes gets an error naming the file and the tensor, never a crash. */
#ifndef WEFT_FILES_SAFETENSORS_H
#define WEFT_FILES_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

typedef struct weft_st_tensor {
    const char *name;
    uint32_t dtype; /* weft_dtype */
    uint32_t rank;
    int64_t shape[WEFT_MAX_DIMS];
    const uint8_t *data; /* inside the mapping */
    uint64_t bytes;
    uint32_t file; /* shard index */
} weft_st_tensor;

typedef struct weft_safetensors weft_safetensors;

/* A model directory: model.safetensors, or model.safetensors.index.json and its shards. */
weft_status weft_safetensors_open_dir(const char *dir, weft_safetensors **out, weft_error *err);
/* One file. */
weft_status weft_safetensors_open_file(const char *path, weft_safetensors **out, weft_error *err);
/* An in-memory image (not copied; must outlive the handle). `name` is used in errors. */
weft_status weft_safetensors_parse(const uint8_t *buf, size_t len, const char *name,
                                   weft_safetensors **out, weft_error *err);
size_t weft_safetensors_count(const weft_safetensors *st);
const weft_st_tensor *weft_safetensors_at(const weft_safetensors *st, size_t i);
const weft_st_tensor *weft_safetensors_find(const weft_safetensors *st, const char *name);
/* The files behind it (for hashing into locks). */
size_t weft_safetensors_file_count(const weft_safetensors *st);
const char *weft_safetensors_file_path(const weft_safetensors *st, size_t i);
void weft_safetensors_close(weft_safetensors *st);

/* Writer: collects tensors (data copied) and writes one file with sorted, aligned offsets. */
typedef struct weft_st_writer weft_st_writer;
weft_st_writer *weft_st_writer_new(void);
weft_status weft_st_writer_add(weft_st_writer *w, const char *name, uint32_t dtype, uint32_t rank,
                               const int64_t *shape, const void *data, uint64_t bytes,
                               weft_error *err);
/* metadata_json: a JSON object of string values or NULL. */
weft_status weft_st_writer_write(weft_st_writer *w, const char *path, const char *metadata_json,
                                 weft_error *err);
void weft_st_writer_free(weft_st_writer *w);

/* dtype helpers: byte size of one element (0 for block formats), names as in safetensors
 * ("F32", "BF16", ...), and back (WEFT_DTYPE_INVALID when unknown). */
size_t weft_dtype_size(uint32_t dtype);
const char *weft_dtype_name(uint32_t dtype);
uint32_t weft_dtype_from_name(const char *name);
/* Bytes of a tensor of dtype and shape, 0 on overflow or unknown dtype. */
uint64_t weft_dtype_bytes(uint32_t dtype, uint32_t rank, const int64_t *shape);

/* 16-bit float conversions. */
float weft_bf16_to_f32(uint16_t h);
uint16_t weft_f32_to_bf16(float f); /* round to nearest even */
float weft_f16_to_f32(uint16_t h);
uint16_t weft_f32_to_f16(float f);

/* ---- appended ---------------------------------------------------------------------------- */
/* A __metadata__ value (first file holding the key wins for shards), or NULL. */
const char *weft_safetensors_metadata(const weft_safetensors *st, const char *key);

/* Streaming writes: a deferred tensor has no data at add time; weft_st_writer_write_fill asks
 * `fill` for its bytes in file order, in chunks (offset = bytes of the tensor already written),
 * so a file larger than memory can be written. Tensors added with data are written from it. */
typedef weft_status (*weft_st_fill_fn)(void *ctx, const char *name, uint32_t dtype, uint32_t rank,
                                       const int64_t *shape, uint64_t offset, void *buf,
                                       uint64_t bytes, weft_error *err);
weft_status weft_st_writer_add_deferred(weft_st_writer *w, const char *name, uint32_t dtype,
                                        uint32_t rank, const int64_t *shape, weft_error *err);
weft_status weft_st_writer_write_fill(weft_st_writer *w, const char *path,
                                      const char *metadata_json, weft_st_fill_fn fill, void *ctx,
                                      weft_error *err);
/* Sum of the tensors' byte sizes (the data section). */
uint64_t weft_st_writer_data_bytes(const weft_st_writer *w);

#endif
