/* fuse.norm-linear's graph pass on hand-built decoder graphs (no device needed), shaped as after
 * fuse.rmsnorm-residual, fuse.merged-projections and fuse.swiglu: embed, layer 0's plain
 * attention norm, then per layer the q|k|v product, a stand-in attention (split + attention),
 * the o projection and its ADD_RMSNORM join, the gate|up product (fuse.linear_swiglu, merged or
 * as two weights), the down projection and its join, whose normalised row feeds the next layer's
 * q|k|v product or, after the last layer, the LM head (a LINEAR). Checked, with the option
 * products 3 (both kinds of product): each join and the product reading its y become one
 * fuse.norm_linear node with the contract of techniques/fuse.norm-linear/README.md (inputs x,
 * res, norm weight, the product's weight and bias or up rows; outputs the product's, r, y; eps,
 * the swiglu and merged flags; the product's layer, place and name) and the graph stays valid,
 * two joins a layer; a bias-carrying product fuses; the graph is left exactly as it was (same
 * canonical hash) when y has a second reader, is a graph output, is read by something other than
 * a product (a plain RMSNORM, an ADD, an LM_HEAD node) or is also passed as the product's
 * weight, when r is read between the join and the product, when x or res is rewritten in place
 * between them, when r is written in place over x or res, when the join's tensors differ in
 * dtype, and when the bucket has more rows than max_tokens; a second run changes nothing. The
 * option products picks the joins by their product: left out (the default, 2) exactly the joins
 * read by a fuse.linear_swiglu (gate|up) are fused and those read by a LINEAR (q|k|v, the LM
 * head) stay an ADD_RMSNORM and a LINEAR; 1 fuses exactly the LINEAR-read joins, 3 all; a run
 * with 2 then one with 1 gives the graph of one run with 3. max_tokens outside 1..8 and
 * products outside 1..3 are refused at create, the message naming the option and its range.
 * Option down 1: each gate|up node takes in the down projection after it (the 6-input form:
 * inputs as above plus the down weight, outputs the down product, r, y and h; p.i[2] 1; "mlp+"
 * names), the q|k|v joins (products 3) keep the 5-input form, a second run changes nothing;
 * a down projection with a bias, an h that is a graph output or read twice, or a down weight
 * of the wrong width stays a LINEAR beside a 5-input node; down outside 0..1 is refused. The
 * bit-identity of the op itself is the cuda backend's to check (tests/unit/test_cuda_ops.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "plugin/host.h"
#include "weft/plugin.h"

#include "pass_plugin.h"

/* Shapes only: no tensor data is allocated. q|k|v is (D, D) (q 512, k and v 256 columns) and
 * the vocabulary D wide, so every LINEAR product may take y as its bias (y_weight). */
enum { NL = 3, JOINS = 2 * NL, D = 1024, QW = 512, KVW = 256, F = 2048, V = D };
#define ALL ((1u << JOINS) - 1)
#define LAST (1u << (JOINS - 1)) /* the final norm's join (LM head) */
#define GATE_UP 0x15u            /* joins 0, 2, 4: read by gate|up (fuse.linear_swiglu) */
#define QKV (ALL & ~GATE_UP)     /* joins 1, 3, 5: read by a LINEAR (q|k|v, the LM head) */
#define BOTH 3                   /* the option products: LINEAR and fuse.linear_swiglu */
#define OP_NAME "fuse.norm_linear"
#define SWIGLU_OP "fuse.linear_swiglu"

static const weft_graph_service *gs;
static const weft_plugin_descriptor *desc;
static weft_host *host;
static void *dl;
static uint32_t (*fused_of)(const void *st), (*downs_of)(const void *st);

/* What to build. Each variation applies to the joins whose bit is set in its mask: join 2l is
 * layer l's after the o projection (product: gate|up), 2l + 1 its join after the down
 * projection (product: layer l + 1's q|k|v, or the LM head after the last layer). */
typedef struct form {
    uint32_t rows;        /* the bucket's max_tokens (default 1) */
    uint32_t split_gu;    /* layer mask: fuse.linear_swiglu with gate and up as two weights */
    uint32_t bias;        /* the LINEAR product carries a bias */
    uint32_t none_bias;   /* the LINEAR product has a third input slot holding WEFT_TENSOR_NONE */
    uint32_t between;     /* a node between join and product reads x and res (allowed) */
    uint32_t second_read; /* another node, after the product, also reads y */
    uint32_t output;      /* y is a graph output */
    uint32_t norm_reader; /* y is read by a plain RMSNORM, whose output the product reads */
    uint32_t add_reader;  /* y is read by an ADD, whose output the product reads */
    uint32_t lm_head_op;  /* the final product is a WEFT_OP_LM_HEAD node, not a LINEAR */
    uint32_t y_weight;    /* the product also takes y as its bias (LINEAR) or up rows (swiglu) */
    uint32_t r_read;      /* a node between join and product reads r */
    uint32_t inplace_x;   /* a node between join and product rewrites x (in[0]) in place */
    uint32_t inplace_res; /* a node between join and product rewrites res (in[1]) in place */
    uint32_t r_over_x;    /* the join writes r in place over x: out[1] == in[0] */
    uint32_t r_over_res;  /* the join writes r in place over res: out[1] == in[1] */
    uint32_t f32_r;       /* r is f32, x, res and y bf16 */
} form;

