/* The step graph on the host side: the graph service (tensors, weights, nodes, rewrites, user
 * ops), validation with the messages a pass author sees, the canonical text and hash, the
 * op-implementation registry (priorities, key matching, accepts, the refusal naming the node)
 * and the pass chain (order and validation after each pass, with the pass named). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/passes.h"
#include "util/error.h"

static const weft_graph_service *gs;

static weft_graph *new_graph(uint32_t T) {
    weft_bucket b = {.size = sizeof(b), .max_tokens = T, .max_seqs = 1, .max_logits = 1};
    weft_graph *g = weft_graph_new(&b);
    assert_non_null(g);
    return g;
}

static uint32_t act(weft_graph *g, const char *name, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    weft_error err;
    weft_error_clear(&err);
    uint32_t id = gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, shape, name, &err);
    assert_int_not_equal(id, WEFT_TENSOR_NONE);
    return id;
}

static weft_node mk(uint32_t op, const char *name, uint32_t n_in, const uint32_t *in,
                    uint32_t out) {
    weft_node n;
    memset(&n, 0, sizeof(n));
    n.op = op;
    n.layer = -1;
    n.n_in = n_in;
    for (uint32_t i = 0; i < n_in; i++)
        n.in[i] = in[i];
    n.n_out = 1;
    n.out[0] = out;
    snprintf(n.name, sizeof(n.name), "%s", name);
    return n;
}

/* x (T,4) -> linear w (3,4) -> y (T,3) -> add(y, y) -> z (T,3) */
typedef struct small {
    weft_graph *g;
    uint32_t x, w, y, z, tok;
} small;

static small build_small(void) {
    small s;
    weft_error err;
    weft_error_clear(&err);
    s.g = new_graph(2);
    int64_t t_shape[1] = {2};
    s.tok = gs->tensor_add(s.g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, t_shape, "in.tokens", &err);
    int64_t e_shape[2] = {10, 4};
    uint32_t table =
        gs->weight_add(s.g, "embed", "model.embed_tokens.weight", WEFT_DTYPE_F32, 2, e_shape, &err);
    s.x = act(s.g, "x", 2, 4);
    int64_t w_shape[2] = {3, 4};
    s.w =
        gs->weight_add(s.g, "layers.0.attn.q", "model.q.weight", WEFT_DTYPE_BF16, 2, w_shape, &err);
    assert_int_not_equal(s.w, WEFT_TENSOR_NONE);
    s.y = act(s.g, "y", 2, 3);
    s.z = act(s.g, "z", 2, 3);
    uint32_t in0[2] = {s.tok, table};
    weft_node n0 = mk(WEFT_OP_EMBED, "embed", 2, in0, s.x);
    assert_int_equal(gs->node_add(s.g, &n0, UINT32_MAX, &err), 0);
    uint32_t in1[2] = {s.x, s.w};
    weft_node n1 = mk(WEFT_OP_LINEAR, "q", 2, in1, s.y);
    assert_int_equal(gs->node_add(s.g, &n1, UINT32_MAX, &err), 1);
    uint32_t in2[2] = {s.y, s.y};
    weft_node n2 = mk(WEFT_OP_ADD, "double", 2, in2, s.z);
    n2.p.f[0] = 0.5f;
    assert_int_equal(gs->node_add(s.g, &n2, UINT32_MAX, &err), 2);
    return s;
}

static int setup(void **state) {
    (void)state;
    gs = weft_graph_service_get();
    return gs && gs->version == 1 && gs->size == sizeof(*gs) ? 0 : -1;
}

