/* fuse.linear-add-norm's graph pass on hand-built decoder graphs (no device needed), shaped as
 * after fuse.rmsnorm-residual: per layer a stand-in attention product, the o projection and its
 * ADD_RMSNORM join, gate/up/SwiGLU, the down projection and its join, then the LM head. Checked:
 * each product + join pair becomes one fuse.linear_add_rmsnorm node with the contract of
 * techniques/fuse.linear-add-norm/README.md (inputs x, w, bias, res, norm weight; outputs y, r;
 * eps; the product's layer and name) and the graph stays valid, two pairs a layer; the residual
 * on either side of the add and a bias-carrying product fuse; the graph is left exactly as it
 * was (same canonical hash) when the product's output has a second reader, is a graph output,
 * feeds a plain ADD or RMSNORM or has another dtype than the residual, when x is rewritten in
 * place between the two nodes, and when the bucket has more rows than max_tokens; max_tokens
 * outside 1..8 is refused at create; exec.l2-prefetch's pass gives the same graph whether it
 * runs before or after this one. The bit-identity of the op itself is the cuda backend's to check
 * (tests/unit/test_cuda_ops.c). */
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

/* Shapes only: no tensor data is allocated. Every product's weight is at least 1 MiB of bf16, so
 * exec.l2-prefetch counts it as a product (test_l2_prefetch_order). */
enum { NL = 2, PAIRS = 2 * NL, D = 1024, A = 512, F = 1024, V = 100 };
#define ALL ((1u << PAIRS) - 1)
#define OP_NAME "fuse.linear_add_rmsnorm"

static const weft_graph_service *gs;
static const weft_plugin_descriptor *desc, *prefetch;
static weft_host *host;
static void *dl, *dl_prefetch;
static uint32_t (*fused_of)(const void *st);

/* What to build. Each variation applies to the pairs whose bit (pair 2l: layer l's o
 * projection, 2l + 1: its down projection) is set in its mask. */
typedef struct form {
    uint32_t rows;        /* the bucket's max_tokens (default 1) */
    uint32_t res_first;   /* the join reads (res, t) as llama builds it; otherwise (t, res) */
    uint32_t bias;        /* the product carries a bias tensor */
    uint32_t none_bias;   /* the product has a third input slot holding WEFT_TENSOR_NONE */
    uint32_t second_read; /* another node also reads t */
    uint32_t output;      /* t is a graph output */
    uint32_t add_norm;    /* the join is ADD then RMSNORM (fuse.rmsnorm-residual not run) */
    uint32_t norm_only;   /* t feeds a plain RMSNORM (no residual add) */
    uint32_t f32_t;       /* t is f32, the residual bf16 */
    uint32_t inplace_x;   /* a node between product and join rewrites x in place */
} form;

/* One product + join pair as built: the ids the fused node must carry. */
typedef struct pair {
    uint32_t x, w, bias, t, res, nw, y, r;
    float eps;
    int32_t layer, join_layer;
    char name[48];
    int bias_slot; /* the product has three inputs */
} pair;

typedef struct built {
    weft_graph *g;
    pair p[PAIRS];
} built;

/* Product `name` (K -> D) reading x, then its join with the residual *res: *h becomes the
 * normalised row, *res the new residual stream. */