/* One join and its product as built: the ids the fused node must carry. */
typedef struct pair {
    uint32_t x, res, nw, y, r; /* the join's in[0..2], out[0..1] */
    float eps;
    uint32_t w, b, out; /* the product's in[1], in[2] (or WEFT_TENSOR_NONE), out[0] */
    uint32_t op;        /* the product's */
    int swiglu, merged;
    int32_t layer; /* the product's */
    char name[48]; /* the product's */
    char prev[48]; /* the node before the product, the join not counted */
    char next[48]; /* the node after the product ("" at the end) */
} pair;

typedef struct built {
    weft_graph *g;
    pair p[JOINS];
} built;

static uint32_t swiglu_op, fused_op;

/* An activation (T, cols) of bf16 named "<base><suffix>". */
static uint32_t act(weft_graph *g, int64_t cols, const char *base, const char *suffix) {
    char nm[WEFT_NAME_MAX];
    snprintf(nm, sizeof(nm), "%s%s", base, suffix);
    return pass_tensor(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_BF16, g->bucket.max_tokens, cols, nm);
}

/* y = t * f (SCALE), in place when y == t */
static void scale(weft_graph *g, int32_t layer, const char *name, uint32_t t, uint32_t y) {
    weft_op_params sp = {.f = {0.5f}};
    pass_node(g, WEFT_OP_SCALE, layer, name, &t, 1, &y, 1, &sp);
}

/* Join k (named `name`, in layer `layer`): y, r = add_rmsnorm(*stream, t, w_norm), with the
 * stream as in[0] as llama builds it; then what s puts between it and its product. *stream
 * becomes r; returns what the product reads (y, or a non-product reader's output). */
static uint32_t join_node(weft_graph *g, const form *s, int k, pair *p, int32_t layer,
                          const char *name, uint32_t *stream, uint32_t t) {
    const uint32_t bit = 1u << k, bf = WEFT_DTYPE_BF16, T = g->bucket.max_tokens;
    char nm[WEFT_NAME_MAX];
    memset(p, 0, sizeof(*p));
    p->x = *stream;
    p->res = t;
    p->nw = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, 0, name);
    snprintf(nm, sizeof(nm), "%s.y", name);
    p->y =
        pass_tensor(g, s->output & bit ? WEFT_TENSOR_OUTPUT : WEFT_TENSOR_ACTIVATION, bf, T, D, nm);
    snprintf(nm, sizeof(nm), "%s.r", name);
    if (s->r_over_x & bit)
        p->r = p->x;
    else if (s->r_over_res & bit)
        p->r = p->res;
    else
        p->r =
            pass_tensor(g, WEFT_TENSOR_ACTIVATION, s->f32_r & bit ? WEFT_DTYPE_F32 : bf, T, D, nm);
    p->eps = 1e-6f * (float)(k + 1); /* each join its own, to see which one a node came from */
    weft_op_params np = {.f = {p->eps}};
    uint32_t in[3] = {p->x, p->res, p->nw}, out[2] = {p->y, p->r};
    pass_node(g, WEFT_OP_ADD_RMSNORM, layer, name, in, 3, out, 2, &np);
    if (s->r_read & bit) scale(g, layer, "r_reader", p->r, act(g, D, name, ".r_scaled"));
    if (s->between & bit) {
        uint32_t bin[2] = {p->x, p->res}, z = act(g, D, name, ".sum");
        pass_node(g, WEFT_OP_ADD, layer, "between", bin, 2, &z, 1, NULL);
    }
    if (s->inplace_x & bit) scale(g, layer, "x_in_place", p->x, p->x);
    if (s->inplace_res & bit) scale(g, layer, "res_in_place", p->res, p->res);
    uint32_t h = p->y;
    if (s->norm_reader & bit) {
        snprintf(nm, sizeof(nm), "%s.extra", name);
        uint32_t nin[2] = {p->y, pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, 0, nm)};
        h = act(g, D, name, ".renormed");
        pass_node(g, WEFT_OP_RMSNORM, layer, "extra_norm", nin, 2, &h, 1, &np);
    } else if (s->add_reader & bit) {
        uint32_t ain[2] = {p->y, p->res};
        h = act(g, D, name, ".plus");
        pass_node(g, WEFT_OP_ADD, layer, "extra_add", ain, 2, &h, 1, NULL);
    }
    *stream = p->r;
    return h;
}

enum { P_QKV, P_GATE_UP, P_HEAD };

/* The product reading h in layer `layer` (kind: q|k|v, gate|up, LM head), join k's (k < 0: layer
 * 0's q|k|v after the plain norm); returns its output. y is join k's y, for y_weight. */
