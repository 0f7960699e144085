/* Recursive-descent parser for chat templates. The grammar and operator precedence are
 * Jinja2's (its parser.py is the specification: `~` binds tighter than `+`, unary minus
 * tighter than `**`, filters and tests tighter than any binary operator). Nesting is bounded
 * because templates are untrusted input. */
#include "text/jinja.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"

typedef struct ps {
    jarena *a;
    const jsource *src;
    const jtok *t;
    size_t n, i;
    int depth, max_depth;
    int loop_depth;
    weft_error *err;
    int failed;
} ps;

static const jtok *cur(const ps *p) {
    return &p->t[p->i < p->n ? p->i : p->n - 1];
}
static const jtok *look(const ps *p) {
    return &p->t[p->i + 1 < p->n ? p->i + 1 : p->n - 1];
}
static void adv(ps *p) {
    if (p->i + 1 < p->n) p->i++;
}

static int tok_is_name(const jtok *t, const char *name) {
    return t->type == T_NAME && js_eq(t->str, name);
}
static int tok_is_op(const jtok *t, int op) {
    return t->type == T_OP && t->op == op;
}

static void describe(const ps *p, const jtok *t, char *out, size_t cap) {
    switch (t->type) {
    case T_EOF:
        snprintf(out, cap, "end of template");
        break;
    case T_BLOCK_END:
        snprintf(out, cap, "end of statement block");
        break;
    case T_VAR_END:
        snprintf(out, cap, "end of print statement");
        break;
    case T_BLOCK_BEGIN:
        snprintf(out, cap, "begin of statement block");
        break;
    case T_VAR_BEGIN:
        snprintf(out, cap, "begin of print statement");
        break;
    case T_DATA:
        snprintf(out, cap, "template data");
        break;
    default: {
        size_t n = t->end - t->pos;
        if (n > 40) n = 40;
        snprintf(out, cap, "'%.*s'", (int)n, p->src->text + t->pos);
    }
    }
}

static void *fail(ps *p, const jtok *t, const char *fmt, ...) {
    if (p->failed) return NULL;
    p->failed = 1;
    char where[320], msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jsrc_where(p->src, t->pos, where, sizeof where);
    weft_error_set(p->err, WEFT_ERR_FORMAT, "chat template", "%s: %s", where, msg);
    return NULL;
}

static void *nomem(ps *p) {
    if (!p->failed) {
        p->failed = 1;
        weft_error_set(p->err, WEFT_ERR_NOMEM, "chat template", "%s: out of memory parsing",
                       p->src->name ? p->src->name : "template");
    }
    return NULL;
}

static jnode *nn(ps *p, int kind, const jtok *t) {
    jnode *n = ja_alloc(p->a, sizeof(jnode));
    if (!n) return nomem(p);
    n->kind = (uint16_t)kind;
    n->pos = t->pos;
    n->end = t->end;
    n->fid = -1;
    return n;
}

static void fin(ps *p, jnode *n) {
    if (p->i > 0) {
        uint32_t e = p->t[p->i - 1].end;
        if (e > n->pos) n->end = e;
    }
}

/* growable node vectors in the arena */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;