static void product_and_join(weft_graph *g, const form *s, uint32_t k, pair *p, const char *name,
                             int32_t layer, int32_t join_layer, int64_t K, uint32_t x,
                             uint32_t *res, uint32_t *h) {
    const uint32_t bf = WEFT_DTYPE_BF16, T = s->rows ? s->rows : 1, bit = 1u << k;
    char nm[96];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->layer = layer, p->join_layer = join_layer;
    p->x = x;
    p->res = *res;
    p->w = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, K, name);
    p->bias = WEFT_TENSOR_NONE;
    snprintf(nm, sizeof(nm), "%s.y", name);
    p->t = pass_tensor(g, s->output & bit ? WEFT_TENSOR_OUTPUT : WEFT_TENSOR_ACTIVATION,
                       s->f32_t & bit ? WEFT_DTYPE_F32 : bf, T, D, nm);
    uint32_t in[3] = {x, p->w, WEFT_TENSOR_NONE};
    if (s->bias & bit) {
        snprintf(nm, sizeof(nm), "%s.bias", name);
        in[2] = p->bias = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, 0, nm);
    }
    p->bias_slot = (s->bias | s->none_bias) & bit ? 1 : 0;
    pass_node(g, WEFT_OP_LINEAR, layer, name, in, p->bias_slot ? 3 : 2, &p->t, 1, NULL);
    if (s->inplace_x & bit) {
        snprintf(nm, sizeof(nm), "%s.x_scale", name);
        weft_op_params sp = {.f = {0.5f}};
        pass_node(g, WEFT_OP_SCALE, layer, nm, &x, 1, &x, 1, &sp);
    }
    snprintf(nm, sizeof(nm), "layers.%d.norm%u", join_layer, k);
    p->nw = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, 0, nm);
    snprintf(nm, sizeof(nm), "layers.%d.norm%u.y", join_layer, k);
    p->y = pass_tensor(g, WEFT_TENSOR_ACTIVATION, bf, T, D, nm);
    p->eps = 1e-6f * (float)(k + 1); /* each pair its own, to see which join it came from */
    weft_op_params np;
    memset(&np, 0, sizeof(np));
    np.f[0] = p->eps;
    snprintf(nm, sizeof(nm), "layers.%d.add%u", join_layer, k);
    if (s->norm_only & bit) { /* no residual: the stream passes unchanged */
        uint32_t nin[2] = {p->t, p->nw};
        pass_node(g, WEFT_OP_RMSNORM, join_layer, nm, nin, 2, &p->y, 1, &np);
        p->r = *res;
    } else {
        char rn[96];
        snprintf(rn, sizeof(rn), "%s.r", nm);
        p->r = pass_tensor(g, WEFT_TENSOR_ACTIVATION, bf, T, D, rn);
        if (s->add_norm & bit) {
            uint32_t ain[2] = {*res, p->t};
            pass_node(g, WEFT_OP_ADD, join_layer, nm, ain, 2, &p->r, 1, NULL);
            uint32_t nin[2] = {p->r, p->nw};
            snprintf(rn, sizeof(rn), "%s.norm", nm);
            pass_node(g, WEFT_OP_RMSNORM, join_layer, rn, nin, 2, &p->y, 1, &np);
        } else {
            uint32_t jin[3] = {p->t, *res, p->nw};
            if (s->res_first & bit) jin[0] = *res, jin[1] = p->t;
            uint32_t jout[2] = {p->y, p->r};
            pass_node(g, WEFT_OP_ADD_RMSNORM, join_layer, nm, jin, 3, jout, 2, &np);
        }
    }
    if (s->second_read & bit) {
        snprintf(nm, sizeof(nm), "%s.copy", name);
        uint32_t z =
            pass_tensor(g, WEFT_TENSOR_ACTIVATION, s->f32_t & bit ? WEFT_DTYPE_F32 : bf, T, D, nm);
        weft_op_params sp = {.f = {2.f}};
        pass_node(g, WEFT_OP_SCALE, layer, nm, &p->t, 1, &z, 1, &sp);
    }
    *res = p->r;
    *h = p->y;
}

/* embed -> x; attn_norm; per layer: attention stand-in, o projection + join, gate/up/swiglu,
 * down projection + join; LM head -> out.logits */
