/* Internal interface of the chat-template interpreter: a Jinja2 subset with Python value
 * semantics. Values live in an arena that is dropped whole after a render, so the evaluator
 * never tracks ownership; the lexer, parser and evaluator share the types declared here.
 * Nothing here is public: chat.h is the module's interface. */
#ifndef WEFT_TEXT_JINJA_H
#define WEFT_TEXT_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "weft/plugin.h"

/* ---- arena ---------------------------------------------------------------------------- */
typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    size_t total; /* bytes obtained from malloc so far */
    size_t limit; /* 0: unlimited */
    int exhausted;
} jarena;

void *ja_alloc(jarena *a, size_t n); /* zeroed; NULL when out of memory or over the limit */
void ja_free(jarena *a);

/* ---- values --------------------------------------------------------------------------- */
typedef enum jtype {
    JV_UNDEF = 0,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,
    JV_LOOP,
    JV_FUNC,
} jtype;

/* Immutable, NUL-terminated, valid UTF-8; ncp is the number of code points (Python len). */
typedef struct jstr {
    size_t len;
    size_t ncp;
    char s[];
} jstr;

struct jlist;
struct jdict;
struct jloop;
struct jfunc;

typedef struct jv {
    uint8_t t;      /* jtype */
    uint8_t unsafe; /* JV_UNDEF only: the sandbox refused the attribute (calling it fails) */
    union {
        int64_t i; /* JV_BOOL (0/1), JV_INT */
        double f;
        jstr *s;
        struct jlist *l;
        struct jdict *d; /* JV_DICT, JV_NS */
        struct jloop *lp;
        struct jfunc *fn;
        const char *why; /* JV_UNDEF: the message an operation on it reports; may be NULL */
    } u;
} jv;

/* What a list-like value is in Python terms; only printing, truthiness and len differ. */
enum {
    JL_LIST = 0,
    JL_TUPLE,
    JL_ITER,   /* a generator or iterator: always true, no len, no indexing */
    JL_ITEMS,  /* dict_items view */
    JL_KEYS,   /* dict_keys view */
    JL_VALUES, /* dict_values view */
    JL_RANGE,  /* range(): a list that prints and slices as Python's range does */
};

typedef struct jlist {
    size_t len, cap;
    jv *v;
    uint8_t kind;
    int64_t range[3]; /* JL_RANGE: start, stop, step */
} jlist;

/* Insertion ordered; lookup is linear below JD_HASH_MIN entries and hashed above. */
typedef struct jdict {
    size_t len, cap;
    jv *k;
    jv *v;
    uint32_t *slots; /* open addressing over indices+1, 0 = empty; NULL while small */
    size_t nslots;
} jdict;

typedef struct jloop {
    jlist *items;
    size_t i;
} jloop;

struct jnode;
struct jscope;

enum {
    JF_BUILTIN = 1, /* id is a builtin global */
    JF_METHOD,      /* name on self */
    JF_MACRO,
};

typedef struct jfunc {
    int kind;
    int id;
    const char *name;
    jv self;
    const struct jnode *macro;
    struct jscope *closure;
} jfunc;

/* Constructors (NULL/failed allocation reported as a JV_UNDEF with u.why == NULL and ok = 0). */
static inline jv jv_undef(const char *why) {
    jv v = {JV_UNDEF, 0, {0}};
    v.u.why = why;
    return v;
}
static inline jv jv_none(void) {
    jv v = {JV_NONE, 0, {0}};
    return v;
}
static inline jv jv_bool(int b) {
    jv v = {JV_BOOL, 0, {0}};
    v.u.i = b ? 1 : 0;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {JV_INT, 0, {0}};
    v.u.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = {JV_FLOAT, 0, {0}};
    v.u.f = f;
    return v;
}
static inline jv jv_of_str(jstr *s) {
    jv v = {JV_STR, 0, {0}};
    v.u.s = s;
    return v;
}
static inline jv jv_of_list(jlist *l) {
    jv v = {JV_LIST, 0, {0}};
    v.u.l = l;
    return v;
}
static inline jv jv_of_dict(jdict *d) {
    jv v = {JV_DICT, 0, {0}};
    v.u.d = d;
    return v;
}

