/* The step graph on the host side: storage with growth, the weft_graph_service table through
 * which model plugins build graphs and passes rewrite them, the validation that runs after the
 * model and after every pass, and the canonical text whose XXH3-128 hash identifies a final
 * graph. Tensor and node arrays live in the public weft_graph; their capacities live in a
 * private header around it, so a plugin can hold the public struct and nothing else. */
#include "graph/graph.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util/error.h"

#define GRAPH_MAGIC 0x6772617068766531ull /* "graphve1" */

typedef struct graph_impl {
    weft_graph g; /* first: a weft_graph * is a graph_impl * */
    uint32_t cap_tensors;
    uint32_t cap_nodes;
} graph_impl;

/* A host graph is recognised from inside the public struct (reading past a foreign one would
 * be out of bounds): reserved[0] holds a magic and reserved[1] the graph's own address, so a
 * plugin's copy of a host graph is not mistaken for one. */
static graph_impl *impl_of(weft_graph *g) {
    if (!g || g->reserved[0] != GRAPH_MAGIC || g->reserved[1] != (uint64_t)(uintptr_t)g)
        return NULL;
    return (graph_impl *)g;
}

int weft_graph_is_host(const weft_graph *g) {
    return impl_of((weft_graph *)g) != NULL;
}

weft_graph *weft_graph_new(const weft_bucket *bucket) {
    graph_impl *gi = calloc(1, sizeof(*gi));
    if (!gi) return NULL;
    gi->g.size = sizeof(weft_graph);
    gi->g.reserved[0] = GRAPH_MAGIC;
    gi->g.reserved[1] = (uint64_t)(uintptr_t)&gi->g;
    if (bucket) gi->g.bucket = *bucket;
    gi->g.bucket.size = sizeof(weft_bucket);
    return &gi->g;
}

void weft_graph_free(weft_graph *g) {
    graph_impl *gi = impl_of(g);
    if (!gi) return;
    free(gi->g.tensors);
    free(gi->g.nodes);
    gi->g.reserved[0] = 0;
    free(gi);
}

/* ---- names ------------------------------------------------------------------------------- */
static const char *const builtin_ops[WEFT_OP_BUILTIN_COUNT] = {
    [WEFT_OP_NONE] = "none",
    [WEFT_OP_EMBED] = "embed",
    [WEFT_OP_LINEAR] = "linear",
    [WEFT_OP_RMSNORM] = "rmsnorm",
    [WEFT_OP_ROPE] = "rope",
    [WEFT_OP_ATTENTION] = "attention",
    [WEFT_OP_SWIGLU] = "swiglu",
    [WEFT_OP_ADD] = "add",
    [WEFT_OP_ACTIVATION] = "activation",
    [WEFT_OP_LM_HEAD] = "lm_head",
    [WEFT_OP_SAMPLE] = "sample",
    [WEFT_OP_MOE] = "moe",
    [WEFT_OP_ALL_REDUCE] = "all_reduce",
    [WEFT_OP_SCALE] = "scale",
    [WEFT_OP_ADD_RMSNORM] = "add_rmsnorm",
    [WEFT_OP_COPY] = "copy",
    [WEFT_OP_SPLIT] = "split",
};

/* Minimum input counts of the builtin ops (optional inputs beyond these). */
static const uint8_t builtin_min_in[WEFT_OP_BUILTIN_COUNT] = {
    [WEFT_OP_EMBED] = 2,  [WEFT_OP_LINEAR] = 2,      [WEFT_OP_RMSNORM] = 2,
    [WEFT_OP_ROPE] = 2,   [WEFT_OP_ATTENTION] = 4,   [WEFT_OP_SWIGLU] = 2,
    [WEFT_OP_ADD] = 2,    [WEFT_OP_ACTIVATION] = 1,  [WEFT_OP_LM_HEAD] = 2,
    [WEFT_OP_SAMPLE] = 1, [WEFT_OP_MOE] = 2,         [WEFT_OP_ALL_REDUCE] = 1,
    [WEFT_OP_SCALE] = 1,  [WEFT_OP_ADD_RMSNORM] = 3, [WEFT_OP_COPY] = 1,
    [WEFT_OP_SPLIT] = 1,
};