static uint32_t product(weft_graph *g, const form *s, int k, pair *p, int kind, int32_t layer,
                        uint32_t h) {
    const uint32_t bit = k >= 0 ? 1u << k : 0, bf = WEFT_DTYPE_BF16, T = g->bucket.max_tokens;
    char nm[48], wn[WEFT_NAME_MAX];
    uint32_t in[3] = {h, WEFT_TENSOR_NONE, WEFT_TENSOR_NONE}, n_in = 2, out, op = WEFT_OP_LINEAR;
    uint32_t y = k >= 0 ? p->y : WEFT_TENSOR_NONE;
    weft_op_params pp;
    memset(&pp, 0, sizeof(pp));
    if (kind == P_GATE_UP) {
        /* layer 1's name is longer than the 42 characters the fused name keeps */
        snprintf(nm, sizeof(nm),
                 layer == 1 ? "layers.%d.feed_forward.gate_up_projection_swiglu"
                            : "layers.%d.mlp.gate_up",
                 layer);
        op = swiglu_op;
        int merged = !(s->split_gu >> layer & 1) && !(s->y_weight & bit);
        in[1] = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, merged ? 2 * F : F, D, nm);
        if (!merged) {
            snprintf(wn, sizeof(wn), "%s.up", nm);
            in[2] = s->y_weight & bit ? y : pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, F, D, wn);
            n_in = 3;
        }
        pp.i[0] = merged;
        out = act(g, F, nm, ".y");
    } else {
        int64_t N = kind == P_QKV ? D : V;
        if (kind == P_QKV)
            snprintf(nm, sizeof(nm), "layers.%d.attn.qkv", layer);
        else
            snprintf(nm, sizeof(nm), "lm_head");
        in[1] = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, N, D, nm);
        if (s->bias & bit) {
            snprintf(wn, sizeof(wn), "%s.bias", nm);
            in[2] = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, N, 0, wn);
        } else if (s->y_weight & bit) {
            in[2] = y;
        }
        n_in = (s->bias | s->none_bias | s->y_weight) & bit ? 3 : 2;
        if (kind == P_HEAD && s->lm_head_op) op = WEFT_OP_LM_HEAD;
        out = kind == P_QKV
                  ? act(g, N, nm, ".y")
                  : pass_tensor(g, WEFT_TENSOR_OUTPUT, WEFT_DTYPE_F32, T, V, "out.logits");
    }
    pass_node(g, op, layer, nm, in, n_in, &out, 1, &pp);
    if (s->second_read & bit) scale(g, layer, "second_reader", y, act(g, D, nm, ".y_scaled"));
    if (k >= 0) {
        p->w = in[1];
        p->b = n_in == 3 ? in[2] : WEFT_TENSOR_NONE;
        p->out = out;
        p->op = op;
        p->swiglu = op == swiglu_op;
        p->merged = (int)pp.i[0];
        p->layer = layer;
        snprintf(p->name, sizeof(p->name), "%s", nm);
    }
    return out;
}

/* The index of the first node of op `op` writing tensor t as out[0], or -1. */
static int32_t find(const weft_graph *g, uint32_t op, uint32_t t) {
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op && g->nodes[i].out[0] == t) return (int32_t)i;
    return -1;
}

/* embed -> x; layer 0's attn norm; per layer q|k|v, split, attention, o projection + join,
 * gate|up, down projection + join; LM head -> out.logits */
static built build(const form *s) {
    built b;
    memset(&b, 0, sizeof(b));
    const uint32_t T = s->rows ? s->rows : 1, bf = WEFT_DTYPE_BF16;
    weft_bucket bk = {.size = sizeof(bk), .max_tokens = T, .max_seqs = 1, .max_logits = T};
    b.g = weft_graph_new(&bk);
    assert_non_null(b.g);
    weft_graph *g = b.g;
    uint32_t tok = pass_tensor(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.tokens");
    uint32_t pos = pass_tensor(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.positions");
    uint32_t ein[2] = {tok, pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, V, D, "embed")};
    uint32_t stream = act(g, D, "x", "");
    pass_node(g, WEFT_OP_EMBED, -1, "embed", ein, 2, &stream, 1, NULL);
    /* no residual yet: layer 0's attention norm stays a plain RMSNORM, and its product too */
    uint32_t nin[2] = {stream, pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, 0, "layers.0.attn_norm")};
    uint32_t h = act(g, D, "layers.0.attn_norm", ".y");
    weft_op_params np = {.f = {1e-6f}};
    pass_node(g, WEFT_OP_RMSNORM, 0, "layers.0.attn_norm", nin, 2, &h, 1, &np);
    for (int32_t l = 0; l < NL; l++) {
        char nm[WEFT_NAME_MAX];
        int k = 2 * l; /* this layer's first join */
        uint32_t qkv = product(g, s, k - 1, k ? &b.p[k - 1] : NULL, P_QKV, l, h);
        /* stand-in attention: split q|k|v, attend */
        snprintf(nm, sizeof(nm), "layers.%d.attn", l);
        uint32_t qkvs[3] = {act(g, QW, nm, ".q"), act(g, KVW, nm, ".k"), act(g, KVW, nm, ".v")};
        weft_op_params sp = {.i = {QW, KVW, KVW}};
        pass_node(g, WEFT_OP_SPLIT, l, nm, &qkv, 1, qkvs, 3, &sp);
        uint32_t ain[4] = {qkvs[0], qkvs[1], qkvs[2], pos}, att = act(g, QW, nm, ".y");
        weft_op_params ap = {.i = {l, 8, 4, 64}};
        pass_node(g, WEFT_OP_ATTENTION, l, nm, ain, 4, &att, 1, &ap);
        snprintf(nm, sizeof(nm), "layers.%d.attn.o", l);
        uint32_t oin[2] = {att, pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, QW, nm)};
        uint32_t o = act(g, D, nm, ".y");
        pass_node(g, WEFT_OP_LINEAR, l, nm, oin, 2, &o, 1, NULL);
        snprintf(nm, sizeof(nm), "layers.%d.ffn_norm", l);
        h = join_node(g, s, k, &b.p[k], l, nm, &stream, o);
        uint32_t gu = product(g, s, k, &b.p[k], P_GATE_UP, l, h);
        snprintf(nm, sizeof(nm), "layers.%d.mlp.down", l);
        uint32_t din[2] = {gu, pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, F, nm)};
        uint32_t down = act(g, D, nm, ".y");
        pass_node(g, WEFT_OP_LINEAR, l, nm, din, 2, &down, 1, NULL);
        /* the next layer's attention norm, or the final norm */
        if (l + 1 < NL)
            snprintf(nm, sizeof(nm), "layers.%d.attn_norm", l + 1);
        else
            snprintf(nm, sizeof(nm), "norm");
        h = join_node(g, s, k + 1, &b.p[k + 1], l, nm, &stream, down);
    }
    product(g, s, JOINS - 1, &b.p[JOINS - 1], P_HEAD, -1, h);
    /* each product's neighbours, to see that the fused node takes the product's place */
    for (int k = 0; k < JOINS; k++) {
        pair *p = &b.p[k];
        int32_t ai = find(g, WEFT_OP_ADD_RMSNORM, p->y), pi = -1;
        for (uint32_t i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].out[0] == p->out) pi = (int32_t)i;
        assert_true(ai >= 1 && pi > ai);
        snprintf(p->prev, sizeof(p->prev), "%s", g->nodes[pi - 1 == ai ? ai - 1 : pi - 1].name);
        snprintf(p->next, sizeof(p->next), "%s",
                 (uint32_t)pi + 1 < g->n_nodes ? g->nodes[pi + 1].name : "");
    }
    weft_error err = {.size = sizeof(err)};
    if (weft_graph_validate(g, &err)) fail_msg("built graph: %s", err.message);
    return b;
}

