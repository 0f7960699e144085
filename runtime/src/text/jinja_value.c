/* Values for the chat-template interpreter: the arena they live in, UTF-8 strings, ordered
 * dicts, and the Python behaviours templates observe (truthiness, ==, <, str(), repr(), and
 * json.dumps as transformers' tojson calls it). Output must match CPython byte for byte, so
 * float formatting and string escaping follow CPython's rules rather than printf's. */
#include "text/jinja.h"

#include <math.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---------------------------------------------------------------------------- */
struct jchunk {
    jchunk *next;
    size_t cap, used;
    max_align_t data[];
};

enum { JA_CHUNK = 64 * 1024, JA_ALIGN = 16 };

void *ja_alloc(jarena *a, size_t n) {
    if (a->exhausted) return NULL;
    if (n > SIZE_MAX / 2) {
        a->exhausted = 1;
        return NULL;
    }
    n = (n + JA_ALIGN - 1) & ~(size_t)(JA_ALIGN - 1);
    if (n == 0) n = JA_ALIGN;
    jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > JA_CHUNK ? n : JA_CHUNK;
        if (a->limit && (a->total + cap + sizeof(jchunk) > a->limit)) {
            a->exhausted = 1;
            return NULL;
        }
        c = malloc(sizeof(jchunk) + cap);
        if (!c) {
            a->exhausted = 1;
            return NULL;
        }
        c->cap = cap;
        c->used = 0;
        a->total += cap + sizeof(jchunk);
        if (a->head && n > JA_CHUNK) {
            /* A large block gets its own chunk behind the current one so the space left in
             * the current chunk stays usable. */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free(jarena *a) {
    jchunk *c = a->head;
    while (c) {
        jchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
    a->exhausted = 0;
}

/* ---- UTF-8 ---------------------------------------------------------------------------- */
int ju_valid(const char *s, size_t len, size_t *bad_at) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
        } else {
            goto bad;
        }
        if (len - i <= n) goto bad;
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xC0) != 0x80) goto bad;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            goto bad;
        i += n + 1;
    }
    return 1;
bad:
    if (bad_at) *bad_at = i;
    return 0;
}

uint32_t ju_next(const char *s, size_t len, size_t *i) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    size_t n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = c & (n == 3 ? 0x07 : n == 2 ? 0x0F : 0x1F);
    for (size_t k = 1; k <= n && *i + k < len; k++)
        cp = (cp << 6) | (p[*i + k] & 0x3F);
    *i += n + 1;
    if (*i > len) *i = len;
    return cp;
}

size_t ju_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ju_count(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) n++;
    return n;
}

size_t ju_offset(const jstr *s, size_t cp_index) {
    if (s->ncp == s->len) return cp_index < s->len ? cp_index : s->len;
    size_t i = 0, k = 0;
    while (i < s->len && k < cp_index) {
        ju_next(s->s, s->len, &i);
        k++;
    }
    return i;
}

