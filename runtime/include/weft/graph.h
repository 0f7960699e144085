/* weft/graph.h: the step graph, the shared vocabulary of models, backends and techniques.
 *
 * A model plugin does not run a model; it describes one engine step as a graph of ops over typed
 * tensors, once per shape bucket. Technique passes rewrite that graph (fuse nodes, change a
 * linear node's weight format, pick an attention layout), op implementations registered per
 * (op, backend, dtype, layout) run its nodes, and an executor runs the finished graph.
 *
 * The graph is plain data owned by the host: arrays of tensors and nodes addressed by index.
 * Plugins read it directly and change it only through the weft_graph_service functions, so the
 * host can keep its invariants (ids valid, topological order, hash current).
 *
 * Shapes: activation tensors have shape[0] = the bucket's token capacity (rows); a step runs
 * with n_tokens <= capacity rows and kernels touch only those rows. Weight tensors have their
 * exact shape, in the PyTorch convention: a linear weight is (out_features, in_features).
 *
 * Part of plugin ABI v1: only append to these structs and enums (docs/ABI.md, rules 1-4).
 */
#ifndef WEFT_GRAPH_H
#define WEFT_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data types ------------------------------------------------------------------------ */
typedef enum weft_dtype {
    WEFT_DTYPE_INVALID = 0,
    WEFT_DTYPE_F32 = 1,
    WEFT_DTYPE_F16 = 2,
    WEFT_DTYPE_BF16 = 3,
    WEFT_DTYPE_I32 = 4,
    WEFT_DTYPE_I64 = 5,
    WEFT_DTYPE_I8 = 6,
    WEFT_DTYPE_U8 = 7,
    WEFT_DTYPE_F8_E4M3 = 8,
    WEFT_DTYPE_F8_E5M2 = 9,
    WEFT_DTYPE_I16 = 10,
    WEFT_DTYPE_F64 = 11,
    WEFT_DTYPE_BOOL = 12,
    /* Block-quantized formats: shape is the logical (dequantized) shape; bytes come from the
     * format. quant.* techniques add their own ids from WEFT_DTYPE_USER up. */
    WEFT_DTYPE_Q8_0 = 32,
    WEFT_DTYPE_Q4_K = 33,
    WEFT_DTYPE_Q4_G128 = 34,
    WEFT_DTYPE_USER = 1024,
} weft_dtype;

/* ---- ops -------------------------------------------------------------------------------- *
 * Builtin ops, with their inputs (in[]), outputs (out[]) and parameters (p.i[], p.f[]).
 * T = rows of the step, D = hidden size. "KV" means the attention node reads and writes the kv
 * slot's cache through weft_exec_ctx.kv.                                                      */
