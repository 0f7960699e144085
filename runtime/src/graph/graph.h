/* The host side of the step graph (weft/graph.h): creating and freeing graphs, the
 * weft_graph_service table plugins build and rewrite them through, validation (ids, topological
 * order, single producers, shapes of the builtin ops), and the canonical text and XXH3-128 hash
 * that identify a final graph. Graphs are plain data; the host keeps their growth capacity in a
 * private header around the public struct. */
#ifndef WEFT_GRAPH_GRAPH_H
#define WEFT_GRAPH_GRAPH_H

#include <stdio.h>

#include "weft/plugin.h"

/* A new empty graph for a bucket (copied). NULL when out of memory. */
weft_graph *weft_graph_new(const weft_bucket *bucket);
/* NULL-safe. Only for graphs made by weft_graph_new. */
void weft_graph_free(weft_graph *g);
/* True when g was made by weft_graph_new (plugins may hand back any pointer). */
int weft_graph_is_host(const weft_graph *g);

/* The service table (WEFT_SERVICE_GRAPH, version 1). Process-wide: it has no state of its own
 * except the user-op name table, which is shared by every engine of the process. */
const weft_graph_service *weft_graph_service_get(void);

/* Name of a builtin or registered op ("linear", "fuse.add_rmsnorm"), or NULL. */
const char *weft_op_name(uint32_t op);
/* Builtin op id from its name, or WEFT_OP_NONE. */
uint32_t weft_op_from_name(const char *name);
const char *weft_tensor_kind_name(uint32_t kind);

/* Checks every invariant a finished graph must keep: tensor and node ids in range, every input
 * produced by an earlier node (or an input/weight tensor), no tensor produced twice except in
 * place, inputs and weights never produced, builtin ops with their input counts and matching
 * shapes. The message names the node and the tensor. */
weft_status weft_graph_validate(const weft_graph *g, weft_error *err);

/* The canonical text of a graph: a bucket line, one line per referenced tensor, one line per
 * node. Two graphs with equal text run the same computation. malloc'ed; NULL when out of
 * memory. */
char *weft_graph_canonical(const weft_graph *g);
/* XXH3-128 of the canonical text as 32 hex digits. Returns WEFT_ERR_NOMEM on failure. */
weft_status weft_graph_hash(const weft_graph *g, char hex[33]);
/* One node as a line, without newline: "name: op(in, ...) -> out [i=..] [f=..]". */
void weft_graph_node_text(const weft_graph *g, const weft_node *n, char *buf, size_t cap);
/* Writes the nodes, one per line, then "hash <hex>". providers[i] (optional) is printed after
 * node i (the op implementation that will run it). */
weft_status weft_graph_print(const weft_graph *g, const char *const *providers, FILE *f);

/* Bytes of one element of a dense dtype; 0 for block formats and unknown ids. */
uint32_t weft_graph_dtype_size(uint32_t dtype);
/* Short lowercase name ("f32", "bf16", "q8_0"), or NULL for unknown ids. */
const char *weft_graph_dtype_name(uint32_t dtype);
/* Bytes of one tensor (0 for unknown dtypes or overflow). */
uint64_t weft_graph_tensor_bytes(const weft_tensor *t);

#endif