int ju_isspace(uint32_t cp) {
    if (cp >= 9 && cp <= 13) return 1;
    if (cp >= 0x1C && cp <= 0x20) return 1;
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- strings and buffers -------------------------------------------------------------- */
jstr *js_new(jarena *a, const char *s, size_t len) {
    if (len > SIZE_MAX - sizeof(jstr) - 1) return NULL;
    jstr *r = ja_alloc(a, sizeof(jstr) + len + 1);
    if (!r) return NULL;
    r->len = len;
    if (len) memcpy(r->s, s, len);
    r->s[len] = '\0';
    r->ncp = ju_count(r->s, len);
    return r;
}

jstr *js_cstr(jarena *a, const char *s) {
    return js_new(a, s, strlen(s));
}

jstr *js_cat(jarena *a, const jstr *x, const jstr *y) {
    if (x->len > SIZE_MAX / 2 || y->len > SIZE_MAX / 2) return NULL;
    jstr *r = ja_alloc(a, sizeof(jstr) + x->len + y->len + 1);
    if (!r) return NULL;
    memcpy(r->s, x->s, x->len);
    memcpy(r->s + x->len, y->s, y->len);
    r->len = x->len + y->len;
    r->s[r->len] = '\0';
    r->ncp = x->ncp + y->ncp;
    return r;
}

int js_eq(const jstr *s, const char *lit) {
    size_t n = strlen(lit);
    return s->len == n && memcmp(s->s, lit, n) == 0;
}

int jb_put(jbuf *b, const char *s, size_t n) {
    if (b->failed) return -1;
    if (b->limit && (n > b->limit || b->len > b->limit - n)) {
        b->failed = 2;
        return -1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->failed = 1;
                return -1;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int jb_puts(jbuf *b, const char *s) {
    return jb_put(b, s, strlen(s));
}
int jb_putc(jbuf *b, char c) {
    return jb_put(b, &c, 1);
}

void jb_free(jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

jstr *jb_to_str(jarena *a, const jbuf *b) {
    return js_new(a, b->p ? b->p : "", b->len);
}

/* ---- lists and dicts ------------------------------------------------------------------ */
jlist *jl_new(jarena *a, size_t cap, int kind) {
    jlist *l = ja_alloc(a, sizeof(jlist));
    if (!l) return NULL;
    l->kind = (uint8_t)kind;
    if (cap == 0) cap = 1; /* storage is never NULL, so v + len is always defined */
    {
        if (cap > SIZE_MAX / sizeof(jv)) return NULL;
        l->v = ja_alloc(a, cap * sizeof(jv));
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

int jl_push(jarena *a, jlist *l, jv v) {
    if (l->len == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(jv)) return -1;
        jv *nv = ja_alloc(a, cap * sizeof(jv));
        if (!nv) return -1;
        if (l->len) memcpy(nv, l->v, l->len * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->len++] = v;
    return 0;
}

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

/* ---- the work meter (jinja.h, jv_meter_set) ------------------------------------------------ */
static _Thread_local uint64_t *meter_used;
static _Thread_local uint64_t meter_max;

void jv_meter_set(uint64_t *counter, uint64_t max) {
    meter_used = counter;
    meter_max = max;
}

/* adds one unit for the value visited plus one per 64 string bytes; nonzero once over budget */
static int meter_charge(size_t bytes) {
    if (!meter_used) return 0;
    *meter_used += 1 + bytes / 64;
    return *meter_used > meter_max;
}

/* Equal values hash equal, including 1 == 1.0 == True as in Python. */
static uint64_t jv_hash(jv v) {
    if (meter_charge(v.t == JV_STR ? v.u.s->len : 0)) return 0;
    switch (v.t) {
    case JV_NONE:
        return 0x9e3779b97f4a7c15ULL;
    case JV_BOOL:
    case JV_INT:
        return mix((uint64_t)v.u.i);
    case JV_FLOAT:
        if (v.u.f == floor(v.u.f) && fabs(v.u.f) < 9.2e18) return mix((uint64_t)(int64_t)v.u.f);
        {
            uint64_t bits;
            double f = v.u.f;
            memcpy(&bits, &f, sizeof bits);
            return mix(bits);
        }
    case JV_STR: {
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < v.u.s->len; i++)
            h = (h ^ (unsigned char)v.u.s->s[i]) * 1099511628211ULL;
        return h;
    }
    case JV_LIST: {
        uint64_t h = 0x51ed270b27ULL;
        for (size_t i = 0; i < v.u.l->len; i++)
            h = mix(h * 31 + jv_hash(v.u.l->v[i]));
        return h;
    }
    default:
        return mix((uint64_t)(uintptr_t)v.u.d);
    }
}

enum { JD_HASH_MIN = 16 };

static int jd_rehash(jarena *a, jdict *d, size_t nslots) {
    uint32_t *s = ja_alloc(a, nslots * sizeof(uint32_t));
    if (!s) return -1;
    for (size_t i = 0; i < d->len; i++) {
        size_t h = (size_t)jv_hash(d->k[i]) & (nslots - 1);
        while (s[h])
            h = (h + 1) & (nslots - 1);
        s[h] = (uint32_t)(i + 1);
    }
    d->slots = s;
    d->nslots = nslots;
    return 0;
}

jdict *jd_new(jarena *a) {
    return ja_alloc(a, sizeof(jdict));
}

static long jd_find(const jdict *d, jv key) {
    if (d->slots) {
        size_t h = (size_t)jv_hash(key) & (d->nslots - 1);
        while (d->slots[h]) {
            size_t i = d->slots[h] - 1;
            if (jv_eq(d->k[i], key)) return (long)i;
            h = (h + 1) & (d->nslots - 1);
        }
        return -1;
    }
    for (size_t i = 0; i < d->len; i++)
        if (jv_eq(d->k[i], key)) return (long)i;
    return -1;
}

jv *jd_get(const jdict *d, jv key) {
    long i = jd_find(d, key);
    return i < 0 ? NULL : &d->v[i];
}

jv *jd_gets(const jdict *d, const char *key, size_t len) {
    if (d->slots) {
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < len; i++)
            h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
        size_t s = (size_t)h & (d->nslots - 1);
        while (d->slots[s]) {
            size_t i = d->slots[s] - 1;
            if (d->k[i].t == JV_STR && d->k[i].u.s->len == len &&
                memcmp(d->k[i].u.s->s, key, len) == 0)
                return &d->v[i];
            s = (s + 1) & (d->nslots - 1);
        }
        return NULL;
    }
    for (size_t i = 0; i < d->len; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == len && memcmp(d->k[i].u.s->s, key, len) == 0)
            return &d->v[i];
    return NULL;
}

int jd_set(jarena *a, jdict *d, jv key, jv val) {
    long at = jd_find(d, key);
    if (at >= 0) {
        d->v[at] = val;
        return 0;
    }
    if (d->len >= UINT32_MAX - 1) return -1;
    if (d->len == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(jv)) return -1;
        jv *nk = ja_alloc(a, cap * sizeof(jv)), *nv = ja_alloc(a, cap * sizeof(jv));
        if (!nk || !nv) return -1;
        if (d->len) {
            memcpy(nk, d->k, d->len * sizeof(jv));
            memcpy(nv, d->v, d->len * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->len] = key;
    d->v[d->len] = val;
    d->len++;
    if (d->len >= JD_HASH_MIN && (!d->slots || d->len * 2 > d->nslots)) {
        size_t n = 64;
        while (n < d->len * 4)
            n *= 2;
        if (jd_rehash(a, d, n)) return -1;
    } else if (d->slots) {
        size_t h = (size_t)jv_hash(key) & (d->nslots - 1);
        while (d->slots[h])
            h = (h + 1) & (d->nslots - 1);
        d->slots[h] = (uint32_t)d->len;
    }
    return 0;
}

/* ---- Python semantics ----------------------------------------------------------------- */
const char *jv_typename(jv v) {
    switch (v.t) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        switch (v.u.l->kind) {
        case JL_TUPLE:
            return "tuple";
        case JL_ITER:
            return "generator";
        case JL_ITEMS:
            return "dict_items";
        case JL_KEYS:
            return "dict_keys";
        case JL_VALUES:
            return "dict_values";
        case JL_RANGE:
            return "range";
        default:
            return "list";
        }
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_LOOP:
        return "LoopContext";
    case JV_FUNC:
        return v.u.fn->kind == JF_MACRO ? "Macro" : "builtin_function_or_method";
    }
    return "object";
}

int jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    case JV_BOOL:
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.u.s->len != 0;
    case JV_LIST:
        return v.u.l->kind == JL_ITER ? 1 : v.u.l->len != 0;
    case JV_DICT:
        return v.u.d->len != 0;
    default:
        return 1;
    }
}

int jv_is_number(jv v) {
    return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT;
}

double jv_num(jv v) {
    return v.t == JV_FLOAT ? v.u.f : (double)v.u.i;
}

static int num_eq(jv a, jv b) {
    if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i == b.u.i;
    if (a.t == JV_FLOAT && b.t == JV_FLOAT) return a.u.f == b.u.f;
    /* int against float: exact, as Python compares them. */
    double f = a.t == JV_FLOAT ? a.u.f : b.u.f;
    int64_t i = a.t == JV_FLOAT ? b.u.i : a.u.i;
    if (f != floor(f) || !(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) return 0;
    return (int64_t)f == i;
}

static int seq_like(jv v) {
    return v.t == JV_LIST && (v.u.l->kind == JL_LIST || v.u.l->kind == JL_TUPLE);
}

int jv_eq(jv a, jv b) {
    if (meter_charge(a.t == JV_STR && b.t == JV_STR ? a.u.s->len : 0)) return 0;
    if (jv_is_number(a) && jv_is_number(b)) return num_eq(a, b);
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST:
        if (a.u.l == b.u.l) return 1;
        if (!seq_like(a) || a.u.l->kind != b.u.l->kind) {
            /* dict views compare by content; iterators by identity */
            if (a.u.l->kind != b.u.l->kind || a.u.l->kind == JL_ITER) return 0;
        }
        if (a.u.l->len != b.u.l->len) return 0;
        for (size_t i = 0; i < a.u.l->len; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d == b.u.d) return 1;
        if (a.u.d->len != b.u.d->len) return 0;
        for (size_t i = 0; i < a.u.d->len; i++) {
            jv *o = jd_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_eq(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    default:
        return a.u.d == b.u.d;
    }
}

int jv_hashable(jv v) {
    if (v.t == JV_DICT) return 0;
    if (meter_charge(0)) return 1;
    if (v.t == JV_LIST) {
        if (v.u.l->kind == JL_ITER || v.u.l->kind == JL_RANGE) return 1;
        if (v.u.l->kind != JL_TUPLE) return 0;
        for (size_t i = 0; i < v.u.l->len; i++)
            if (!jv_hashable(v.u.l->v[i])) return 0;
    }
    return 1;
}

int jv_cmp(jv a, jv b) {
    if (meter_charge(a.t == JV_STR && b.t == JV_STR ? a.u.s->len : 0)) return 0;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        double x = jv_num(a), y = jv_num(b);
        if (x != x || y != y) return 3; /* NaN: every ordering is false */
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (seq_like(a) && seq_like(b) && a.u.l->kind == b.u.l->kind) {
        size_t n = a.u.l->len < b.u.l->len ? a.u.l->len : b.u.l->len;
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_cmp(a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->len < b.u.l->len ? -1 : a.u.l->len > b.u.l->len;
    }
    return 2;
}

/* ---- str() and repr() ----------------------------------------------------------------- */
void jv_float_repr(double f, char out[40]) {
    if (f != f) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        strcpy(out, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char buf[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf is [-]d[.ddd]e(+|-)xx: collect the digits and the exponent. */
    char digits[24];
    size_t nd = 0;
    const char *p = buf;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof(digits) - 1) digits[nd++] = *p;
    digits[nd] = '\0';
    int e = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        digits[--nd] = '\0';
    int decpt = e + 1; /* value = 0.DIGITS x 10^decpt */
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, nd - 1);
            o += nd - 1;
        }
        int x = decpt - 1;
        o += sprintf(o, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    } else if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++)
            *o++ = '0';
        memcpy(o, digits, nd);
        o += nd;
    } else if ((size_t)decpt >= nd) {
        memcpy(o, digits, nd);
        o += nd;
        for (size_t i = nd; i < (size_t)decpt; i++)
            *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, nd - (size_t)decpt);
        o += nd - (size_t)decpt;
    }
    *o = '\0';
}

/* CPython's str.isprintable() approximated without the Unicode database: C0/C1 controls,
 * separators other than space, the common format characters, surrogates, private use and
 * noncharacters are non-printable; everything else is taken as printable. */
static int py_printable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F) return 0;
    if (cp < 0x7F) return 1;
    if (cp <= 0xA0 || cp == 0xAD) return 0;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
        (cp >= 0xFFF9 && cp <= 0xFFFB) || (cp >= 0x600 && cp <= 0x605) || cp == 0x61C ||
        cp == 0x6DD || cp == 0x70F || cp == 0x180E || cp == 0x8E2)
        return 0;
    if (cp >= 0xD800 && cp <= 0xF8FF) return 0; /* surrogates and private use */
    if ((cp & 0xFFFE) == 0xFFFE || (cp >= 0xFDD0 && cp <= 0xFDEF)) return 0;
    if (cp >= 0xE0000) return 0; /* tags, variation selectors supplement, private use planes */
    if (cp == 0x110BD || cp == 0x110CD || (cp >= 0x1BCA0 && cp <= 0x1BCA3) ||
        (cp >= 0x1D173 && cp <= 0x1D17A))
        return 0;
    return 1;
}

