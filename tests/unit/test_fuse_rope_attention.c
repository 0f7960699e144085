/* fuse.rope-attention's graph pass on hand-built decoder-layer graphs (no device needed): a
 * fuse.qkv_rope node whose outputs only an attention reads becomes one fuse.rope_attention node
 * with the contract of techniques/fuse.rope-attention/README.md (inputs, outputs, packed
 * parameters) and the graph stays valid, for the merged q|k|v form with qk-norm and the
 * separate form without; the graph is left exactly as it was (same canonical hash) when the
 * attention has a custom mask, reads no in.kv_slots, another node reads q', or the two nodes'
 * head counts disagree. The bit-identity of the op itself is checked on the GPU
 * (test_cuda_ops.c, test_rope_attention). */
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

enum { T = 4, D = 64, HQ = 4, HKV = 2, HD = 16, LAYER = 3, WINDOW = 7 };

static const weft_graph_service *gs;
static const weft_plugin_descriptor *desc;
static weft_host *host;
static void *dl;

/* What to build: the merged or separate form, and the variations the pass must refuse. */
typedef struct form {
    int merged, norm, slots, extra_reader, mask, hkv_off;
} form;

typedef struct built {
    weft_graph *g;
    uint32_t x, qkv, q, k, v, pos, slots, qn, kn, qo, ko, vo, o, y;
} built;

