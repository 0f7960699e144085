/* Strict parsing of plugin and candidate manifests (see manifest.h, docs/MANIFEST.md). The text
 * goes through libyaml's event parser into a small tree of our own: building the tree is where
 * the document-level guards live (size, depth, node count, anchors, aliases, tags, several
 * documents, duplicate keys), so the schema walkers below only deal with types and values.
 * Scalars keep whether they were quoted: `8` is an integer, `"8"` is a string. */
#include "plugin/manifest.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "util/error.h"
#include "util/file.h"

#define SRC "manifest"
#define MAX_ITEMS 1024         /* entries of one mapping or list */
#define MAX_SCALAR (64u << 10) /* bytes of one scalar */

/* ---- the tree ---------------------------------------------------------------------------- */
enum { Y_SCALAR = 1, Y_MAP = 2, Y_SEQ = 3 };

typedef struct ynode {
    int type;
    uint32_t line, col; /* 1-based */
    char *s;            /* scalar text (NUL-terminated, no NUL inside) */
    size_t len;
    int quoted;      /* not a plain scalar */
    uint32_t n, cap; /* children; a mapping holds key, value, key, value... */
    struct ynode **kids;
} ynode;

static void ynode_free(ynode *n) {
    if (!n) return;
    for (uint32_t i = 0; i < n->n; i++)
        ynode_free(n->kids[i]);
    free(n->kids);
    free(n->s);
    free(n);
}

typedef struct ctx {
    const char *file;
    weft_error *err;
} ctx;

static weft_status failv(ctx *c, uint32_t line, uint32_t col, const char *field, const char *fmt,
                         va_list ap) {
    char tail[400];
    vsnprintf(tail, sizeof(tail), fmt, ap);
    if (field && field[0])
        return weft_error_set(c->err, WEFT_ERR_FORMAT, SRC, "%s:%u:%u: %s: %s", c->file, line, col,
                              field, tail);
    return weft_error_set(c->err, WEFT_ERR_FORMAT, SRC, "%s:%u:%u: %s", c->file, line, col, tail);
}

/* "FILE:LINE:COL: FIELD: message" at node n. */
static weft_status fail(ctx *c, const ynode *n, const char *field, const char *fmt, ...)
    WEFT_PRINTF(4, 5);
static weft_status fail(ctx *c, const ynode *n, const char *field, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_status st = failv(c, n ? n->line : 1, n ? n->col : 1, field, fmt, ap);
    va_end(ap);
    return st;
}

static int is_null(const ynode *n) {
    if (!n) return 1;
    if (n->type != Y_SCALAR || n->quoted) return 0;
    return n->len == 0 || !strcmp(n->s, "~") || !strcmp(n->s, "null") || !strcmp(n->s, "Null") ||
           !strcmp(n->s, "NULL");
}

/* What a node is, for "found ...". */
static const char *describe(const ynode *n, char *buf, size_t cap) {
    if (!n) return "nothing";
    if (n->type == Y_MAP) return "a mapping";
    if (n->type == Y_SEQ) return "a list";
    if (is_null(n)) return n->len ? "null" : "nothing";
    /* keep messages one line: cut at the first control character */
    size_t k = 0;
    while (k < n->len && k < 48 && (unsigned char)n->s[k] >= 0x20)
        k++;
    const char *more = k < n->len ? "..." : "";
    if (n->quoted)
        snprintf(buf, cap, "\"%.*s%s\"", (int)k, n->s, more);
    else
        snprintf(buf, cap, "%.*s%s", (int)k, n->s, more);
    return buf;
}

static void join_path(char *out, size_t cap, const char *base, const char *key) {
    if (base && base[0])
        snprintf(out, cap, "%s.%s", base, key);
    else
        snprintf(out, cap, "%s", key);
}

typedef struct builder {
    ctx *c;
    ynode *root;
    ynode *stack[WEFT_MANIFEST_MAX_DEPTH + 1];
    int depth;
    uint32_t n_nodes;
    int documents;
} builder;