static built build(const form *s) {
    built b;
    memset(&b, 0, sizeof(b));
    const uint32_t T = s->rows ? s->rows : 1, bf = WEFT_DTYPE_BF16;
    weft_bucket bk = {.size = sizeof(bk), .max_tokens = T, .max_seqs = 1, .max_logits = 1};
    b.g = weft_graph_new(&bk);
    assert_non_null(b.g);
    weft_graph *g = b.g;
    uint32_t tok = pass_tensor(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.tokens");
    uint32_t table = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, V, D, "embed");
    uint32_t x = pass_tensor(g, WEFT_TENSOR_ACTIVATION, bf, T, D, "x");
    uint32_t ein[2] = {tok, table};
    pass_node(g, WEFT_OP_EMBED, -1, "embed", ein, 2, &x, 1, NULL);
    uint32_t nw0 = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, D, 0, "layers.0.attn_norm");
    uint32_t h = pass_tensor(g, WEFT_TENSOR_ACTIVATION, bf, T, D, "layers.0.attn_norm.y");
    weft_op_params np = {.f = {1e-6f}};
    uint32_t nin[2] = {x, nw0};
    pass_node(g, WEFT_OP_RMSNORM, 0, "layers.0.attn_norm", nin, 2, &h, 1, &np);
    for (int32_t l = 0; l < NL; l++) {
        char nm[96];
        /* stand-in for q|k|v + attention: a product whose reader is another product */
        char an[96];
        snprintf(nm, sizeof(nm), "layers.%d.attn.qkv", l);
        snprintf(an, sizeof(an), "layers.%d.attn.y", l);
        uint32_t wa = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, A, D, nm);
        uint32_t att = pass_tensor(g, WEFT_TENSOR_ACTIVATION, bf, T, A, an);
        uint32_t ain[2] = {h, wa};
        pass_node(g, WEFT_OP_LINEAR, l, nm, ain, 2, &att, 1, NULL);
        /* layer 1's o projection has a name longer than the fused name's 39 characters */
        if (l == 1)
            snprintf(nm, sizeof(nm), "layers.%d.self_attention.output_projection", l);
        else
            snprintf(nm, sizeof(nm), "layers.%d.attn.o", l);
        product_and_join(g, s, 2 * (uint32_t)l, &b.p[2 * l], nm, l, l, A, att, &x, &h);
        uint32_t gu[2];
        for (int i = 0; i < 2; i++) {
            snprintf(nm, sizeof(nm), "layers.%d.mlp.%s", l, i ? "up" : "gate");
            uint32_t w = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, F, D, nm);
            snprintf(an, sizeof(an), "%s.y", nm);
            gu[i] = pass_tensor(g, WEFT_TENSOR_ACTIVATION, bf, T, F, an);
            uint32_t in[2] = {h, w};
            pass_node(g, WEFT_OP_LINEAR, l, nm, in, 2, &gu[i], 1, NULL);
        }
        snprintf(nm, sizeof(nm), "layers.%d.mlp.swiglu", l);
        uint32_t sw = pass_tensor(g, WEFT_TENSOR_ACTIVATION, bf, T, F, nm);
        pass_node(g, WEFT_OP_SWIGLU, l, nm, gu, 2, &sw, 1, NULL);
        snprintf(nm, sizeof(nm), "layers.%d.mlp.down", l);
        /* the down projection's join normalises for the next layer: its node carries layer
         * l + 1 here, so the test sees which of the two layers the fused node takes */
        product_and_join(g, s, 2 * (uint32_t)l + 1, &b.p[2 * l + 1], nm, l, l + 1, F, sw, &x, &h);
    }
    uint32_t head = pass_tensor(g, WEFT_TENSOR_WEIGHT, bf, V, D, "lm_head");
    uint32_t logits = pass_tensor(g, WEFT_TENSOR_OUTPUT, WEFT_DTYPE_F32, 1, V, "out.logits");
    uint32_t hin[2] = {h, head};
    pass_node(g, WEFT_OP_LM_HEAD, -1, "lm_head", hin, 2, &logits, 1, NULL);
    weft_error err = {.size = sizeof(err)};
    if (weft_graph_validate(g, &err)) fail_msg("built graph: %s", err.message);
    return b;
}

/* Runs plugin d's pass once (max_tokens 0: the manifest default); returns the pairs it fused
 * when d is fuse.linear-add-norm. */
static uint32_t run_plugin(const weft_plugin_descriptor *d, weft_graph *g, int64_t max_tokens) {
    void *st = NULL;
    weft_error err = {.size = sizeof(err)};
    weft_option opt = {.key = "max_tokens", .type = WEFT_OPTION_INT, .i = max_tokens};
    weft_options opts = {max_tokens ? 1 : 0, max_tokens ? &opt : NULL};
    if (d->create(weft_host_services_of(host), &opts, &st, &err))
        fail_msg("create %s: %s", d->name, err.message);
    weft_model_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.size = sizeof(cfg);
    weft_status s = d->pass->run(st, &cfg, gs, g, &err);
    if (s) fail_msg("pass %s: %s", d->name, err.message);
    uint32_t n = d == desc ? fused_of(st) : 0;
    d->destroy(st);
    if (weft_graph_validate(g, &err)) fail_msg("graph after %s: %s", d->name, err.message);
    return n;
}

static uint32_t run_pass(weft_graph *g, int64_t max_tokens) {
    return run_plugin(desc, g, max_tokens);
}