/* User ops: a process-wide table, because op_register takes no graph or engine. */
#define USER_OPS_MAX 256
static pthread_mutex_t user_ops_lock = PTHREAD_MUTEX_INITIALIZER;
static char user_ops[USER_OPS_MAX][48];
static uint32_t n_user_ops;

const char *weft_op_name(uint32_t op) {
    if (op > WEFT_OP_NONE && op < WEFT_OP_BUILTIN_COUNT) return builtin_ops[op];
    if (op >= WEFT_OP_USER) {
        const char *name = NULL;
        pthread_mutex_lock(&user_ops_lock);
        if (op - WEFT_OP_USER < n_user_ops) name = user_ops[op - WEFT_OP_USER];
        pthread_mutex_unlock(&user_ops_lock);
        return name;
    }
    return NULL;
}

uint32_t weft_op_from_name(const char *name) {
    if (!name) return WEFT_OP_NONE;
    for (uint32_t i = 1; i < WEFT_OP_BUILTIN_COUNT; i++)
        if (!strcmp(builtin_ops[i], name)) return i;
    return WEFT_OP_NONE;
}

static uint32_t svc_op_register(const char *name, weft_error *err) {
    if (!name || !name[0] || strlen(name) >= sizeof(user_ops[0])) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "op_register: expected a name of 1..%zu characters, got %s",
                       sizeof(user_ops[0]) - 1, name ? "a longer one" : "NULL");
        return WEFT_OP_NONE;
    }
    if (weft_op_from_name(name) != WEFT_OP_NONE) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "op_register: '%s' is a builtin op; user ops need their own name "
                       "(e.g. \"fuse.%s\")",
                       name, name);
        return WEFT_OP_NONE;
    }
    uint32_t id = WEFT_OP_NONE;
    pthread_mutex_lock(&user_ops_lock);
    for (uint32_t i = 0; i < n_user_ops; i++)
        if (!strcmp(user_ops[i], name)) id = WEFT_OP_USER + i;
    if (id == WEFT_OP_NONE && n_user_ops < USER_OPS_MAX) {
        snprintf(user_ops[n_user_ops], sizeof(user_ops[0]), "%s", name);
        id = WEFT_OP_USER + n_user_ops++;
    }
    pthread_mutex_unlock(&user_ops_lock);
    if (id == WEFT_OP_NONE)
        weft_error_set(err, WEFT_ERR_NOMEM, "graph",
                       "op_register '%s': the table of %d user ops is full", name, USER_OPS_MAX);
    return id;
}

static const char *svc_op_name(uint32_t op) {
    return weft_op_name(op);
}

const char *weft_tensor_kind_name(uint32_t kind) {
    switch (kind) {
    case WEFT_TENSOR_ACTIVATION:
        return "act";
    case WEFT_TENSOR_WEIGHT:
        return "weight";
    case WEFT_TENSOR_INPUT:
        return "input";
    case WEFT_TENSOR_OUTPUT:
        return "output";
    default:
        return "?";
    }
}

static const char *dtype_short(uint32_t dt) {
    switch (dt) {
    case WEFT_DTYPE_F32:
        return "f32";
    case WEFT_DTYPE_F16:
        return "f16";
    case WEFT_DTYPE_BF16:
        return "bf16";
    case WEFT_DTYPE_I32:
        return "i32";
    case WEFT_DTYPE_I64:
        return "i64";
    case WEFT_DTYPE_I8:
        return "i8";
    case WEFT_DTYPE_U8:
        return "u8";
    case WEFT_DTYPE_F8_E4M3:
        return "f8e4m3";
    case WEFT_DTYPE_F8_E5M2:
        return "f8e5m2";
    case WEFT_DTYPE_I16:
        return "i16";
    case WEFT_DTYPE_F64:
        return "f64";
    case WEFT_DTYPE_BOOL:
        return "bool";
    case WEFT_DTYPE_Q8_0:
        return "q8_0";
    case WEFT_DTYPE_Q4_K:
        return "q4_k";
    case WEFT_DTYPE_Q4_G128:
        return "q4_g128";
    default:
        return NULL;
    }
}