static int repr_str(jbuf *b, const jstr *s) {
    int has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (jb_putc(b, q)) return -1;
    size_t i = 0;
    while (i < s->len) {
        size_t start = i;
        uint32_t cp = ju_next(s->s, s->len, &i);
        char esc[16];
        if (cp == (uint32_t)q || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            if (jb_put(b, esc, 2)) return -1;
        } else if (cp == '\n') {
            if (jb_put(b, "\\n", 2)) return -1;
        } else if (cp == '\r') {
            if (jb_put(b, "\\r", 2)) return -1;
        } else if (cp == '\t') {
            if (jb_put(b, "\\t", 2)) return -1;
        } else if (!py_printable(cp)) {
            if (cp < 0x100)
                snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp < 0x10000)
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            else
                snprintf(esc, sizeof esc, "\\U%08x", cp);
            if (jb_puts(b, esc)) return -1;
        } else if (jb_put(b, s->s + start, i - start)) {
            return -1;
        }
    }
    return jb_putc(b, q);
}

enum { JV_MAX_NEST = 1000 };

static int str_rec(jbuf *b, jv v, int repr, int depth);

static int seq_repr(jbuf *b, const jlist *l, const char *open, const char *close, int depth) {
    if (jb_puts(b, open)) return -1;
    for (size_t i = 0; i < l->len; i++) {
        if (i && jb_put(b, ", ", 2)) return -1;
        if (str_rec(b, l->v[i], 1, depth + 1)) return -1;
    }
    if (l->kind == JL_TUPLE && l->len == 1 && jb_putc(b, ',')) return -1;
    return jb_puts(b, close);
}