/* memcpy of n values that tolerates empty (NULL) storage when n == 0 */
static inline void jv_copy(jv *dst, const jv *src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof(jv));
}

/* Strings. All return NULL when the arena refuses. */
jstr *js_new(jarena *a, const char *s, size_t len); /* s must be valid UTF-8 */
jstr *js_cstr(jarena *a, const char *s);
jstr *js_cat(jarena *a, const jstr *x, const jstr *y);
int js_eq(const jstr *s, const char *lit);

/* Growable byte buffer (malloc based) used for output and string building. */
typedef struct jbuf {
    char *p;
    size_t len, cap;
    size_t limit; /* 0: unlimited */
    int failed;   /* 1: out of memory, 2: over limit */
} jbuf;
int jb_put(jbuf *b, const char *s, size_t n);
int jb_puts(jbuf *b, const char *s);
int jb_putc(jbuf *b, char c);
void jb_free(jbuf *b);
jstr *jb_to_str(jarena *a, const jbuf *b); /* copies; buffer contents must be valid UTF-8 */

/* UTF-8 */
int ju_valid(const char *s, size_t len, size_t *bad_at);
uint32_t ju_next(const char *s, size_t len, size_t *i); /* decodes at *i and advances */
size_t ju_encode(uint32_t cp, char out[4]);
size_t ju_count(const char *s, size_t len);
size_t ju_offset(const jstr *s, size_t cp_index); /* byte offset of a code point index <= ncp */
int ju_isspace(uint32_t cp);                      /* Python str.isspace() */

/* Lists and dicts */
jlist *jl_new(jarena *a, size_t cap, int kind);
int jl_push(jarena *a, jlist *l, jv v);
jdict *jd_new(jarena *a);
int jd_set(jarena *a, jdict *d, jv key, jv val);
jv *jd_get(const jdict *d, jv key);
jv *jd_gets(const jdict *d, const char *key, size_t len);

/* Python semantics */
const char *jv_typename(jv v);
int jv_truthy(jv v);
int jv_eq(jv a, jv b);
/* The comparisons and hashing here walk nested values, and a template can build lists that
 * share their elements so that one comparison visits billions of them. While a meter is set
 * for the calling thread (jrender sets its work counter), every value they visit adds 1 to
 * *counter, and 1 per 64 bytes of a string compared; once *counter passes max they stop early
 * with an arbitrary result, and the evaluator fails the expression for doing too much work.
 * NULL unsets it. */
void jv_meter_set(uint64_t *counter, uint64_t max);
int jv_hashable(jv v);
/* -1, 0, 1, or 2 when Python would raise TypeError for '<' between them. */
int jv_cmp(jv a, jv b);
int jv_is_number(jv v);
double jv_num(jv v); /* for JV_BOOL, JV_INT, JV_FLOAT */

/* str(v) and repr(v) appended to b; 0 or -1 (buffer failure). */
int jv_str(jbuf *b, jv v);
int jv_repr(jbuf *b, jv v);
void jv_float_repr(double f, char out[40]);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) appended to b. Returns 0, -1 on a
 * buffer failure, or 1 with why set when Python raises TypeError/ValueError. */
typedef struct jjson_opts {
    int ensure_ascii;
    int has_indent;
    const char *indent; /* used when has_indent */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
    int sort_keys;
} jjson_opts;
int jv_json(jbuf *b, jv v, const jjson_opts *o, int depth, const char **why);

/* ---- lexer tokens --------------------------------------------------------------------- */
typedef enum jtok_type {
    T_EOF = 0,
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
} jtok_type;

typedef enum jop {
    OP_NONE = 0,
    OP_ADD,
    OP_SUB,
    OP_DIV,
    OP_FLOORDIV,
    OP_MUL,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GE,
    OP_LT,
    OP_LE,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMICOLON,
    /* comparison-only operators produced by the parser */
    OP_IN,
    OP_NOTIN,
} jop;

