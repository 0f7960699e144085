/* A fake `cpu` backend (version 0.0.1) for lock and candidate tests, so those tests resolve a
 * whole candidate from plugins/fakes alone, without the real cpu backend. Its memory hooks are
 * real host-memory implementations (malloc, memcpy); it registers no kernels. Tests that build
 * a registry from the fakes directory only (WEFT_REGISTRY_ONLY_EXTRA) get it; on a normal
 * search path the real cpu backend (a higher version) wins. */
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "cpu"

static weft_status be_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static weft_status be_info(void *st, weft_device_info *out, weft_error *err) {
    if (!out) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "device_info: out is NULL");
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    snprintf(out->name, sizeof(out->name), "fake host backend");
    snprintf(out->arch, sizeof(out->arch), "host");
    out->compute_units = 1;
    return WEFT_OK;
}

static weft_status be_register(void *st, const weft_ops_service *ops, weft_error *err) {
    return WEFT_OK; /* no kernels: the fake backend only moves bytes */
}

static weft_status be_alloc(void *st, uint64_t bytes, uint32_t memory, weft_buffer *out,
                            weft_error *err) {
    if (!out) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "alloc: out is NULL");
    memset(out, 0, sizeof(*out));
    out->ptr = calloc(1, bytes ? (size_t)bytes : 1);
    if (!out->ptr)
        return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "alloc: %llu bytes",
                              (unsigned long long)bytes);
    out->bytes = bytes;
    out->memory = memory;
    return WEFT_OK;
}

static void be_free(void *st, weft_buffer *buf) {
    if (!buf) return;
    free(buf->ptr);
    buf->ptr = NULL;
    buf->bytes = 0;
}

static int in_range(const weft_buffer *b, uint64_t off, uint64_t n) {
    return b && b->ptr && off <= b->bytes && n <= b->bytes - off;
}

static weft_status be_copy(void *st, weft_buffer *dst, uint64_t dst_off, const weft_buffer *src,
                           uint64_t src_off, uint64_t bytes, void *stream, weft_error *err) {
    if (!in_range(dst, dst_off, bytes) || !in_range(src, src_off, bytes))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "copy: range outside a buffer");
    memmove((char *)dst->ptr + dst_off, (const char *)src->ptr + src_off, (size_t)bytes);
    return WEFT_OK;
}

static weft_status be_upload(void *st, weft_buffer *dst, uint64_t dst_off, const void *src,
                             uint64_t bytes, weft_error *err) {
    if (!in_range(dst, dst_off, bytes) || (!src && bytes))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "upload: range outside the buffer");
    memcpy((char *)dst->ptr + dst_off, src, (size_t)bytes);
    return WEFT_OK;
}

static weft_status be_download(void *st, void *dst, const weft_buffer *src, uint64_t src_off,
                               uint64_t bytes, weft_error *err) {
    if (!in_range(src, src_off, bytes) || (!dst && bytes))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "download: range outside the buffer");
    memcpy(dst, (const char *)src->ptr + src_off, (size_t)bytes);
    return WEFT_OK;
}

static weft_status be_sync(void *st, void *stream, weft_error *err) {
    return WEFT_OK; /* every operation above is synchronous */
}

static void *be_stream(void *st) {
    return NULL;
}

static const weft_backend_vtable be_vt = {
    .size = sizeof(weft_backend_vtable),
    .device_info = be_info,
    .register_ops = be_register,
    .alloc = be_alloc,
    .free = be_free,
    .copy = be_copy,
    .upload = be_upload,
    .download = be_download,
    .synchronize = be_sync,
    .stream = be_stream,
};

static const weft_plugin_descriptor be_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.0.1",
    .kind = WEFT_KIND_BACKEND,
    .slots = WEFT_SLOT_BACKEND,
    .create = be_create,
    .backend = &be_vt,
};

WEFT_SDK_ENTRY(be_desc, 1, 1)