static int dict_repr(jbuf *b, const jdict *d, int depth) {
    if (jb_putc(b, '{')) return -1;
    for (size_t i = 0; i < d->len; i++) {
        if (i && jb_put(b, ", ", 2)) return -1;
        if (str_rec(b, d->k[i], 1, depth + 1) || jb_put(b, ": ", 2) ||
            str_rec(b, d->v[i], 1, depth + 1))
            return -1;
    }
    return jb_putc(b, '}');
}

static int str_rec(jbuf *b, jv v, int repr, int depth) {
    char num[96];
    if (depth > JV_MAX_NEST) {
        b->failed = b->failed ? b->failed : 3;
        return -1;
    }
    switch (v.t) {
    case JV_UNDEF:
        return repr ? jb_puts(b, "Undefined") : 0;
    case JV_NONE:
        return jb_puts(b, "None");
    case JV_BOOL:
        return jb_puts(b, v.u.i ? "True" : "False");
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        return jb_puts(b, num);
    case JV_FLOAT:
        jv_float_repr(v.u.f, num);
        return jb_puts(b, num);
    case JV_STR:
        return repr ? repr_str(b, v.u.s) : jb_put(b, v.u.s->s, v.u.s->len);
    case JV_LIST:
        switch (v.u.l->kind) {
        case JL_TUPLE:
            return seq_repr(b, v.u.l, "(", ")", depth);
        case JL_ITER:
            return jb_puts(b, "<generator object>");
        case JL_ITEMS:
            return seq_repr(b, v.u.l, "dict_items([", "])", depth);
        case JL_KEYS:
            return seq_repr(b, v.u.l, "dict_keys([", "])", depth);
        case JL_VALUES:
            return seq_repr(b, v.u.l, "dict_values([", "])", depth);
        case JL_RANGE:
            if (v.u.l->range[2] == 1)
                snprintf(num, sizeof num, "range(%lld, %lld)", (long long)v.u.l->range[0],
                         (long long)v.u.l->range[1]);
            else
                snprintf(num, sizeof num, "range(%lld, %lld, %lld)", (long long)v.u.l->range[0],
                         (long long)v.u.l->range[1], (long long)v.u.l->range[2]);
            return jb_puts(b, num);
        default:
            return seq_repr(b, v.u.l, "[", "]", depth);
        }
    case JV_DICT:
        return dict_repr(b, v.u.d, depth);
    case JV_NS:
        if (jb_puts(b, "<Namespace ") || dict_repr(b, v.u.d, depth)) return -1;
        return jb_putc(b, '>');
    case JV_LOOP:
        snprintf(num, sizeof num, "<LoopContext %zu/%zu>", v.u.lp->i + 1, v.u.lp->items->len);
        return jb_puts(b, num);
    case JV_FUNC:
        if (jb_puts(b, v.u.fn->kind == JF_MACRO ? "<Macro '" : "<built-in function '")) return -1;
        if (jb_puts(b, v.u.fn->name ? v.u.fn->name : "?")) return -1;
        return jb_puts(b, "'>");
    }
    return 0;
}