typedef struct jtok {
    uint8_t type;
    uint8_t op;
    uint32_t pos, end; /* byte offsets into the normalized source */
    jstr *str;         /* T_DATA, T_NAME, T_STRING */
    int64_t i;
    double f;
} jtok;

/* Source after newline normalization (what every offset refers to). */
typedef struct jsource {
    const char *name;
    char *text;
    size_t len;
} jsource;

/* Formats "name:line:col: " for an offset. */
void jsrc_where(const jsource *src, size_t pos, char *out, size_t cap);

/* Tokenizes with trim_blocks and lstrip_blocks. Returns 0 or fills err. */
int jlex(jarena *a, const jsource *src, jtok **toks, size_t *ntoks, weft_error *err);

/* ---- syntax tree ---------------------------------------------------------------------- */
typedef enum jnode_kind {
    /* statements */
    S_BODY = 1, /* items */
    S_TEXT,     /* str */
    S_OUT,      /* a */
    S_IF,       /* a test, b body, c else (body) or NULL */
    S_FOR,      /* a target, b iter, c body, d else or NULL, e filter or NULL */
    S_SET,      /* a target (E_NAME, E_TUPLE or E_NSREF), b value */
    S_SETBLOCK, /* a target, b body, c filter chain (E_FILTER with a NULL operand) or NULL */
    S_MACRO,    /* str name, items params (E_NAME), kwv defaults (NULL where none), b body */
    S_BREAK,
    S_CONTINUE,
    S_FILTER, /* a filter chain, b body */
    S_WITH,   /* items targets, kwv values, b body */
    S_SCOPE,  /* b body run in a child scope ({% generation %}) */
    /* expressions */
    E_CONST,  /* cv */
    E_NAME,   /* str */
    E_NSREF,  /* str namespace name, str2 attribute */
    E_LIST,   /* items */
    E_TUPLE,  /* items */
    E_DICT,   /* items: key, value, key, value... */
    E_ATTR,   /* a, str */
    E_ITEM,   /* a, b (E_SLICE for slices) */
    E_SLICE,  /* a start, b stop, c step (each may be NULL) */
    E_CALL,   /* a callee, items args, kwn/kwv */
    E_FILTER, /* a operand (NULL in filter blocks), str name, items args, kwn/kwv */
    E_TEST,   /* a operand, str name, items args, kwn/kwv */
    E_NOT,    /* a */
    E_NEG,    /* a */
    E_POS,    /* a */
    E_BIN,    /* op, a, b */
    E_AND,    /* a, b */
    E_OR,     /* a, b */
    E_CMP,    /* a, items operands, ops */
    E_COND,   /* a test, b then, c else or NULL */
    E_CONCAT, /* items */
} jnode_kind;

typedef struct jnode jnode;
struct jnode {
    uint16_t kind;
    uint16_t op;
    uint32_t pos, end;
    jnode *a, *b, *c, *d, *e;
    jnode **items;
    size_t n;
    jstr **kwn;
    jnode **kwv;
    size_t nkw;
    uint8_t *ops;
    jstr *str, *str2;
    jv cv;
    int fid; /* resolved filter or test id */
};

/* Parses tokens into a body node. Filters and tests are resolved by name here, so an unknown
 * one is a parse error as in Jinja2. */
int jparse(jarena *a, const jsource *src, const jtok *toks, size_t ntoks, int max_depth,
           jnode **root, weft_error *err);

/* Filter and test tables (jinja_eval.c); -1 when unknown. */
int jfilter_id(const char *name);
int jtest_id(const char *name);

/* ---- evaluation ----------------------------------------------------------------------- */
typedef struct jlimits {
    size_t max_output;
    size_t max_memory;
    uint64_t max_iterations;
    int max_depth;
} jlimits;

typedef struct jrender_in {
    const jsource *src;
    const jnode *root;
    jdict *vars; /* the template's variables, in the render arena */
    int have_now;
    int64_t now; /* seconds since the epoch, rendered as a naive UTC wall clock */
    jlimits lim;
} jrender_in;

/* Renders into out (caller-initialized jbuf); 0 or fills err. */
int jrender(jarena *a, const jrender_in *in, jbuf *out, weft_error *err);

#endif