/* The field path of the container on top of the stack ("options.page_size", "slots[2]"). */
static void stack_path(const builder *b, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 1; i < b->depth && used + 1 < cap; i++) {
        const ynode *parent = b->stack[i - 1];
        int w;
        if (parent->type == Y_MAP)
            w = snprintf(buf + used, cap - used, "%s%s", used ? "." : "",
                         parent->n >= 2 ? parent->kids[parent->n - 2]->s : "?");
        else
            w = snprintf(buf + used, cap - used, "[%u]", parent->n ? parent->n - 1 : 0);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* The field path of the node about to be added (the value of the pending key, or the next
 * list item). */
static void next_field(const builder *b, char *buf, size_t cap) {
    char base[256];
    stack_path(b, base, sizeof(base));
    if (b->depth == 0) {
        buf[0] = '\0';
        return;
    }
    const ynode *top = b->stack[b->depth - 1];
    if (top->type == Y_MAP && top->n % 2 == 1)
        join_path(buf, cap, base, top->kids[top->n - 1]->s);
    else if (top->type == Y_SEQ)
        snprintf(buf, cap, "%s[%u]", base, top->n);
    else
        snprintf(buf, cap, "%s", base);
}

static weft_status add_child(builder *b, ynode *parent, ynode *kid) {
    char path[256], field[320];
    if (parent->n >= (parent->type == Y_MAP ? 2u : 1u) * MAX_ITEMS) {
        stack_path(b, path, sizeof(path));
        return fail(b->c, kid, path, "expected at most %d entries in one %s, found more", MAX_ITEMS,
                    parent->type == Y_MAP ? "mapping" : "list");
    }
    if (parent->type == Y_MAP && parent->n % 2 == 0) {
        /* a key: plain scalars only, each once */
        if (kid->type != Y_SCALAR || is_null(kid)) {
            char d[80];
            stack_path(b, path, sizeof(path));
            return fail(b->c, kid, path, "expected a text key, found %s",
                        describe(kid, d, sizeof(d)));
        }
        for (uint32_t i = 0; i < parent->n; i += 2) {
            if (!strcmp(parent->kids[i]->s, kid->s)) {
                stack_path(b, path, sizeof(path));
                join_path(field, sizeof(field), path, kid->s);
                return fail(b->c, kid, field,
                            "expected each key once in a mapping, found it again (first at "
                            "line %u)",
                            parent->kids[i]->line);
            }
        }
    }
    if (parent->n == parent->cap) {
        uint32_t cap = parent->cap ? parent->cap * 2 : 8;
        ynode **k = realloc(parent->kids, cap * sizeof(*k));
        if (!k) return weft_error_set(b->c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
        parent->kids = k;
        parent->cap = cap;
    }
    parent->kids[parent->n++] = kid;
    return WEFT_OK;
}

static weft_status check_props(builder *b, const yaml_event_t *e, const yaml_char_t *anchor,
                               const yaml_char_t *tag) {
    uint32_t line = (uint32_t)e->start_mark.line + 1, col = (uint32_t)e->start_mark.column + 1;
    char field[320];
    next_field(b, field, sizeof(field));
    ynode at = {.line = line, .col = col};
    if (anchor)
        return fail(b->c, &at, field, "expected plain YAML without anchors, found anchor &%.40s",
                    (const char *)anchor);
    if (tag)
        return fail(b->c, &at, field, "expected plain YAML without tags, found tag %.40s",
                    (const char *)tag);
    return WEFT_OK;
}

/* Handles one event. Returns WEFT_OK, an error, or WEFT_FINISHED at the end of the stream. */
static weft_status on_event(builder *b, yaml_event_t *e) {
    uint32_t line = (uint32_t)e->start_mark.line + 1, col = (uint32_t)e->start_mark.column + 1;
    ynode *n = NULL;
    weft_status st;
    switch (e->type) {
    case YAML_STREAM_START_EVENT:
        return WEFT_OK;
    case YAML_STREAM_END_EVENT:
        return WEFT_FINISHED;
    case YAML_DOCUMENT_START_EVENT:
        if (++b->documents > 1) {
            return weft_error_set(b->c->err, WEFT_ERR_FORMAT, SRC,
                                  "%s:%u:%u: expected one YAML document, found a second one",
                                  b->c->file, line, col);
        }
        return WEFT_OK;
    case YAML_DOCUMENT_END_EVENT:
        return WEFT_OK;
    case YAML_ALIAS_EVENT: {
        char field[320];
        next_field(b, field, sizeof(field));
        ynode at = {.line = line, .col = col};
        return fail(b->c, &at, field, "expected plain YAML without aliases, found alias *%.40s",
                    (const char *)e->data.alias.anchor);
    }
    case YAML_SCALAR_EVENT:
        if ((st = check_props(b, e, e->data.scalar.anchor, e->data.scalar.tag)) != WEFT_OK)
            return st;
        break;
    case YAML_SEQUENCE_START_EVENT:
        if ((st = check_props(b, e, e->data.sequence_start.anchor, e->data.sequence_start.tag)) !=
            WEFT_OK)
            return st;
        break;
    case YAML_MAPPING_START_EVENT:
        if ((st = check_props(b, e, e->data.mapping_start.anchor, e->data.mapping_start.tag)) !=
            WEFT_OK)
            return st;
        break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (b->depth > 0) {
            ynode *top = b->stack[b->depth - 1];
            if (top->type == Y_MAP && top->n % 2) /* cannot happen with libyaml; be safe */
                return fail(b->c, top, NULL, "expected a value for every key");
            b->depth--;
        }
        return WEFT_OK;
    default:
        return WEFT_OK;
    }

    if (++b->n_nodes > WEFT_MANIFEST_MAX_NODES) {
        return weft_error_set(b->c->err, WEFT_ERR_FORMAT, SRC,
                              "%s:%u:%u: expected at most %d YAML nodes, found more", b->c->file,
                              line, col, WEFT_MANIFEST_MAX_NODES);
    }
    n = calloc(1, sizeof(*n));
    if (!n) return weft_error_set(b->c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    n->line = line;
    n->col = col;
    if (e->type == YAML_SCALAR_EVENT) {
        n->type = Y_SCALAR;
        size_t len = e->data.scalar.length;
        const char *v = (const char *)e->data.scalar.value;
        if (len > MAX_SCALAR || memchr(v, '\0', len)) {
            char field[320];
            next_field(b, field, sizeof(field));
            if (len > MAX_SCALAR)
                st = fail(b->c, n, field, "expected a value of at most %u bytes, found %zu bytes",
                          MAX_SCALAR, len);
            else
                st = fail(b->c, n, field,
                          "expected text without NUL characters, found a NUL "
                          "character");
            free(n);
            return st;
        }
        n->s = malloc(len + 1);
        if (!n->s) {
            free(n);
            return weft_error_set(b->c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
        }
        memcpy(n->s, v, len);
        n->s[len] = '\0';
        n->len = len;
        n->quoted = e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    } else {
        n->type = e->type == YAML_MAPPING_START_EVENT ? Y_MAP : Y_SEQ;
        if (b->depth >= WEFT_MANIFEST_MAX_DEPTH) {
            char field[320];
            next_field(b, field, sizeof(field));
            st = fail(b->c, n, field, "expected nesting at most %d levels deep, found deeper",
                      WEFT_MANIFEST_MAX_DEPTH);
            free(n);
            return st;
        }
    }
    if (b->depth == 0) {
        if (b->root) { /* cannot happen within one document */
            ynode_free(n);
            return fail(b->c, b->root, NULL, "expected one top-level node");
        }
        b->root = n;
    } else if ((st = add_child(b, b->stack[b->depth - 1], n)) != WEFT_OK) {
        ynode_free(n);
        return st;
    }
    if (n->type != Y_SCALAR) b->stack[b->depth++] = n;
    return WEFT_OK;
}

/* Parses text into a tree whose root must be a mapping. */
static weft_status yaml_tree(ctx *c, const char *text, size_t len, ynode **out) {
    *out = NULL;
    if (len > WEFT_MANIFEST_MAX_BYTES) {
        return weft_error_set(c->err, WEFT_ERR_FORMAT, SRC,
                              "%s: expected a manifest of at most %u bytes, found %zu bytes",
                              c->file, WEFT_MANIFEST_MAX_BYTES, len);
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory (yaml parser)");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    builder b;
    memset(&b, 0, sizeof(b));
    b.c = c;
    weft_status st = WEFT_OK;
    while (1) {
        yaml_event_t e;
        if (!yaml_parser_parse(&parser, &e)) {
            const char *problem = parser.problem ? parser.problem : "malformed YAML";
            yaml_mark_t m = parser.problem_mark;
            if (parser.error == YAML_MEMORY_ERROR) {
                st = weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory (yaml parser)");
            } else {
                st =
                    weft_error_set(c->err, WEFT_ERR_FORMAT, SRC,
                                   "%s:%u:%u: expected valid YAML, found a syntax error: %s%s%s",
                                   c->file, (unsigned)m.line + 1, (unsigned)m.column + 1, problem,
                                   parser.context ? " " : "", parser.context ? parser.context : "");
            }
            break;
        }
        st = on_event(&b, &e);
        yaml_event_delete(&e);
        if (st == WEFT_FINISHED) {
            st = WEFT_OK;
            break;
        }
        if (st != WEFT_OK) break;
    }
    yaml_parser_delete(&parser);
    if (st != WEFT_OK) {
        ynode_free(b.root);
        return st;
    }
    if (!b.root || is_null(b.root)) {
        ynode_free(b.root);
        return weft_error_set(c->err, WEFT_ERR_FORMAT, SRC,
                              "%s:1:1: expected a mapping of manifest fields, found an empty "
                              "document",
                              c->file);
    }
    if (b.root->type != Y_MAP) {
        char d[80];
        st = fail(c, b.root, NULL, "expected a mapping of manifest fields, found %s",
                  describe(b.root, d, sizeof(d)));
        ynode_free(b.root);
        return st;
    }
    *out = b.root;
    return WEFT_OK;
}

/* ---- schema helpers ---------------------------------------------------------------------- */
static const ynode *map_get(const ynode *map, const char *key) {
    for (uint32_t i = 0; i + 1 < map->n; i += 2)
        if (!strcmp(map->kids[i]->s, key)) return map->kids[i + 1];
    return NULL;
}

/* Checks a mapping's keys against allowed (NULL-terminated) and that every key in required
 * is present. path names the mapping ("" at the root). */
static weft_status map_keys(ctx *c, const ynode *map, const char *path, const char *const *allowed,
                            const char *const *required) {
    for (uint32_t i = 0; i + 1 < map->n; i += 2) {
        const ynode *k = map->kids[i];
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, k->s)) ok = 1;
        if (!ok) {
            char list[300] = "", d[80];
            size_t used = 0;
            for (const char *const *a = allowed; *a && used + 1 < sizeof(list); a++) {
                int w = snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", *a);
                if (w < 0) break;
                used += (size_t)w;
            }
            char field[256];
            join_path(field, sizeof(field), path, k->s);
            return fail(c, k, field, "expected a known key (%s), found unknown key %s", list,
                        describe(k, d, sizeof(d)));
        }
    }
    for (const char *const *r = required; r && *r; r++) {
        if (!map_get(map, *r)) {
            char field[256];
            join_path(field, sizeof(field), path, *r);
            return fail(c, map, field, "expected this required key, found nothing (it is missing)");
        }
    }
    return WEFT_OK;
}

static weft_status want_type(ctx *c, const ynode *n, const char *field, int type,
                             const char *what) {
    if (n->type == type && !(type == Y_SCALAR && is_null(n))) return WEFT_OK;
    char d[80];
    return fail(c, n, field, "expected %s, found %s", what, describe(n, d, sizeof(d)));
}

/* A non-null scalar copied into out (cap bytes). */
static weft_status get_text(ctx *c, const ynode *n, const char *field, char *out, size_t cap,
                            const char *what) {
    weft_status st = want_type(c, n, field, Y_SCALAR, what);
    if (st) return st;
    if (n->len >= cap) {
        char d[80];
        return fail(c, n, field, "expected %s of at most %zu characters, found %s", what, cap - 1,
                    describe(n, d, sizeof(d)));
    }
    memcpy(out, n->s, n->len + 1);
    return WEFT_OK;
}

static weft_status get_text_dup(ctx *c, const ynode *n, const char *field, char **out,
                                const char *what) {
    weft_status st = want_type(c, n, field, Y_SCALAR, what);
    if (st) return st;
    *out = strdup(n->s);
    if (!*out) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    return WEFT_OK;
}

/* Plain-scalar integer syntax: -?[0-9]+ without leading zeros. */
static int parse_int_text(const char *s, int64_t *out) {
    const char *p = s;
    int neg = 0;
    if (*p == '-') neg = 1, p++;
    if (!*p) return 0;
    if (p[0] == '0' && p[1]) return 0;
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        if (v > (UINT64_C(9223372036854775807) - (uint64_t)(*p - '0')) / 10) return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* A finite decimal number (integers too); no inf, nan, hex. */
static int parse_float_text(const char *s, double *out) {
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789+-.eE", *p)) return 0;
    if (!*s) return 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

static void int_range_text(char *buf, size_t cap, int has_min, int64_t lo, int has_max,
                           int64_t hi) {
    if (has_min && has_max)
        snprintf(buf, cap, "an integer in %lld..%lld", (long long)lo, (long long)hi);
    else if (has_min)
        snprintf(buf, cap, "an integer >= %lld", (long long)lo);
    else if (has_max)
        snprintf(buf, cap, "an integer <= %lld", (long long)hi);
    else
        snprintf(buf, cap, "an integer");
}

static void float_range_text(char *buf, size_t cap, int has_min, double lo, int has_max,
                             double hi) {
    if (has_min && has_max)
        snprintf(buf, cap, "a number in %g..%g", lo, hi);
    else if (has_min)
        snprintf(buf, cap, "a number >= %g", lo);
    else if (has_max)
        snprintf(buf, cap, "a number <= %g", hi);
    else
        snprintf(buf, cap, "a number");
}

static weft_status get_int(ctx *c, const ynode *n, const char *field, int64_t lo, int64_t hi,
                           int64_t *out) {
    char what[96], d[80];
    int_range_text(what, sizeof(what), 1, lo, 1, hi);
    int64_t v;
    if (n->type != Y_SCALAR || n->quoted || !parse_int_text(n->s, &v) || v < lo || v > hi)
        return fail(c, n, field, "expected %s, found %s", what, describe(n, d, sizeof(d)));
    *out = v;
    return WEFT_OK;
}

static weft_status get_u32(ctx *c, const ynode *n, const char *field, uint32_t lo, uint32_t hi,
                           uint32_t *out) {
    int64_t v;
    weft_status st = get_int(c, n, field, lo, hi, &v);
    if (!st) *out = (uint32_t)v;
    return st;
}

static weft_status get_float(ctx *c, const ynode *n, const char *field, double lo, double hi,
                             double *out) {
    char what[96], d[80];
    float_range_text(what, sizeof(what), 1, lo, 1, hi);
    double v;
    if (n->type != Y_SCALAR || n->quoted || !parse_float_text(n->s, &v) || v < lo || v > hi)
        return fail(c, n, field, "expected %s, found %s", what, describe(n, d, sizeof(d)));
    *out = v;
    return WEFT_OK;
}

static int parse_bool_text(const char *s, int *out) {
    if (!strcmp(s, "true")) return *out = 1, 1;
    if (!strcmp(s, "false")) return *out = 0, 1;
    return 0;
}

/* Index of s in names (NULL-terminated), or -1. */
static int name_index(const char *const *names, const char *s) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], s)) return i;
    return -1;
}

static void names_list(const char *const *names, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && used + 1 < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? "|" : "", names[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* A scalar that must be one of names; returns its index through *out. */
static weft_status get_enum(ctx *c, const ynode *n, const char *field, const char *const *names,
                            int *out) {
    char list[200], d[80];
    names_list(names, list, sizeof(list));
    int i = n->type == Y_SCALAR && !is_null(n) ? name_index(names, n->s) : -1;
    if (i < 0)
        return fail(c, n, field, "expected one of %s, found %s", list, describe(n, d, sizeof(d)));
    *out = i;
    return WEFT_OK;
}

static weft_status get_list(ctx *c, const ynode *n, const char *field, int allow_empty) {
    char d[80];
    if (n->type != Y_SEQ)
        return fail(c, n, field, "expected a list, found %s", describe(n, d, sizeof(d)));
    if (!allow_empty && n->n == 0) return fail(c, n, field, "expected a non-empty list, found []");
    return WEFT_OK;
}

/* Refuses a repeated scalar in a list of scalars. */
static weft_status list_unique(ctx *c, const ynode *list, const char *field) {
    for (uint32_t i = 0; i < list->n; i++)
        for (uint32_t j = 0; j < i; j++)
            if (list->kids[i]->type == Y_SCALAR && list->kids[j]->type == Y_SCALAR &&
                !strcmp(list->kids[i]->s, list->kids[j]->s)) {
                char f[256];
                snprintf(f, sizeof(f), "%s[%u]", field, i);
                return fail(c, list->kids[i], f,
                            "expected each entry once, found %s again (first at line %u)",
                            list->kids[i]->s, list->kids[j]->line);
            }
    return WEFT_OK;
}

/* ---- names --------------------------------------------------------------------------------- */
static const char *const kind_names[] = {"backend", "model", "technique", "feature", NULL};
static const char *const backend_names[] = {"cpu", "cuda", NULL};
static const char *const arch_names[] = {"x86_64", "aarch64", NULL};
static const char *const type_names[] = {"bool", "int", "float", "string", "enum", NULL};

static const struct {
    const char *name;
    uint32_t bit;
} slot_table[] = {
    {"backend", WEFT_SLOT_BACKEND},     {"model", WEFT_SLOT_MODEL},
    {"scheduler", WEFT_SLOT_SCHEDULER}, {"kv", WEFT_SLOT_KV},
    {"pass", WEFT_SLOT_PASS},           {"ops", WEFT_SLOT_OPS},
    {"executor", WEFT_SLOT_EXECUTOR},   {"sampler", WEFT_SLOT_SAMPLER},
    {"decoder", WEFT_SLOT_DECODER},     {"drafter", WEFT_SLOT_DRAFTER},
    {"placement", WEFT_SLOT_PLACEMENT}, {"parallel", WEFT_SLOT_PARALLEL},
    {"feature", WEFT_SLOT_FEATURE},
};
#define N_SLOTS (sizeof(slot_table) / sizeof(slot_table[0]))

static const char *const service_names[] = {"graph",      "weights",     "device",  "kv",
                                            "ops",        "threads",     "profile", "tokens",
                                            "collective", "host_memory", NULL};

const char *weft_plugin_kind_name(uint32_t kind) {
    if (kind >= 1 && kind <= 4) return kind_names[kind - 1];
    return NULL;
}

uint32_t weft_slot_from_name(const char *name) {
    if (!name) return 0;
    for (size_t i = 0; i < N_SLOTS; i++)
        if (!strcmp(slot_table[i].name, name)) return slot_table[i].bit;
    return 0;
}

const char *weft_slot_name(uint32_t bit) {
    for (size_t i = 0; i < N_SLOTS; i++)
        if (slot_table[i].bit == bit) return slot_table[i].name;
    return NULL;
}

int weft_slot_is_chain(uint32_t bit) {
    return bit == WEFT_SLOT_PASS || bit == WEFT_SLOT_OPS || bit == WEFT_SLOT_FEATURE;
}

char *weft_slots_format(uint32_t slots, const char *sep, char *buf, size_t cap) {
    size_t used = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < N_SLOTS && used + 1 < cap; i++) {
        if (!(slots & slot_table[i].bit)) continue;
        int w = snprintf(buf + used, cap - used, "%s%s", used ? sep : "", slot_table[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
    return buf;
}

uint32_t weft_service_from_name(const char *name) {
    int i = name ? name_index(service_names, name) : -1;
    return i < 0 ? 0 : (uint32_t)i + 1;
}

const char *weft_service_name(uint32_t id) {
    if (id >= 1 && id <= 10) return service_names[id - 1];
    return NULL;
}

int weft_plugin_name_valid(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= WEFT_MANIFEST_NAME_MAX) return 0;
    if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9'))) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
              ch == '-'))
            return 0;
    }
    return 1;
}

static int option_name_valid(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n >= WEFT_MANIFEST_NAME_MAX || name[0] < 'a' || name[0] > 'z') return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return 0;
    }
    return 1;
}