const char *weft_graph_dtype_name(uint32_t dtype) {
    return dtype_short(dtype);
}

uint32_t weft_graph_dtype_size(uint32_t dtype) {
    switch (dtype) {
    case WEFT_DTYPE_F64:
    case WEFT_DTYPE_I64:
        return 8;
    case WEFT_DTYPE_F32:
    case WEFT_DTYPE_I32:
        return 4;
    case WEFT_DTYPE_F16:
    case WEFT_DTYPE_BF16:
    case WEFT_DTYPE_I16:
        return 2;
    case WEFT_DTYPE_I8:
    case WEFT_DTYPE_U8:
    case WEFT_DTYPE_F8_E4M3:
    case WEFT_DTYPE_F8_E5M2:
    case WEFT_DTYPE_BOOL:
        return 1;
    default:
        return 0;
    }
}

static int dtype_known(uint32_t dt) {
    return dtype_short(dt) != NULL || dt >= WEFT_DTYPE_USER;
}

uint64_t weft_graph_tensor_bytes(const weft_tensor *t) {
    uint64_t n = 1;
    if (!t || t->rank == 0 || t->rank > WEFT_MAX_DIMS) return 0;
    for (uint32_t d = 0; d < t->rank; d++) {
        if (t->shape[d] <= 0 || (uint64_t)t->shape[d] > UINT64_MAX / 16 / n) return 0;
        n *= (uint64_t)t->shape[d];
    }
    uint32_t es = weft_graph_dtype_size(t->dtype);
    if (es) return n * es;
    switch (t->dtype) {
    case WEFT_DTYPE_Q8_0:
        return n % 32 ? 0 : n / 32 * 34;
    case WEFT_DTYPE_Q4_K:
        return n % 256 ? 0 : n / 256 * 144;
    default:
        return 0;
    }
}

/* ---- building ---------------------------------------------------------------------------- */
static uint32_t svc_tensor_find(const weft_graph *g, const char *name) {
    if (!g || !name) return WEFT_TENSOR_NONE;
    for (uint32_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return i;
    return WEFT_TENSOR_NONE;
}

static uint32_t svc_tensor_add(weft_graph *g, uint32_t kind, uint32_t dtype, uint32_t rank,
                               const int64_t *shape, const char *name, weft_error *err) {
    graph_impl *gi = impl_of(g);
    if (!gi) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "tensor_add: the graph was not made by the host");
        return WEFT_TENSOR_NONE;
    }
    if (!name || !name[0] || strlen(name) >= WEFT_NAME_MAX) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "tensor_add: expected a name of 1..%d characters, got %s", WEFT_NAME_MAX - 1,
                       name ? (name[0] ? "a longer one" : "\"\"") : "NULL");
        return WEFT_TENSOR_NONE;
    }
    if (kind > WEFT_TENSOR_OUTPUT) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph", "tensor %s: expected kind 0..3, got %u",
                       name, kind);
        return WEFT_TENSOR_NONE;
    }
    if (!dtype_known(dtype)) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph", "tensor %s: unknown dtype %u", name, dtype);
        return WEFT_TENSOR_NONE;
    }
    if (rank == 0 || rank > WEFT_MAX_DIMS || !shape) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "tensor %s: expected rank 1..%d with a shape, got rank %u", name,
                       WEFT_MAX_DIMS, rank);
        return WEFT_TENSOR_NONE;
    }
    for (uint32_t d = 0; d < rank; d++)
        if (shape[d] <= 0 || shape[d] > ((int64_t)1 << 40)) {
            weft_error_set(err, WEFT_ERR_INVALID, "graph",
                           "tensor %s: dimension %u must be in 1..2^40, got %" PRId64, name, d,
                           shape[d]);
            return WEFT_TENSOR_NONE;
        }
    if (svc_tensor_find(g, name) != WEFT_TENSOR_NONE) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph", "tensor %s: the name is already used", name);
        return WEFT_TENSOR_NONE;
    }
    if (g->n_tensors == gi->cap_tensors) {
        uint32_t cap = gi->cap_tensors ? gi->cap_tensors * 2 : 64;
        weft_tensor *t = realloc(g->tensors, (size_t)cap * sizeof(*t));
        if (!t) {
            weft_error_set(err, WEFT_ERR_NOMEM, "graph", "tensor %s: out of memory", name);
            return WEFT_TENSOR_NONE;
        }
        g->tensors = t;
        gi->cap_tensors = cap;
    }
    weft_tensor *t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof(*t));
    t->id = g->n_tensors;
    t->kind = kind;
    t->dtype = dtype;
    t->rank = rank;
    for (uint32_t d = 0; d < rank; d++)
        t->shape[d] = shape[d];
    snprintf(t->name, sizeof(t->name), "%s", name);
    return g->n_tensors++;
}