int jv_str(jbuf *b, jv v) {
    return str_rec(b, v, 0, 0);
}
int jv_repr(jbuf *b, jv v) {
    return str_rec(b, v, 1, 0);
}

/* ---- json.dumps ----------------------------------------------------------------------- */
static int json_str(jbuf *b, const char *s, size_t len, int ensure_ascii) {
    if (jb_putc(b, '"')) return -1;
    size_t i = 0, run = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        } else if (ensure_ascii && c >= 0x80) {
            if (jb_put(b, s + run, i - run)) return -1;
            uint32_t cp = ju_next(s, len, &i);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                         0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            if (jb_puts(b, tmp)) return -1;
            run = i;
            continue;
        }
        if (esc) {
            if (jb_put(b, s + run, i - run) || jb_puts(b, esc)) return -1;
            run = i + 1;
        }
        i++;
    }
    if (jb_put(b, s + run, len - run)) return -1;
    return jb_putc(b, '"');
}

static int json_float(jbuf *b, double f) {
    char num[48];
    if (f != f) return jb_puts(b, "NaN");
    if (isinf(f)) return jb_puts(b, f < 0 ? "-Infinity" : "Infinity");
    jv_float_repr(f, num);
    return jb_puts(b, num);
}

static int json_newline(jbuf *b, const jjson_opts *o, int level) {
    if (jb_putc(b, '\n')) return -1;
    for (int i = 0; i < level; i++)
        if (jb_put(b, o->indent, o->indent_len)) return -1;
    return 0;
}