/* A pass instance (max_tokens, products or down 0: that option left out, the manifest
 * default; down's default is 0 anyway). */
static void *create_down(int64_t max_tokens, int64_t products, int64_t down) {
    void *st = NULL;
    weft_error err = {.size = sizeof(err)};
    weft_option opt[3];
    uint32_t n = 0;
    if (max_tokens)
        opt[n++] = (weft_option){.key = "max_tokens", .type = WEFT_OPTION_INT, .i = max_tokens};
    if (products)
        opt[n++] = (weft_option){.key = "products", .type = WEFT_OPTION_INT, .i = products};
    if (down) opt[n++] = (weft_option){.key = "down", .type = WEFT_OPTION_INT, .i = down};
    weft_options opts = {n, n ? opt : NULL};
    if (desc->create(weft_host_services_of(host), &opts, &st, &err))
        fail_msg("create %s: %s", desc->name, err.message);
    return st;
}

static void *create(int64_t max_tokens, int64_t products) {
    return create_down(max_tokens, products, 0);
}

/* Runs instance st's pass once; returns the joins it fused (its counter's growth). */
static uint32_t run_with(void *st, weft_graph *g) {
    weft_error err = {.size = sizeof(err)};
    weft_model_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.size = sizeof(cfg);
    uint32_t before = fused_of(st);
    if (desc->pass->run(st, &cfg, gs, g, &err)) fail_msg("pass: %s", err.message);
    if (weft_graph_validate(g, &err)) fail_msg("graph after the pass: %s", err.message);
    return fused_of(st) - before;
}

static uint32_t run_pass(weft_graph *g, int64_t max_tokens, int64_t products) {
    void *st = create(max_tokens, products);
    uint32_t n = run_with(st, g);
    desc->destroy(st);
    return n;
}