typedef enum weft_op {
    WEFT_OP_NONE = 0,
    /* in: tokens (i32 T), table (V,D)            out: x (T,D)                                  */
    WEFT_OP_EMBED = 1,
    /* in: x (T,K), w (N,K) [, bias (N)]          out: y (T,N)     y = x w^T + b                */
    WEFT_OP_LINEAR = 2,
    /* in: x (T,D), w (D)                         out: y (T,D)     p.f[0]=eps; p.i[0]=group size
     * (0 = whole row; head_dim for per-head q/k norm, the row then being n groups)             */
    WEFT_OP_RMSNORM = 3,
    /* in: x (T,H*hd), positions (i32 T)          out: y (same)    p.i[0]=n_heads p.i[1]=head_dim
     * p.i[2]=rotary dims (0 = head_dim) p.i[3]=layout (0 half-split as HF, 1 interleaved pairs)
     * p.i[4]=scaling (0 none, 1 llama3, 2 linear) p.f[0]=theta p.f[1]=factor p.f[2]=low_freq
     * p.f[3]=high_freq p.f[4]=original max positions                                            */
    WEFT_OP_ROPE = 4,
    /* in: q (T,Hq*hd), k (T,Hkv*hd), v (T,Hkv*hd), positions (i32 T) [, kv_slots (i32 T)]
     * out: o (T,Hq*hd)  KV. Device backends read the row -> slot map from in.kv_slots; the cpu
     * backend may use the host batch (seq_of_row, seqs[].kv_slot) instead.
     * p.i[0]=layer p.i[1]=n_heads p.i[2]=n_kv_heads p.i[3]=head_dim p.i[4]=sliding window (0 off)
     * p.i[5]=mask (0 causal, 1 tree/custom through exec ctx) p.f[0]=scale (0 = 1/sqrt(hd))
     * Writes k and v of the step's rows into the cache, then attends causally per sequence.    */
    WEFT_OP_ATTENTION = 5,
    /* in: gate (T,F), up (T,F)                   out: y (T,F)     y = silu(gate) * up          */
    WEFT_OP_SWIGLU = 6,
    /* in: a, b (same shape)                      out: y = a + b                                */
    WEFT_OP_ADD = 7,
    /* in: x (T,N)                                out: y           p.i[0]: 0 silu 1 gelu 2 relu  */
    WEFT_OP_ACTIVATION = 8,
    /* in: x (T,D), w (V,D) [, logit_rows (i32 R)]  out: logits (R,V) f32 for the rows listed
     * by the step's logit rows (batch->logit_rows on the host, in.logit_rows on the device)     */
    WEFT_OP_LM_HEAD = 9,
    /* in: logits (R,V)                           out: tokens (i32 R)   exec.device-sampling     */
    WEFT_OP_SAMPLE = 10,
    /* in: x (T,D), router (E,D), experts...      out: y (T,D)     p.i[0]=n_experts p.i[1]=top_k */
    WEFT_OP_MOE = 11,
    /* in: x                                      out: x (reduced in place) parallel.tensor      */
    WEFT_OP_ALL_REDUCE = 12,
    /* in: x (T,N)  out: y (T,N)   y = x * scalar p.f[0]                                        */
    WEFT_OP_SCALE = 13,
    /* in: x (T,D), residual (T,D), w (D)  out: y (T,D) normed, r (T,D) = x + residual
     * p.f[0]=eps. Emitted by fuse.rmsnorm-residual; listed here because most backends have it.  */
    WEFT_OP_ADD_RMSNORM = 14,
    /* in: x (T,N) out: y (T,N) a copy (layout or dtype change: p.i[0] = target dtype)           */
    WEFT_OP_COPY = 15,
    /* in: x (T, a+b+...) out: n outputs, column slices of widths p.i[0..n-1] (merged QKV)       */
    WEFT_OP_SPLIT = 16,
    WEFT_OP_BUILTIN_COUNT,
    /* Ops registered at run time by plugins (weft_graph_service.op_register) get ids from here. */
    WEFT_OP_USER = 1024,
} weft_op;

/* ---- tensors ---------------------------------------------------------------------------- */
#define WEFT_MAX_DIMS 4
#define WEFT_NAME_MAX 96
#define WEFT_LAYOUT_MAX 24

typedef enum weft_tensor_kind {
    WEFT_TENSOR_ACTIVATION = 0, /* produced by a node, lives in the step arena */
    WEFT_TENSOR_WEIGHT = 1,     /* bound to a checkpoint tensor or a derived weight at load */
    WEFT_TENSOR_INPUT = 2,      /* filled from the step (tokens, positions, ...) */
    WEFT_TENSOR_OUTPUT = 3,     /* read back after the step (logits, sampled tokens) */
} weft_tensor_kind;

/* Well-known step inputs and outputs, by tensor name. */
#define WEFT_INPUT_TOKENS "in.tokens"       /* i32 (T) */
#define WEFT_INPUT_POSITIONS "in.positions" /* i32 (T) */
#define WEFT_INPUT_KV_SLOTS "in.kv_slots"   /* i32 (T) kv slot of each row's request */
#define WEFT_INPUT_LOGIT_ROWS "in.logit_rows" /* i32 (R) rows whose logits are wanted */
#define WEFT_OUTPUT_LOGITS "out.logits"     /* f32 (R,V) */
#define WEFT_OUTPUT_TOKENS "out.tokens"     /* i32 (R) */

typedef struct weft_tensor {
    uint32_t id;
    uint32_t kind;  /* weft_tensor_kind */
    uint32_t dtype; /* weft_dtype */
    uint32_t rank;
    int64_t shape[WEFT_MAX_DIMS];
    /* Canonical name: weights "layers.3.attn.q", "embed", "norm", "lm_head"; inputs "in.*";
     * outputs "out.*"; activations free-form ("layers.3.attn_out"). */
    char name[WEFT_NAME_MAX];
    /* Memory layout: "" = dense row-major. Techniques name theirs ("q8_0", "paged", ...). */
    char layout[WEFT_LAYOUT_MAX];
    /* Weights: the checkpoint tensor it binds to ("model.layers.3.self_attn.q_proj.weight"),
     * or "" when a pass derives it (then deriver names the plugin whose transform fills it). */
    char source[WEFT_NAME_MAX];
    char deriver[48];
    uint64_t reserved[4];
} weft_tensor;

