/* Evaluator for chat templates: walks the syntax tree with Jinja2's runtime semantics as
 * transformers configures it (ImmutableSandboxedEnvironment, default Undefined, the loop
 * controls extension, its tojson/raise_exception/strftime_now/namespace/dict globals).
 * Scoping follows Jinja2: a for-loop iteration, macro call, set-block, with-block and
 * {% generation %} body each get a child scope, `if` does not. Every failure names the
 * expression and its line:column; iterations, output size, memory and depth are bounded. */
#include "text/jinja_rt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"

enum { EVAL_MAX_DEPTH = 400 };

/* ---- errors --------------------------------------------------------------------------- */
int jx_fail(jctx *c, const jnode *n, weft_status code, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[300], where[320], expr[100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const jsource *src = c->in->src;
    size_t pos = n ? n->pos : 0, end = n ? n->end : 0;
    jsrc_where(src, pos, where, sizeof where);
    if (n && end > pos && end <= src->len && n->kind >= E_CONST) {
        size_t len = end - pos, k = 0;
        if (len > sizeof(expr) - 5) {
            len = sizeof(expr) - 5;
            while (len > 0 && ((unsigned char)src->text[pos + len] & 0xC0) == 0x80)
                len--;
        }
        for (size_t i = 0; i < len; i++) {
            char ch = src->text[pos + i];
            expr[k++] = ch == '\n' || ch == '\t' ? ' ' : ch;
        }
        if (len < end - pos) {
            memcpy(expr + k, "...", 3);
            k += 3;
        }
        expr[k] = '\0';
        weft_error_set(c->err, code, "chat template", "%s: %s (in `%s`)", where, msg, expr);
    } else {
        weft_error_set(c->err, code, "chat template", "%s: %s", where, msg);
    }
    return -1;
}

int jx_nomem(jctx *c, const jnode *n) {
    if (c->a->exhausted && c->in->lim.max_memory)
        return jx_fail(c, n, WEFT_ERR_NOMEM,
                       "rendering needs more than the %zu bytes of memory allowed",
                       c->in->lim.max_memory);
    return jx_fail(c, n, WEFT_ERR_NOMEM, "out of memory");
}

int jx_bufail(jctx *c, const jnode *n, const jbuf *b) {
    if (b->failed == 2)
        return jx_fail(c, n, WEFT_ERR_INVALID,
                       "rendered output is longer than the %zu bytes allowed",
                       c->in->lim.max_output);
    if (b->failed == 3) return jx_fail(c, n, WEFT_ERR_INVALID, "value nested too deeply to print");
    return jx_fail(c, n, WEFT_ERR_NOMEM, "out of memory");
}

int jx_type_error(jctx *c, const jnode *n, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return jx_fail(c, n, WEFT_ERR_INVALID, "%s", msg);
}

int jx_undef_fail(jctx *c, const jnode *n, jv v) {
    if (v.unsafe) return jx_fail(c, n, WEFT_ERR_INVALID, "%s", v.u.why ? v.u.why : "unsafe access");
    return jx_fail(c, n, WEFT_ERR_INVALID, "%s", v.u.why ? v.u.why : "value is undefined");
}

const char *jx_why(jctx *c, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    jstr *s = js_cstr(c->a, tmp);
    return s ? s->s : NULL;
}

/* ---- small constructors ----------------------------------------------------------------- */
int jx_mkstr(jctx *c, const jnode *n, const char *s, size_t len, jv *out) {
    jstr *r = js_new(c->a, s, len);
    if (!r) return jx_nomem(c, n);
    *out = jv_of_str(r);
    return 0;
}

int jx_buf_to_val(jctx *c, const jnode *n, jbuf *b, jv *out) {
    if (b->failed) {
        int r = jx_bufail(c, n, b);
        jb_free(b);
        return r;
    }
    int r = jx_mkstr(c, n, b->p ? b->p : "", b->len, out);
    jb_free(b);
    return r;
}

jbuf jx_newbuf(jctx *c) {
    jbuf b = {0};
    b.limit = c->in->lim.max_output;
    return b;
}

/* str(v) as a jstr */
int jx_to_str(jctx *c, const jnode *n, jv v, jstr **out) {
    if (v.t == JV_STR) {
        *out = v.u.s;
        return 0;
    }
    jbuf b = jx_newbuf(c);
    jv_str(&b, v);
    jv r;
    if (jx_buf_to_val(c, n, &b, &r)) return -1;
    *out = r.u.s;
    return 0;
}

int jx_push(jctx *c, const jnode *n, jlist *l, jv v) {
    return jl_push(c->a, l, v) ? jx_nomem(c, n) : 0;
}

jv jx_func(jctx *c, int kind, int id, const char *name, jv self) {
    jfunc *f = ja_alloc(c->a, sizeof(jfunc));
    if (!f) return jv_undef(NULL);
    f->kind = kind;
    f->id = id;
    f->name = name;
    f->self = self;
    jv v = {JV_FUNC, 0, {0}};
    v.u.fn = f;
    return v;
}

/* ---- iteration -------------------------------------------------------------------------- */
/* The items a Python for-loop over v would see. */
int jx_iterate(jctx *c, const jnode *n, jv v, jlist **out) {
    if (jx_work_of(c, n, v)) return -1;
    switch (v.t) {
    case JV_UNDEF:
        if (v.unsafe) return jx_undef_fail(c, n, v);
        *out = jl_new(c->a, 0, JL_LIST);
        return *out ? 0 : jx_nomem(c, n);
    case JV_LIST:
        *out = v.u.l;
        return 0;
    case JV_STR: {
        jlist *l = jl_new(c->a, v.u.s->ncp, JL_LIST);
        if (!l) return jx_nomem(c, n);
        size_t i = 0;
        while (i < v.u.s->len) {
            size_t s = i;
            ju_next(v.u.s->s, v.u.s->len, &i);
            jv ch;
            if (jx_mkstr(c, n, v.u.s->s + s, i - s, &ch) || jx_push(c, n, l, ch)) return -1;
        }
        *out = l;
        return 0;
    }
    case JV_DICT: {
        jlist *l = jl_new(c->a, v.u.d->len, JL_LIST);
        if (!l) return jx_nomem(c, n);
        for (size_t i = 0; i < v.u.d->len; i++)
            l->v[i] = v.u.d->k[i];
        l->len = v.u.d->len;
        *out = l;
        return 0;
    }
    default:
        return jx_type_error(c, n, "'%s' object is not iterable", jv_typename(v));
    }
}

int jx_count_iter(jctx *c, const jnode *n) {
    if (++c->iters > c->in->lim.max_iterations)
        return jx_fail(c, n, WEFT_ERR_INVALID, "more than %llu loop iterations",
                       (unsigned long long)c->in->lim.max_iterations);
    return 0;
}

uint64_t jx_work_max(const jlimits *lim) {
    return lim->max_iterations > UINT64_MAX / JX_WORK_PER_ITERATION
               ? UINT64_MAX
               : lim->max_iterations * JX_WORK_PER_ITERATION;
}

int jx_work(jctx *c, const jnode *n, size_t elements, size_t bytes) {
    c->work += elements + bytes / 64;
    uint64_t max = jx_work_max(&c->in->lim);
    if (c->work > max)
        return jx_fail(c, n, WEFT_ERR_INVALID,
                       "template does more work than allowed (%llu element visits)",
                       (unsigned long long)max);
    return 0;
}

int jx_work_of(jctx *c, const jnode *n, jv v) {
    switch (v.t) {
    case JV_STR:
        return jx_work(c, n, 1, v.u.s->len);
    case JV_LIST:
        return jx_work(c, n, v.u.l->len + 1, 0);
    case JV_DICT:
    case JV_NS:
        return jx_work(c, n, v.u.d->len + 1, 0);
    default:
        return 0;
    }
}

/* ---- lookups ---------------------------------------------------------------------------- */
static const struct {
    const char *name;
    int id;
} BUILTINS[] = {
    {"range", BI_RANGE},           {"namespace", BI_NAMESPACE},   {"dict", BI_DICT},
    {"raise_exception", BI_RAISE}, {"strftime_now", BI_STRFTIME},
};

static jv lookup(jctx *c, const jstr *name) {
    for (jscope *s = c->sc; s; s = s->parent) {
        jv *v = jd_gets(s->vars, name->s, name->len);
        if (v) return *v;
    }
    for (size_t i = 0; i < sizeof(BUILTINS) / sizeof(BUILTINS[0]); i++)
        if (js_eq(name, BUILTINS[i].name))
            return jx_func(c, JF_BUILTIN, BUILTINS[i].id, BUILTINS[i].name, jv_none());
    return jv_undef(jx_why(c, "'%s' is undefined", name->s));
}

static jscope *new_scope(jctx *c, jscope *parent) {
    jscope *s = ja_alloc(c->a, sizeof(jscope));
    if (!s) return NULL;
    s->parent = parent;
    s->vars = jd_new(c->a);
    return s->vars ? s : NULL;
}

static int set_var(jctx *c, const jnode *n, jscope *s, jstr *name, jv v) {
    return jd_set(c->a, s->vars, jv_of_str(name), v) ? jx_nomem(c, n) : 0;
}

/* Method names per type. Mutating ones are refused the way the immutable sandbox does. */
static const char *const STR_METHODS[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill",        NULL};
static const char *const DICT_METHODS[] = {"copy", "fromkeys", "get", "items",
                                           "keys", "values",   NULL};
static const char *const DICT_UNSAFE[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const LIST_METHODS[] = {"copy", "count", "index", NULL};
static const char *const LIST_UNSAFE[] = {"append", "clear",   "extend", "insert", "pop",
                                          "remove", "reverse", "sort",   NULL};

static const char *find_name(const char *const *names, const jstr *s) {
    for (; *names; names++)
        if (js_eq(s, *names)) return *names;
    return NULL;
}

static jv unsafe_attr(jctx *c, jv obj, const jstr *name) {
    jv u = jv_undef(
        jx_why(c, "access to attribute '%s' of '%s' object is unsafe", name->s, jv_typename(obj)));
    u.unsafe = 1;
    return u;
}

static jv no_attr(jctx *c, jv obj, const jstr *name) {
    return jv_undef(jx_why(c, "'%s object' has no attribute '%s'", jv_typename(obj), name->s));
}

static int loop_attr(jctx *c, const jnode *n, jv obj, const jstr *name, jv *out) {
    const jloop *lp = obj.u.lp;
    size_t len = lp->items->len, i = lp->i;
    if (js_eq(name, "index"))
        *out = jv_int((int64_t)i + 1);
    else if (js_eq(name, "index0"))
        *out = jv_int((int64_t)i);
    else if (js_eq(name, "revindex"))
        *out = jv_int((int64_t)(len - i));
    else if (js_eq(name, "revindex0"))
        *out = jv_int((int64_t)(len - i - 1));
    else if (js_eq(name, "first"))
        *out = jv_bool(i == 0);
    else if (js_eq(name, "last"))
        *out = jv_bool(i + 1 == len);
    else if (js_eq(name, "length"))
        *out = jv_int((int64_t)len);
    else if (js_eq(name, "depth"))
        *out = jv_int(1);
    else if (js_eq(name, "depth0"))
        *out = jv_int(0);
    else if (js_eq(name, "previtem"))
        *out = i > 0 ? lp->items->v[i - 1] : jv_undef("there is no previous item");
    else if (js_eq(name, "nextitem"))
        *out = i + 1 < len ? lp->items->v[i + 1] : jv_undef("there is no next item");
    else if (js_eq(name, "cycle") || js_eq(name, "changed"))
        *out = jx_func(c, JF_METHOD, 0, js_eq(name, "cycle") ? "cycle" : "changed", obj);
    else
        *out = no_attr(c, obj, name);
    return 0;
}

/* Attribute lookup (Python getattr first); no item fallback. found=0 when absent. */
int jx_attr_only(jctx *c, const jnode *n, jv obj, const jstr *name, jv *out, int *found) {
    const char *m = NULL;
    *found = 1;
    switch (obj.t) {
    case JV_STR:
        m = find_name(STR_METHODS, name);
        break;
    case JV_DICT:
        if ((m = find_name(DICT_METHODS, name)) == NULL && find_name(DICT_UNSAFE, name)) {
            *out = unsafe_attr(c, obj, name);
            return 0;
        }
        break;
    case JV_LIST:
        if (obj.u.l->kind == JL_LIST) {
            if ((m = find_name(LIST_METHODS, name)) == NULL && find_name(LIST_UNSAFE, name)) {
                *out = unsafe_attr(c, obj, name);
                return 0;
            }
        } else if ((obj.u.l->kind == JL_TUPLE || obj.u.l->kind == JL_RANGE) &&
                   (js_eq(name, "count") || js_eq(name, "index"))) {
            m = js_eq(name, "count") ? "count" : "index";
        }
        break;
    case JV_NS: {
        jv *v = jd_gets(obj.u.d, name->s, name->len);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    case JV_LOOP:
        return loop_attr(c, n, obj, name, out);
    default:
        break;
    }
    if (m) {
        *out = jx_func(c, JF_METHOD, 0, m, obj);
        return out->t == JV_FUNC ? 0 : jx_nomem(c, n);
    }
    *found = 0;
    return 0;
}

int jx_getattr(jctx *c, const jnode *n, jv obj, const jstr *name, jv *out) {
    if (obj.t == JV_UNDEF) return jx_undef_fail(c, n, obj);
    int found;
    if (jx_attr_only(c, n, obj, name, out, &found)) return -1;
    if (found) return 0;
    if (obj.t == JV_DICT) {
        jv *v = jd_gets(obj.u.d, name->s, name->len);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = no_attr(c, obj, name);
    return 0;
}

/* Python slice.indices() */
static int slice_indices(jctx *c, const jnode *n, int64_t len, const jv *se, int64_t *start,
                         int64_t *stop, int64_t *step, int64_t *count) {
    for (int k = 0; k < 3; k++)
        if (se[k].t != JV_NONE && se[k].t != JV_INT && se[k].t != JV_BOOL)
            return jx_type_error(c, n, "slice indices must be integers or None, not %s",
                                 jv_typename(se[k]));
    *step = se[2].t == JV_NONE ? 1 : se[2].u.i;
    if (*step == 0) return jx_type_error(c, n, "slice step cannot be zero");
    if (*step == INT64_MIN) *step = -INT64_MAX;
    int64_t lower = *step < 0 ? -1 : 0, upper = *step < 0 ? len - 1 : len;
    for (int k = 0; k < 2; k++) {
        int64_t v;
        if (se[k].t == JV_NONE) {
            v = (k == 0) == (*step < 0) ? upper : lower;
        } else {
            v = se[k].u.i;
            if (v < 0) {
                v = v < -len ? lower : v + len;
                if (v < lower) v = lower;
            } else if (v > upper) {
                v = upper;
            }
        }
        if (k == 0)
            *start = v;
        else
            *stop = v;
    }
    if (*step > 0)
        *count = *stop > *start ? (*stop - *start - 1) / *step + 1 : 0;
    else
        *count = *stop < *start ? (*start - *stop - 1) / (-*step) + 1 : 0;
    return 0;
}

static int do_slice(jctx *c, const jnode *n, jv obj, const jv *se, jv *out) {
    if (obj.t == JV_UNDEF) return jx_undef_fail(c, n, obj);
    if (jx_work_of(c, n, obj)) return -1;
    int64_t start, stop, step, cnt;
    if (obj.t == JV_STR) {
        const jstr *s = obj.u.s;
        if (slice_indices(c, n, (int64_t)s->ncp, se, &start, &stop, &step, &cnt)) return -1;
        if (s->ncp == s->len && step == 1) return jx_mkstr(c, n, s->s + start, (size_t)cnt, out);
        size_t *off = ja_alloc(c->a, (s->ncp + 1) * sizeof(size_t));
        if (!off) return jx_nomem(c, n);
        size_t i = 0, k = 0;
        while (i < s->len) {
            off[k++] = i;
            ju_next(s->s, s->len, &i);
        }
        off[k] = s->len;
        jbuf b = jx_newbuf(c);
        for (int64_t j = 0, idx = start; j < cnt; j++, idx += step)
            jb_put(&b, s->s + off[idx], off[idx + 1] - off[idx]);
        return jx_buf_to_val(c, n, &b, out);
    }
    if (obj.t == JV_LIST &&
        (obj.u.l->kind == JL_LIST || obj.u.l->kind == JL_TUPLE || obj.u.l->kind == JL_RANGE)) {
        const jlist *l = obj.u.l;
        if (slice_indices(c, n, (int64_t)l->len, se, &start, &stop, &step, &cnt)) return -1;
        jlist *r = jl_new(c->a, (size_t)cnt, l->kind);
        if (!r) return jx_nomem(c, n);
        for (int64_t j = 0, idx = start; j < cnt; j++, idx += step)
            r->v[j] = l->v[idx];
        r->len = (size_t)cnt;
        if (l->kind == JL_RANGE) { /* range(start + i*step, start + j*step, step*k), as Python */
            r->range[0] = l->range[0] + start * l->range[2];
            r->range[1] = l->range[0] + stop * l->range[2];
            r->range[2] = l->range[2] * step;
        }
        *out = jv_of_list(r);
        return 0;
    }
    *out = jv_undef(jx_why(c, "'%s object' cannot be sliced", jv_typename(obj)));
    return 0;
}

/* Python subscription, then Jinja2's getattr fallback for string keys. */
int jx_getitem(jctx *c, const jnode *n, jv obj, jv key, jv *out) {
    if (obj.t == JV_UNDEF) return jx_undef_fail(c, n, obj);
    int is_index = key.t == JV_INT || key.t == JV_BOOL;
    if (obj.t == JV_DICT && jv_hashable(key)) {
        jv *v = jd_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    } else if (obj.t == JV_LIST &&
               (obj.u.l->kind == JL_LIST || obj.u.l->kind == JL_TUPLE ||
                obj.u.l->kind == JL_RANGE) &&
               is_index) {
        int64_t i = key.u.i, len = (int64_t)obj.u.l->len;
        if (i < 0) i += len;
        if (i >= 0 && i < len) {
            *out = obj.u.l->v[i];
            return 0;
        }
    } else if (obj.t == JV_STR && is_index) {
        int64_t i = key.u.i, len = (int64_t)obj.u.s->ncp;
        if (i < 0) i += len;
        if (i >= 0 && i < len) {
            if (obj.u.s->ncp != obj.u.s->len && jx_work(c, n, 1, obj.u.s->len)) return -1;
            size_t a = ju_offset(obj.u.s, (size_t)i), e = a;
            ju_next(obj.u.s->s, obj.u.s->len, &e);
            return jx_mkstr(c, n, obj.u.s->s + a, e - a, out);
        }
    }
    if (key.t == JV_STR) {
        int found;
        if (jx_attr_only(c, n, obj, key.u.s, out, &found)) return -1;
        if (found) return 0;
        *out = no_attr(c, obj, key.u.s);
        return 0;
    }
    jbuf b = jx_newbuf(c);
    jv_repr(&b, key);
    *out = jv_undef(jx_why(c, "'%s object' has no element %.100s", jv_typename(obj),
                           b.p && !b.failed ? b.p : "?"));
    jb_free(&b);
    return 0;
}

/* ---- arithmetic ------------------------------------------------------------------------- */
static int int_result(jctx *c, const jnode *n, int overflow, int64_t v, jv *out) {
    if (overflow) return jx_fail(c, n, WEFT_ERR_INVALID, "integer result does not fit in 64 bits");
    *out = jv_int(v);
    return 0;
}

static double py_fmod(double x, double y) {
    double m = fmod(x, y);
    if (m != 0 && ((y < 0) != (m < 0)))
        m += y;
    else if (m == 0)
        m = copysign(0.0, y);
    return m;
}

static int repeat(jctx *c, const jnode *n, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    /* an empty operand repeats to an empty result at once: '' * 10**15 must not loop */
    if ((seq.t == JV_STR ? seq.u.s->len : seq.u.l->len) == 0) times = 0;
    if (seq.t == JV_STR) {
        const jstr *s = seq.u.s;
        if (s->len && (uint64_t)times > c->in->lim.max_memory / s->len)
            return jx_fail(c, n, WEFT_ERR_NOMEM, "string repetition result is too large");
        if (jx_work(c, n, 1, s->len * (size_t)times)) return -1;
        jbuf b = jx_newbuf(c);
        for (int64_t i = 0; i < times && !b.failed; i++)
            jb_put(&b, s->s, s->len);
        return jx_buf_to_val(c, n, &b, out);
    }
    const jlist *l = seq.u.l;
    if (l->len && (uint64_t)times > c->in->lim.max_memory / (l->len * sizeof(jv)))
        return jx_fail(c, n, WEFT_ERR_NOMEM, "list repetition result is too large");
    if (jx_work(c, n, l->len * (size_t)times + 1, 0)) return -1;
    jlist *r = jl_new(c->a, l->len * (size_t)times, l->kind);
    if (!r) return jx_nomem(c, n);
    for (int64_t i = 0; i < times; i++) {
        jv_copy(r->v + r->len, l->v, l->len);
        r->len += l->len;
    }
    *out = jv_of_list(r);
    return 0;
}

static const char *op_text(int op) {
    switch (op) {
    case OP_ADD:
        return "+";
    case OP_SUB:
        return "-";
    case OP_MUL:
        return "*";
    case OP_DIV:
        return "/";
    case OP_FLOORDIV:
        return "//";
    case OP_MOD:
        return "%";
    case OP_POW:
        return "**";
    default:
        return "?";
    }
}

int jx_binop(jctx *c, const jnode *n, int op, jv x, jv y, jv *out) {
    if (op == OP_MOD && x.t == JV_STR) return jx_percent(c, n, x.u.s, y, out);
    if (x.t == JV_UNDEF) return jx_undef_fail(c, n, x);
    if (y.t == JV_UNDEF) return jx_undef_fail(c, n, y);
    if (jv_is_number(x) && jv_is_number(y)) {
        int isf = x.t == JV_FLOAT || y.t == JV_FLOAT;
        int64_t a = x.u.i, b = y.u.i, r = 0;
        double fa = jv_num(x), fb = jv_num(y);
        switch (op) {
        case OP_ADD:
            if (isf) break;
            {
                int ovf = __builtin_add_overflow(a, b, &r);
                return int_result(c, n, ovf, r, out);
            }
        case OP_SUB:
            if (isf) break;
            {
                int ovf = __builtin_sub_overflow(a, b, &r);
                return int_result(c, n, ovf, r, out);
            }
        case OP_MUL:
            if (isf) break;
            {
                int ovf = __builtin_mul_overflow(a, b, &r);
                return int_result(c, n, ovf, r, out);
            }
        case OP_DIV:
            if (fb == 0) return jx_fail(c, n, WEFT_ERR_INVALID, "division by zero");
            *out = jv_float(fa / fb);
            return 0;
        case OP_FLOORDIV:
        case OP_MOD:
            if (isf ? fb == 0 : b == 0)
                return jx_fail(c, n, WEFT_ERR_INVALID,
                               op == OP_MOD ? "modulo by zero" : "division by zero");
            if (!isf) {
                if (a == INT64_MIN && b == -1) {
                    if (op == OP_MOD) return int_result(c, n, 0, 0, out);
                    return int_result(c, n, 1, 0, out);
                }
                int64_t q = a / b, m = a % b;
                if (m != 0 && ((m < 0) != (b < 0))) {
                    q--;
                    m += b;
                }
                *out = jv_int(op == OP_MOD ? m : q);
                return 0;
            }
            {
                double m = py_fmod(fa, fb);
                if (op == OP_MOD) {
                    *out = jv_float(m);
                } else {
                    double q = (fa - fmod(fa, fb)) / fb;
                    if (fmod(fa, fb) != 0 && ((fb < 0) != (fmod(fa, fb) < 0))) q -= 1.0;
                    double fl = floor(q);
                    if (q - fl > 0.5) fl += 1.0;
                    *out = jv_float(q == 0 ? copysign(0.0, fa / fb) : fl);
                }
            }
            return 0;
        case OP_POW:
            if (!isf && b >= 0) {
                int64_t acc = 1, base = a;
                int64_t e = b;
                int ovf = 0;
                while (e > 0) {
                    if (e & 1) ovf |= __builtin_mul_overflow(acc, base, &acc);
                    e >>= 1;
                    if (e) ovf |= __builtin_mul_overflow(base, base, &base);
                }
                return int_result(c, n, ovf, acc, out);
            }
            if (fa == 0 && fb < 0)
                return jx_fail(c, n, WEFT_ERR_INVALID, "0.0 cannot be raised to a negative power");
            if (fa < 0 && fb != floor(fb))
                return jx_fail(c, n, WEFT_ERR_UNSUPPORTED, "complex results are not supported");
            *out = jv_float(pow(fa, fb));
            return 0;
        }
        double r2 = op == OP_ADD ? fa + fb : op == OP_SUB ? fa - fb : fa * fb;
        *out = jv_float(r2);
        return 0;
    }
    if (op == OP_ADD && x.t == JV_STR && y.t == JV_STR) {
        jstr *s = js_cat(c->a, x.u.s, y.u.s);
        if (!s) return jx_nomem(c, n);
        *out = jv_of_str(s);
        return 0;
    }
    if (op == OP_ADD && x.t == JV_LIST && y.t == JV_LIST && x.u.l->kind == y.u.l->kind &&
        (x.u.l->kind == JL_LIST || x.u.l->kind == JL_TUPLE)) {
        jlist *r = jl_new(c->a, x.u.l->len + y.u.l->len, x.u.l->kind);
        if (!r) return jx_nomem(c, n);
        jv_copy(r->v, x.u.l->v, x.u.l->len);
        jv_copy(r->v + x.u.l->len, y.u.l->v, y.u.l->len);
        r->len = x.u.l->len + y.u.l->len;
        *out = jv_of_list(r);
        return 0;
    }
    if (op == OP_MUL) {
        int xs = x.t == JV_STR ||
                 (x.t == JV_LIST && (x.u.l->kind == JL_LIST || x.u.l->kind == JL_TUPLE));
        int ys = y.t == JV_STR ||
                 (y.t == JV_LIST && (y.u.l->kind == JL_LIST || y.u.l->kind == JL_TUPLE));
        if (xs && (y.t == JV_INT || y.t == JV_BOOL)) return repeat(c, n, x, y.u.i, out);
        if (ys && (x.t == JV_INT || x.t == JV_BOOL)) return repeat(c, n, y, x.u.i, out);
    }
    if (op == OP_ADD && x.t == JV_STR)
        return jx_type_error(c, n, "can only concatenate str (not \"%s\") to str", jv_typename(y));
    return jx_type_error(c, n, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
                         jv_typename(x), jv_typename(y));
}

/* Python's `a in b`. */
int jx_contains(jctx *c, const jnode *n, jv item, jv seq, int *res) {
    if (jx_work_of(c, n, seq)) return -1;
    switch (seq.t) {
    case JV_UNDEF:
        if (seq.unsafe) return jx_undef_fail(c, n, seq);
        *res = 0;
        return 0;
    case JV_STR:
        if (item.t == JV_UNDEF) return jx_undef_fail(c, n, item);
        if (item.t != JV_STR)
            return jx_type_error(c, n, "'in <string>' requires string as left operand, not %s",
                                 jv_typename(item));
        *res = item.u.s->len == 0 ||
               js_find(seq.u.s->s, seq.u.s->len, item.u.s->s, item.u.s->len, 0) != (size_t)-1;
        return 0;
    case JV_DICT:
        if (!jv_hashable(item))
            return jx_type_error(c, n, "unhashable type: '%s'", jv_typename(item));
        *res = jd_get(seq.u.d, item) != NULL;
        return 0;
    case JV_LIST:
        if (seq.u.l->kind == JL_KEYS && !jv_hashable(item))
            return jx_type_error(c, n, "unhashable type: '%s'", jv_typename(item));
        *res = 0;
        for (size_t i = 0; i < seq.u.l->len && !*res; i++)
            *res = jv_eq(seq.u.l->v[i], item);
        return 0;
    default:
        return jx_type_error(c, n, "argument of type '%s' is not iterable", jv_typename(seq));
    }
}

int jx_compare(jctx *c, const jnode *n, int op, jv x, jv y, int *res) {
    if ((x.t == JV_LIST || x.t == JV_DICT || x.t == JV_STR) && jx_work_of(c, n, x)) return -1;
    switch (op) {
    case OP_EQ:
        *res = jv_eq(x, y);
        return 0;
    case OP_NE:
        *res = !jv_eq(x, y);
        return 0;
    case OP_IN:
        return jx_contains(c, n, x, y, res);
    case OP_NOTIN:
        if (jx_contains(c, n, x, y, res)) return -1;
        *res = !*res;
        return 0;
    default:
        break;
    }
    if (x.t == JV_UNDEF) return jx_undef_fail(c, n, x);
    if (y.t == JV_UNDEF) return jx_undef_fail(c, n, y);
    int r = jv_cmp(x, y);
    const char *sym = op == OP_LT ? "<" : op == OP_LE ? "<=" : op == OP_GT ? ">" : ">=";
    if (r == 2)
        return jx_type_error(c, n, "'%s' not supported between instances of '%s' and '%s'", sym,
                             jv_typename(x), jv_typename(y));
    if (r == 3) {
        *res = 0;
        return 0;
    }
    *res = op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
    return 0;
}

/* ---- forward declarations ---- */
static int exec_node(jctx *c, const jnode *n);

/* ---- expressions ------------------------------------------------------------------------ */
static int eval_args(jctx *c, const jnode *n, jargs *a) {
    jv *pos = NULL, *kwv = NULL;
    if (n->n) {
        pos = ja_alloc(c->a, n->n * sizeof(jv));
        if (!pos) return jx_nomem(c, n);
        for (size_t i = 0; i < n->n; i++)
            if (jx_eval(c, n->items[i], &pos[i])) return -1;
    }
    if (n->nkw) {
        kwv = ja_alloc(c->a, n->nkw * sizeof(jv));
        if (!kwv) return jx_nomem(c, n);
        for (size_t i = 0; i < n->nkw; i++)
            if (jx_eval(c, n->kwv[i], &kwv[i])) return -1;
    }
    a->pos = pos;
    a->npos = n->n;
    a->kwn = n->kwn;
    a->kwv = kwv;
    a->nkw = n->nkw;
    return 0;
}

static int eval_seq(jctx *c, const jnode *n, int kind, jv *out) {
    jlist *l = jl_new(c->a, n->n, kind);
    if (!l) return jx_nomem(c, n);
    for (size_t i = 0; i < n->n; i++)
        if (jx_eval(c, n->items[i], &l->v[i])) return -1;
    l->len = n->n;
    *out = jv_of_list(l);
    return 0;
}

static int eval_inner(jctx *c, const jnode *n, jv *out) {
    jv x, y;
    switch (n->kind) {
    case E_CONST:
        *out = n->cv;
        return 0;
    case E_NAME:
        *out = lookup(c, n->str);
        return 0; /* an allocation failure here is caught by jx_eval's arena check */
    case E_LIST:
        return eval_seq(c, n, JL_LIST, out);
    case E_TUPLE:
        return eval_seq(c, n, JL_TUPLE, out);
    case E_DICT: {
        jdict *d = jd_new(c->a);
        if (!d) return jx_nomem(c, n);
        for (size_t i = 0; i + 1 < n->n; i += 2) {
            if (jx_eval(c, n->items[i], &x) || jx_eval(c, n->items[i + 1], &y)) return -1;
            if (!jv_hashable(x))
                return jx_type_error(c, n->items[i], "unhashable type: '%s'", jv_typename(x));
            if (jd_set(c->a, d, x, y)) return jx_nomem(c, n);
        }
        *out = jv_of_dict(d);
        return 0;
    }
    case E_ATTR:
        if (jx_eval(c, n->a, &x)) return -1;
        return jx_getattr(c, n, x, n->str, out);
    case E_ITEM:
        if (jx_eval(c, n->a, &x)) return -1;
        if (n->b->kind == E_SLICE) {
            jv se[3] = {jv_none(), jv_none(), jv_none()};
            const jnode *parts[3] = {n->b->a, n->b->b, n->b->c};
            for (int k = 0; k < 3; k++)
                if (parts[k] && jx_eval(c, parts[k], &se[k])) return -1;
            return do_slice(c, n, x, se, out);
        }
        if (jx_eval(c, n->b, &y)) return -1;
        return jx_getitem(c, n, x, y, out);
    case E_CALL: {
        jargs a;
        if (jx_eval(c, n->a, &x) || eval_args(c, n, &a)) return -1;
        return jx_call(c, n, x, &a, out);
    }
    case E_FILTER: {
        jargs a;
        if (n->a) {
            if (jx_eval(c, n->a, &x)) return -1;
        } else {
            x = c->filter_input;
        }
        if (eval_args(c, n, &a)) return -1;
        return jx_filter(c, n, n->fid, x, &a, out);
    }
    case E_TEST: {
        jargs a;
        int r;
        if (jx_eval(c, n->a, &x) || eval_args(c, n, &a)) return -1;
        if (jx_test(c, n, n->fid, x, &a, &r)) return -1;
        *out = jv_bool(r);
        return 0;
    }
    case E_NOT:
        if (jx_eval(c, n->a, &x)) return -1;
        *out = jv_bool(!jv_truthy(x));
        return 0;
    case E_NEG:
    case E_POS:
        if (jx_eval(c, n->a, &x)) return -1;
        if (x.t == JV_UNDEF) return jx_undef_fail(c, n, x);
        if (x.t == JV_FLOAT) {
            *out = jv_float(n->kind == E_NEG ? -x.u.f : x.u.f);
            return 0;
        }
        if (x.t == JV_INT || x.t == JV_BOOL) {
            if (n->kind == E_POS) return int_result(c, n, 0, x.u.i, out);
            return int_result(c, n, x.u.i == INT64_MIN, -x.u.i, out);
        }
        return jx_type_error(c, n, "bad operand type for unary %s: '%s'",
                             n->kind == E_NEG ? "-" : "+", jv_typename(x));
    case E_BIN:
        if (jx_eval(c, n->a, &x) || jx_eval(c, n->b, &y)) return -1;
        return jx_binop(c, n, n->op, x, y, out);
    case E_AND:
        if (jx_eval(c, n->a, &x)) return -1;
        if (!jv_truthy(x)) {
            *out = x;
            return 0;
        }
        return jx_eval(c, n->b, out);
    case E_OR:
        if (jx_eval(c, n->a, &x)) return -1;
        if (jv_truthy(x)) {
            *out = x;
            return 0;
        }
        return jx_eval(c, n->b, out);
    case E_CMP: {
        if (jx_eval(c, n->a, &x)) return -1;
        for (size_t i = 0; i < n->n; i++) {
            int r;
            if (jx_eval(c, n->items[i], &y) || jx_compare(c, n, n->ops[i], x, y, &r)) return -1;
            if (!r) {
                *out = jv_bool(0);
                return 0;
            }
            x = y;
        }
        *out = jv_bool(1);
        return 0;
    }
    case E_COND:
        if (jx_eval(c, n->a, &x)) return -1;
        if (jv_truthy(x)) return jx_eval(c, n->b, out);
        if (n->c) return jx_eval(c, n->c, out);
        *out =
            jv_undef("the inline if-expression evaluated to false and no else section was defined");
        return 0;
    case E_CONCAT: {
        jbuf b = jx_newbuf(c);
        for (size_t i = 0; i < n->n; i++) {
            if (jx_eval(c, n->items[i], &x)) {
                jb_free(&b);
                return -1;
            }
            if (x.unsafe) {
                jb_free(&b);
                return jx_undef_fail(c, n->items[i], x);
            }
            jv_str(&b, x);
        }
        return jx_buf_to_val(c, n, &b, out);
    }
    default:
        return jx_fail(c, n, WEFT_ERR_INTERNAL, "unexpected node kind %d", n->kind);
    }
}

int jx_eval(jctx *c, const jnode *n, jv *out) {
    if (++c->depth > EVAL_MAX_DEPTH) {
        c->depth--;
        return jx_fail(c, n, WEFT_ERR_INVALID, "expression nested more than %d levels deep",
                       EVAL_MAX_DEPTH);
    }
    int r = eval_inner(c, n, out);
    c->depth--;
    if (r == 0 && c->a->exhausted) return jx_nomem(c, n);
    /* the meter jrender sets may have stopped a comparison early: its result is not usable */
    if (r == 0 && c->work > jx_work_max(&c->in->lim)) return jx_work(c, n, 0, 0);
    return r;
}

/* ---- calls -------------------------------------------------------------------------------- */
static int call_macro(jctx *c, const jnode *n, const jfunc *f, const jargs *a, jv *out) {
    const jnode *m = f->macro;
    if (a->npos > m->n)
        return jx_type_error(c, n, "macro '%s' takes not more than %zu argument(s)", m->str->s,
                             m->n);
    if (c->depth + 8 > EVAL_MAX_DEPTH)
        return jx_fail(c, n, WEFT_ERR_INVALID, "macro calls nested too deeply");
    jscope *sc = new_scope(c, f->closure);
    if (!sc) return jx_nomem(c, n);
    jscope *saved = c->sc;
    c->sc = sc;
    int r = 0;
    for (size_t k = 0; k < a->nkw && !r; k++) {
        size_t i;
        for (i = 0; i < m->n; i++)
            if (js_eq(m->items[i]->str, a->kwn[k]->s)) break;
        if (i == m->n)
            r = jx_type_error(c, n, "macro '%s' takes no keyword argument '%s'", m->str->s,
                              a->kwn[k]->s);
        else if (i < a->npos)
            r = jx_type_error(c, n, "macro '%s' got multiple values for argument '%s'", m->str->s,
                              a->kwn[k]->s);
    }
    for (size_t i = 0; i < m->n && !r; i++) {
        jv v;
        int have = 0;
        if (i < a->npos) {
            v = a->pos[i];
            have = 1;
        } else {
            for (size_t k = 0; k < a->nkw; k++)
                if (js_eq(m->items[i]->str, a->kwn[k]->s)) {
                    v = a->kwv[k];
                    have = 1;
                }
        }
        if (!have) {
            if (m->kwv[i]) {
                if (jx_eval(c, m->kwv[i], &v)) r = -1;
            } else {
                v = jv_undef(jx_why(c, "parameter '%s' was not provided", m->items[i]->str->s));
            }
        }
        if (!r) r = set_var(c, n, sc, m->items[i]->str, v);
    }
    jbuf b = jx_newbuf(c);
    if (!r) {
        jbuf *saved_out = c->out;
        c->out = &b;
        c->depth += 4;
        r = exec_node(c, m->b);
        c->depth -= 4;
        c->out = saved_out;
    }
    c->sc = saved;
    if (r) {
        jb_free(&b);
        return -1;
    }
    return jx_buf_to_val(c, n, &b, out);
}

int jx_call(jctx *c, const jnode *n, jv callee, const jargs *a, jv *out) {
    if (callee.t == JV_UNDEF) return jx_undef_fail(c, n, callee);
    if (callee.t == JV_LOOP)
        return jx_fail(c, n, WEFT_ERR_UNSUPPORTED, "recursive loops are not supported");
    if (callee.t != JV_FUNC)
        return jx_type_error(c, n, "'%s' object is not callable", jv_typename(callee));
    const jfunc *f = callee.u.fn;
    if (jx_count_iter(c, n)) return -1;
    switch (f->kind) {
    case JF_MACRO:
        return call_macro(c, n, f, a, out);
    case JF_METHOD:
        return jx_method(c, n, f->self, f->name, a, out);
    default:
        return jx_builtin(c, n, f->id, a, out);
    }
}

/* ---- statements --------------------------------------------------------------------------- */
static int emit(jctx *c, const jnode *n, jv v) {
    if (v.t == JV_UNDEF) return 0;
    if (v.t == JV_STR ? jb_put(c->out, v.u.s->s, v.u.s->len) : jv_str(c->out, v))
        return jx_bufail(c, n, c->out);
    return 0;
}

static int bind_target(jctx *c, const jnode *t, jscope *sc, jv v) {
    if (t->kind == E_NAME) return set_var(c, t, sc, t->str, v);
    jlist *items;
    if (v.t == JV_UNDEF && !v.unsafe) return jx_undef_fail(c, t, v);
    if (jx_iterate(c, t, v, &items)) return -1;
    if (items->len < t->n)
        return jx_type_error(c, t, "not enough values to unpack (expected %zu, got %zu)", t->n,
                             items->len);
    if (items->len > t->n)
        return jx_type_error(c, t, "too many values to unpack (expected %zu)", t->n);
    for (size_t i = 0; i < t->n; i++)
        if (bind_target(c, t->items[i], sc, items->v[i])) return -1;
    return 0;
}

static int capture(jctx *c, const jnode *body, jscope *sc, jv *out) {
    jbuf b = jx_newbuf(c);
    jbuf *saved = c->out;
    jscope *ssc = c->sc;
    c->out = &b;
    c->sc = sc;
    int r = exec_node(c, body);
    c->out = saved;
    c->sc = ssc;
    if (r) {
        jb_free(&b);
        return -1;
    }
    return jx_buf_to_val(c, body, &b, out);
}

static int apply_chain(jctx *c, const jnode *chain, jv input, jv *out) {
    jv saved = c->filter_input;
    c->filter_input = input;
    int r = jx_eval(c, chain, out);
    c->filter_input = saved;
    return r;
}

static int exec_for(jctx *c, const jnode *n) {
    jv it;
    jlist *items;
    if (jx_eval(c, n->b, &it) || jx_iterate(c, n->b, it, &items)) return -1;
    jscope *outer = c->sc;
    if (n->e) {
        /* Jinja2 filters first, so loop.index/length count only the kept items. */
        jlist *kept = jl_new(c->a, items->len, JL_LIST);
        if (!kept) return jx_nomem(c, n);
        for (size_t i = 0; i < items->len; i++) {
            if (jx_count_iter(c, n)) return -1;
            jscope *sc = new_scope(c, outer);
            if (!sc) return jx_nomem(c, n);
            jv keep;
            c->sc = sc;
            int r = bind_target(c, n->a, sc, items->v[i]);
            if (!r) r = jx_eval(c, n->e, &keep);
            c->sc = outer;
            if (r) return -1;
            if (jv_truthy(keep)) kept->v[kept->len++] = items->v[i];
        }
        items = kept;
    }
    jloop *lp = ja_alloc(c->a, sizeof(jloop));
    if (!lp) return jx_nomem(c, n);
    lp->items = items;
    jv lv = {JV_LOOP, 0, {0}};
    lv.u.lp = lp;
    jstr *ln = js_cstr(c->a, "loop");
    if (!ln) return jx_nomem(c, n);
    /* Jinja2 clears its "run the else block" flag at the end of the loop body, so the else
     * block also runs when every iteration left through break or continue. */
    int completed = 0;
    for (size_t i = 0; i < items->len; i++) {
        if (jx_count_iter(c, n)) return -1;
        lp->i = i;
        jscope *sc = new_scope(c, outer);
        if (!sc) return jx_nomem(c, n);
        if (set_var(c, n, sc, ln, lv)) return -1;
        c->sc = sc;
        int r = bind_target(c, n->a, sc, items->v[i]);
        if (!r) r = exec_node(c, n->c);
        c->sc = outer;
        if (r) return -1;
        int ctl = c->ctl;
        c->ctl = 0;
        if (ctl == 0) completed = 1;
        if (ctl == 1) break;
    }
    if (completed || !n->d) return 0;
    jscope *sc = new_scope(c, outer);
    if (!sc) return jx_nomem(c, n);
    c->sc = sc;
    int r = exec_node(c, n->d);
    c->sc = outer;
    return r;
}

static int exec_set(jctx *c, const jnode *n, jv v) {
    const jnode *t = n->a;
    if (t->kind == E_NSREF) {
        jv ns = lookup(c, t->str);
        if (ns.t != JV_NS)
            return jx_fail(c, t, WEFT_ERR_INVALID,
                           "cannot assign attribute on non-namespace object '%s'", t->str->s);
        if (t->str2->s[0] == '_')
            return jx_fail(
                c, t, WEFT_ERR_INVALID,
                "chat templates cannot store underscore-prefixed attributes on a namespace ('%s')",
                t->str2->s);
        return jd_set(c->a, ns.u.d, jv_of_str(t->str2), v) ? jx_nomem(c, n) : 0;
    }
    return bind_target(c, t, c->sc, v);
}

static int exec_inner(jctx *c, const jnode *n) {
    jv v;
    switch (n->kind) {
    case S_BODY:
        for (size_t i = 0; i < n->n; i++) {
            if (exec_node(c, n->items[i])) return -1;
            if (c->ctl) return 0;
        }
        return 0;
    case S_TEXT:
        if (jb_put(c->out, n->str->s, n->str->len)) return jx_bufail(c, n, c->out);
        return 0;
    case S_OUT:
        if (jx_eval(c, n->a, &v)) return -1;
        return emit(c, n->a, v);
    case S_IF:
        if (jx_eval(c, n->a, &v)) return -1;
        if (jv_truthy(v)) return exec_node(c, n->b);
        return n->c ? exec_node(c, n->c) : 0;
    case S_FOR:
        return exec_for(c, n);
    case S_SET:
        if (jx_eval(c, n->b, &v)) return -1;
        return exec_set(c, n, v);
    case S_SETBLOCK: {
        jscope *sc = new_scope(c, c->sc);
        if (!sc) return jx_nomem(c, n);
        if (capture(c, n->b, sc, &v)) return -1;
        if (n->c && apply_chain(c, n->c, v, &v)) return -1;
        return exec_set(c, n, v);
    }
    case S_MACRO: {
        jv f = jx_func(c, JF_MACRO, 0, n->str->s, jv_none());
        if (f.t != JV_FUNC) return jx_nomem(c, n);
        f.u.fn->macro = n;
        f.u.fn->closure = c->sc;
        return set_var(c, n, c->sc, n->str, f);
    }
    case S_BREAK:
        c->ctl = 1;
        return 0;
    case S_CONTINUE:
        c->ctl = 2;
        return 0;
    case S_FILTER: {
        jscope *sc = new_scope(c, c->sc);
        if (!sc) return jx_nomem(c, n);
        if (capture(c, n->b, sc, &v) || apply_chain(c, n->a, v, &v)) return -1;
        return emit(c, n, v);
    }
    case S_WITH: {
        jscope *sc = new_scope(c, c->sc);
        if (!sc) return jx_nomem(c, n);
        for (size_t i = 0; i < n->n; i++) {
            if (jx_eval(c, n->kwv[i], &v)) return -1;
            if (bind_target(c, n->items[i], sc, v)) return -1;
        }
        jscope *saved = c->sc;
        c->sc = sc;
        int r = exec_node(c, n->b);
        c->sc = saved;
        return r;
    }
    case S_SCOPE: {
        jscope *sc = new_scope(c, c->sc);
        if (!sc) return jx_nomem(c, n);
        jscope *saved = c->sc;
        c->sc = sc;
        int r = exec_node(c, n->b);
        c->sc = saved;
        return r;
    }
    default:
        return jx_fail(c, n, WEFT_ERR_INTERNAL, "unexpected statement kind %d", n->kind);
    }
}

static int exec_node(jctx *c, const jnode *n) {
    if (++c->depth > EVAL_MAX_DEPTH) {
        c->depth--;
        return jx_fail(c, n, WEFT_ERR_INVALID, "statements nested more than %d levels deep",
                       EVAL_MAX_DEPTH);
    }
    int r = exec_inner(c, n);
    c->depth--;
    if (r == 0 && c->a->exhausted) return jx_nomem(c, n);
    return r;
}

int jrender(jarena *a, const jrender_in *in, jbuf *out, weft_error *err) {
    jctx c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.in = in;
    c.err = err;
    c.out = out;
    c.filter_input = jv_undef(NULL);
    jscope *root = ja_alloc(a, sizeof(jscope));
    if (!root) return jx_nomem(&c, NULL);
    root->vars = in->vars;
    c.sc = root;
    jv_meter_set(&c.work, jx_work_max(&in->lim));
    int r = exec_node(&c, in->root);
    jv_meter_set(NULL, 0);
    return r;
}