/* embed -> x; q|k|v projection(s); fuse.qkv_rope; attention; o projection (-> y) */
static built build(const form *s) {
    built b;
    memset(&b, 0, sizeof(b));
    weft_bucket bk = {.size = sizeof(bk), .max_tokens = T, .max_seqs = 1, .max_logits = 1};
    b.g = weft_graph_new(&bk);
    assert_non_null(b.g);
    weft_graph *g = b.g;
    const uint32_t dt = WEFT_DTYPE_BF16, C = (HQ + 2 * HKV) * HD;
    uint32_t tok = pass_tensor(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.tokens");
    b.pos = pass_tensor(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.positions");
    b.slots = pass_tensor(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.kv_slots");
    uint32_t table = pass_tensor(g, WEFT_TENSOR_WEIGHT, dt, 100, D, "embed");
    b.x = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, D, "x");
    uint32_t in2[2] = {tok, table};
    pass_node(g, WEFT_OP_EMBED, LAYER, "embed", in2, 2, &b.x, 1, NULL);
    if (s->merged) {
        uint32_t w = pass_tensor(g, WEFT_TENSOR_WEIGHT, dt, C, D, "layers.3.attn.qkv");
        b.qkv = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, C, "layers.3.qkv");
        uint32_t in[2] = {b.x, w};
        pass_node(g, WEFT_OP_LINEAR, LAYER, "layers.3.attn.qkv", in, 2, &b.qkv, 1, NULL);
    } else {
        const char *nm[3] = {"layers.3.attn.q", "layers.3.attn.k", "layers.3.attn.v"};
        uint32_t *dst[3] = {&b.q, &b.k, &b.v};
        for (int i = 0; i < 3; i++) {
            int64_t rows = i == 0 ? HQ * HD : HKV * HD;
            uint32_t w = pass_tensor(g, WEFT_TENSOR_WEIGHT, dt, rows, D, nm[i]);
            char an[64];
            snprintf(an, sizeof(an), "%s.out", nm[i]);
            *dst[i] = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, rows, an);
            uint32_t in[2] = {b.x, w};
            pass_node(g, WEFT_OP_LINEAR, LAYER, nm[i], in, 2, dst[i], 1, NULL);
        }
    }
    b.qn = pass_tensor(g, WEFT_TENSOR_WEIGHT, dt, HD, 0, "layers.3.attn.q_norm");
    b.kn = pass_tensor(g, WEFT_TENSOR_WEIGHT, dt, HD, 0, "layers.3.attn.k_norm");
    b.qo = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, HQ * HD, "layers.3.q_rot");
    b.ko = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, HKV * HD, "layers.3.k_rot");
    if (s->merged) b.vo = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, HKV * HD, "layers.3.v");
    weft_op_params rp;
    memset(&rp, 0, sizeof(rp));
    rp.i[0] = HQ, rp.i[1] = HD, rp.i[2] = 0, rp.i[3] = 0, rp.i[4] = 1, rp.i[5] = HKV;
    rp.i[6] = s->merged, rp.i[7] = s->norm;
    rp.f[0] = 500000.f, rp.f[1] = 32.f, rp.f[2] = 1.f, rp.f[3] = 4.f, rp.f[4] = 8192.f;
    rp.f[5] = 1e-6f;
    uint32_t in[5], n_in = 0;
    if (s->merged) {
        in[n_in++] = b.qkv;
    } else {
        in[n_in++] = b.q;
        in[n_in++] = b.k;
    }
    in[n_in++] = b.pos;
    if (s->norm) in[n_in++] = b.qn, in[n_in++] = b.kn;
    uint32_t out[3] = {b.qo, b.ko, b.vo};
    weft_error err = {.size = sizeof(err)};
    uint32_t qr = gs->op_register("fuse.qkv_rope", &err);
    pass_node(g, qr, LAYER, "layers.3.attn.qkv_rope", in, n_in, out, s->merged ? 3 : 2, &rp);
    b.o = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, HQ * HD, "layers.3.attn_out");
    weft_op_params ap;
    memset(&ap, 0, sizeof(ap));
    ap.i[0] = LAYER, ap.i[1] = HQ, ap.i[2] = HKV + s->hkv_off, ap.i[3] = HD, ap.i[4] = WINDOW;
    ap.i[5] = s->mask, ap.f[0] = 0.125f;
    uint32_t ain[5] = {b.qo, b.ko, s->merged ? b.vo : b.v, b.pos, b.slots};
    pass_node(g, WEFT_OP_ATTENTION, LAYER, "layers.3.attn", ain, s->slots ? 5 : 4, &b.o, 1, &ap);
    if (s->extra_reader) {
        uint32_t z = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, HQ * HD, "layers.3.q_copy");
        weft_op_params sp = {.f = {2.f}};
        pass_node(g, WEFT_OP_SCALE, LAYER, "layers.3.q_copy", &b.qo, 1, &z, 1, &sp);
    }
    uint32_t wo = pass_tensor(g, WEFT_TENSOR_WEIGHT, dt, D, HQ * HD, "layers.3.attn.o");
    b.y = pass_tensor(g, WEFT_TENSOR_ACTIVATION, dt, T, D, "layers.3.o_out");
    uint32_t oin[2] = {b.o, wo};
    pass_node(g, WEFT_OP_LINEAR, LAYER, "layers.3.attn.o", oin, 2, &b.y, 1, NULL);
    assert_int_equal(weft_graph_validate(g, &err), WEFT_OK);
    return b;
}

static void run_pass(weft_graph *g) {
    void *st = NULL;
    weft_error err = {.size = sizeof(err)};
    weft_options none = {0, NULL};
    assert_int_equal(desc->create(weft_host_services_of(host), &none, &st, &err), WEFT_OK);
    weft_model_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.size = sizeof(cfg);
    weft_status s = desc->pass->run(st, &cfg, gs, g, &err);
    if (s) fail_msg("pass: %s", err.message);
    desc->destroy(st);
    assert_int_equal(weft_graph_validate(g, &err), WEFT_OK);
}