static uint32_t svc_weight_add(weft_graph *g, const char *canonical, const char *source,
                               uint32_t dtype, uint32_t rank, const int64_t *shape,
                               weft_error *err) {
    if (source && strlen(source) >= WEFT_NAME_MAX) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "weight %s: source name longer than %d characters",
                       canonical ? canonical : "?", WEFT_NAME_MAX - 1);
        return WEFT_TENSOR_NONE;
    }
    uint32_t id = svc_tensor_add(g, WEFT_TENSOR_WEIGHT, dtype, rank, shape, canonical, err);
    if (id == WEFT_TENSOR_NONE) return id;
    snprintf(g->tensors[id].source, sizeof(g->tensors[id].source), "%s", source ? source : "");
    return id;
}

static int node_op_known(uint32_t op) {
    return weft_op_name(op) != NULL;
}

static int32_t svc_node_add(weft_graph *g, const weft_node *node, uint32_t before,
                            weft_error *err) {
    graph_impl *gi = impl_of(g);
    if (!gi || !node) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "node_add: expected a host graph and a node, got %s",
                       gi ? "no node" : "a foreign graph");
        return -1;
    }
    const char *nm = node->name[0] ? node->name : "(unnamed)";
    if (memchr(node->name, '\0', sizeof(node->name)) == NULL) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph", "node_add: name is not terminated");
        return -1;
    }
    if (!node_op_known(node->op)) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "node %s: op %u is neither builtin nor registered", nm, node->op);
        return -1;
    }
    if (node->n_in > WEFT_NODE_MAX_IN || node->n_out == 0 || node->n_out > WEFT_NODE_MAX_OUT) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "node %s: expected 0..%d inputs and 1..%d outputs, got %u and %u", nm,
                       WEFT_NODE_MAX_IN, WEFT_NODE_MAX_OUT, node->n_in, node->n_out);
        return -1;
    }
    for (uint32_t i = 0; i < node->n_in; i++)
        if (node->in[i] != WEFT_TENSOR_NONE && node->in[i] >= g->n_tensors) {
            weft_error_set(err, WEFT_ERR_INVALID, "graph",
                           "node %s: input %u is tensor %u, but the graph has %u tensors", nm, i,
                           node->in[i], g->n_tensors);
            return -1;
        }
    for (uint32_t i = 0; i < node->n_out; i++)
        if (node->out[i] >= g->n_tensors) {
            weft_error_set(err, WEFT_ERR_INVALID, "graph",
                           "node %s: output %u is tensor %u, but the graph has %u tensors", nm, i,
                           node->out[i], g->n_tensors);
            return -1;
        }
    if (g->n_nodes == gi->cap_nodes) {
        uint32_t cap = gi->cap_nodes ? gi->cap_nodes * 2 : 64;
        weft_node *n = realloc(g->nodes, (size_t)cap * sizeof(*n));
        if (!n) {
            weft_error_set(err, WEFT_ERR_NOMEM, "graph", "node %s: out of memory", nm);
            return -1;
        }
        g->nodes = n;
        gi->cap_nodes = cap;
    }
    uint32_t at = before < g->n_nodes ? before : g->n_nodes;
    memmove(&g->nodes[at + 1], &g->nodes[at], (size_t)(g->n_nodes - at) * sizeof(weft_node));
    g->nodes[at] = *node;
    for (uint32_t i = node->n_in; i < WEFT_NODE_MAX_IN; i++)
        g->nodes[at].in[i] = WEFT_TENSOR_NONE;
    for (uint32_t i = node->n_out; i < WEFT_NODE_MAX_OUT; i++)
        g->nodes[at].out[i] = WEFT_TENSOR_NONE;
    g->n_nodes++;
    return (int32_t)at;
}