static void test_tensor_add_checks(void **state) {
    (void)state;
    weft_graph *g = new_graph(4);
    weft_error err;
    weft_error_clear(&err);
    int64_t shape[2] = {4, 8}, bad[2] = {4, 0};
    assert_int_equal(gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, shape, "a", &err),
                     0);
    assert_int_equal(gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, shape, "a", &err),
                     WEFT_TENSOR_NONE);
    assert_non_null(strstr(err.message, "tensor a: the name is already used"));
    assert_int_equal(gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, bad, "b", &err),
                     WEFT_TENSOR_NONE);
    assert_non_null(strstr(err.message, "tensor b: dimension 1 must be in 1..2^40, got 0"));
    assert_int_equal(gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, 999, 2, shape, "c", &err),
                     WEFT_TENSOR_NONE);
    assert_non_null(strstr(err.message, "unknown dtype 999"));
    assert_int_equal(gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 5, shape, "d", &err),
                     WEFT_TENSOR_NONE);
    assert_int_equal(gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, shape, "", &err),
                     WEFT_TENSOR_NONE);
    assert_int_equal(gs->tensor_add(g, 7, WEFT_DTYPE_F32, 2, shape, "e", &err), WEFT_TENSOR_NONE);
    /* Growth past the first allocation keeps ids and contents. */
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof(name), "t%d", i);
        assert_int_equal(
            gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, shape, name, &err),
            (uint32_t)i + 1);
    }
    assert_int_equal(gs->tensor_find(g, "t299"), 300);
    assert_int_equal(gs->tensor_find(g, "a"), 0);
    assert_int_equal(gs->tensor_find(g, "nope"), WEFT_TENSOR_NONE);
    assert_string_equal(g->tensors[150].name, "t149");
    /* A graph the host did not make is refused, not written to. */
    weft_graph fake;
    memset(&fake, 0, sizeof(fake));
    assert_int_equal(gs->tensor_add(&fake, 0, WEFT_DTYPE_F32, 2, shape, "x", &err),
                     WEFT_TENSOR_NONE);
    weft_graph_free(g);
}

static void test_nodes_and_rewrites(void **state) {
    (void)state;
    small s = build_small();
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_OK);
    assert_int_equal(gs->tensor_uses(s.g, s.y), 2);
    assert_int_equal(gs->tensor_uses(s.g, s.z), 0);
    /* Insert a scale node before "double" and route the add through it. */
    uint32_t y2 = act(s.g, "y2", 2, 3);
    uint32_t in[1] = {s.y};
    weft_node sc = mk(WEFT_OP_SCALE, "scale", 1, in, y2);
    assert_int_equal(gs->node_add(s.g, &sc, 2, &err), 2);
    assert_string_equal(s.g->nodes[3].name, "double");
    assert_int_equal(gs->replace_uses(s.g, s.y, y2, 3), 2);
    assert_int_equal(s.g->nodes[3].in[0], y2);
    assert_int_equal(s.g->nodes[2].in[0], s.y); /* before `start`: untouched */
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_OK);
    /* Removing the scale node leaves "double" reading y2 before anyone produces it. */
    assert_int_equal(gs->node_remove(s.g, 2, &err), 0);
    assert_int_equal(s.g->n_nodes, 3);
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_ERR_INVALID);
    assert_string_equal(err.message, "node double reads y2 before any node produces it (nodes "
                                     "must be in topological order)");
    assert_int_equal(gs->node_remove(s.g, 3, &err), -1);
    /* Bad node arguments. */
    uint32_t bad_in[1] = {999};
    weft_node bad = mk(WEFT_OP_SCALE, "bad", 1, bad_in, s.z);
    assert_int_equal(gs->node_add(s.g, &bad, UINT32_MAX, &err), -1);
    assert_non_null(strstr(err.message, "node bad: input 0 is tensor 999"));
    weft_node unk = mk(5000, "unknown", 1, in, s.z);
    assert_int_equal(gs->node_add(s.g, &unk, UINT32_MAX, &err), -1);
    assert_non_null(strstr(err.message, "op 5000 is neither builtin nor registered"));
    weft_graph_free(s.g);
}

static void test_validate_messages(void **state) {
    (void)state;
    weft_error err;
    /* Writing a weight. */
    small s = build_small();
    s.g->nodes[2].out[0] = s.w;
    weft_error_clear(&err);
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_ERR_INVALID);
    assert_string_equal(err.message,
                        "node double writes layers.0.attn.q, which is a weight tensor");
    weft_graph_free(s.g);
    /* Producing a tensor twice (not in place). */
    s = build_small();
    s.g->nodes[2].out[0] = s.x;
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "node double writes x, already produced by node embed"));
    /* In place is allowed: the node reads what it writes. */
    s.g->nodes[2].in[0] = s.x;
    s.g->nodes[2].in[1] = s.x;
    /* (add of x (T,4) into x: widths agree) */
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_OK);
    weft_graph_free(s.g);
    /* A linear whose weight does not fit its input. */
    s = build_small();
    s.g->tensors[s.w].shape[1] = 5;
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "node q (linear): expected x (T,K), w (N,K), y (T,N)"));
    weft_graph_free(s.g);
    /* Too few inputs for a builtin op. */
    s = build_small();
    s.g->nodes[1].n_in = 1;
    assert_int_equal(weft_graph_validate(s.g, &err), WEFT_ERR_INVALID);
    assert_string_equal(err.message, "node q (linear): expected at least 2 inputs, got 1");
    weft_graph_free(s.g);
}

