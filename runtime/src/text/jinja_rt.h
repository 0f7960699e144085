/* Runtime internals shared by the evaluator (jinja_eval.c) and the library of filters, tests,
 * methods and globals (jinja_lib.c). Every helper reports failures through jx_fail, which
 * names the expression node being evaluated, and returns -1 so callers just propagate. */
#ifndef WEFT_TEXT_JINJA_RT_H
#define WEFT_TEXT_JINJA_RT_H

#include "text/jinja.h"

typedef struct jscope {
    struct jscope *parent;
    jdict *vars;
} jscope;

typedef struct jctx {
    jarena *a;
    const jrender_in *in;
    weft_error *err;
    int failed;
    jbuf *out;
    jscope *sc;
    uint64_t iters;
    uint64_t work; /* elements visited plus string bytes / 64, see jx_work */
    int depth;
    int ctl; /* 1: break, 2: continue pending */
    jv filter_input;
} jctx;

/* Evaluated call arguments. */
typedef struct jargs {
    const jv *pos;
    size_t npos;
    jstr *const *kwn;
    const jv *kwv;
    size_t nkw;
} jargs;

/* range() refuses more items than this, as Jinja2's sandbox does. */
enum { RANGE_MAX = 100000 };

enum {
    BI_RANGE = 1,
    BI_NAMESPACE,
    BI_DICT,
    BI_RAISE,
    BI_STRFTIME,
};

#if defined(__GNUC__)
#define JX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define JX_PRINTF(a, b)
#endif

/* errors: all return -1 */
int jx_fail(jctx *c, const jnode *n, weft_status code, const char *fmt, ...) JX_PRINTF(4, 5);
int jx_type_error(jctx *c, const jnode *n, const char *fmt, ...) JX_PRINTF(3, 4);
int jx_nomem(jctx *c, const jnode *n);
int jx_bufail(jctx *c, const jnode *n, const jbuf *b);
int jx_undef_fail(jctx *c, const jnode *n, jv v);
const char *jx_why(jctx *c, const char *fmt, ...) JX_PRINTF(2, 3);

/* values */
int jx_mkstr(jctx *c, const jnode *n, const char *s, size_t len, jv *out);
jbuf jx_newbuf(jctx *c);
int jx_buf_to_val(jctx *c, const jnode *n, jbuf *b, jv *out); /* frees b */
int jx_to_str(jctx *c, const jnode *n, jv v, jstr **out);
int jx_push(jctx *c, const jnode *n, jlist *l, jv v);
jv jx_func(jctx *c, int kind, int id, const char *name, jv self);

/* Python operations */
int jx_iterate(jctx *c, const jnode *n, jv v, jlist **out);
int jx_count_iter(jctx *c, const jnode *n);
/* Charges O(n) work (list elements, or string bytes / 64) against the work budget, which is
 * JX_WORK_PER_ITERATION units per allowed iteration (jx_work_max); bounds CPU for templates that
 * scan big values in loops. 8: at the default 1,000,000 iterations, 8M units, which the worst
 * templates found spend in 1.5-3 s of a 2026 x86 core (docs/CHAT_TEMPLATES.md), while a render
 * of a 1 MB conversation charges about 20,000. */
#define JX_WORK_PER_ITERATION 8u
uint64_t jx_work_max(const jlimits *lim);
int jx_work(jctx *c, const jnode *n, size_t elements, size_t bytes);
/* work units of a value: elements of a list or dict, bytes of a string */
int jx_work_of(jctx *c, const jnode *n, jv v);
int jx_attr_only(jctx *c, const jnode *n, jv obj, const jstr *name, jv *out, int *found);
int jx_getattr(jctx *c, const jnode *n, jv obj, const jstr *name, jv *out);
int jx_getitem(jctx *c, const jnode *n, jv obj, jv key, jv *out);
int jx_binop(jctx *c, const jnode *n, int op, jv x, jv y, jv *out);
int jx_contains(jctx *c, const jnode *n, jv item, jv seq, int *res);
int jx_compare(jctx *c, const jnode *n, int op, jv x, jv y, int *res);
int jx_call(jctx *c, const jnode *n, jv callee, const jargs *a, jv *out);
int jx_eval(jctx *c, const jnode *n, jv *out);

/* library (jinja_lib.c) */
int jx_builtin(jctx *c, const jnode *n, int id, const jargs *a, jv *out);
int jx_method(jctx *c, const jnode *n, jv self, const char *name, const jargs *a, jv *out);
int jx_filter(jctx *c, const jnode *n, int fid, jv v, const jargs *a, jv *out);
int jx_test(jctx *c, const jnode *n, int tid, jv v, const jargs *a, int *res);

/* Python's fmt % args */
int jx_percent(jctx *c, const jnode *n, const jstr *fmt, jv args, jv *out);

/* byte offset of needle in hay at or after from, (size_t)-1 when absent */
size_t js_find(const char *hay, size_t hl, const char *needle, size_t nl, size_t from);

#endif