static int library_name_valid(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || name[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-' || ch == '+'))
            return 0;
    }
    return 1;
}

static weft_status get_name(ctx *c, const ynode *n, const char *field, char *out) {
    const char *what = "a plugin name of 1..63 characters [a-z0-9._-] starting with a letter or "
                       "digit";
    weft_status st = want_type(c, n, field, Y_SCALAR, what);
    if (st) return st;
    if (!weft_plugin_name_valid(n->s)) {
        char d[80];
        return fail(c, n, field, "expected %s, found %s", what, describe(n, d, sizeof(d)));
    }
    memcpy(out, n->s, n->len + 1);
    return WEFT_OK;
}

static weft_status get_range(ctx *c, const ynode *n, const char *field, weft_semver_range *r) {
    weft_status st = want_type(c, n, field, Y_SCALAR, "a version range such as \"^1.2\"");
    if (st) return st;
    weft_error e;
    weft_error_clear(&e);
    if (weft_semver_range_parse(n->s, r, &e) != WEFT_OK) return fail(c, n, field, "%s", e.message);
    return WEFT_OK;
}

/* ---- plugin manifest ----------------------------------------------------------------------- */
static char *dup_or_empty(void) {
    return calloc(1, 1);
}

void weft_plugin_manifest_free(weft_plugin_manifest *m) {
    if (!m) return;
    free(m->summary);
    free(m->platforms);
    free(m->requires);
    free(m->conflicts);
    for (uint32_t i = 0; m->after && i < m->n_after; i++)
        free(m->after[i]);
    free(m->after);
    for (uint32_t i = 0; m->options && i < m->n_options; i++) {
        weft_option_schema *o = &m->options[i];
        free((char *)o->def.s);
        for (uint32_t k = 0; o->values && k < o->n_values; k++)
            free(o->values[k]);
        free(o->values);
        free(o->help);
    }
    free(m->options);
    free(m->helps_when);
    for (uint32_t i = 0; m->architectures && i < m->n_architectures; i++)
        free(m->architectures[i]);
    free(m->architectures);
    free(m->text);
    free(m);
}