static int32_t svc_node_remove(weft_graph *g, uint32_t index, weft_error *err) {
    if (!impl_of(g) || index >= g->n_nodes) {
        weft_error_set(err, WEFT_ERR_INVALID, "graph",
                       "node_remove: expected a node index below %u, got %u", g ? g->n_nodes : 0,
                       index);
        return -1;
    }
    memmove(&g->nodes[index], &g->nodes[index + 1],
            (size_t)(g->n_nodes - index - 1) * sizeof(weft_node));
    g->n_nodes--;
    return 0;
}

static int32_t svc_replace_uses(weft_graph *g, uint32_t from, uint32_t to, uint32_t start) {
    if (!impl_of(g) || from >= g->n_tensors || to >= g->n_tensors) return -1;
    int32_t count = 0;
    for (uint32_t n = start; n < g->n_nodes; n++)
        for (uint32_t i = 0; i < g->nodes[n].n_in; i++)
            if (g->nodes[n].in[i] == from) {
                g->nodes[n].in[i] = to;
                count++;
            }
    return count;
}

static uint32_t svc_tensor_uses(const weft_graph *g, uint32_t t) {
    uint32_t count = 0;
    if (!g) return 0;
    for (uint32_t n = 0; n < g->n_nodes; n++)
        for (uint32_t i = 0; i < g->nodes[n].n_in; i++)
            if (g->nodes[n].in[i] == t) count++;
    return count;
}

static const weft_graph_service graph_service = {
    .size = sizeof(weft_graph_service),
    .version = 1,
    .tensor_add = svc_tensor_add,
    .weight_add = svc_weight_add,
    .node_add = svc_node_add,
    .node_remove = svc_node_remove,
    .replace_uses = svc_replace_uses,
    .tensor_find = svc_tensor_find,
    .op_register = svc_op_register,
    .op_name = svc_op_name,
    .tensor_uses = svc_tensor_uses,
};

const weft_graph_service *weft_graph_service_get(void) {
    return &graph_service;
}

/* ---- validation -------------------------------------------------------------------------- */
static const char *node_label(const weft_node *n) {
    return n->name[0] ? n->name : "(unnamed)";
}

static int64_t last_dim(const weft_tensor *t) {
    return t->shape[t->rank - 1];
}

static int64_t rows_of(const weft_tensor *t) {
    return t->shape[0];
}

/* Shape rules of the builtin ops that every backend relies on. Ops whose tensors have a
 * technique layout (packed weights) are checked on their logical shape, which is what the
 * graph stores. */