static void test_user_ops(void **state) {
    (void)state;
    weft_error err;
    weft_error_clear(&err);
    uint32_t a = gs->op_register("test.fused_thing", &err);
    assert_true(a >= WEFT_OP_USER);
    assert_int_equal(gs->op_register("test.fused_thing", &err), a);
    uint32_t b = gs->op_register("test.other", &err);
    assert_int_equal(b, a + 1);
    assert_string_equal(gs->op_name(a), "test.fused_thing");
    assert_string_equal(gs->op_name(WEFT_OP_ATTENTION), "attention");
    assert_null(gs->op_name(WEFT_OP_BUILTIN_COUNT));
    assert_int_equal(gs->op_register("linear", &err), WEFT_OP_NONE);
    assert_non_null(strstr(err.message, "'linear' is a builtin op"));
    assert_int_equal(gs->op_register("", &err), WEFT_OP_NONE);
}

static void test_canonical_and_hash(void **state) {
    (void)state;
    small a = build_small(), b = build_small();
    char ha[33], hb[33];
    assert_int_equal(weft_graph_hash(a.g, ha), WEFT_OK);
    assert_int_equal(weft_graph_hash(b.g, hb), WEFT_OK);
    assert_int_equal(strlen(ha), 32);
    assert_string_equal(ha, hb);
    char *text = weft_graph_canonical(a.g);
    assert_non_null(text);
    assert_string_equal(text,
                        "bucket tokens=2 seqs=1 logits=1 kv_class=0\n"
                        "tensor input in.tokens:i32[2]\n"
                        "tensor weight embed:f32[10,4] <- model.embed_tokens.weight\n"
                        "tensor act x:f32[2,4]\n"
                        "tensor weight layers.0.attn.q:bf16[3,4] <- model.q.weight\n"
                        "tensor act y:f32[2,3]\n"
                        "tensor act z:f32[2,3]\n"
                        "node embed: embed(in.tokens:i32[2], embed:f32[10,4]) -> x:f32[2,4]\n"
                        "node q: linear(x:f32[2,4], layers.0.attn.q:bf16[3,4]) -> y:f32[2,3]\n"
                        "node double: add(y:f32[2,3], y:f32[2,3]) -> z:f32[2,3] f=[0.5]\n");
    free(text);
    /* An orphan tensor does not change what runs, so not the hash. */
    act(b.g, "orphan", 2, 2);
    assert_int_equal(weft_graph_hash(b.g, hb), WEFT_OK);
    assert_string_equal(ha, hb);
    /* A parameter, a layout or a weight's source does. */
    b.g->nodes[2].p.f[0] = 0.25f;
    assert_int_equal(weft_graph_hash(b.g, hb), WEFT_OK);
    assert_string_not_equal(ha, hb);
    b.g->nodes[2].p.f[0] = 0.5f;
    snprintf(b.g->tensors[b.w].layout, WEFT_LAYOUT_MAX, "q8_0");
    assert_int_equal(weft_graph_hash(b.g, hb), WEFT_OK);
    assert_string_not_equal(ha, hb);
    b.g->tensors[b.w].layout[0] = '\0';
    snprintf(b.g->tensors[b.w].source, WEFT_NAME_MAX, "model.k.weight");
    assert_int_equal(weft_graph_hash(b.g, hb), WEFT_OK);
    assert_string_not_equal(ha, hb);
    /* The printed form: one node per line, the provider, then the hash. */
    const char *prov[3] = {"cpu", "cpu", "fuse.test"};
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    assert_non_null(f);
    assert_int_equal(weft_graph_print(a.g, prov, f), WEFT_OK);
    fclose(f);
    assert_non_null(strstr(buf, "   2 double: add(y:f32[2,3], y:f32[2,3]) -> z:f32[2,3] f=[0.5]  "
                                "[fuse.test]\n"));
    char want[64];
    snprintf(want, sizeof(want), "hash %s\n", ha);
    assert_non_null(strstr(buf, want));
    weft_graph_free(a.g);
    weft_graph_free(b.g);
}