static weft_status parse_platforms(ctx *c, const ynode *list, weft_plugin_manifest *m) {
    weft_status st = get_list(c, list, "platforms", 1);
    if (st) return st;
    if (!list->n) return WEFT_OK;
    m->platforms = calloc(list->n, sizeof(*m->platforms));
    if (!m->platforms) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    static const char *const keys[] = {"arch", "cuda", "sm", NULL};
    for (uint32_t i = 0; i < list->n; i++) {
        const ynode *p = list->kids[i];
        char path[64], f[96];
        snprintf(path, sizeof(path), "platforms[%u]", i);
        if ((st = want_type(c, p, path, Y_MAP, "a mapping {arch, cuda, sm}"))) return st;
        if ((st = map_keys(c, p, path, keys, NULL))) return st;
        weft_manifest_platform *pl = &m->platforms[m->n_platforms++];
        const ynode *v;
        if ((v = map_get(p, "arch"))) {
            int k;
            snprintf(f, sizeof(f), "%s.arch", path);
            if ((st = get_enum(c, v, f, arch_names, &k))) return st;
            snprintf(pl->arch, sizeof(pl->arch), "%s", arch_names[k]);
        }
        if ((v = map_get(p, "cuda"))) {
            snprintf(f, sizeof(f), "%s.cuda", path);
            if ((st = get_u32(c, v, f, 1, 99, &pl->cuda_major))) return st;
        }
        if ((v = map_get(p, "sm"))) {
            snprintf(f, sizeof(f), "%s.sm", path);
            if (!pl->cuda_major)
                return fail(c, v, f,
                            "expected sm only beside a cuda major version, found sm "
                            "without cuda");
            if ((st = get_list(c, v, f, 1))) return st;
            if ((st = list_unique(c, v, f))) return st;
            if (v->n > WEFT_MANIFEST_MAX_SM)
                return fail(c, v, f, "expected at most %d SM versions, found %u",
                            WEFT_MANIFEST_MAX_SM, v->n);
            for (uint32_t k = 0; k < v->n; k++) {
                char fk[128];
                snprintf(fk, sizeof(fk), "%s[%u]", f, k);
                if ((st = get_u32(c, v->kids[k], fk, 10, 999, &pl->sm[k]))) return st;
            }
            pl->n_sm = v->n;
        }
    }
    return WEFT_OK;
}

/* requires / conflicts: entries are a name or {name, version}. */
static weft_status parse_deps(ctx *c, const ynode *list, const char *field,
                              const weft_plugin_manifest *m, weft_manifest_dep **out,
                              uint32_t *n_out) {
    weft_status st = get_list(c, list, field, 1);
    if (st) return st;
    if (!list->n) return WEFT_OK;
    weft_manifest_dep *deps = calloc(list->n, sizeof(*deps));
    if (!deps) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    *out = deps;
    static const char *const keys[] = {"name", "version", NULL};
    static const char *const req[] = {"name", NULL};
    for (uint32_t i = 0; i < list->n; i++) {
        const ynode *e = list->kids[i];
        weft_manifest_dep *d = &deps[i];
        char path[64], f[96];
        snprintf(path, sizeof(path), "%s[%u]", field, i);
        d->pos.line = e->line;
        d->pos.column = e->col;
        weft_semver_range_any(&d->range);
        const ynode *name = e;
        if (e->type == Y_MAP) {
            if ((st = map_keys(c, e, path, keys, req))) return st;
            name = map_get(e, "name");
            snprintf(f, sizeof(f), "%s.name", path);
            if ((st = get_name(c, name, f, d->name))) return st;
            const ynode *v = map_get(e, "version");
            snprintf(f, sizeof(f), "%s.version", path);
            if (v && (st = get_range(c, v, f, &d->range))) return st;
        } else if ((st = get_name(c, e, path, d->name))) {
            return st;
        }
        if (!strcmp(d->name, m->name))
            return fail(c, name, path, "expected another plugin's name, found the plugin itself");
        for (uint32_t k = 0; k < i; k++)
            if (!strcmp(deps[k].name, d->name))
                return fail(c, name, path,
                            "expected each plugin once, found %s again (first at line %u)", d->name,
                            deps[k].pos.line);
        (*n_out)++;
    }
    return WEFT_OK;
}

static weft_status parse_string_list(ctx *c, const ynode *list, const char *field, int allow_empty,
                                     char ***out, uint32_t *n_out, int names_only) {
    weft_status st = get_list(c, list, field, allow_empty);
    if (st) return st;
    if ((st = list_unique(c, list, field))) return st;
    if (!list->n) return WEFT_OK;
    *out = calloc(list->n, sizeof(char *));
    if (!*out) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    for (uint32_t i = 0; i < list->n; i++) {
        char f[128];
        snprintf(f, sizeof(f), "%s[%u]", field, i);
        if (names_only) {
            char name[WEFT_MANIFEST_NAME_MAX];
            if ((st = get_name(c, list->kids[i], f, name))) return st;
        }
        if ((st = get_text_dup(c, list->kids[i], f, &(*out)[i], "a text entry"))) return st;
        (*n_out)++;
    }
    return WEFT_OK;
}

