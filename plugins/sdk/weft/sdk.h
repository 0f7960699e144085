/* weft/sdk.h: small helpers for plugin authors, header-only so a bundle links nothing of weft.
 *
 * A plugin needs three things from this file: weft_sdk_negotiate (the ABI handshake, including
 * the refusal message and the "highest version I speak" hint the host prints), the
 * WEFT_SDK_ENTRY macro that defines the exported entry function around a static descriptor, and
 * typed option getters with defaults; graph passes also check tensor ids and find a tensor's
 * readers and writers here (weft_sdk_tensor_valid, weft_sdk_node_reads, weft_sdk_node_writes,
 * weft_sdk_only_reader). Everything is static inline and uses only the C library; errors are
 * written into the caller's weft_error the same way the host writes them.
 *
 *     static const weft_pass_vtable my_pass = {sizeof(weft_pass_vtable), my_run, NULL};
 *     static const weft_plugin_descriptor my_desc = {
 *         .size = sizeof(weft_plugin_descriptor), .abi_version = 1,
 *         .name = "mytech.thing", .version = "0.1.0", .kind = WEFT_KIND_TECHNIQUE,
 *         .slots = WEFT_SLOT_PASS, .create = my_create, .destroy = my_destroy,
 *         .pass = &my_pass};
 *     WEFT_SDK_ENTRY(my_desc, 1, 1)
 */
#ifndef WEFT_SDK_H
#define WEFT_SDK_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "weft/plugin.h"

/* Fills err (when not NULL) and returns code. The text is formatted apart and then copied, so
 * err's own message or source may be an argument (an error wrapped with context). */
static inline weft_status weft_sdk_verror(weft_error *err, weft_status code, const char *source,
                                          const char *fmt, va_list ap) {
    if (!err) return code;
    char src[sizeof(err->source)], msg[sizeof(err->message)];
    snprintf(src, sizeof(src), "%s", source ? source : "plugin");
    vsnprintf(msg, sizeof(msg), fmt, ap);
    err->size = sizeof(*err);
    err->code = code;
    memcpy(err->source, src, sizeof(src));
    memcpy(err->message, msg, sizeof(msg));
    return code;
}