static weft_status check_shapes(const weft_graph *g, const weft_node *n, weft_error *err) {
    const weft_tensor *in0 =
        n->n_in > 0 && n->in[0] != WEFT_TENSOR_NONE ? &g->tensors[n->in[0]] : NULL;
    const weft_tensor *in1 =
        n->n_in > 1 && n->in[1] != WEFT_TENSOR_NONE ? &g->tensors[n->in[1]] : NULL;
    const weft_tensor *out = &g->tensors[n->out[0]];
    const char *nm = node_label(n);
    switch (n->op) {
    case WEFT_OP_LINEAR:
        if (!in0 || !in1 || in1->rank != 2 || last_dim(in0) != in1->shape[1] ||
            last_dim(out) != in1->shape[0] || rows_of(out) != rows_of(in0))
            return weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                  "node %s (linear): expected x (T,K), w (N,K), y (T,N); got x %s "
                                  "(..,%" PRId64 "), w %s, y %s (..,%" PRId64 ")",
                                  nm, in0 ? in0->name : "-", in0 ? last_dim(in0) : 0,
                                  in1 ? in1->name : "-", out->name, last_dim(out));
        if (n->n_in > 2 && n->in[2] != WEFT_TENSOR_NONE &&
            last_dim(&g->tensors[n->in[2]]) != in1->shape[0])
            return weft_error_set(
                err, WEFT_ERR_INVALID, "graph",
                "node %s (linear): bias %s has %" PRId64 " entries, expected %" PRId64, nm,
                g->tensors[n->in[2]].name, last_dim(&g->tensors[n->in[2]]), in1->shape[0]);
        break;
    case WEFT_OP_EMBED:
        if (!in0 || !in1 || in1->rank != 2 || last_dim(out) != in1->shape[1])
            return weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                  "node %s (embed): expected table (V,D) and x (T,D), got table "
                                  "%s and x %s",
                                  nm, in1 ? in1->name : "-", out->name);
        break;
    case WEFT_OP_LM_HEAD:
        if (!in0 || !in1 || in1->rank != 2 || last_dim(in0) != in1->shape[1] ||
            last_dim(out) != in1->shape[0])
            return weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                  "node %s (lm_head): expected x (T,D), w (V,D), logits (R,V); "
                                  "got x %s, w %s, logits %s",
                                  nm, in0 ? in0->name : "-", in1 ? in1->name : "-", out->name);
        break;
    case WEFT_OP_ADD:
    case WEFT_OP_SWIGLU:
        if (!in0 || !in1 || last_dim(in0) != last_dim(in1) || last_dim(out) != last_dim(in0))
            return weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                  "node %s (%s): inputs and output must have the same width; got "
                                  "%s, %s -> %s",
                                  nm, weft_op_name(n->op), in0 ? in0->name : "-",
                                  in1 ? in1->name : "-", out->name);
        break;
    case WEFT_OP_RMSNORM: {
        int64_t group = n->p.i[0] ? n->p.i[0] : (in0 ? last_dim(in0) : 0);
        if (!in0 || !in1 || last_dim(in1) != group || group <= 0 || last_dim(in0) % group ||
            last_dim(out) != last_dim(in0))
            return weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                  "node %s (rmsnorm): expected weight of the group width %" PRId64
                                  " dividing the row; got x %s, w %s",
                                  nm, group, in0 ? in0->name : "-", in1 ? in1->name : "-");
        break;
    }
    default:
        break;
    }
    return WEFT_OK;
}

weft_status weft_graph_validate(const weft_graph *g, weft_error *err) {
    if (!g || !g->tensors || g->n_tensors == 0)
        return weft_error_set(err, WEFT_ERR_INVALID, "graph", "the graph has no tensors");
    if (g->n_nodes == 0 || !g->nodes)
        return weft_error_set(err, WEFT_ERR_INVALID, "graph", "the graph has no nodes");
    /* producer[t]: index of the node that produced t so far, or -1. */
    int32_t *producer = malloc((size_t)g->n_tensors * sizeof(int32_t));
    if (!producer) return weft_error_set(err, WEFT_ERR_NOMEM, "graph", "out of memory");
    for (uint32_t t = 0; t < g->n_tensors; t++) {
        producer[t] = -1;
        if (g->tensors[t].id != t) {
            free(producer);
            return weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                  "tensor %s: id %u stored at index %u", g->tensors[t].name,
                                  g->tensors[t].id, t);
        }
    }
    weft_status st = WEFT_OK;
    for (uint32_t ni = 0; ni < g->n_nodes && st == WEFT_OK; ni++) {
        const weft_node *n = &g->nodes[ni];
        const char *nm = node_label(n);
        if (!node_op_known(n->op)) {
            st =
                weft_error_set(err, WEFT_ERR_INVALID, "graph", "node %s: unknown op %u", nm, n->op);
            break;
        }
        if (n->n_in > WEFT_NODE_MAX_IN || n->n_out == 0 || n->n_out > WEFT_NODE_MAX_OUT) {
            st = weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                "node %s: %u inputs and %u outputs out of range", nm, n->n_in,
                                n->n_out);
            break;
        }
        if (n->op < WEFT_OP_BUILTIN_COUNT) {
            uint32_t need = builtin_min_in[n->op], have = 0;
            for (uint32_t i = 0; i < n->n_in && i < need; i++)
                have += n->in[i] != WEFT_TENSOR_NONE;
            if (have < need) {
                st = weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                    "node %s (%s): expected at least %u inputs, got %u", nm,
                                    weft_op_name(n->op), need, have);
                break;
            }
        }
        for (uint32_t i = 0; i < n->n_in && st == WEFT_OK; i++) {
            uint32_t t = n->in[i];
            if (t == WEFT_TENSOR_NONE) continue;
            if (t >= g->n_tensors) {
                st = weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                    "node %s: input %u is tensor %u of %u", nm, i, t, g->n_tensors);
            } else if ((g->tensors[t].kind == WEFT_TENSOR_ACTIVATION ||
                        g->tensors[t].kind == WEFT_TENSOR_OUTPUT) &&
                       producer[t] < 0) {
                st = weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                    "node %s reads %s before any node produces it (nodes must be "
                                    "in topological order)",
                                    nm, g->tensors[t].name);
            }
        }
        for (uint32_t o = 0; o < n->n_out && st == WEFT_OK; o++) {
            uint32_t t = n->out[o];
            if (t >= g->n_tensors) {
                st =
                    weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                   "node %s: output %u is tensor %u of %u", nm, o, t, g->n_tensors);
                break;
            }
            const weft_tensor *tt = &g->tensors[t];
            if (tt->kind == WEFT_TENSOR_INPUT || tt->kind == WEFT_TENSOR_WEIGHT) {
                st = weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                    "node %s writes %s, which is a%s %s tensor", nm, tt->name,
                                    tt->kind == WEFT_TENSOR_INPUT ? "n" : "",
                                    weft_tensor_kind_name(tt->kind));
                break;
            }
            if (producer[t] >= 0) {
                int in_place = 0;
                for (uint32_t i = 0; i < n->n_in; i++)
                    in_place |= n->in[i] == t;
                if (!in_place) {
                    st = weft_error_set(err, WEFT_ERR_INVALID, "graph",
                                        "node %s writes %s, already produced by node %s (only an "
                                        "in-place node may write a tensor it reads)",
                                        nm, tt->name, node_label(&g->nodes[producer[t]]));
                    break;
                }
            }
            producer[t] = (int32_t)ni;
        }
        if (st == WEFT_OK && n->op < WEFT_OP_BUILTIN_COUNT) st = check_shapes(g, n, err);
    }
    free(producer);
    return st;
}