/* ---- op registry ------------------------------------------------------------------------- */
static weft_status run_a(void *st, const weft_exec_ctx *c, const weft_node *n, weft_error *e) {
    return WEFT_OK;
}

static int32_t accepts_never(void *st, const weft_graph *g, const weft_node *n) {
    return 0;
}

static weft_op_impl impl(uint32_t op, uint32_t dtype, const char *layout, int32_t prio,
                         int32_t (*acc)(void *, const weft_graph *, const weft_node *)) {
    weft_op_impl i;
    memset(&i, 0, sizeof(i));
    i.size = sizeof(i);
    i.op = op;
    snprintf(i.backend, sizeof(i.backend), "cpu");
    i.dtype = dtype;
    snprintf(i.layout, sizeof(i.layout), "%s", layout);
    i.priority = prio;
    i.run = run_a;
    i.accepts = acc;
    return i;
}

static void test_op_registry(void **state) {
    (void)state;
    weft_op_registry *r = weft_op_registry_new();
    assert_non_null(r);
    const weft_ops_service *ops = weft_op_registry_service(r);
    weft_error err;
    weft_error_clear(&err);
    small s = build_small();
    const weft_node *lin = &s.g->nodes[1];
    weft_op_registry_set_provider(r, "cpu");
    weft_op_impl any = impl(WEFT_OP_LINEAR, 0, "", 0, NULL);
    weft_op_impl bf16 = impl(WEFT_OP_LINEAR, WEFT_DTYPE_BF16, "", 0, NULL);
    weft_op_impl f32 = impl(WEFT_OP_LINEAR, WEFT_DTYPE_F32, "", 0, NULL);
    assert_int_equal(ops->add(ops->self, &any, &err), WEFT_OK);
    assert_int_equal(ops->add(ops->self, &bf16, &err), WEFT_OK);
    assert_int_equal(ops->add(ops->self, &f32, &err), WEFT_OK);
    /* The exact dtype beats "any" at equal priority. */
    const weft_op_impl *got =
        ops->find(ops->self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_BF16, "", s.g, lin);
    assert_non_null(got);
    assert_int_equal(got->dtype, WEFT_DTYPE_BF16);
    assert_string_equal(got->provider, "cpu");
    /* A dense impl does not take a packed layout; an "any" dtype impl takes f16. */
    assert_null(ops->find(ops->self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_BF16, "q8_0", s.g, lin));
    got = ops->find(ops->self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_F16, "", s.g, lin);
    assert_non_null(got);
    assert_int_equal(got->dtype, 0);
    assert_null(ops->find(ops->self, WEFT_OP_LINEAR, "cuda", WEFT_DTYPE_BF16, "", s.g, lin));
    /* A technique at higher priority wins even with a less specific key... */
    weft_op_registry_set_provider(r, "fuse.test");
    weft_op_impl tech = impl(WEFT_OP_LINEAR, 0, "", 10, NULL);
    assert_int_equal(ops->add(ops->self, &tech, &err), WEFT_OK);
    got = ops->find(ops->self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_BF16, "", s.g, lin);
    assert_string_equal(got->provider, "fuse.test");
    /* ...unless its accepts() declines the node: the next best takes it. */
    weft_op_impl picky = impl(WEFT_OP_LINEAR, WEFT_DTYPE_BF16, "", 20, accepts_never);
    assert_int_equal(ops->add(ops->self, &picky, &err), WEFT_OK);
    got = ops->find(ops->self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_BF16, "", s.g, lin);
    assert_int_equal(got->priority, 10);
    /* Equal keys and priority: the later registration wins. */
    weft_op_impl later = impl(WEFT_OP_LINEAR, 0, "", 10, NULL);
    weft_op_registry_set_provider(r, "fuse.later");
    assert_int_equal(ops->add(ops->self, &later, &err), WEFT_OK);
    got = ops->find(ops->self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_BF16, "", s.g, lin);
    assert_string_equal(got->provider, "fuse.later");
    /* The kv's "contiguous" layout is dense: an impl with layout "" takes it. */
    weft_op_impl att = impl(WEFT_OP_ATTENTION, WEFT_DTYPE_F32, "", 0, NULL);
    assert_int_equal(ops->add(ops->self, &att, &err), WEFT_OK);
    assert_non_null(
        ops->find(ops->self, WEFT_OP_ATTENTION, "cpu", WEFT_DTYPE_F32, "contiguous", NULL, NULL));
    assert_null(
        ops->find(ops->self, WEFT_OP_ATTENTION, "cpu", WEFT_DTYPE_F32, "paged", NULL, NULL));
    /* Bad registrations. */
    weft_op_impl norun = impl(WEFT_OP_ADD, 0, "", 0, NULL);
    norun.run = NULL;
    assert_int_equal(ops->add(ops->self, &norun, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "has no run function"));
    weft_op_impl small_struct = impl(WEFT_OP_ADD, 0, "", 0, NULL);
    small_struct.size = 8;
    assert_int_equal(ops->add(ops->self, &small_struct, &err), WEFT_ERR_ABI);
    /* Resolving the small graph: embed and add have no implementation. */
    const weft_op_impl *impls[3];
    assert_int_equal(
        weft_op_registry_resolve(r, s.g, "cpu", WEFT_DTYPE_F32, "contiguous", impls, &err),
        WEFT_ERR_UNSUPPORTED);
    assert_string_equal(err.message,
                        "node embed (embed, cpu, f32, layout dense) has no implementation in "
                        "this candidate");
    weft_op_impl emb = impl(WEFT_OP_EMBED, WEFT_DTYPE_F32, "", 0, NULL);
    weft_op_impl add = impl(WEFT_OP_ADD, WEFT_DTYPE_F32, "", 0, NULL);
    assert_int_equal(ops->add(ops->self, &emb, &err), WEFT_OK);
    assert_int_equal(ops->add(ops->self, &add, &err), WEFT_OK);
    assert_int_equal(
        weft_op_registry_resolve(r, s.g, "cpu", WEFT_DTYPE_F32, "contiguous", impls, &err),
        WEFT_OK);
    assert_int_equal(impls[0]->op, WEFT_OP_EMBED);
    assert_string_equal(impls[1]->provider, "fuse.later");
    weft_graph_free(s.g);
    weft_op_registry_free(r);
}