/* Converts a scalar to a typed option value under schema o; what gets the "expected" text. */
static int option_value(const weft_option_schema *o, const ynode *n, weft_option *v, char *what,
                        size_t what_cap) {
    memset(v, 0, sizeof(*v));
    v->key = o->name;
    switch (o->type) {
    case WEFT_SCHEMA_BOOL: {
        snprintf(what, what_cap, "true or false");
        int b;
        if (n->type != Y_SCALAR || n->quoted || !parse_bool_text(n->s, &b)) return 0;
        v->type = WEFT_OPTION_BOOL;
        v->i = b;
        return 1;
    }
    case WEFT_SCHEMA_INT: {
        int_range_text(what, what_cap, (int)o->has_min, o->imin, (int)o->has_max, o->imax);
        int64_t x;
        if (n->type != Y_SCALAR || n->quoted || !parse_int_text(n->s, &x)) return 0;
        if ((o->has_min && x < o->imin) || (o->has_max && x > o->imax)) return 0;
        v->type = WEFT_OPTION_INT;
        v->i = x;
        return 1;
    }
    case WEFT_SCHEMA_FLOAT: {
        float_range_text(what, what_cap, (int)o->has_min, o->fmin, (int)o->has_max, o->fmax);
        double x;
        if (n->type != Y_SCALAR || n->quoted || !parse_float_text(n->s, &x)) return 0;
        if ((o->has_min && x < o->fmin) || (o->has_max && x > o->fmax)) return 0;
        v->type = WEFT_OPTION_FLOAT;
        v->f = x;
        return 1;
    }
    case WEFT_SCHEMA_STRING:
        snprintf(what, what_cap, "a string");
        if (n->type != Y_SCALAR || is_null(n)) return 0;
        v->type = WEFT_OPTION_STRING;
        v->s = n->s;
        return 1;
    case WEFT_SCHEMA_ENUM: {
        size_t used = (size_t)snprintf(what, what_cap, "one of ");
        for (uint32_t i = 0; i < o->n_values && used + 1 < what_cap; i++) {
            int w = snprintf(what + used, what_cap - used, "%s%s", i ? "|" : "", o->values[i]);
            if (w < 0) break;
            used += (size_t)w;
        }
        if (n->type != Y_SCALAR || is_null(n)) return 0;
        for (uint32_t i = 0; i < o->n_values; i++)
            if (!strcmp(o->values[i], n->s)) {
                v->type = WEFT_OPTION_STRING;
                v->s = o->values[i];
                return 1;
            }
        return 0;
    }
    default:
        snprintf(what, what_cap, "a value");
        return 0;
    }
}

static weft_status parse_option(ctx *c, const ynode *key, const ynode *spec,
                                weft_option_schema *o) {
    char path[128], f[160];
    snprintf(path, sizeof(path), "options.%s", key->s);
    o->pos.line = key->line;
    o->pos.column = key->col;
    if (!option_name_valid(key->s)) {
        char d[80];
        return fail(c, key, path,
                    "expected an option name of 1..63 characters [a-z0-9_] starting with a "
                    "letter, found %s",
                    describe(key, d, sizeof(d)));
    }
    snprintf(o->name, sizeof(o->name), "%s", key->s);
    weft_status st =
        want_type(c, spec, path, Y_MAP, "a mapping {type, default, min, max, values, help}");
    if (st) return st;
    static const char *const keys[] = {"type", "default", "min", "max", "values", "help", NULL};
    static const char *const req[] = {"type", "default", NULL};
    if ((st = map_keys(c, spec, path, keys, req))) return st;
    int t;
    snprintf(f, sizeof(f), "%s.type", path);
    if ((st = get_enum(c, map_get(spec, "type"), f, type_names, &t))) return st;
    o->type = (uint32_t)t + 1;
    const ynode *mn = map_get(spec, "min"), *mx = map_get(spec, "max"),
                *vals = map_get(spec, "values"), *help = map_get(spec, "help");
    if ((mn || mx) && o->type != WEFT_SCHEMA_INT && o->type != WEFT_SCHEMA_FLOAT) {
        const ynode *b = mn ? mn : mx;
        snprintf(f, sizeof(f), "%s.%s", path, mn ? "min" : "max");
        return fail(c, b, f,
                    "expected min and max only on int and float options, found them on "
                    "a %s option",
                    type_names[t]);
    }
    if (o->type == WEFT_SCHEMA_INT) {
        if (mn) {
            snprintf(f, sizeof(f), "%s.min", path);
            if ((st = get_int(c, mn, f, INT64_MIN + 1, INT64_MAX, &o->imin))) return st;
            o->has_min = 1;
        }
        if (mx) {
            snprintf(f, sizeof(f), "%s.max", path);
            if ((st = get_int(c, mx, f, INT64_MIN + 1, INT64_MAX, &o->imax))) return st;
            o->has_max = 1;
        }
        if (mn && mx && o->imin > o->imax) {
            snprintf(f, sizeof(f), "%s.max", path);
            return fail(c, mx, f, "expected max >= min (%lld), found %lld", (long long)o->imin,
                        (long long)o->imax);
        }
    } else if (o->type == WEFT_SCHEMA_FLOAT) {
        if (mn) {
            snprintf(f, sizeof(f), "%s.min", path);
            if ((st = get_float(c, mn, f, -HUGE_VAL, HUGE_VAL, &o->fmin))) return st;
            o->has_min = 1;
        }
        if (mx) {
            snprintf(f, sizeof(f), "%s.max", path);
            if ((st = get_float(c, mx, f, -HUGE_VAL, HUGE_VAL, &o->fmax))) return st;
            o->has_max = 1;
        }
        if (mn && mx && o->fmin > o->fmax) {
            snprintf(f, sizeof(f), "%s.max", path);
            return fail(c, mx, f, "expected max >= min (%g), found %g", o->fmin, o->fmax);
        }
    }
    snprintf(f, sizeof(f), "%s.values", path);
    if (vals && o->type != WEFT_SCHEMA_ENUM)
        return fail(c, vals, f, "expected values only on enum options, found them on a %s option",
                    type_names[t]);
    if (o->type == WEFT_SCHEMA_ENUM) {
        if (!vals)
            return fail(c, spec, f,
                        "expected the list of allowed values of this enum option, "
                        "found nothing (it is missing)");
        if ((st = parse_string_list(c, vals, f, 0, &o->values, &o->n_values, 0))) return st;
    }
    if (help) {
        snprintf(f, sizeof(f), "%s.help", path);
        if ((st = get_text_dup(c, help, f, &o->help, "a line of help text"))) return st;
    } else if (!(o->help = dup_or_empty())) {
        return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    }
    /* the default must satisfy the option's own schema */
    const ynode *def = map_get(spec, "default");
    snprintf(f, sizeof(f), "%s.default", path);
    char what[300], d[80];
    weft_option v;
    if (!option_value(o, def, &v, what, sizeof(what)))
        return fail(c, def, f, "expected %s, found %s", what, describe(def, d, sizeof(d)));
    o->def = v;
    o->def.s = NULL;
    if (v.type == WEFT_OPTION_STRING) {
        char *s = strdup(v.s);
        if (!s) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
        o->def.s = s;
    }
    return WEFT_OK;
}