/* ---- canonical text and hash ------------------------------------------------------------- */
typedef struct text_buf {
    char *p;
    size_t len, cap;
    int failed;
} text_buf;

static void tb_printf(text_buf *b, const char *fmt, ...) WEFT_PRINTF(2, 3);
static void tb_printf(text_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void tensor_ref(text_buf *b, const weft_tensor *t) {
    const char *dt = dtype_short(t->dtype);
    if (dt)
        tb_printf(b, "%s:%s[", t->name, dt);
    else
        tb_printf(b, "%s:dtype%u[", t->name, t->dtype);
    for (uint32_t d = 0; d < t->rank; d++)
        tb_printf(b, "%s%" PRId64, d ? "," : "", t->shape[d]);
    tb_printf(b, "]");
    if (t->layout[0]) tb_printf(b, "@%s", t->layout);
}

static void node_line(text_buf *b, const weft_graph *g, const weft_node *n) {
    const char *op = weft_op_name(n->op);
    tb_printf(b, "%s: %s(", node_label(n), op ? op : "?");
    for (uint32_t i = 0; i < n->n_in; i++) {
        if (i) tb_printf(b, ", ");
        if (n->in[i] == WEFT_TENSOR_NONE || n->in[i] >= g->n_tensors)
            tb_printf(b, "-");
        else
            tensor_ref(b, &g->tensors[n->in[i]]);
    }
    tb_printf(b, ") -> ");
    for (uint32_t o = 0; o < n->n_out; o++) {
        if (o) tb_printf(b, ", ");
        if (n->out[o] >= g->n_tensors)
            tb_printf(b, "-");
        else
            tensor_ref(b, &g->tensors[n->out[o]]);
    }
    int last_i = -1, last_f = -1;
    for (int k = 0; k < WEFT_PARAMS_I; k++)
        if (n->p.i[k]) last_i = k;
    for (int k = 0; k < WEFT_PARAMS_F; k++)
        if (n->p.f[k] != 0.0f) last_f = k;
    if (last_i >= 0) {
        tb_printf(b, " i=[");
        for (int k = 0; k <= last_i; k++)
            tb_printf(b, "%s%" PRId64, k ? "," : "", n->p.i[k]);
        tb_printf(b, "]");
    }
    if (last_f >= 0) {
        tb_printf(b, " f=[");
        for (int k = 0; k <= last_f; k++)
            tb_printf(b, "%s%.9g", k ? "," : "", (double)n->p.f[k]);
        tb_printf(b, "]");
    }
    if (n->flags) tb_printf(b, " flags=%u", n->flags);
    if (n->layer >= 0) tb_printf(b, " layer=%d", n->layer);
}

void weft_graph_node_text(const weft_graph *g, const weft_node *n, char *buf, size_t cap) {
    text_buf b = {0};
    if (!buf || cap == 0) return;
    node_line(&b, g, n);
    snprintf(buf, cap, "%s", b.failed || !b.p ? "(out of memory)" : b.p);
    free(b.p);
}

char *weft_graph_canonical(const weft_graph *g) {
    text_buf b = {0};
    if (!g) return NULL;
    tb_printf(&b, "bucket tokens=%u seqs=%u logits=%u kv_class=%u\n", g->bucket.max_tokens,
              g->bucket.max_seqs, g->bucket.max_logits, g->bucket.kv_class);
    /* Only tensors some node touches: a pass that leaves an orphan behind does not change what
     * runs. Weights carry their binding, which is part of what runs. */
    uint8_t *used = calloc(g->n_tensors ? g->n_tensors : 1, 1);
    if (!used) return NULL;
    for (uint32_t n = 0; n < g->n_nodes; n++) {
        for (uint32_t i = 0; i < g->nodes[n].n_in; i++)
            if (g->nodes[n].in[i] < g->n_tensors) used[g->nodes[n].in[i]] = 1;
        for (uint32_t o = 0; o < g->nodes[n].n_out; o++)
            if (g->nodes[n].out[o] < g->n_tensors) used[g->nodes[n].out[o]] = 1;
    }
    for (uint32_t t = 0; t < g->n_tensors; t++) {
        if (!used[t]) continue;
        const weft_tensor *tt = &g->tensors[t];
        tb_printf(&b, "tensor %s ", weft_tensor_kind_name(tt->kind));
        tensor_ref(&b, tt);
        if (tt->kind == WEFT_TENSOR_WEIGHT) {
            if (tt->source[0]) tb_printf(&b, " <- %s", tt->source);
            if (tt->deriver[0]) tb_printf(&b, " derived-by %s", tt->deriver);
        }
        tb_printf(&b, "\n");
    }
    free(used);
    for (uint32_t n = 0; n < g->n_nodes; n++) {
        tb_printf(&b, "node ");
        node_line(&b, g, &g->nodes[n]);
        tb_printf(&b, "\n");
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

weft_status weft_graph_hash(const weft_graph *g, char hex[33]) {
    char *text = weft_graph_canonical(g);
    if (!text) {
        hex[0] = '\0';
        return WEFT_ERR_NOMEM;
    }
    XXH128_hash_t h = XXH3_128bits(text, strlen(text));
    snprintf(hex, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
    free(text);
    return WEFT_OK;
}

weft_status weft_graph_print(const weft_graph *g, const char *const *providers, FILE *f) {
    char hex[33];
    weft_status st = weft_graph_hash(g, hex);
    if (st != WEFT_OK) return st;
    fprintf(f, "graph: %u nodes, %u tensors, bucket tokens=%u seqs=%u logits=%u\n", g->n_nodes,
            g->n_tensors, g->bucket.max_tokens, g->bucket.max_seqs, g->bucket.max_logits);
    for (uint32_t n = 0; n < g->n_nodes; n++) {
        text_buf b = {0};
        node_line(&b, g, &g->nodes[n]);
        if (b.failed) {
            free(b.p);
            return WEFT_ERR_NOMEM;
        }
        if (providers && providers[n])
            fprintf(f, "%4u %s  [%s]\n", n, b.p, providers[n]);
        else
            fprintf(f, "%4u %s\n", n, b.p);
        free(b.p);
    }
    fprintf(f, "hash %s\n", hex);
    return WEFT_OK;
}