static inline weft_status weft_sdk_error(weft_error *err, weft_status code, const char *source,
                                         const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static inline weft_status weft_sdk_error(weft_error *err, weft_status code, const char *source,
                                         const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_sdk_verror(err, code, source, fmt, ap);
    va_end(ap);
    return code;
}

/* The ABI handshake of a plugin that speaks versions lo..hi: picks the highest version both
 * sides speak, or refuses with WEFT_ERR_ABI and sets *chosen to hi so the host can say what the
 * plugin was built for (docs/ABI.md, rule 5). */
static inline weft_status weft_sdk_negotiate(const char *name, uint32_t host_min, uint32_t host_max,
                                             uint32_t lo, uint32_t hi, uint32_t *chosen,
                                             weft_error *err) {
    uint32_t top = host_max < hi ? host_max : hi;
    uint32_t bottom = host_min > lo ? host_min : lo;
    if (!chosen) return weft_sdk_error(err, WEFT_ERR_INVALID, name, "negotiate: chosen is NULL");
    if (top < bottom) {
        *chosen = hi;
        return weft_sdk_error(err, WEFT_ERR_ABI, name, "speaks ABI %u..%u, the host speaks %u..%u",
                              (unsigned)lo, (unsigned)hi, (unsigned)host_min, (unsigned)host_max);
    }
    *chosen = top;
    return WEFT_OK;
}

/* Defines the exported entry function for a plugin whose one static descriptor serves every
 * version in lo..hi (with one version, lo == hi == desc.abi_version). */
#define WEFT_SDK_ENTRY(desc, lo, hi)                                                               \
    WEFT_EXPORT weft_status WEFT_PLUGIN_ENTRY(                                                     \
        uint32_t host_min, uint32_t host_max, uint32_t *chosen,                                    \
        const weft_plugin_descriptor **out, weft_error *err) {                                     \
        weft_status st_ =                                                                          \
            weft_sdk_negotiate((desc).name, host_min, host_max, (lo), (hi), chosen, err);          \
        if (st_ != WEFT_OK) return st_;                                                            \
        if (!out) return weft_sdk_error(err, WEFT_ERR_INVALID, (desc).name, "out is NULL");        \
        *out = &(desc);                                                                            \
        return WEFT_OK;                                                                            \
    }

/* Typed option getters: the host validated opts against the manifest's schema and filled every
 * default, so a missing key or a wrong type means the manifest and the code disagree; the
 * getters then return def. */
static inline const weft_option *weft_sdk_option(const weft_options *opts, const char *key) {
    if (!opts || !key || !opts->items) return NULL;
    for (uint32_t i = 0; i < opts->count; i++)
        if (opts->items[i].key && !strcmp(opts->items[i].key, key)) return &opts->items[i];
    return NULL;
}

static inline int64_t weft_sdk_option_int(const weft_options *opts, const char *key, int64_t def) {
    const weft_option *o = weft_sdk_option(opts, key);
    return o && o->type == WEFT_OPTION_INT ? o->i : def;
}

static inline double weft_sdk_option_float(const weft_options *opts, const char *key, double def) {
    const weft_option *o = weft_sdk_option(opts, key);
    if (!o) return def;
    if (o->type == WEFT_OPTION_FLOAT) return o->f;
    if (o->type == WEFT_OPTION_INT) return (double)o->i;
    return def;
}

static inline int weft_sdk_option_bool(const weft_options *opts, const char *key, int def) {
    const weft_option *o = weft_sdk_option(opts, key);
    return o && o->type == WEFT_OPTION_BOOL ? (o->i != 0) : def;
}

static inline const char *weft_sdk_option_string(const weft_options *opts, const char *key,
                                                 const char *def) {
    const weft_option *o = weft_sdk_option(opts, key);
    return o && o->type == WEFT_OPTION_STRING && o->s ? o->s : def;
}

/* Graph passes: whether t names a tensor of g (not WEFT_TENSOR_NONE, not past the table),
 * whether node n reads tensor t, whether it writes t (graph.h lets a node write a tensor it
 * reads: in place), and the one node after index `from` that reads t, or -1 (t not a tensor of
 * g, read twice, or by nobody). */
static inline int weft_sdk_tensor_valid(const weft_graph *g, uint32_t t) {
    return t < g->n_tensors;
}
static inline int weft_sdk_node_reads(const weft_node *n, uint32_t t) {
    for (uint32_t k = 0; k < n->n_in && k < WEFT_NODE_MAX_IN; k++)
        if (n->in[k] == t) return 1;
    return 0;
}
static inline int weft_sdk_node_writes(const weft_node *n, uint32_t t) {
    for (uint32_t o = 0; o < n->n_out && o < WEFT_NODE_MAX_OUT; o++)
        if (n->out[o] == t) return 1;
    return 0;
}
static inline int32_t weft_sdk_only_reader(const weft_graph *g, const weft_graph_service *gs,
                                           uint32_t t, uint32_t from) {
    if (t >= g->n_tensors || gs->tensor_uses(g, t) != 1) return -1;
    for (uint32_t i = from + 1; i < g->n_nodes; i++)
        if (weft_sdk_node_reads(&g->nodes[i], t)) return (int32_t)i;
    return -1;
}

/* KV-length buckets (docs/DESIGN.md, "KV-length buckets"). A step whose largest host-batch
 * position is p lies in the bucket of length WEFT_SDK_KV_BUCKET_MIN << k, the smallest above p:
 * every row of the step reads at most that many cache positions. exec.cuda-graph keys its
 * captures by the bucket as well as by the row counts, so an op may size a launch by it (the
 * cuda backend's fused attention sizes its split grid) and a replay stays valid for every step
 * of the bucket. 0 when the step has no host positions (size for the whole cache). An op may
 * size by a coarser rule that is a function of the bucket (the cuda backend's option
 * attn_bucket_min: at least that many positions), never by a finer one. */
#define WEFT_SDK_KV_BUCKET_MIN 128
static inline int64_t weft_sdk_kv_bucket(const weft_batch *b) {
    if (!b || !b->positions || !b->n_tokens) return 0;
    int32_t top = 0;
    for (uint32_t i = 0; i < b->n_tokens; i++)
        if (b->positions[i] > top) top = b->positions[i];
    int64_t len = WEFT_SDK_KV_BUCKET_MIN;
    while (len <= top) len <<= 1;
    return len;
}

#endif /* WEFT_SDK_H */