static int count_op(const weft_graph *g, uint32_t op) {
    int n = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

static uint32_t fused_op(void) {
    weft_error err = {.size = sizeof(err)};
    uint32_t op = gs->op_register(OP_NAME, &err);
    assert_int_not_equal(op, WEFT_OP_NONE);
    return op;
}

/* The fused node of pair p: exactly the contract of the README. */
static void check_pair(const weft_graph *g, const pair *p, uint32_t op) {
    int32_t at = -1;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op && g->nodes[i].out[0] == p->y) at = (int32_t)i;
    if (at < 0) fail_msg("no fused node writes %s", g->tensors[p->y].name);
    const weft_node *n = &g->nodes[at];
    assert_int_equal(n->n_in, 5);
    assert_int_equal(n->in[0], p->x);
    assert_int_equal(n->in[1], p->w);
    assert_int_equal(n->in[2], p->bias); /* WEFT_TENSOR_NONE when the product has none */
    assert_int_equal(n->in[3], p->res);
    assert_int_equal(n->in[4], p->nw);
    assert_int_equal(n->n_out, 2);
    assert_int_equal(n->out[0], p->y);
    assert_int_equal(n->out[1], p->r);
    assert_true(n->p.f[0] == p->eps);
    for (int k = 0; k < WEFT_PARAMS_I; k++)
        assert_int_equal(n->p.i[k], 0);
    for (int k = 1; k < WEFT_PARAMS_F; k++)
        assert_true(n->p.f[k] == 0.f);
    assert_int_equal(n->flags, 0);
    assert_int_equal(n->layer, p->layer); /* the product's, not the join's */
    char want[48];
    snprintf(want, sizeof(want), "%.39s+addnorm", p->name);
    assert_string_equal(n->name, want);
    /* t is gone from the graph's use: no node reads or writes it */
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        for (uint32_t k = 0; k < g->nodes[i].n_in; k++)
            assert_int_not_equal(g->nodes[i].in[k], p->t);
        for (uint32_t k = 0; k < g->nodes[i].n_out; k++)
            assert_int_not_equal(g->nodes[i].out[k], p->t);
    }
    printf("  %s -> %s (in %u %u %u %u %u, out %u %u, eps %g, layer %d)\n", p->name, n->name,
           n->in[0], n->in[1], n->in[2], n->in[3], n->in[4], n->out[0], n->out[1],
           (double)n->p.f[0], n->layer);
}

/* Every pair of s fuses (max_tokens 0: the default option). */
static void check_fused(const form *s, int64_t max_tokens, const char *what) {
    built b = build(s);
    uint32_t op = fused_op();
    uint32_t nodes = b.g->n_nodes;
    int linears = count_op(b.g, WEFT_OP_LINEAR);
    printf("fused (%s):\n", what);
    assert_int_equal(run_pass(b.g, max_tokens), PAIRS);
    assert_int_equal(b.g->n_nodes, nodes - PAIRS);
    assert_int_equal(count_op(b.g, op), PAIRS);
    assert_int_equal(count_op(b.g, WEFT_OP_ADD_RMSNORM), 0);
    assert_int_equal(count_op(b.g, WEFT_OP_LINEAR), linears - PAIRS);
    for (int k = 0; k < PAIRS; k++)
        check_pair(b.g, &b.p[k], op);
    weft_graph_free(b.g);
}

static void check_unchanged(const form *s, int64_t max_tokens, const char *why) {
    built b = build(s);
    char before[33];
    pass_hash(b.g, before);
    pass_expect_unchanged(b.g, before, run_pass(b.g, max_tokens), why);
    weft_graph_free(b.g);
}

static void test_fuses_two_pairs_per_layer(void **state) {
    (void)state;
    form s = {.res_first = ALL}; /* as the llama graph adds: residual + product */
    check_fused(&s, 0, "decoder, residual as in[0]");
}

static void test_residual_either_side(void **state) {
    (void)state;
    form s = {.res_first = 0};
    check_fused(&s, 0, "residual as in[1]");
    s.res_first = 0x5; /* the o projections' joins one way, the down projections' the other */
    check_fused(&s, 0, "mixed sides");
}

static void test_bias(void **state) {
    (void)state;
    form s = {.res_first = ALL, .bias = ALL};
    check_fused(&s, 0, "products with bias");
    form t = {.res_first = ALL, .none_bias = ALL};
    check_fused(&t, 0, "third input slot absent");
}

static void test_max_tokens_option(void **state) {
    (void)state;
    form s = {.rows = 4, .res_first = ALL};
    check_unchanged(&s, 0, "4 rows, max_tokens 1 (default)");
    check_unchanged(&s, 3, "4 rows, max_tokens 3");
    check_fused(&s, 4, "4 rows, max_tokens 4");
}

static void test_refuses(void **state) {
    (void)state;
    form s = {.res_first = ALL, .second_read = ALL};
    check_unchanged(&s, 0, "t read twice");
    form o = {.res_first = ALL, .output = ALL};
    check_unchanged(&o, 0, "t is a graph output");
    form an = {.res_first = ALL, .add_norm = ALL};
    check_unchanged(&an, 0, "plain ADD then RMSNORM");
    form nm = {.res_first = ALL, .norm_only = ALL};
    check_unchanged(&nm, 0, "plain RMSNORM reads t");
    form dt = {.res_first = ALL, .f32_t = ALL};
    check_unchanged(&dt, 0, "t f32, residual bf16");
    form ip = {.res_first = ALL, .inplace_x = ALL};
    check_unchanged(&ip, 0, "x rewritten in place before the join");
}