static weft_status parse_plugin(ctx *c, const ynode *root, weft_plugin_manifest *m) {
    static const char *const keys[] = {
        "format",  "name",      "kind",     "version",    "abi",           "library",
        "summary", "platforms", "backends", "slots",      "requires",      "conflicts",
        "after",   "services",  "options",  "helps_when", "architectures", NULL};
    static const char *const req[] = {"format",  "name",     "kind",  "version", "abi",
                                      "library", "backends", "slots", NULL};
    weft_status st;
    /* format first: a newer format is reported as such, not as unknown keys */
    const ynode *fmt = map_get(root, "format");
    if (fmt) {
        int64_t f;
        if (fmt->type != Y_SCALAR || fmt->quoted || !parse_int_text(fmt->s, &f) ||
            f != WEFT_MANIFEST_FORMAT) {
            char d[80];
            return fail(c, fmt, "format",
                        "expected %d (the manifest format this runtime reads), found %s",
                        WEFT_MANIFEST_FORMAT, describe(fmt, d, sizeof(d)));
        }
        m->format = (uint32_t)f;
    }
    if ((st = map_keys(c, root, "", keys, req))) return st;
    if ((st = get_name(c, map_get(root, "name"), "name", m->name))) return st;
    int k;
    if ((st = get_enum(c, map_get(root, "kind"), "kind", kind_names, &k))) return st;
    m->kind = (uint32_t)k + 1;

    const ynode *ver = map_get(root, "version");
    if ((st = get_text(c, ver, "version", m->version_text, sizeof(m->version_text),
                       "a semver version MAJOR.MINOR.PATCH")))
        return st;
    weft_error e;
    weft_error_clear(&e);
    if (weft_semver_parse(m->version_text, &m->version, &e))
        return fail(c, ver, "version", "%s", e.message);

    const ynode *abi = map_get(root, "abi");
    if ((st = want_type(c, abi, "abi", Y_MAP, "a mapping {min: N, max: N}"))) return st;
    static const char *const abi_keys[] = {"min", "max", NULL};
    if ((st = map_keys(c, abi, "abi", abi_keys, abi_keys))) return st;
    if ((st = get_u32(c, map_get(abi, "min"), "abi.min", 1, 65535, &m->abi_min))) return st;
    if ((st = get_u32(c, map_get(abi, "max"), "abi.max", 1, 65535, &m->abi_max))) return st;
    if (m->abi_max < m->abi_min)
        return fail(c, map_get(abi, "max"), "abi.max", "expected max >= min (%u), found %u",
                    m->abi_min, m->abi_max);

    const ynode *lib = map_get(root, "library");
    if ((st = get_text(c, lib, "library", m->library, sizeof(m->library), "a library file name")))
        return st;
    if (!library_name_valid(m->library)) {
        char d[80];
        return fail(c, lib, "library",
                    "expected a file name inside the bundle directory ([A-Za-z0-9._+-], no "
                    "'/', not starting with '.'), found %s",
                    describe(lib, d, sizeof(d)));
    }

    const ynode *v;
    if ((v = map_get(root, "summary"))) {
        if ((st = get_text_dup(c, v, "summary", &m->summary, "a one-line summary"))) return st;
    } else if (!(m->summary = dup_or_empty())) {
        return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    }
    if ((v = map_get(root, "platforms")) && (st = parse_platforms(c, v, m))) return st;

    v = map_get(root, "backends");
    if ((st = get_list(c, v, "backends", 0))) return st;
    if ((st = list_unique(c, v, "backends"))) return st;
    if (v->n > WEFT_MANIFEST_MAX_BACKENDS)
        return fail(c, v, "backends", "expected at most %d backends, found %u",
                    WEFT_MANIFEST_MAX_BACKENDS, v->n);
    for (uint32_t i = 0; i < v->n; i++) {
        char f[64];
        snprintf(f, sizeof(f), "backends[%u]", i);
        if ((st = get_enum(c, v->kids[i], f, backend_names, &k))) return st;
        snprintf(m->backends[i], sizeof(m->backends[i]), "%s", backend_names[k]);
    }
    m->n_backends = v->n;

    v = map_get(root, "slots");
    if ((st = get_list(c, v, "slots", 0))) return st;
    if ((st = list_unique(c, v, "slots"))) return st;
    for (uint32_t i = 0; i < v->n; i++) {
        char f[64], list[256], d[80];
        snprintf(f, sizeof(f), "slots[%u]", i);
        const ynode *s = v->kids[i];
        uint32_t bit = s->type == Y_SCALAR ? weft_slot_from_name(s->s) : 0;
        if (!bit)
            return fail(c, s, f, "expected a slot (%s), found %s",
                        weft_slots_format(0xffffffffu, "|", list, sizeof(list)),
                        describe(s, d, sizeof(d)));
        m->slots |= bit;
    }
    /* kind and slots agree: a backend fills backend, a model fills model, nothing else does */
    const ynode *slots_node = v;
    if (m->kind == WEFT_KIND_BACKEND && !(m->slots & WEFT_SLOT_BACKEND))
        return fail(c, slots_node, "slots",
                    "expected a backend plugin to list slot backend, "
                    "found it missing");
    if (m->kind == WEFT_KIND_MODEL && !(m->slots & WEFT_SLOT_MODEL))
        return fail(c, slots_node, "slots",
                    "expected a model plugin to list slot model, found "
                    "it missing");
    if (m->kind != WEFT_KIND_BACKEND && (m->slots & WEFT_SLOT_BACKEND))
        return fail(c, slots_node, "slots",
                    "expected slot backend only in kind backend, found "
                    "it in kind %s",
                    kind_names[m->kind - 1]);
    if (m->kind != WEFT_KIND_MODEL && (m->slots & WEFT_SLOT_MODEL))
        return fail(c, slots_node, "slots",
                    "expected slot model only in kind model, found it in "
                    "kind %s",
                    kind_names[m->kind - 1]);
    if (m->kind == WEFT_KIND_BACKEND &&
        (m->n_backends != 1 || strcmp(m->backends[0], m->name) != 0))
        return fail(c, map_get(root, "backends"), "backends",
                    "expected a backend plugin to list exactly its own name [%s], found another "
                    "list",
                    m->name);

    if ((v = map_get(root, "requires")) &&
        (st = parse_deps(c, v, "requires", m, &m->requires, &m->n_requires)))
        return st;
    if ((v = map_get(root, "conflicts")) &&
        (st = parse_deps(c, v, "conflicts", m, &m->conflicts, &m->n_conflicts)))
        return st;
    for (uint32_t i = 0; i < m->n_requires; i++)
        for (uint32_t j = 0; j < m->n_conflicts; j++)
            if (!strcmp(m->requires[i].name, m->conflicts[j].name)) {
                char f[64];
                snprintf(f, sizeof(f), "conflicts[%u]", j);
                return fail(c, map_get(root, "conflicts")->kids[j], f,
                            "expected a plugin not also in requires, found %s in both",
                            m->conflicts[j].name);
            }
    if ((v = map_get(root, "after"))) {
        if ((st = parse_string_list(c, v, "after", 1, &m->after, &m->n_after, 1))) return st;
        for (uint32_t i = 0; i < m->n_after; i++)
            if (!strcmp(m->after[i], m->name)) {
                char f[64];
                snprintf(f, sizeof(f), "after[%u]", i);
                return fail(c, v->kids[i], f,
                            "expected another plugin's name, found the plugin itself");
            }
    }
    if ((v = map_get(root, "services"))) {
        if ((st = get_list(c, v, "services", 1))) return st;
        if ((st = list_unique(c, v, "services"))) return st;
        for (uint32_t i = 0; i < v->n; i++) {
            char f[64];
            snprintf(f, sizeof(f), "services[%u]", i);
            if ((st = get_enum(c, v->kids[i], f, service_names, &k))) return st;
            m->services |= 1u << (k + 1);
        }
    }
    if ((v = map_get(root, "options"))) {
        if ((st = want_type(c, v, "options", Y_MAP, "a mapping of option name to its schema")))
            return st;
        if (v->n) {
            m->options = calloc(v->n / 2, sizeof(*m->options));
            if (!m->options) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
        }
        for (uint32_t i = 0; i + 1 < v->n; i += 2) {
            st = parse_option(c, v->kids[i], v->kids[i + 1], &m->options[m->n_options]);
            m->n_options++; /* counted even on failure so that free() sees it */
            if (st) return st;
        }
    }
    if ((v = map_get(root, "helps_when"))) {
        if ((st = get_text_dup(c, v, "helps_when", &m->helps_when, "text for the planner")))
            return st;
    } else if (!(m->helps_when = dup_or_empty())) {
        return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    }
    v = map_get(root, "architectures");
    if (m->kind == WEFT_KIND_MODEL) {
        if (!v)
            return fail(c, root, "architectures",
                        "expected the list of Hugging Face architectures a model plugin runs, "
                        "found nothing (it is missing)");
        if ((st = parse_string_list(c, v, "architectures", 0, &m->architectures,
                                    &m->n_architectures, 0)))
            return st;
    } else if (v) {
        return fail(c, v, "architectures",
                    "expected architectures only in kind model, found it "
                    "in kind %s",
                    kind_names[m->kind - 1]);
    }
    return WEFT_OK;
}

static weft_status keep_text(const char *text, size_t len, char **out, size_t *out_len) {
    *out = malloc(len + 1);
    if (!*out) return WEFT_ERR_NOMEM;
    memcpy(*out, text, len);
    (*out)[len] = '\0';
    *out_len = len;
    return WEFT_OK;
}