static int count_op(const weft_graph *g, uint32_t op) {
    int n = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

static int popcount(uint32_t m) {
    int n = 0;
    for (; m; m &= m - 1)
        n++;
    return n;
}

/* Nodes writing tensor t. */
static int writers(const weft_graph *g, uint32_t t) {
    int n = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        for (uint32_t o = 0; o < g->nodes[i].n_out; o++)
            n += g->nodes[i].out[o] == t;
    return n;
}

/* The fused node of join p: exactly the contract of the README, at the product's place. */
static void check_pair(const weft_graph *g, const pair *p) {
    int32_t at = find(g, fused_op, p->out);
    if (at < 0) fail_msg("no fused node writes %s", g->tensors[p->out].name);
    const weft_node *n = &g->nodes[at];
    assert_int_equal(n->n_in, 5);
    assert_int_equal(n->in[0], p->x);
    assert_int_equal(n->in[1], p->res);
    assert_int_equal(n->in[2], p->nw);
    assert_int_equal(n->in[3], p->w);
    assert_int_equal(n->in[4], p->b); /* bias, up rows, or WEFT_TENSOR_NONE */
    assert_int_equal(n->n_out, 3);
    assert_int_equal(n->out[0], p->out);
    assert_int_equal(n->out[1], p->r);
    assert_int_equal(n->out[2], p->y);
    assert_true(n->p.f[0] == p->eps);
    for (int k = 1; k < WEFT_PARAMS_F; k++)
        assert_true(n->p.f[k] == 0.f);
    assert_int_equal(n->p.i[0], p->swiglu);
    assert_int_equal(n->p.i[1], p->merged);
    for (int k = 2; k < WEFT_PARAMS_I; k++)
        assert_int_equal(n->p.i[k], 0);
    assert_int_equal(n->flags, 0);
    assert_int_equal(n->layer, p->layer); /* the product's, not the join's */
    char want[48];
    snprintf(want, sizeof(want), "norm+%.42s", p->name);
    assert_string_equal(n->name, want);
    /* the product's place: after what preceded it (the join gone), before what followed it */
    assert_true(at > 0);
    assert_string_equal(g->nodes[at - 1].name, p->prev);
    assert_string_equal((uint32_t)at + 1 < g->n_nodes ? g->nodes[at + 1].name : "", p->next);
    /* the join and the product are gone; y is the fused node's and nobody reads it */
    assert_int_equal(find(g, WEFT_OP_ADD_RMSNORM, p->y), -1);
    assert_int_equal(writers(g, p->out), 1);
    assert_int_equal(writers(g, p->r), 1);
    assert_int_equal(writers(g, p->y), 1);
    assert_int_equal(gs->tensor_uses(g, p->y), 0);
    printf("  %s -> %s (in %u %u %u %u %d, out %u %u %u, eps %g, swiglu %d merged %d, layer "
           "%d)\n",
           p->name, n->name, n->in[0], n->in[1], n->in[2], n->in[3],
           n->in[4] == WEFT_TENSOR_NONE ? -1 : (int)n->in[4], n->out[0], n->out[1], n->out[2],
           (double)n->p.f[0], (int)n->p.i[0], (int)n->p.i[1], n->layer);
}

/* The joins in `want` fuse with their products, the others stay as built: their join and their
 * product, of the op it was built with, still write y, r and the product's output. */
static void check_fused(const form *s, int64_t max_tokens, int64_t products, uint32_t want,
                        const char *what) {
    built b = build(s);
    uint32_t nodes = b.g->n_nodes;
    int linears = count_op(b.g, WEFT_OP_LINEAR), swiglus = count_op(b.g, swiglu_op),
        fused = popcount(want), lin = 0; /* lin: the fused joins whose product is a LINEAR */
    for (int k = 0; k < JOINS; k++)
        lin += (want >> k & 1) && !b.p[k].swiglu;
    printf("fused (%s):\n", what);
    assert_int_equal(run_pass(b.g, max_tokens, products), fused);
    assert_int_equal(b.g->n_nodes, nodes - (uint32_t)fused);
    assert_int_equal(count_op(b.g, fused_op), fused);
    assert_int_equal(count_op(b.g, WEFT_OP_ADD_RMSNORM), JOINS - fused);
    assert_int_equal(count_op(b.g, WEFT_OP_LINEAR), linears - lin);
    assert_int_equal(count_op(b.g, swiglu_op), swiglus - (fused - lin));
    for (int k = 0; k < JOINS; k++) {
        if (want >> k & 1) {
            check_pair(b.g, &b.p[k]);
        } else {
            int32_t a = find(b.g, WEFT_OP_ADD_RMSNORM, b.p[k].y);
            assert_true(a >= 0);
            assert_int_equal(b.g->nodes[a].out[1], b.p[k].r);
            assert_true(find(b.g, b.p[k].op, b.p[k].out) > a);
            assert_int_equal(find(b.g, fused_op, b.p[k].out), -1);
        }
    }
    weft_graph_free(b.g);
}

static void check_unchanged(const form *s, int64_t max_tokens, int64_t products, const char *why) {
    built b = build(s);
    char before[33];
    pass_hash(b.g, before);
    pass_expect_unchanged(b.g, before, run_pass(b.g, max_tokens, products), why);
    weft_graph_free(b.g);
}

static void test_decoder(void **state) {
    (void)state;
    form s = {.split_gu = 0x2}; /* layers 0 and 2 merged gate|up, layer 1 two weights */
    check_fused(&s, 0, BOTH, ALL, "decoder, merged and split gate|up");
    form m = {.split_gu = 0};
    check_fused(&m, 0, BOTH, ALL, "every gate|up merged");
    form u = {.split_gu = (1u << NL) - 1};
    check_fused(&u, 0, BOTH, ALL, "every gate|up as two weights");
}

static void test_bias(void **state) {
    (void)state;
    form s = {.bias = ALL};
    check_fused(&s, 0, BOTH, ALL, "q|k|v and LM head with bias");
    form t = {.none_bias = ALL};
    check_fused(&t, 0, BOTH, ALL, "third input slot absent");
}

/* A node between the join and the product that neither reads r nor writes the join's inputs
 * does not stop the rewrite; the fused node comes after it, at the product's place. */
static void test_between(void **state) {
    (void)state;
    form s = {.between = ALL};
    check_fused(&s, 0, BOTH, ALL, "a reader of x and res in between");
}

static void test_max_tokens_option(void **state) {
    (void)state;
    form s = {.rows = 4};
    check_unchanged(&s, 0, BOTH, "4 rows, max_tokens 1 (default)");
    check_unchanged(&s, 3, BOTH, "4 rows, max_tokens 3");
    check_fused(&s, 4, BOTH, ALL, "4 rows, max_tokens 4");
    form e = {.rows = 8};
    check_fused(&e, 8, BOTH, ALL, "8 rows, max_tokens 8");
}

static void test_refuses(void **state) {
    (void)state;
    const struct {
        form s;
        const char *why;
    } cases[] = {
        {{.second_read = ALL}, "y read twice"},
        {{.output = ALL}, "y is a graph output"},
        {{.norm_reader = ALL}, "a plain RMSNORM reads y"},
        {{.add_reader = ALL}, "an ADD reads y"},
        {{.y_weight = ALL}, "y also the product's bias or up rows"},
        {{.r_read = ALL}, "r read between join and product"},
        {{.inplace_x = ALL}, "x rewritten in place between join and product"},
        {{.inplace_res = ALL}, "res rewritten in place between join and product"},
        {{.r_over_x = ALL}, "r written over x"},
        {{.r_over_res = ALL}, "r written over res"},
        {{.f32_r = ALL}, "r f32, the rest bf16"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_unchanged(&cases[i].s, 0, BOTH, cases[i].why);
}

/* A refused join does not stop the others: the pass goes on past it. */
static void test_refuses_one(void **state) {
    (void)state;
    form s = {.split_gu = 0x2, .second_read = 0x4};
    check_fused(&s, 0, BOTH, ALL & ~0x4u, "layer 1's first join's y read twice");
    form r = {.r_read = 0x2, .inplace_res = 0x8};
    check_fused(&r, 0, BOTH, ALL & ~0xau, "r read after join 1, res rewritten after join 3");
    /* the LM head as an LM_HEAD node, as models/llama builds it, is not a product here */
    form h = {.lm_head_op = 1};
    check_fused(&h, 0, BOTH, ALL & ~LAST, "LM head as an LM_HEAD node");
}

/* Once every join is fused, another run (same instance or a new one) finds nothing. */
static void test_twice(void **state) {
    (void)state;
    form s = {.split_gu = 0x2, .bias = 0x2};
    built b = build(&s);
    void *st = create(0, BOTH);
    char first[33], second[33];
    assert_int_equal(run_with(st, b.g), JOINS);
    assert_int_equal(fused_of(st), JOINS);
    assert_int_equal(weft_graph_hash(b.g, first), WEFT_OK);
    assert_int_equal(run_with(st, b.g), 0);
    assert_int_equal(fused_of(st), JOINS);
    desc->destroy(st);
    assert_int_equal(run_pass(b.g, 8, BOTH), 0);
    assert_int_equal(weft_graph_hash(b.g, second), WEFT_OK);
    printf("after one run %s, after three %s\n", first, second);
    assert_string_equal(first, second);
    for (int k = 0; k < JOINS; k++)
        check_pair(b.g, &b.p[k]);
    weft_graph_free(b.g);
}

/* Option `key` at each of bad[3] is refused at create, the message naming it and its range. */
static void check_refused(const char *key, const int64_t *bad, const char *range) {
    for (int i = 0; i < 3; i++) {
        weft_option opt = {.key = key, .type = WEFT_OPTION_INT, .i = bad[i]};
        weft_options opts = {1, &opt};
        weft_error err = {.size = sizeof(err)};
        void *st = NULL;
        assert_int_equal(desc->create(weft_host_services_of(host), &opts, &st, &err),
                         WEFT_ERR_INVALID);
        assert_null(st);
        printf("%s %lld: %s\n", key, (long long)bad[i], err.message);
        assert_non_null(strstr(err.message, key));
        assert_non_null(strstr(err.message, range));
    }
}

static void test_option_range(void **state) {
    (void)state;
    const int64_t bad[3] = {-1, 0 /* given explicitly, not left out */, 9};
    check_refused("max_tokens", bad, "1..8");
    desc->destroy(create(1, 0));
    desc->destroy(create(8, 0));
}

/* The option products picks the joins by the product reading them: left out (2) and 2 the
 * gate|up ones, 1 the q|k|v and LM head ones, 3 all; the others stay a join and a product. */
static void test_products(void **state) {
    (void)state;
    form s = {.split_gu = 0x2};
    check_fused(&s, 0, 0, GATE_UP, "products left out (2): gate|up only");
    check_fused(&s, 0, 2, GATE_UP, "products 2: gate|up only");
    check_fused(&s, 0, 1, QKV, "products 1: q|k|v and LM head only");
    check_fused(&s, 0, 3, ALL, "products 3: all");
    form u = {.split_gu = (1u << NL) - 1, .bias = ALL};
    check_fused(&u, 0, 0, GATE_UP, "products left out, gate|up as two weights, biased LINEARs");
    check_fused(&u, 0, 1, QKV, "products 1, gate|up as two weights, biased LINEARs");
    form h = {.lm_head_op = 1};
    check_fused(&h, 0, 1, QKV & ~LAST, "products 1, LM head as an LM_HEAD node");
    check_fused(&h, 0, 0, GATE_UP, "products left out, LM head as an LM_HEAD node");
    form r = {.second_read = 0x5};
    check_fused(&r, 0, 0, GATE_UP & ~0x5u, "products left out, joins 0 and 2's y read twice");
    form e = {.rows = 4};
    check_fused(&e, 4, 0, GATE_UP, "4 rows, max_tokens 4, products left out");
    check_unchanged(&e, 0, 1, "4 rows, max_tokens 1 (default), products 1");
}

/* A run with the default fuses the gate|up joins; a later one with products 1 the rest, and the
 * graph is the one a single run with products 3 makes. */
static void test_products_in_turn(void **state) {
    (void)state;
    form s = {.split_gu = 0x2, .bias = 0x2};
    built b = build(&s), c = build(&s);
    char turn[33], once[33];
    assert_int_equal(run_pass(b.g, 0, 0), popcount(GATE_UP));
    assert_int_equal(count_op(b.g, WEFT_OP_ADD_RMSNORM), popcount(QKV));
    assert_int_equal(run_pass(b.g, 0, 1), popcount(QKV));
    assert_int_equal(run_pass(b.g, 0, BOTH), 0);
    assert_int_equal(run_pass(c.g, 0, BOTH), JOINS);
    assert_int_equal(weft_graph_hash(b.g, turn), WEFT_OK);
    assert_int_equal(weft_graph_hash(c.g, once), WEFT_OK);
    printf("products 2 then 1: %s, products 3: %s\n", turn, once);
    assert_string_equal(turn, once);
    for (int k = 0; k < JOINS; k++)
        check_pair(b.g, &b.p[k]);
    weft_graph_free(b.g);
    weft_graph_free(c.g);
}

static void test_products_range(void **state) {
    (void)state;
    const int64_t bad[3] = {-1, 0 /* given explicitly, not left out */, 4};
    check_refused("products", bad, "1..3");
    for (int64_t p = 1; p <= 3; p++)
        desc->destroy(create(0, p));
}

/* The down projection reading gate|up's h, node di of graph g: its weight and output. */
typedef struct down_proj {
    uint32_t w, out;
    char name[48];
} down_proj;

static down_proj down_of(const weft_graph *g, uint32_t h) {
    down_proj d = {0, 0, ""};
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == WEFT_OP_LINEAR && g->nodes[i].in[0] == h) {
            d.w = g->nodes[i].in[1], d.out = g->nodes[i].out[0];
            snprintf(d.name, sizeof(d.name), "%s", g->nodes[i].name);
        }
    assert_true(d.out != 0);
    return d;
}

/* Option down 1 on graph b (built as s, mutated by the caller) with products `products`: the
 * gate|up joins in `took` take their down projection in (the 6-input form of the README: in[5]
 * the down weight, out[0] the down product, out[3] h, p.i[2] 1, "mlp+" and the product's name),
 * the other fused joins are the 5-input form. */
static void check_down(built *b, int64_t products, uint32_t took, const char *what) {
    down_proj d[JOINS];
    for (int k = 0; k < JOINS; k++)
        if (b->p[k].swiglu) d[k] = down_of(b->g, b->p[k].out);
    uint32_t nodes = b->g->n_nodes, want = products == BOTH ? ALL : GATE_UP;
    int linears = count_op(b->g, WEFT_OP_LINEAR);
    void *st = create_down(0, products, 1);
    printf("down (%s):\n", what);
    assert_int_equal(run_with(st, b->g), popcount(want));
    assert_int_equal(downs_of(st), popcount(took));
    desc->destroy(st);
    assert_int_equal(b->g->n_nodes, nodes - (uint32_t)popcount(want) - (uint32_t)popcount(took));
    assert_int_equal(count_op(b->g, WEFT_OP_LINEAR),
                     linears - popcount(want & QKV) - popcount(took));
    for (int k = 0; k < JOINS; k++) {
        if (!(want >> k & 1)) continue;
        if (!(took >> k & 1)) {
            /* a q|k|v product's neighbour before it was the down projection: now the node
             * that took it in */
            pair q = b->p[k];
            if (k > 0 && (took >> (k - 1) & 1) && !strcmp(q.prev, d[k - 1].name))
                snprintf(q.prev, sizeof(q.prev), "mlp+%.43s", b->p[k - 1].name);
            check_pair(b->g, &q);
            continue;
        }
        const pair *p = &b->p[k];
        int32_t at = find(b->g, fused_op, d[k].out);
        if (at < 0) fail_msg("no fused node writes %s", d[k].name);
        const weft_node *n = &b->g->nodes[at];
        assert_int_equal(n->n_in, 6);
        assert_int_equal(n->in[0], p->x);
        assert_int_equal(n->in[1], p->res);
        assert_int_equal(n->in[2], p->nw);
        assert_int_equal(n->in[3], p->w);
        assert_int_equal(n->in[4], p->b);
        assert_int_equal(n->in[5], d[k].w);
        assert_int_equal(n->n_out, 4);
        assert_int_equal(n->out[1], p->r);
        assert_int_equal(n->out[2], p->y);
        assert_int_equal(n->out[3], p->out);
        assert_true(n->p.f[0] == p->eps);
        assert_int_equal(n->p.i[0], 1);
        assert_int_equal(n->p.i[1], p->merged);
        assert_int_equal(n->p.i[2], 1);
        assert_int_equal(n->layer, p->layer);
        char want_name[48];
        snprintf(want_name, sizeof(want_name), "mlp+%.43s", p->name);
        assert_string_equal(n->name, want_name);
        /* the join, gate|up and down are gone; h and y are the node's and nobody reads them */
        assert_int_equal(find(b->g, WEFT_OP_ADD_RMSNORM, p->y), -1);
        assert_int_equal(find(b->g, swiglu_op, p->out), -1);
        assert_int_equal(find(b->g, WEFT_OP_LINEAR, d[k].out), -1);
        assert_int_equal(writers(b->g, p->out), 1);
        assert_int_equal(writers(b->g, d[k].out), 1);
        assert_int_equal(gs->tensor_uses(b->g, p->out), 0);
        assert_int_equal(gs->tensor_uses(b->g, p->y), 0);
        printf("  %s + %s -> %s\n", p->name, d[k].name, n->name);
    }
}

static void test_down(void **state) {
    (void)state;
    form s = {.split_gu = 0x2};
    built b = build(&s);
    check_down(&b, 0, GATE_UP, "every gate|up join, merged and apart");
    /* a second run changes nothing */
    char first[33], second[33];
    assert_int_equal(weft_graph_hash(b.g, first), WEFT_OK);
    void *st = create_down(0, BOTH, 1);
    assert_int_equal(run_with(st, b.g), popcount(QKV));
    desc->destroy(st);
    st = create_down(0, BOTH, 1);
    assert_int_equal(run_with(st, b.g), 0);
    assert_int_equal(downs_of(st), 0);
    desc->destroy(st);
    assert_int_equal(weft_graph_hash(b.g, second), WEFT_OK);
    assert_string_not_equal(first, second); /* the q|k|v joins went in the first of the two */
    weft_graph_free(b.g);
    b = build(&s);
    check_down(&b, BOTH, GATE_UP, "products 3: q|k|v joins in the 5-input form");
    weft_graph_free(b.g);
    /* down 0 (the default): the 5-input form, the down projections stay */
    check_fused(&s, 0, 0, GATE_UP, "down left out");
}

/* The gate|up node stays the 5-input form, its down projection a LINEAR, when the down
 * projection has a bias, h is a graph output or has a second reader, or the down weight is
 * not (D, F); each case in one layer only (join 2), the other two layers still taking
 * theirs in. */
static void test_down_refuses(void **state) {
    (void)state;
    const char *why[] = {"down with a bias", "h a graph output", "h read twice",
                         "down weight of the wrong width"};
    for (int c = 0; c < 4; c++) {
        form s = {.split_gu = 0x2};
        built b = build(&s);
        weft_graph *g = b.g;
        uint32_t h = b.p[2].out;
        int32_t di = -1;
        for (uint32_t i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == WEFT_OP_LINEAR && g->nodes[i].in[0] == h) di = (int32_t)i;
        assert_true(di > 0);
        weft_node *d = &g->nodes[di];
        if (c == 0) {
            d->in[2] = pass_tensor(g, WEFT_TENSOR_WEIGHT, WEFT_DTYPE_BF16, D, 0, "down.bias");
            d->n_in = 3;
        } else if (c == 1) {
            g->tensors[h].kind = WEFT_TENSOR_OUTPUT;
        } else if (c == 2) {
            scale(g, 1, "h_reader", h, act(g, F, "h", ".scaled"));
        } else {
            d->in[1] = pass_tensor(g, WEFT_TENSOR_WEIGHT, WEFT_DTYPE_BF16, D / 2, F, "down.half");
        }
        weft_error err = {.size = sizeof(err)};
        if (c != 3 && weft_graph_validate(g, &err)) fail_msg("%s: %s", why[c], err.message);
        if (c == 3) {
            /* the validator may refuse this graph; a host that does not validate still gets
             * that layer's down projection left alone */
            uint32_t o = d->out[0];
            void *st = create_down(0, 0, 1);
            assert_int_equal(desc->pass->run(st, NULL, gs, g, &err), WEFT_OK);
            assert_int_equal(downs_of(st), 2);
            desc->destroy(st);
            assert_true(find(g, WEFT_OP_LINEAR, o) >= 0);
        } else {
            check_down(&b, 0, GATE_UP & ~0x4u, why[c]);
        }
        weft_graph_free(g);
    }
}

static void test_down_range(void **state) {
    (void)state;
    const int64_t bad[3] = {-1, 2, 7};
    check_refused("down", bad, "0..1");
    desc->destroy(create_down(0, 0, 0));
    desc->destroy(create_down(0, 0, 1));
}

static int setup(void **state) {
    (void)state;
    gs = weft_graph_service_get();
    if (open_pass_plugin("fuse.norm-linear", "weft-fuse-norm-linear", &dl, &desc)) return -1;
    void *sym = dlsym(dl, "fuse_norm_linear_fused");
    if (sym) memcpy(&fused_of, &sym, sizeof(fused_of));
    sym = dlsym(dl, "fuse_norm_linear_downs");
    if (sym) memcpy(&downs_of, &sym, sizeof(downs_of));
    if (!fused_of || !downs_of) return -1;
    weft_error err = {.size = sizeof(err)};
    host = weft_host_new();
    if (!host ||
        weft_host_register_service(host, WEFT_SERVICE_GRAPH, weft_graph_service_get()) != 0)
        return -1;
    swiglu_op = gs->op_register(SWIGLU_OP, &err);
    fused_op = gs->op_register(OP_NAME, &err);
    return swiglu_op == WEFT_OP_NONE || fused_op == WEFT_OP_NONE ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    if (host) weft_host_free(host);
    if (dl) dlclose(dl);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decoder),        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_between),        cmocka_unit_test(test_max_tokens_option),
        cmocka_unit_test(test_refuses),        cmocka_unit_test(test_refuses_one),
        cmocka_unit_test(test_twice),          cmocka_unit_test(test_option_range),
        cmocka_unit_test(test_products),       cmocka_unit_test(test_products_in_turn),
        cmocka_unit_test(test_products_range), cmocka_unit_test(test_down),
        cmocka_unit_test(test_down_refuses),   cmocka_unit_test(test_down_range),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
