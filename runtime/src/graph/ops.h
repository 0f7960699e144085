/* The op-implementation registry: backends and technique opsets register kernels keyed by
 * (op, backend, dtype, layout) with a priority; resolving a graph picks one implementation per
 * node or refuses the graph, naming the first node nothing implements. One registry per engine;
 * it is what the host service WEFT_SERVICE_OPS hands to plugins. */
#ifndef WEFT_GRAPH_OPS_H
#define WEFT_GRAPH_OPS_H

#include "weft/plugin.h"

typedef struct weft_op_registry weft_op_registry;

weft_op_registry *weft_op_registry_new(void);
void weft_op_registry_free(weft_op_registry *r);
/* The service table (self = r). Valid while r lives. */
const weft_ops_service *weft_op_registry_service(weft_op_registry *r);
/* Names the plugin whose registrations follow (copied into weft_op_impl.provider). */
void weft_op_registry_set_provider(weft_op_registry *r, const char *plugin_name);
size_t weft_op_registry_count(const weft_op_registry *r);

/* The key a node is looked up by: the dtype and layout of its key input: the weight (in[1])
 * for linear and lm_head, the table (in[1]) for embed, the kv cache (kv_dtype, kv_layout) for
 * attention, in[0] otherwise. */
void weft_op_key(const weft_graph *g, const weft_node *n, uint32_t kv_dtype, const char *kv_layout,
                 uint32_t *dtype, const char **layout);

/* One implementation per node of g (impls has g->n_nodes entries), or WEFT_ERR_UNSUPPORTED
 * naming the node: "node layers.0.attn (attention, cpu, f32, layout contiguous) has no
 * implementation in this candidate". */
weft_status weft_op_registry_resolve(weft_op_registry *r, const weft_graph *g, const char *backend,
                                     uint32_t kv_dtype, const char *kv_layout,
                                     const weft_op_impl **impls, weft_error *err);

#endif