weft_status weft_plugin_manifest_parse(const char *text, size_t len, const char *name,
                                       weft_plugin_manifest **out, weft_error *err) {
    if (!out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no output given");
    *out = NULL;
    if (!text && len) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no text given");
    ctx c = {name ? name : "<buffer>", err};
    ynode *root = NULL;
    weft_status st = yaml_tree(&c, text ? text : "", len, &root);
    if (st) return st;
    weft_plugin_manifest *m = calloc(1, sizeof(*m));
    if (!m) {
        ynode_free(root);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    }
    snprintf(m->path, sizeof(m->path), "%s", c.file);
    st = parse_plugin(&c, root, m);
    ynode_free(root);
    if (!st && keep_text(text ? text : "", len, &m->text, &m->text_len))
        st = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    if (st) {
        weft_plugin_manifest_free(m);
        return st;
    }
    *out = m;
    return WEFT_OK;
}

/* Reads a whole file of at most WEFT_MANIFEST_MAX_BYTES. */
static weft_status read_file(const char *path, char **text, size_t *len, weft_error *err) {
    return weft_file_read(path, WEFT_MANIFEST_MAX_BYTES, "a manifest", SRC, text, len, err);
}

weft_status weft_plugin_manifest_load(const char *path, weft_plugin_manifest **out,
                                      weft_error *err) {
    if (!path || !out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no path given");
    *out = NULL;
    char *text;
    size_t len;
    weft_status st = read_file(path, &text, &len, err);
    if (st) return st;
    st = weft_plugin_manifest_parse(text, len, path, out, err);
    free(text);
    return st;
}

weft_status weft_plugin_manifest_dup(const weft_plugin_manifest *m, weft_plugin_manifest **out,
                                     weft_error *err) {
    if (!m || !out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no manifest given");
    return weft_plugin_manifest_parse(m->text, m->text_len, m->path, out, err);
}

const weft_option_schema *weft_plugin_manifest_option(const weft_plugin_manifest *m,
                                                      const char *key) {
    if (!m || !key) return NULL;
    for (uint32_t i = 0; i < m->n_options; i++)
        if (!strcmp(m->options[i].name, key)) return &m->options[i];
    return NULL;
}

int weft_plugin_manifest_has_backend(const weft_plugin_manifest *m, const char *backend) {
    if (!m || !backend) return 0;
    for (uint32_t i = 0; i < m->n_backends; i++)
        if (!strcmp(m->backends[i], backend)) return 1;
    return 0;
}

/* ---- options ------------------------------------------------------------------------------ */
weft_status weft_options_build(const weft_plugin_manifest *m, const weft_manifest_value *values,
                               uint32_t n_values, const char *file, const char *field,
                               weft_options *out, weft_error *err) {
    if (!m || !out || (n_values && !values))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no manifest or output given");
    out->count = 0;
    out->items = NULL;
    ctx c = {file ? file : "<options>", err};
    weft_option *tmp = m->n_options ? calloc(m->n_options, sizeof(*tmp)) : NULL;
    if (m->n_options && !tmp) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    weft_status st = WEFT_OK;
    for (uint32_t i = 0; i < m->n_options; i++)
        tmp[i] = m->options[i].def;
    for (uint32_t i = 0; i < n_values && !st; i++) {
        const weft_manifest_value *v = &values[i];
        char f[256];
        join_path(f, sizeof(f), field, v->key);
        ynode n;
        memset(&n, 0, sizeof(n));
        n.type = Y_SCALAR;
        n.s = v->text ? v->text : (char *)"";
        n.len = strlen(n.s);
        n.quoted = (int)v->quoted;
        n.line = v->pos.line;
        n.col = v->pos.column;
        for (uint32_t k = 0; k < i; k++)
            if (!strcmp(values[k].key, v->key)) {
                st = fail(&c, &n, f,
                          "expected each option once, found %s again (first at line "
                          "%u)",
                          v->key, values[k].pos.line);
                break;
            }
        if (st) break;
        const weft_option_schema *o = weft_plugin_manifest_option(m, v->key);
        if (!o) {
            char list[300] = "";
            size_t used = 0;
            for (uint32_t k = 0; k < m->n_options && used + 1 < sizeof(list); k++) {
                int w = snprintf(list + used, sizeof(list) - used, "%s%s", k ? ", " : "",
                                 m->options[k].name);
                if (w < 0) break;
                used += (size_t)w;
            }
            st = fail(&c, &n, f, "expected an option of %s (%s), found unknown option %s", m->name,
                      m->n_options ? list : "it has none", v->key);
            break;
        }
        char what[300], d[80];
        weft_option val;
        if (!option_value(o, &n, &val, what, sizeof(what))) {
            st = fail(&c, &n, f, "expected %s, found %s", what, describe(&n, d, sizeof(d)));
            break;
        }
        tmp[o - m->options] = val;
    }
    if (!st) {
        weft_options view = {m->n_options, tmp};
        st = weft_options_dup(&view, out, err);
    }
    free(tmp);
    return st;
}

weft_status weft_options_dup(const weft_options *src, weft_options *out, weft_error *err) {
    if (!src || !out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no options given");
    out->count = 0;
    out->items = NULL;
    if (!src->count) return WEFT_OK;
    if (!src->items) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "options without items");
    size_t bytes = src->count * sizeof(weft_option);
    for (uint32_t i = 0; i < src->count; i++) {
        bytes += strlen(src->items[i].key ? src->items[i].key : "") + 1;
        if (src->items[i].s) bytes += strlen(src->items[i].s) + 1;
    }
    char *block = malloc(bytes);
    if (!block) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    weft_option *items = (weft_option *)(void *)block;
    char *strings = block + src->count * sizeof(weft_option);
    for (uint32_t i = 0; i < src->count; i++) {
        items[i] = src->items[i];
        const char *k = src->items[i].key ? src->items[i].key : "";
        size_t kl = strlen(k) + 1;
        memcpy(strings, k, kl);
        items[i].key = strings;
        strings += kl;
        if (src->items[i].s) {
            size_t sl = strlen(src->items[i].s) + 1;
            memcpy(strings, src->items[i].s, sl);
            items[i].s = strings;
            strings += sl;
        }
    }
    out->count = src->count;
    out->items = items;
    return WEFT_OK;
}

void weft_options_free(weft_options *opts) {
    if (!opts) return;
    free((void *)opts->items);
    opts->items = NULL;
    opts->count = 0;
}

const weft_option *weft_options_find(const weft_options *opts, const char *key) {
    if (!opts || !key || !opts->items) return NULL;
    for (uint32_t i = 0; i < opts->count; i++)
        if (opts->items[i].key && !strcmp(opts->items[i].key, key)) return &opts->items[i];
    return NULL;
}

/* ---- candidate manifest -------------------------------------------------------------------- */
static void ref_free(weft_candidate_ref *r) {
    for (uint32_t i = 0; r->options && i < r->n_options; i++)
        free(r->options[i].text);
    free(r->options);
    r->options = NULL;
    r->n_options = 0;
}

void weft_candidate_manifest_free(weft_candidate_manifest *m) {
    if (!m) return;
    ref_free(&m->backend);
    ref_free(&m->model_plugin);
    for (uint32_t i = 0; m->techniques && i < m->n_techniques; i++)
        ref_free(&m->techniques[i]);
    free(m->techniques);
    free(m->text);
    free(m);
}

/* A plugin reference: `name` or {name, version, options}. backend_only restricts the name to
 * the known backends. */
static weft_status parse_ref(ctx *c, const ynode *n, const char *path, int backend_only,
                             weft_candidate_ref *r) {
    char f[160];
    weft_status st;
    r->pos.line = n->line;
    r->pos.column = n->col;
    weft_semver_range_any(&r->range);
    const ynode *name = n;
    if (n->type == Y_MAP) {
        static const char *const keys[] = {"name", "version", "options", NULL};
        static const char *const req[] = {"name", NULL};
        if ((st = map_keys(c, n, path, keys, req))) return st;
        name = map_get(n, "name");
        snprintf(f, sizeof(f), "%s.name", path);
    } else {
        snprintf(f, sizeof(f), "%s", path);
    }
    if (backend_only) {
        int k;
        if ((st = get_enum(c, name, f, backend_names, &k))) return st;
        snprintf(r->name, sizeof(r->name), "%s", backend_names[k]);
    } else if ((st = get_name(c, name, f, r->name))) {
        return st;
    }
    if (n->type != Y_MAP) return WEFT_OK;
    const ynode *v;
    if ((v = map_get(n, "version"))) {
        snprintf(f, sizeof(f), "%s.version", path);
        if ((st = get_range(c, v, f, &r->range))) return st;
    }
    if ((v = map_get(n, "options"))) {
        snprintf(f, sizeof(f), "%s.options", path);
        if ((st = want_type(c, v, f, Y_MAP, "a mapping of option name to value"))) return st;
        if (v->n) {
            r->options = calloc(v->n / 2, sizeof(*r->options));
            if (!r->options) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
        }
        for (uint32_t i = 0; i + 1 < v->n; i += 2) {
            const ynode *key = v->kids[i], *val = v->kids[i + 1];
            char fk[256];
            snprintf(fk, sizeof(fk), "%s.options.%s", path, key->s);
            if (!option_name_valid(key->s)) {
                char d[80];
                return fail(c, key, fk, "expected an option name [a-z][a-z0-9_]*, found %s",
                            describe(key, d, sizeof(d)));
            }
            if ((st = want_type(c, val, fk, Y_SCALAR, "a single value (bool, number or text)")))
                return st;
            weft_manifest_value *o = &r->options[r->n_options];
            snprintf(o->key, sizeof(o->key), "%s", key->s);
            o->quoted = (uint32_t)val->quoted;
            o->pos.line = val->line;
            o->pos.column = val->col;
            if (!(o->text = strdup(val->s)))
                return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
            r->n_options++;
        }
    }
    return WEFT_OK;
}

static weft_status parse_candidate(ctx *c, const ynode *root, weft_candidate_manifest *m) {
    static const char *const keys[] = {"format",  "candidate",    "model",
                                       "backend", "model_plugin", "techniques",
                                       "serving", "quality",      NULL};
    static const char *const req[] = {"format", "candidate", "model", "backend", NULL};
    weft_status st;
    const ynode *fmt = map_get(root, "format");
    if (fmt) {
        int64_t f;
        if (fmt->type != Y_SCALAR || fmt->quoted || !parse_int_text(fmt->s, &f) ||
            f != WEFT_MANIFEST_FORMAT) {
            char d[80];
            return fail(c, fmt, "format",
                        "expected %d (the manifest format this runtime reads), found %s",
                        WEFT_MANIFEST_FORMAT, describe(fmt, d, sizeof(d)));
        }
        m->format = (uint32_t)f;
    }
    if ((st = map_keys(c, root, "", keys, req))) return st;
    if ((st = get_name(c, map_get(root, "candidate"), "candidate", m->candidate))) return st;
    const ynode *v = map_get(root, "model");
    if ((st = get_text(c, v, "model", m->model, sizeof(m->model),
                       "a model directory, cache name or hub id org/name")))
        return st;
    m->model_pos.line = v->line;
    m->model_pos.column = v->col;
    if ((st = parse_ref(c, map_get(root, "backend"), "backend", 1, &m->backend))) return st;
    if ((v = map_get(root, "model_plugin")) &&
        (st = parse_ref(c, v, "model_plugin", 0, &m->model_plugin)))
        return st;
    if (!m->model_plugin.name[0]) weft_semver_range_any(&m->model_plugin.range);
    if (!m->backend.name[0]) weft_semver_range_any(&m->backend.range);
    if ((v = map_get(root, "techniques"))) {
        if ((st = get_list(c, v, "techniques", 1))) return st;
        if (v->n) {
            m->techniques = calloc(v->n, sizeof(*m->techniques));
            if (!m->techniques) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
        }
        for (uint32_t i = 0; i < v->n; i++) {
            char path[64];
            snprintf(path, sizeof(path), "techniques[%u]", i);
            st = parse_ref(c, v->kids[i], path, 0, &m->techniques[i]);
            m->n_techniques++;
            if (st) return st;
            for (uint32_t k = 0; k < i; k++)
                if (!strcmp(m->techniques[k].name, m->techniques[i].name)) {
                    char f[80];
                    snprintf(f, sizeof(f), "%s%s", path, v->kids[i]->type == Y_MAP ? ".name" : "");
                    const ynode *at =
                        v->kids[i]->type == Y_MAP ? map_get(v->kids[i], "name") : v->kids[i];
                    return fail(c, at, f,
                                "expected each technique once, found %s again (first at line %u)",
                                m->techniques[i].name, m->techniques[k].pos.line);
                }
        }
    }
    if ((v = map_get(root, "serving"))) {
        static const char *const skeys[] = {"max_model_len", "max_concurrency", "threads", NULL};
        if ((st = want_type(c, v, "serving", Y_MAP,
                            "a mapping {max_model_len, max_concurrency, threads}")))
            return st;
        if ((st = map_keys(c, v, "serving", skeys, NULL))) return st;
        const ynode *x;
        if ((x = map_get(v, "max_model_len")) &&
            (st = get_u32(c, x, "serving.max_model_len", 1, 1u << 24, &m->max_model_len)))
            return st;
        if ((x = map_get(v, "max_concurrency")) &&
            (st = get_u32(c, x, "serving.max_concurrency", 1, 65536, &m->max_concurrency)))
            return st;
        if ((x = map_get(v, "threads")) &&
            (st = get_u32(c, x, "serving.threads", 0, 4096, &m->threads)))
            return st;
    }
    if ((v = map_get(root, "quality"))) {
        static const char *const qkeys[] = {"mean_kl", "p99_kl", "ppl_ratio", NULL};
        if ((st = want_type(c, v, "quality", Y_MAP, "a mapping {mean_kl, p99_kl, ppl_ratio}")))
            return st;
        if ((st = map_keys(c, v, "quality", qkeys, NULL))) return st;
        const ynode *x;
        if ((x = map_get(v, "mean_kl"))) {
            if ((st = get_float(c, x, "quality.mean_kl", 0, 100, &m->mean_kl))) return st;
            m->has_mean_kl = 1;
        }
        if ((x = map_get(v, "p99_kl"))) {
            if ((st = get_float(c, x, "quality.p99_kl", 0, 1000, &m->p99_kl))) return st;
            m->has_p99_kl = 1;
        }
        if ((x = map_get(v, "ppl_ratio"))) {
            if ((st = get_float(c, x, "quality.ppl_ratio", 1, 100, &m->ppl_ratio))) return st;
            m->has_ppl_ratio = 1;
        }
    }
    return WEFT_OK;
}

weft_status weft_candidate_manifest_parse(const char *text, size_t len, const char *name,
                                          weft_candidate_manifest **out, weft_error *err) {
    if (!out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no output given");
    *out = NULL;
    if (!text && len) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no text given");
    ctx c = {name ? name : "<buffer>", err};
    ynode *root = NULL;
    weft_status st = yaml_tree(&c, text ? text : "", len, &root);
    if (st) return st;
    weft_candidate_manifest *m = calloc(1, sizeof(*m));
    if (!m) {
        ynode_free(root);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    }
    snprintf(m->path, sizeof(m->path), "%s", c.file);
    st = parse_candidate(&c, root, m);
    ynode_free(root);
    if (!st && keep_text(text ? text : "", len, &m->text, &m->text_len))
        st = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    if (st) {
        weft_candidate_manifest_free(m);
        return st;
    }
    *out = m;
    return WEFT_OK;
}

weft_status weft_candidate_manifest_load(const char *path, weft_candidate_manifest **out,
                                         weft_error *err) {
    if (!path || !out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no path given");
    *out = NULL;
    char *text;
    size_t len;
    weft_status st = read_file(path, &text, &len, err);
    if (st) return st;
    st = weft_candidate_manifest_parse(text, len, path, out, err);
    free(text);
    return st;
}