/* ---- nodes ------------------------------------------------------------------------------ */
#define WEFT_NODE_MAX_IN 8
#define WEFT_NODE_MAX_OUT 4
#define WEFT_PARAMS_I 8
#define WEFT_PARAMS_F 8

typedef struct weft_op_params {
    int64_t i[WEFT_PARAMS_I];
    float f[WEFT_PARAMS_F];
} weft_op_params;

typedef struct weft_node {
    uint32_t op;    /* weft_op or a registered user op id */
    int32_t layer;  /* the transformer layer it belongs to, -1 for none (profiling, placement) */
    uint32_t n_in;
    uint32_t n_out;
    uint32_t in[WEFT_NODE_MAX_IN];   /* tensor ids; UINT32_MAX = absent optional input */
    uint32_t out[WEFT_NODE_MAX_OUT]; /* tensor ids */
    weft_op_params p;
    char name[48]; /* for printing and profiling: "layers.3.attn.q" */
    uint32_t flags;
    uint32_t reserved[3];
} weft_node;

#define WEFT_TENSOR_NONE UINT32_MAX

/* ---- shape buckets ---------------------------------------------------------------------- */
typedef struct weft_bucket {
    uint32_t size;       /* sizeof(weft_bucket) */
    uint32_t max_tokens; /* rows of every activation (tokens of the step, summed over requests) */
    uint32_t max_seqs;   /* requests in the step */
    uint32_t max_logits; /* rows of out.logits */
    uint32_t kv_class;   /* KV-length class (0 = any); executors that capture may key on it */
    uint32_t reserved[3];
} weft_bucket;

/* ---- the graph -------------------------------------------------------------------------- */
typedef struct weft_graph {
    uint32_t size; /* sizeof(weft_graph) */
    uint32_t n_tensors;
    uint32_t n_nodes;
    uint32_t reserved0;
    weft_tensor *tensors; /* (n_tensors) indexed by id; removed tensors keep their slot */
    weft_node *nodes;     /* (n_nodes) in execution order */
    weft_bucket bucket;
    uint64_t reserved[4];
} weft_graph;

/* Services to build and rewrite graphs (host service WEFT_SERVICE_GRAPH). All are setup-class.
 * Functions returning a tensor id return WEFT_TENSOR_NONE on failure with err filled. */
typedef struct weft_error weft_error;
typedef struct weft_graph_service {
    uint32_t size;
    uint32_t version; /* 1 */
    uint32_t (*tensor_add)(weft_graph *g, uint32_t kind, uint32_t dtype, uint32_t rank,
                           const int64_t *shape, const char *name, weft_error *err);
    /* A weight bound to a checkpoint tensor by name (dtype/shape checked when bound). */
    uint32_t (*weight_add)(weft_graph *g, const char *canonical, const char *source,
                           uint32_t dtype, uint32_t rank, const int64_t *shape, weft_error *err);
    /* Appends a node (returns its index) or inserts it before node index `before` (<n_nodes). */
    int32_t (*node_add)(weft_graph *g, const weft_node *node, uint32_t before, weft_error *err);
    int32_t (*node_remove)(weft_graph *g, uint32_t index, weft_error *err);
    /* Rewrites every input use of tensor `from` into `to` in nodes from index `start`. */
    int32_t (*replace_uses)(weft_graph *g, uint32_t from, uint32_t to, uint32_t start);
    uint32_t (*tensor_find)(const weft_graph *g, const char *name);
    /* Registers (or finds) a user op by name, e.g. "fuse.add_rmsnorm"; returns its id. */
    uint32_t (*op_register)(const char *name, weft_error *err);
    const char *(*op_name)(uint32_t op);
    /* Number of nodes reading tensor t (for pattern matching: "is this the only use?"). */
    uint32_t (*tensor_uses)(const weft_graph *g, uint32_t t);
} weft_graph_service;

#ifdef __cplusplus
}
#endif
#endif /* WEFT_GRAPH_H */