static int count_op(const weft_graph *g, uint32_t op) {
    int n = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

static void check_fused(const form *s) {
    built b = build(s);
    uint32_t nodes_before = b.g->n_nodes;
    run_pass(b.g);
    weft_error err = {.size = sizeof(err)};
    uint32_t ra = gs->op_register("fuse.rope_attention", &err);
    uint32_t qr = gs->op_register("fuse.qkv_rope", &err);
    assert_int_equal(b.g->n_nodes, nodes_before - 1);
    assert_int_equal(count_op(b.g, ra), 1);
    assert_int_equal(count_op(b.g, qr), 0);
    assert_int_equal(count_op(b.g, WEFT_OP_ATTENTION), 0);
    /* the fused node sits where the attention was, right before the o projection */
    const weft_node *n = NULL;
    uint32_t at = 0;
    for (uint32_t i = 0; i < b.g->n_nodes; i++)
        if (b.g->nodes[i].op == ra) n = &b.g->nodes[i], at = i;
    assert_true(at + 1 < b.g->n_nodes);
    assert_int_equal(b.g->nodes[at + 1].op, WEFT_OP_LINEAR);
    assert_int_equal(b.g->nodes[at + 1].in[0], b.o);
    assert_int_equal(n->layer, LAYER);
    /* inputs */
    uint32_t k = 0;
    if (s->merged) {
        assert_int_equal(n->in[k++], b.qkv);
    } else {
        assert_int_equal(n->in[k++], b.q);
        assert_int_equal(n->in[k++], b.k);
        assert_int_equal(n->in[k++], b.v);
    }
    assert_int_equal(n->in[k++], b.pos);
    assert_int_equal(n->in[k++], b.slots);
    if (s->norm) {
        assert_int_equal(n->in[k++], b.qn);
        assert_int_equal(n->in[k++], b.kn);
    }
    assert_int_equal(n->n_in, k);
    /* outputs: o, then the unfused path's intermediates */
    assert_int_equal(n->n_out, s->merged ? 4 : 3);
    assert_int_equal(n->out[0], b.o);
    assert_int_equal(n->out[1], b.qo);
    assert_int_equal(n->out[2], b.ko);
    if (s->merged) assert_int_equal(n->out[3], b.vo);
    /* parameters: fuse.qkv_rope's i[0..5], f[0..5]; flags and window; layer; scale */
    assert_int_equal(n->p.i[0], HQ);
    assert_int_equal(n->p.i[1], HD);
    assert_int_equal(n->p.i[4], 1);
    assert_int_equal(n->p.i[5], HKV);
    assert_int_equal(n->p.i[6], (s->merged ? 1 : 0) | (s->norm ? 2 : 0) | (WINDOW << 8));
    assert_int_equal(n->p.i[7], LAYER);
    assert_true(n->p.f[0] == 500000.f && n->p.f[1] == 32.f && n->p.f[4] == 8192.f);
    assert_true(n->p.f[5] == 1e-6f);
    assert_true(n->p.f[6] == 0.125f);
    printf("fused (%s%s): %u nodes -> %u, node %s\n", s->merged ? "merged" : "separate",
           s->norm ? ", qk-norm" : "", nodes_before, b.g->n_nodes, n->name);
    weft_graph_free(b.g);
}

static void check_unchanged(const form *s, const char *why) {
    built b = build(s);
    char before[33];
    pass_hash(b.g, before);
    run_pass(b.g);
    pass_expect_unchanged(b.g, before, UINT32_MAX, why);
    weft_graph_free(b.g);
}

static void test_fuses(void **state) {
    (void)state;
    form merged = {.merged = 1, .norm = 1, .slots = 1};
    form separate = {.merged = 0, .norm = 0, .slots = 1};
    check_fused(&merged);
    check_fused(&separate);
}

static void test_refuses(void **state) {
    (void)state;
    form s = {.merged = 1, .norm = 1, .slots = 1, .mask = 1};
    check_unchanged(&s, "custom mask");
    s.mask = 0, s.slots = 0;
    check_unchanged(&s, "no in.kv_slots");
    s.slots = 1, s.extra_reader = 1;
    check_unchanged(&s, "q' read twice");
    s.extra_reader = 0, s.hkv_off = 1;
    check_unchanged(&s, "kv heads differ");
}

static int setup(void **state) {
    (void)state;
    gs = weft_graph_service_get();
    if (open_pass_plugin("fuse.rope-attention", "weft-fuse-rope-attention", &dl, &desc)) return -1;
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
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuses),
        cmocka_unit_test(test_refuses),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