static void test_resolve_names_attention(void **state) {
    (void)state;
    weft_graph *g = new_graph(1);
    weft_error err;
    weft_error_clear(&err);
    uint32_t q = act(g, "q", 1, 8), k = act(g, "k", 1, 8), v = act(g, "v", 1, 8);
    uint32_t o = act(g, "o", 1, 8);
    int64_t t_shape[1] = {1};
    uint32_t pos =
        gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, t_shape, "in.positions", &err);
    /* q, k, v made by nodes that read the input */
    uint32_t x =
        gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_F32, 2, (int64_t[2]){1, 8}, "x", &err);
    uint32_t srcs[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        uint32_t in[1] = {x};
        weft_node n = mk(WEFT_OP_SCALE, i == 0 ? "sq" : i == 1 ? "sk" : "sv", 1, in, srcs[i]);
        assert_true(gs->node_add(g, &n, UINT32_MAX, &err) >= 0);
    }
    uint32_t in[4] = {q, k, v, pos};
    weft_node att = mk(WEFT_OP_ATTENTION, "layers.0.attn", 4, in, o);
    assert_true(gs->node_add(g, &att, UINT32_MAX, &err) >= 0);
    assert_int_equal(weft_graph_validate(g, &err), WEFT_OK);
    weft_op_registry *r = weft_op_registry_new();
    const weft_ops_service *ops = weft_op_registry_service(r);
    weft_op_impl scale = impl(WEFT_OP_SCALE, WEFT_DTYPE_F32, "", 0, NULL);
    assert_int_equal(ops->add(ops->self, &scale, &err), WEFT_OK);
    const weft_op_impl *impls[4];
    assert_int_equal(
        weft_op_registry_resolve(r, g, "cpu", WEFT_DTYPE_F32, "contiguous", impls, &err),
        WEFT_ERR_UNSUPPORTED);
    assert_string_equal(err.message, "node layers.0.attn (attention, cpu, f32, layout contiguous) "
                                     "has no implementation in this candidate");
    weft_op_registry_free(r);
    weft_graph_free(g);
}