/* One refused pair does not stop the others: the pass goes on past it. */
static void test_refuses_one_pair(void **state) {
    (void)state;
    form s = {.res_first = ALL, .second_read = 0x2};
    built b = build(&s);
    uint32_t op = fused_op(), nodes = b.g->n_nodes;
    assert_int_equal(run_pass(b.g, 0), PAIRS - 1);
    assert_int_equal(b.g->n_nodes, nodes - (PAIRS - 1));
    assert_int_equal(count_op(b.g, WEFT_OP_ADD_RMSNORM), 1);
    for (int k = 0; k < PAIRS; k++)
        if (k != 1) check_pair(b.g, &b.p[k], op);
    weft_graph_free(b.g);
}

/* exec.l2-prefetch lists the weights of the products after each layer's first one; a fused node
 * still reads its product's weight in the product's layer, so the prefetch pass places and fills
 * its nodes the same whichever of the two passes runs first (a candidate that lists
 * exec.l2-prefetch first runs it first: its manifest does not name this technique). Had the
 * fused node taken the join's layer, the down projection's node would move into layer l + 1
 * here and become that layer's anchor when fusion runs first. */
static void test_l2_prefetch_order(void **state) {
    (void)state;
    form s = {.res_first = ALL};
    built first = build(&s), last = build(&s);
    weft_error err = {.size = sizeof(err)};
    uint32_t pf_op = gs->op_register("exec.l2_prefetch", &err);
    run_plugin(prefetch, first.g, 0);
    assert_int_equal(count_op(first.g, pf_op), NL);
    assert_int_equal(run_pass(first.g, 0), PAIRS);
    assert_int_equal(run_pass(last.g, 0), PAIRS);
    run_plugin(prefetch, last.g, 0);
    assert_int_equal(count_op(last.g, pf_op), NL);
    char a[33], b[33];
    assert_int_equal(weft_graph_hash(first.g, a), WEFT_OK);
    assert_int_equal(weft_graph_hash(last.g, b), WEFT_OK);
    printf("prefetch then fuse %s, fuse then prefetch %s\n", a, b);
    assert_string_equal(a, b);
    /* and every fused product's weight is in a prefetch node's list */
    for (int k = 0; k < PAIRS; k++) {
        int listed = 0;
        for (uint32_t i = 0; i < last.g->n_nodes; i++)
            if (last.g->nodes[i].op == pf_op)
                for (uint32_t j = 0; j < last.g->nodes[i].n_in; j++)
                    listed |= last.g->nodes[i].in[j] == last.p[k].w;
        assert_true(listed);
    }
    weft_graph_free(first.g);
    weft_graph_free(last.g);
}

static void test_option_range(void **state) {
    (void)state;
    const int64_t bad[2] = {0, 9};
    for (int i = 0; i < 2; i++) {
        weft_option opt = {.key = "max_tokens", .type = WEFT_OPTION_INT, .i = bad[i]};
        weft_options opts = {1, &opt};
        weft_error err = {.size = sizeof(err)};
        void *st = NULL;
        assert_int_equal(desc->create(weft_host_services_of(host), &opts, &st, &err),
                         WEFT_ERR_INVALID);
        assert_null(st);
        printf("max_tokens %lld: %s\n", (long long)bad[i], err.message);
        assert_non_null(strstr(err.message, "max_tokens"));
        assert_non_null(strstr(err.message, "1..8"));
    }
}

static int setup(void **state) {
    (void)state;
    gs = weft_graph_service_get();
    if (open_pass_plugin("fuse.linear-add-norm", "weft-fuse-linear-add-norm", &dl, &desc))
        return -1;
    void *sym = dlsym(dl, "fuse_linear_add_norm_fused");
    if (sym) memcpy(&fused_of, &sym, sizeof(fused_of));
    if (!fused_of ||
        open_pass_plugin("exec.l2-prefetch", "weft-exec-l2-prefetch", &dl_prefetch, &prefetch))
        return -1;
    host = weft_host_new();
    if (!host ||
        weft_host_register_service(host, WEFT_SERVICE_GRAPH, weft_graph_service_get()) != 0)
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (host) weft_host_free(host);
    if (dl) dlclose(dl);
    if (dl_prefetch) dlclose(dl_prefetch);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuses_two_pairs_per_layer),
        cmocka_unit_test(test_residual_either_side),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_max_tokens_option),
        cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_refuses_one_pair),
        cmocka_unit_test(test_l2_prefetch_order),
        cmocka_unit_test(test_option_range),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