/* Stable merge sort of dict indices by key, reporting keys Python cannot order. */
static int sort_keys(const jdict *d, size_t *idx, size_t *tmp, size_t n, int *bad) {
    if (n < 2) return 0;
    size_t h = n / 2;
    sort_keys(d, idx, tmp, h, bad);
    sort_keys(d, idx + h, tmp, n - h, bad);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = jv_cmp(d->k[idx[j]], d->k[idx[i]]);
        if (c == 2) *bad = 1;
        if (c == -1)
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
    return 0;
}

int jv_json(jbuf *b, jv v, const jjson_opts *o, int depth, const char **why) {
    if (depth > JV_MAX_NEST) {
        *why = "maximum recursion depth exceeded while encoding a JSON object";
        return 1;
    }
    char num[48];
    switch (v.t) {
    case JV_NONE:
        return jb_puts(b, "null");
    case JV_BOOL:
        return jb_puts(b, v.u.i ? "true" : "false");
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        return jb_puts(b, num);
    case JV_FLOAT:
        return json_float(b, v.u.f);
    case JV_STR:
        return json_str(b, v.u.s->s, v.u.s->len, o->ensure_ascii);
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->kind != JL_LIST && l->kind != JL_TUPLE) break;
        if (l->len == 0) return jb_puts(b, "[]");
        if (jb_putc(b, '[')) return -1;
        if (o->has_indent && json_newline(b, o, depth + 1)) return -1;
        for (size_t i = 0; i < l->len; i++) {
            if (i) {
                if (jb_put(b, o->item_sep, o->item_sep_len)) return -1;
                if (o->has_indent && json_newline(b, o, depth + 1)) return -1;
            }
            int r = jv_json(b, l->v[i], o, depth + 1, why);
            if (r) return r;
        }
        if (o->has_indent && json_newline(b, o, depth)) return -1;
        return jb_putc(b, ']');
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->len == 0) return jb_puts(b, "{}");
        size_t *idx = malloc(d->len * sizeof(size_t) * 2);
        if (!idx) {
            b->failed = 1;
            return -1;
        }
        for (size_t i = 0; i < d->len; i++)
            idx[i] = i;
        if (o->sort_keys) {
            int bad = 0;
            sort_keys(d, idx, idx + d->len, d->len, &bad);
            if (bad) {
                free(idx);
                *why = "'<' not supported between the dict's key types (sort_keys)";
                return 1;
            }
        }
        int r = jb_putc(b, '{');
        if (!r && o->has_indent) r = json_newline(b, o, depth + 1);
        for (size_t n = 0; !r && n < d->len; n++) {
            jv k = d->k[idx[n]];
            if (n) {
                r = jb_put(b, o->item_sep, o->item_sep_len);
                if (!r && o->has_indent) r = json_newline(b, o, depth + 1);
                if (r) break;
            }
            switch (k.t) {
            case JV_STR:
                r = json_str(b, k.u.s->s, k.u.s->len, o->ensure_ascii);
                break;
            case JV_NONE:
                r = jb_puts(b, "\"null\"");
                break;
            case JV_BOOL:
                r = jb_puts(b, k.u.i ? "\"true\"" : "\"false\"");
                break;
            case JV_INT:
                snprintf(num, sizeof num, "\"%lld\"", (long long)k.u.i);
                r = jb_puts(b, num);
                break;
            case JV_FLOAT:
                r = jb_putc(b, '"');
                if (!r) r = json_float(b, k.u.f);
                if (!r) r = jb_putc(b, '"');
                break;
            default:
                *why = "keys must be str, int, float, bool or None";
                r = 1;
            }
            if (!r) r = jb_put(b, o->key_sep, o->key_sep_len);
            if (!r) r = jv_json(b, d->v[idx[n]], o, depth + 1, why);
        }
        free(idx);
        if (r) return r;
        if (o->has_indent && json_newline(b, o, depth)) return -1;
        return jb_putc(b, '}');
    }
    default:
        break;
    }
    switch (v.t) {
    case JV_UNDEF:
        *why = "Object of type Undefined is not JSON serializable";
        break;
    case JV_NS:
        *why = "Object of type Namespace is not JSON serializable";
        break;
    case JV_LOOP:
        *why = "Object of type LoopContext is not JSON serializable";
        break;
    case JV_LIST:
        switch (v.u.l->kind) {
        case JL_RANGE:
            *why = "Object of type range is not JSON serializable";
            break;
        case JL_ITEMS:
            *why = "Object of type dict_items is not JSON serializable";
            break;
        case JL_KEYS:
            *why = "Object of type dict_keys is not JSON serializable";
            break;
        case JL_VALUES:
            *why = "Object of type dict_values is not JSON serializable";
            break;
        default:
            *why = "Object of type generator is not JSON serializable";
            break;
        }
        break;
    default:
        *why = "Object of type function is not JSON serializable";
        break;
    }
    return 1;
}