/* ---- passes ------------------------------------------------------------------------------ */
typedef struct pass_log {
    char order[64];
} pass_log;
static pass_log plog;

/* Appends its name's first letter; "b" also doubles the add's parameter. */
static weft_status pass_a(void *st, const weft_model_config *cfg, const weft_graph_service *g,
                          weft_graph *graph, weft_error *err) {
    strcat(plog.order, "a");
    return WEFT_OK;
}

static weft_status pass_b(void *st, const weft_model_config *cfg, const weft_graph_service *g,
                          weft_graph *graph, weft_error *err) {
    strcat(plog.order, "b");
    graph->nodes[2].p.f[0] *= 2;
    return WEFT_OK;
}

/* Breaks the graph: moves the add before the node that produces its input. */
static weft_status pass_break(void *st, const weft_model_config *cfg, const weft_graph_service *g,
                              weft_graph *graph, weft_error *err) {
    strcat(plog.order, "x");
    weft_node n = graph->nodes[2];
    if (g->node_remove(graph, 2, err) < 0) return WEFT_ERR_INTERNAL;
    return g->node_add(graph, &n, 1, err) < 0 ? WEFT_ERR_INTERNAL : WEFT_OK;
}

static const weft_pass_vtable vt_a = {sizeof(weft_pass_vtable), pass_a, NULL};
static const weft_pass_vtable vt_b = {sizeof(weft_pass_vtable), pass_b, NULL};
static const weft_pass_vtable vt_x = {sizeof(weft_pass_vtable), pass_break, NULL};

static void test_passes(void **state) {
    (void)state;
    weft_plugin_descriptor da = {
        .size = sizeof(da), .name = "fuse.a", .slots = WEFT_SLOT_PASS, .pass = &vt_a};
    weft_plugin_descriptor db = da, dx = da;
    db.name = "fuse.b";
    db.pass = &vt_b;
    dx.name = "fuse.break";
    dx.pass = &vt_x;
    weft_plugin_descriptor dm = {.size = sizeof(dm), .name = "llama", .slots = WEFT_SLOT_MODEL};
    weft_loaded_plugin pl[4];
    memset(pl, 0, sizeof(pl));
    snprintf(pl[0].name, sizeof(pl[0].name), "llama");
    pl[0].desc = &dm;
    snprintf(pl[1].name, sizeof(pl[1].name), "fuse.b");
    pl[1].desc = &db;
    pl[1].order = 2;
    snprintf(pl[2].name, sizeof(pl[2].name), "fuse.a");
    pl[2].desc = &da;
    pl[2].order = 1;
    weft_candidate c;
    memset(&c, 0, sizeof(c));
    c.plugins = pl;
    c.n_plugins = 3;
    weft_error err;
    weft_error_clear(&err);
    small s = build_small();
    uint32_t n_run = 0;
    memset(&plog, 0, sizeof(plog));
    assert_int_equal(weft_passes_run(&c, NULL, s.g, &n_run, &err), WEFT_OK);
    assert_int_equal(n_run, 2);
    assert_string_equal(plog.order, "ab"); /* by order, not by position */
    assert_true(s.g->nodes[2].p.f[0] == 1.0f);
    assert_ptr_equal(weft_passes_deriver(&c, "fuse.a"), &pl[2]);
    assert_null(weft_passes_deriver(&c, "llama"));
    /* A pass that breaks the graph is named. */
    snprintf(pl[3].name, sizeof(pl[3].name), "fuse.break");
    pl[3].desc = &dx;
    pl[3].order = 3;
    c.n_plugins = 4;
    memset(&plog, 0, sizeof(plog));
    assert_int_equal(weft_passes_run(&c, NULL, s.g, &n_run, &err), WEFT_ERR_INVALID);
    assert_string_equal(plog.order, "abx");
    assert_string_equal(err.message, "after pass fuse.break: node double reads y before any node "
                                     "produces it (nodes must be in topological order)");
    weft_graph_free(s.g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_add_checks),       cmocka_unit_test(test_nodes_and_rewrites),
        cmocka_unit_test(test_validate_messages),       cmocka_unit_test(test_user_ops),
        cmocka_unit_test(test_canonical_and_hash),      cmocka_unit_test(test_op_registry),
        cmocka_unit_test(test_resolve_names_attention), cmocka_unit_test(test_passes),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