static int nv_push(ps *p, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **nvv = ja_alloc(p->a, cap * sizeof(jnode *));
        if (!nvv) {
            nomem(p);
            return -1;
        }
        if (v->n) memcpy(nvv, v->v, v->n * sizeof(jnode *));
        v->v = nvv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static int expect_op(ps *p, int op, const char *text) {
    if (tok_is_op(cur(p), op)) {
        adv(p);
        return 0;
    }
    char d[64];
    describe(p, cur(p), d, sizeof d);
    fail(p, cur(p), "expected token '%s', got %s", text, d);
    return -1;
}

static int expect_type(ps *p, int type, const char *what) {
    if (cur(p)->type == type) {
        adv(p);
        return 0;
    }
    char d[64];
    describe(p, cur(p), d, sizeof d);
    fail(p, cur(p), "expected token '%s', got %s", what, d);
    return -1;
}

static const jtok *expect_name(ps *p) {
    const jtok *t = cur(p);
    if (t->type != T_NAME) {
        char d[64];
        describe(p, t, d, sizeof d);
        return fail(p, t, "expected token 'name', got %s", d);
    }
    adv(p);
    return t;
}

#define ENTER(p)                                                                                   \
    do {                                                                                           \
        if (++(p)->depth > (p)->max_depth) {                                                       \
            (p)->depth--;                                                                          \
            return fail((p), cur(p), "template nested more than %d levels deep", (p)->max_depth);  \
        }                                                                                          \
    } while (0)
#define LEAVE(p, x)                                                                                \
    do {                                                                                           \
        (p)->depth--;                                                                              \
        return (x);                                                                                \
    } while (0)

static jnode *parse_expression(ps *p, int with_condexpr);
static jnode *parse_tuple(ps *p, int with_condexpr, const char *extra_end, int explicit_paren);
static jnode *parse_unary(ps *p, int with_filter);
static jnode *parse_primary(ps *p);
static jnode *parse_postfix(ps *p, jnode *node);
static jnode *parse_filter(ps *p, jnode *node, int start_inline);

static int is_tuple_end(const ps *p, const char *extra_end) {
    const jtok *t = cur(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || tok_is_op(t, OP_RPAREN)) return 1;
    return extra_end && tok_is_name(t, extra_end);
}

/* (args, kw=...) after a callee, filter or test name. */
static int parse_call_args(ps *p, jnode *n) {
    const jtok *open = cur(p);
    if (expect_op(p, OP_LPAREN, "(")) return -1;
    nvec args = {0}, kwv = {0};
    jstr **kwn = NULL;
    size_t kwcap = 0;
    int require_comma = 0;
    while (!tok_is_op(cur(p), OP_RPAREN)) {
        if (require_comma) {
            if (expect_op(p, OP_COMMA, ",")) return -1;
            if (tok_is_op(cur(p), OP_RPAREN)) break;
        }
        if (tok_is_op(cur(p), OP_MUL) || tok_is_op(cur(p), OP_POW)) {
            fail(p, cur(p), "*args and **kwargs in calls are not supported");
            return -1;
        }
        if (cur(p)->type == T_NAME && tok_is_op(look(p), OP_ASSIGN)) {
            jstr *key = cur(p)->str;
            adv(p);
            adv(p);
            jnode *v = parse_expression(p, 1);
            if (!v) return -1;
            if (kwv.n == kwcap) {
                size_t cap = kwcap ? kwcap * 2 : 4;
                jstr **nk = ja_alloc(p->a, cap * sizeof(jstr *));
                if (!nk) {
                    nomem(p);
                    return -1;
                }
                if (kwv.n) memcpy(nk, kwn, kwv.n * sizeof(jstr *));
                kwn = nk;
                kwcap = cap;
            }
            kwn[kwv.n] = key;
            if (nv_push(p, &kwv, v)) return -1;
        } else {
            if (kwv.n) {
                fail(p, open, "invalid syntax for function call expression");
                return -1;
            }
            jnode *v = parse_expression(p, 1);
            if (!v || nv_push(p, &args, v)) return -1;
        }
        require_comma = 1;
    }
    if (expect_op(p, OP_RPAREN, ")")) return -1;
    n->items = args.v;
    n->n = args.n;
    n->kwn = kwn;
    n->kwv = kwv.v;
    n->nkw = kwv.n;
    return 0;
}

static jnode *parse_subscribed(ps *p) {
    const jtok *start = cur(p);
    jnode *args[3] = {NULL, NULL, NULL};
    if (tok_is_op(cur(p), OP_COLON)) {
        adv(p);
    } else {
        jnode *node = parse_expression(p, 1);
        if (!node) return NULL;
        if (!tok_is_op(cur(p), OP_COLON)) return node;
        adv(p);
        args[0] = node;
    }
    if (tok_is_op(cur(p), OP_COLON)) {
        /* stop omitted */
    } else if (!tok_is_op(cur(p), OP_RBRACKET) && !tok_is_op(cur(p), OP_COMMA)) {
        args[1] = parse_expression(p, 1);
        if (!args[1]) return NULL;
    }
    if (tok_is_op(cur(p), OP_COLON)) {
        adv(p);
        if (!tok_is_op(cur(p), OP_RBRACKET) && !tok_is_op(cur(p), OP_COMMA)) {
            args[2] = parse_expression(p, 1);
            if (!args[2]) return NULL;
        }
    }
    jnode *s = nn(p, E_SLICE, start);
    if (!s) return NULL;
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    fin(p, s);
    return s;
}

static jnode *parse_postfix(ps *p, jnode *node) {
    for (;;) {
        const jtok *t = cur(p);
        if (tok_is_op(t, OP_DOT)) {
            adv(p);
            const jtok *a = cur(p);
            adv(p);
            jnode *x;
            if (a->type == T_NAME) {
                x = nn(p, E_ATTR, t);
                if (!x) return NULL;
                x->str = a->str;
            } else if (a->type == T_INT) {
                x = nn(p, E_ITEM, t);
                jnode *k = nn(p, E_CONST, a);
                if (!x || !k) return NULL;
                k->cv = jv_int(a->i);
                x->b = k;
            } else {
                return fail(p, a, "expected name or number");
            }
            x->a = node;
            x->pos = node->pos;
            fin(p, x);
            node = x;
        } else if (tok_is_op(t, OP_LBRACKET)) {
            adv(p);
            nvec args = {0};
            while (!tok_is_op(cur(p), OP_RBRACKET)) {
                if (args.n && expect_op(p, OP_COMMA, ",")) return NULL;
                if (cur(p)->type == T_EOF) return fail(p, cur(p), "unexpected end of template");
                jnode *s = parse_subscribed(p);
                if (!s || nv_push(p, &args, s)) return NULL;
            }
            if (expect_op(p, OP_RBRACKET, "]")) return NULL;
            if (args.n == 0) return fail(p, t, "expected an index or a slice inside []");
            jnode *x = nn(p, E_ITEM, t);
            if (!x) return NULL;
            x->a = node;
            x->pos = node->pos;
            if (args.n == 1) {
                x->b = args.v[0];
            } else {
                jnode *tu = nn(p, E_TUPLE, t);
                if (!tu) return NULL;
                for (size_t k = 0; k < args.n; k++)
                    if (args.v[k]->kind == E_SLICE)
                        return fail(p, t, "slices inside a tuple index are not supported");
                tu->items = args.v;
                tu->n = args.n;
                x->b = tu;
            }
            fin(p, x);
            node = x;
        } else if (tok_is_op(t, OP_LPAREN)) {
            jnode *x = nn(p, E_CALL, t);
            if (!x) return NULL;
            x->a = node;
            x->pos = node->pos;
            if (parse_call_args(p, x)) return NULL;
            fin(p, x);
            node = x;
        } else {
            return node;
        }
    }
}

static jnode *parse_dotted_name(ps *p, jnode *x) {
    const jtok *nt = expect_name(p);
    if (!nt) return NULL;
    x->str = nt->str;
    while (tok_is_op(cur(p), OP_DOT)) {
        adv(p);
        const jtok *more = expect_name(p);
        if (!more) return NULL;
        jstr *dot = js_cstr(p->a, ".");
        jstr *a = dot ? js_cat(p->a, x->str, dot) : NULL;
        x->str = a ? js_cat(p->a, a, more->str) : NULL;
        if (!x->str) return nomem(p);
    }
    return x;
}

static jnode *parse_filter(ps *p, jnode *node, int start_inline) {
    while (tok_is_op(cur(p), OP_PIPE) || start_inline) {
        const jtok *t = cur(p);
        if (!start_inline) adv(p);
        jnode *x = nn(p, E_FILTER, t);
        if (!x) return NULL;
        if (node) x->pos = node->pos;
        const jtok *name_tok = cur(p);
        if (!parse_dotted_name(p, x)) return NULL;
        x->fid = jfilter_id(x->str->s);
        if (x->fid < 0) return fail(p, name_tok, "no filter named '%s'", x->str->s);
        if (tok_is_op(cur(p), OP_LPAREN) && parse_call_args(p, x)) return NULL;
        x->a = node;
        fin(p, x);
        node = x;
        start_inline = 0;
    }
    return node;
}

static jnode *parse_test(ps *p, jnode *node) {
    const jtok *is_tok = cur(p);
    adv(p);
    int negated = 0;
    if (tok_is_name(cur(p), "not")) {
        adv(p);
        negated = 1;
    }
    jnode *x = nn(p, E_TEST, is_tok);
    if (!x) return NULL;
    x->a = node;
    x->pos = node->pos;
    const jtok *name_tok = cur(p);
    if (!parse_dotted_name(p, x)) return NULL;
    x->fid = jtest_id(x->str->s);
    if (x->fid < 0) return fail(p, name_tok, "no test named '%s'", x->str->s);
    const jtok *t = cur(p);
    if (tok_is_op(t, OP_LPAREN)) {
        if (parse_call_args(p, x)) return NULL;
    } else if ((t->type == T_NAME || t->type == T_STRING || t->type == T_INT ||
                t->type == T_FLOAT || tok_is_op(t, OP_LBRACKET) || tok_is_op(t, OP_LBRACE)) &&
               !tok_is_name(t, "else") && !tok_is_name(t, "or") && !tok_is_name(t, "and")) {
        if (tok_is_name(t, "is")) return fail(p, t, "You cannot chain multiple tests with is");
        jnode *arg = parse_primary(p);
        if (!arg) return NULL;
        arg = parse_postfix(p, arg);
        if (!arg) return NULL;
        jnode **items = ja_alloc(p->a, sizeof(jnode *));
        if (!items) return nomem(p);
        items[0] = arg;
        x->items = items;
        x->n = 1;
    }
    fin(p, x);
    if (negated) {
        jnode *nt = nn(p, E_NOT, is_tok);
        if (!nt) return NULL;
        nt->a = x;
        nt->pos = x->pos;
        nt->end = x->end;
        return nt;
    }
    return x;
}

static jnode *parse_filter_expr(ps *p, jnode *node) {
    for (;;) {
        const jtok *t = cur(p);
        if (tok_is_op(t, OP_PIPE)) {
            node = parse_filter(p, node, 0);
        } else if (tok_is_name(t, "is")) {
            node = parse_test(p, node);
        } else if (tok_is_op(t, OP_LPAREN)) {
            jnode *x = nn(p, E_CALL, t);
            if (!x) return NULL;
            x->a = node;
            x->pos = node->pos;
            if (parse_call_args(p, x)) return NULL;
            fin(p, x);
            node = x;
        } else {
            return node;
        }
        if (!node) return NULL;
    }
}

static jnode *parse_list_or_dict(ps *p, int dict) {
    const jtok *t = cur(p);
    adv(p);
    jnode *x = nn(p, dict ? E_DICT : E_LIST, t);
    if (!x) return NULL;
    nvec items = {0};
    int close = dict ? OP_RBRACE : OP_RBRACKET;
    while (!tok_is_op(cur(p), close)) {
        if (items.n && expect_op(p, OP_COMMA, ",")) return NULL;
        if (tok_is_op(cur(p), close)) break;
        jnode *k = parse_expression(p, 1);
        if (!k || nv_push(p, &items, k)) return NULL;
        if (dict) {
            if (expect_op(p, OP_COLON, ":")) return NULL;
            jnode *v = parse_expression(p, 1);
            if (!v || nv_push(p, &items, v)) return NULL;
        }
    }
    if (expect_op(p, close, dict ? "}" : "]")) return NULL;
    x->items = items.v;
    x->n = items.n;
    fin(p, x);
    return x;
}

static jnode *parse_primary(ps *p) {
    ENTER(p);
    const jtok *t = cur(p);
    jnode *x = NULL;
    if (t->type == T_NAME) {
        adv(p);
        if (js_eq(t->str, "true") || js_eq(t->str, "True") || js_eq(t->str, "false") ||
            js_eq(t->str, "False")) {
            x = nn(p, E_CONST, t);
            if (x) x->cv = jv_bool(t->str->s[0] == 't' || t->str->s[0] == 'T');
        } else if (js_eq(t->str, "none") || js_eq(t->str, "None")) {
            x = nn(p, E_CONST, t);
            if (x) x->cv = jv_none();
        } else {
            x = nn(p, E_NAME, t);
            if (x) x->str = t->str;
        }
    } else if (t->type == T_STRING) {
        adv(p);
        jstr *s = t->str;
        while (cur(p)->type == T_STRING) {
            s = js_cat(p->a, s, cur(p)->str);
            if (!s) LEAVE(p, nomem(p));
            adv(p);
        }
        x = nn(p, E_CONST, t);
        if (x) x->cv = jv_of_str(s);
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        adv(p);
        x = nn(p, E_CONST, t);
        if (x) x->cv = t->type == T_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (tok_is_op(t, OP_LPAREN)) {
        adv(p);
        x = parse_tuple(p, 1, NULL, 1);
        if (x && expect_op(p, OP_RPAREN, ")")) x = NULL;
    } else if (tok_is_op(t, OP_LBRACKET)) {
        x = parse_list_or_dict(p, 0);
    } else if (tok_is_op(t, OP_LBRACE)) {
        x = parse_list_or_dict(p, 1);
    } else {
        char d[64];
        describe(p, t, d, sizeof d);
        x = fail(p, t, "unexpected %s", d);
    }
    if (x) fin(p, x);
    LEAVE(p, x);
}

static jnode *parse_unary(ps *p, int with_filter) {
    ENTER(p);
    const jtok *t = cur(p);
    jnode *node;
    if (tok_is_op(t, OP_SUB) || tok_is_op(t, OP_ADD)) {
        adv(p);
        jnode *inner = parse_unary(p, 0);
        if (!inner) LEAVE(p, NULL);
        node = nn(p, t->op == OP_SUB ? E_NEG : E_POS, t);
        if (!node) LEAVE(p, NULL);
        node->a = inner;
        fin(p, node);
    } else {
        node = parse_primary(p);
    }
    if (node) node = parse_postfix(p, node);
    if (node && with_filter) node = parse_filter_expr(p, node);
    LEAVE(p, node);
}

static jnode *binary(ps *p, int kind, int op, jnode *l, jnode *r, const jtok *t) {
    jnode *x = nn(p, kind, t);
    if (!x) return NULL;
    x->op = (uint16_t)op;
    x->a = l;
    x->b = r;
    x->pos = l->pos;
    fin(p, x);
    return x;
}

static jnode *parse_pow(ps *p) {
    jnode *l = parse_unary(p, 1);
    while (l && tok_is_op(cur(p), OP_POW)) {
        const jtok *t = cur(p);
        adv(p);
        jnode *r = parse_unary(p, 1);
        if (!r) return NULL;
        l = binary(p, E_BIN, OP_POW, l, r, t);
    }
    return l;
}

static jnode *parse_math2(ps *p) {
    jnode *l = parse_pow(p);
    while (l) {
        const jtok *t = cur(p);
        if (!(tok_is_op(t, OP_MUL) || tok_is_op(t, OP_DIV) || tok_is_op(t, OP_FLOORDIV) ||
              tok_is_op(t, OP_MOD)))
            break;
        adv(p);
        jnode *r = parse_pow(p);
        if (!r) return NULL;
        l = binary(p, E_BIN, t->op, l, r, t);
    }
    return l;
}

static jnode *parse_concat(ps *p) {
    jnode *first = parse_math2(p);
    if (!first || !tok_is_op(cur(p), OP_TILDE)) return first;
    const jtok *t = cur(p);
    nvec items = {0};
    if (nv_push(p, &items, first)) return NULL;
    while (tok_is_op(cur(p), OP_TILDE)) {
        adv(p);
        jnode *r = parse_math2(p);
        if (!r || nv_push(p, &items, r)) return NULL;
    }
    jnode *x = nn(p, E_CONCAT, t);
    if (!x) return NULL;
    x->items = items.v;
    x->n = items.n;
    x->pos = first->pos;
    fin(p, x);
    return x;
}

static jnode *parse_math1(ps *p) {
    jnode *l = parse_concat(p);
    while (l && (tok_is_op(cur(p), OP_ADD) || tok_is_op(cur(p), OP_SUB))) {
        const jtok *t = cur(p);
        adv(p);
        jnode *r = parse_concat(p);
        if (!r) return NULL;
        l = binary(p, E_BIN, t->op, l, r, t);
    }
    return l;
}

static jnode *parse_compare(ps *p) {
    jnode *first = parse_math1(p);
    if (!first) return NULL;
    nvec operands = {0};
    uint8_t ops[64];
    size_t nops = 0;
    const jtok *t0 = cur(p);
    for (;;) {
        const jtok *t = cur(p);
        int op = 0;
        if (t->type == T_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT ||
                                t->op == OP_LE || t->op == OP_GT || t->op == OP_GE)) {
            op = t->op;
            adv(p);
        } else if (tok_is_name(t, "in")) {
            op = OP_IN;
            adv(p);
        } else if (tok_is_name(t, "not") && tok_is_name(look(p), "in")) {
            op = OP_NOTIN;
            adv(p);
            adv(p);
        } else {
            break;
        }
        if (nops == sizeof ops) return fail(p, t, "too many chained comparisons");
        ops[nops++] = (uint8_t)op;
        jnode *r = parse_math1(p);
        if (!r || nv_push(p, &operands, r)) return NULL;
    }
    if (!nops) return first;
    jnode *x = nn(p, E_CMP, t0);
    if (!x) return NULL;
    x->a = first;
    x->items = operands.v;
    x->n = operands.n;
    x->ops = ja_alloc(p->a, nops);
    if (!x->ops) return nomem(p);
    memcpy(x->ops, ops, nops);
    x->pos = first->pos;
    fin(p, x);
    return x;
}

static jnode *parse_not(ps *p) {
    if (tok_is_name(cur(p), "not")) {
        ENTER(p);
        const jtok *t = cur(p);
        adv(p);
        jnode *inner = parse_not(p);
        if (!inner) LEAVE(p, NULL);
        jnode *x = nn(p, E_NOT, t);
        if (x) {
            x->a = inner;
            fin(p, x);
        }
        LEAVE(p, x);
    }
    return parse_compare(p);
}

static jnode *parse_and(ps *p) {
    jnode *l = parse_not(p);
    while (l && tok_is_name(cur(p), "and")) {
        const jtok *t = cur(p);
        adv(p);
        jnode *r = parse_not(p);
        if (!r) return NULL;
        l = binary(p, E_AND, 0, l, r, t);
    }
    return l;
}

static jnode *parse_or(ps *p) {
    jnode *l = parse_and(p);
    while (l && tok_is_name(cur(p), "or")) {
        const jtok *t = cur(p);
        adv(p);
        jnode *r = parse_and(p);
        if (!r) return NULL;
        l = binary(p, E_OR, 0, l, r, t);
    }
    return l;
}

static jnode *parse_condexpr(ps *p) {
    ENTER(p);
    jnode *e1 = parse_or(p);
    while (e1 && tok_is_name(cur(p), "if")) {
        const jtok *t = cur(p);
        adv(p);
        jnode *e2 = parse_or(p);
        if (!e2) LEAVE(p, NULL);
        jnode *e3 = NULL;
        if (tok_is_name(cur(p), "else")) {
            adv(p);
            e3 = parse_condexpr(p);
            if (!e3) LEAVE(p, NULL);
        }
        jnode *x = nn(p, E_COND, t);
        if (!x) LEAVE(p, NULL);
        x->a = e2;
        x->b = e1;
        x->c = e3;
        x->pos = e1->pos;
        fin(p, x);
        e1 = x;
    }
    LEAVE(p, e1);
}

static jnode *parse_expression(ps *p, int with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static jnode *parse_tuple(ps *p, int with_condexpr, const char *extra_end, int explicit_paren) {
    const jtok *t0 = cur(p);
    nvec items = {0};
    int is_tuple = 0;
    for (;;) {
        if (items.n && expect_op(p, OP_COMMA, ",")) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        jnode *e = parse_expression(p, with_condexpr);
        if (!e || nv_push(p, &items, e)) return NULL;
        if (tok_is_op(cur(p), OP_COMMA))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_paren) {
            char d[64];
            describe(p, cur(p), d, sizeof d);
            return fail(p, cur(p), "expected an expression, got %s", d);
        }
    }
    jnode *x = nn(p, E_TUPLE, t0);
    if (!x) return NULL;
    x->items = items.v;
    x->n = items.n;
    fin(p, x);
    return x;
}

/* ---- assignment targets ----------------------------------------------------------------- */
static jnode *parse_target(ps *p, const char *extra_end);

static jnode *parse_target_primary(ps *p) {
    ENTER(p);
    const jtok *t = cur(p);
    jnode *x = NULL;
    if (t->type == T_NAME) {
        if (js_eq(t->str, "true") || js_eq(t->str, "false") || js_eq(t->str, "none") ||
            js_eq(t->str, "True") || js_eq(t->str, "False") || js_eq(t->str, "None"))
            LEAVE(p, fail(p, t, "can't assign to the constant '%s'", t->str->s));
        adv(p);
        x = nn(p, E_NAME, t);
        if (x) x->str = t->str;
    } else if (tok_is_op(t, OP_LPAREN)) {
        adv(p);
        x = parse_target(p, NULL);
        if (x && expect_op(p, OP_RPAREN, ")")) x = NULL;
    } else {
        char d[64];
        describe(p, t, d, sizeof d);
        x = fail(p, t, "expected an assignment target (a name), got %s", d);
    }
    LEAVE(p, x);
}

static jnode *parse_target(ps *p, const char *extra_end) {
    const jtok *t0 = cur(p);
    nvec items = {0};
    int is_tuple = 0;
    for (;;) {
        if (items.n && expect_op(p, OP_COMMA, ",")) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        jnode *e = parse_target_primary(p);
        if (!e || nv_push(p, &items, e)) return NULL;
        if (tok_is_op(cur(p), OP_COMMA))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        char d[64];
        describe(p, cur(p), d, sizeof d);
        return fail(p, cur(p), "expected an assignment target, got %s", d);
    }
    jnode *x = nn(p, E_TUPLE, t0);
    if (!x) return NULL;
    x->items = items.v;
    x->n = items.n;
    fin(p, x);
    return x;
}

/* ---- statements ------------------------------------------------------------------------- */
static jnode *subparse(ps *p, const char *const *ends);

static int in_list(const jtok *t, const char *const *names) {
    if (!names || t->type != T_NAME) return 0;
    for (; *names; names++)
        if (js_eq(t->str, *names)) return 1;
    return 0;
}

static jnode *parse_statements(ps *p, const char *const *ends, int drop_needle) {
    if (tok_is_op(cur(p), OP_COLON)) adv(p);
    if (expect_type(p, T_BLOCK_END, "end of statement block")) return NULL;
    jnode *body = subparse(p, ends);
    if (!body) return NULL;
    if (cur(p)->type == T_EOF) {
        char want[128] = "";
        for (const char *const *e = ends; *e; e++) {
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s'%s'", l ? " or " : "", *e);
        }
        return fail(p, cur(p), "unexpected end of template; expected %s", want);
    }
    if (drop_needle) adv(p);
    return body;
}

static jnode *parse_for(ps *p, const jtok *t) {
    jnode *x = nn(p, S_FOR, t);
    if (!x) return NULL;
    x->a = parse_target(p, "in");
    if (!x->a) return NULL;
    if (!tok_is_name(cur(p), "in")) {
        char d[64];
        describe(p, cur(p), d, sizeof d);
        return fail(p, cur(p), "expected token 'in', got %s", d);
    }
    adv(p);
    x->b = parse_tuple(p, 0, "recursive", 0);
    if (!x->b) return NULL;
    if (tok_is_name(cur(p), "if")) {
        adv(p);
        x->e = parse_expression(p, 1);
        if (!x->e) return NULL;
    }
    if (tok_is_name(cur(p), "recursive"))
        return fail(p, cur(p), "recursive loops are not supported");
    static const char *const body_end[] = {"endfor", "else", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    p->loop_depth++;
    x->c = parse_statements(p, body_end, 0);
    p->loop_depth--;
    if (!x->c) return NULL;
    int is_else = tok_is_name(cur(p), "else");
    adv(p);
    if (is_else) {
        x->d = parse_statements(p, else_end, 1);
        if (!x->d) return NULL;
    }
    return x;
}

static jnode *parse_if(ps *p, const jtok *t) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    jnode *first = nn(p, S_IF, t), *node = first;
    if (!first) return NULL;
    for (;;) {
        node->a = parse_tuple(p, 0, NULL, 0);
        if (!node->a) return NULL;
        node->b = parse_statements(p, ends, 0);
        if (!node->b) return NULL;
        const jtok *kw = cur(p);
        adv(p);
        if (js_eq(kw->str, "elif")) {
            jnode *next = nn(p, S_IF, kw);
            if (!next) return NULL;
            node->c = next;
            node = next;
            continue;
        }
        if (js_eq(kw->str, "else")) {
            node->c = parse_statements(p, else_end, 1);
            if (!node->c) return NULL;
        }
        return first;
    }
}

static jnode *parse_set(ps *p, const jtok *t) {
    jnode *target;
    if (cur(p)->type == T_NAME && tok_is_op(look(p), OP_DOT)) {
        const jtok *ns = cur(p);
        adv(p);
        adv(p);
        const jtok *attr = expect_name(p);
        if (!attr) return NULL;
        target = nn(p, E_NSREF, ns);
        if (!target) return NULL;
        target->str = ns->str;
        target->str2 = attr->str;
        fin(p, target);
    } else {
        target = parse_target(p, NULL);
        if (!target) return NULL;
    }
    if (tok_is_op(cur(p), OP_ASSIGN)) {
        adv(p);
        jnode *x = nn(p, S_SET, t);
        if (!x) return NULL;
        x->a = target;
        x->b = parse_tuple(p, 1, NULL, 0);
        return x->b ? x : NULL;
    }
    static const char *const ends[] = {"endset", NULL};
    jnode *x = nn(p, S_SETBLOCK, t);
    if (!x) return NULL;
    x->a = target;
    if (tok_is_op(cur(p), OP_PIPE)) {
        x->c = parse_filter(p, NULL, 0);
        if (!x->c) return NULL;
    }
    x->b = parse_statements(p, ends, 1);
    return x->b ? x : NULL;
}

static jnode *parse_macro(ps *p, const jtok *t) {
    jnode *x = nn(p, S_MACRO, t);
    if (!x) return NULL;
    const jtok *name = expect_name(p);
    if (!name) return NULL;
    x->str = name->str;
    if (expect_op(p, OP_LPAREN, "(")) return NULL;
    nvec params = {0}, defaults = {0};
    int have_default = 0;
    while (!tok_is_op(cur(p), OP_RPAREN)) {
        if (params.n && expect_op(p, OP_COMMA, ",")) return NULL;
        const jtok *pt = expect_name(p);
        if (!pt) return NULL;
        jnode *param = nn(p, E_NAME, pt);
        if (!param) return NULL;
        param->str = pt->str;
        jnode *def = NULL;
        if (tok_is_op(cur(p), OP_ASSIGN)) {
            adv(p);
            def = parse_expression(p, 1);
            if (!def) return NULL;
            have_default = 1;
        } else if (have_default) {
            return fail(p, pt, "non-default argument follows default argument");
        }
        if (nv_push(p, &params, param) || nv_push(p, &defaults, def)) return NULL;
    }
    adv(p);
    x->items = params.v;
    x->n = params.n;
    x->kwv = defaults.v;
    x->nkw = defaults.n;
    static const char *const ends[] = {"endmacro", NULL};
    int saved = p->loop_depth;
    p->loop_depth = 0;
    x->b = parse_statements(p, ends, 1);
    p->loop_depth = saved;
    return x->b ? x : NULL;
}

static jnode *parse_with(ps *p, const jtok *t) {
    jnode *x = nn(p, S_WITH, t);
    if (!x) return NULL;
    nvec targets = {0}, values = {0};
    while (cur(p)->type != T_BLOCK_END) {
        if (targets.n && expect_op(p, OP_COMMA, ",")) return NULL;
        jnode *target = parse_target(p, NULL);
        if (!target) return NULL;
        if (expect_op(p, OP_ASSIGN, "=")) return NULL;
        jnode *v = parse_expression(p, 1);
        if (!v || nv_push(p, &targets, target) || nv_push(p, &values, v)) return NULL;
    }
    x->items = targets.v;
    x->n = targets.n;
    x->kwv = values.v;
    x->nkw = values.n;
    static const char *const ends[] = {"endwith", NULL};
    x->b = parse_statements(p, ends, 1);
    return x->b ? x : NULL;
}

static jnode *parse_statement(ps *p) {
    ENTER(p);
    const jtok *t = cur(p);
    if (t->type != T_NAME) {
        char d[64];
        describe(p, t, d, sizeof d);
        LEAVE(p, fail(p, t, "tag name expected, got %s", d));
    }
    adv(p);
    jnode *x = NULL;
    const char *name = t->str->s;
    if (!strcmp(name, "for")) {
        x = parse_for(p, t);
    } else if (!strcmp(name, "if")) {
        x = parse_if(p, t);
    } else if (!strcmp(name, "set")) {
        x = parse_set(p, t);
    } else if (!strcmp(name, "macro")) {
        x = parse_macro(p, t);
    } else if (!strcmp(name, "print")) {
        x = nn(p, S_OUT, t);
        if (x) {
            x->a = parse_tuple(p, 1, NULL, 0);
            if (!x->a) x = NULL;
        }
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (p->loop_depth == 0) LEAVE(p, fail(p, t, "'%s' outside of a loop", name));
        x = nn(p, name[0] == 'b' ? S_BREAK : S_CONTINUE, t);
    } else if (!strcmp(name, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        x = nn(p, S_FILTER, t);
        if (x) {
            x->a = parse_filter(p, NULL, 1);
            x->b = x->a ? parse_statements(p, ends, 1) : NULL;
            if (!x->b) x = NULL;
        }
    } else if (!strcmp(name, "with")) {
        x = parse_with(p, t);
    } else if (!strcmp(name, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        x = nn(p, S_SCOPE, t);
        if (x) {
            x->b = parse_statements(p, ends, 1);
            if (!x->b) x = NULL;
        }
    } else if (!strcmp(name, "block") || !strcmp(name, "extends") || !strcmp(name, "include") ||
               !strcmp(name, "import") || !strcmp(name, "from") || !strcmp(name, "call") ||
               !strcmp(name, "autoescape")) {
        x = fail(p, t, "the '%s' tag is not supported in chat templates", name);
    } else {
        x = fail(p, t, "encountered unknown tag '%s'", name);
    }
    LEAVE(p, x);
}

static jnode *subparse(ps *p, const char *const *ends) {
    nvec body = {0};
    const jtok *t0 = cur(p);
    for (;;) {
        const jtok *t = cur(p);
        jnode *st = NULL;
        if (t->type == T_EOF) break;
        if (t->type == T_DATA) {
            st = nn(p, S_TEXT, t);
            if (!st) return NULL;
            st->str = t->str;
            adv(p);
        } else if (t->type == T_VAR_BEGIN) {
            adv(p);
            st = nn(p, S_OUT, t);
            if (!st) return NULL;
            st->a = parse_tuple(p, 1, NULL, 0);
            if (!st->a || expect_type(p, T_VAR_END, "end of print statement")) return NULL;
        } else if (t->type == T_BLOCK_BEGIN) {
            adv(p);
            if (in_list(cur(p), ends)) break;
            st = parse_statement(p);
            if (!st || expect_type(p, T_BLOCK_END, "end of statement block")) return NULL;
        } else {
            char d[64];
            describe(p, t, d, sizeof d);
            return fail(p, t, "unexpected %s", d);
        }
        if (nv_push(p, &body, st)) return NULL;
    }
    jnode *x = nn(p, S_BODY, t0);
    if (!x) return NULL;
    x->items = body.v;
    x->n = body.n;
    return x;
}

int jparse(jarena *a, const jsource *src, const jtok *toks, size_t ntoks, int max_depth,
           jnode **root, weft_error *err) {
    ps p = {a, src, toks, ntoks, 0, 0, max_depth > 0 ? max_depth : 200, 0, err, 0};
    jnode *r = subparse(&p, NULL);
    if (!r) return -1;
    if (cur(&p)->type != T_EOF) {
        fail(&p, cur(&p), "unexpected tag");
        return -1;
    }
    *root = r;
    return 0;
}
