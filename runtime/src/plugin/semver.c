/* Semver 2.0.0 versions and npm-style ranges (see semver.h). Ranges are desugared at parse time
 * into plain comparators (">=", "<", ...), so matching is a loop over comparators plus the
 * pre-release rule. Error messages are the "expected X, found Y" tail: the caller knows the
 * file, position and field and prefixes them. */
#include "plugin/semver.h"

#include <stdio.h>
#include <string.h>

#include "util/error.h"

/* Numbers stay below 2^53 so that the +1 of range desugaring never overflows and versions
 * survive a round trip through JSON doubles. */
#define SEMVER_NUM_MAX 9007199254740991ull
#define WILDCARD UINT64_MAX

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}
static int is_ident_char(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
}

/* Parses a numeric part at s (no leading zeros); returns the chars used, 0 on error. */
static size_t parse_num(const char *s, size_t n, uint64_t *out) {
    size_t i = 0;
    uint64_t v = 0;
    while (i < n && is_digit(s[i])) {
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > SEMVER_NUM_MAX) return 0;
        i++;
    }
    if (i == 0 || (i > 1 && s[0] == '0')) return 0;
    *out = v;
    return i;
}

/* Checks dot-separated identifiers s[0..n); numeric ones must not have leading zeros when
 * strict_numeric (pre-release) is set. */
static int idents_valid(const char *s, size_t n, int strict_numeric) {
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            size_t len = i - start;
            if (len == 0) return 0;
            int numeric = 1;
            for (size_t k = start; k < i; k++)
                if (!is_digit(s[k])) numeric = 0;
            if (strict_numeric && numeric && len > 1 && s[start] == '0') return 0;
            start = i + 1;
        } else if (!is_ident_char(s[i])) {
            return 0;
        }
    }
    return 1;
}

/* Parses s[0..n) as a full version. */
static int parse_full(const char *s, size_t n, weft_semver *v) {
    memset(v, 0, sizeof(*v));
    uint64_t parts[3];
    size_t i = 0;
    for (int k = 0; k < 3; k++) {
        size_t used = parse_num(s + i, n - i, &parts[k]);
        if (!used) return 0;
        i += used;
        if (k < 2) {
            if (i >= n || s[i] != '.') return 0;
            i++;
        }
    }
    v->major = parts[0];
    v->minor = parts[1];
    v->patch = parts[2];
    if (i < n && s[i] == '-') {
        size_t start = ++i;
        while (i < n && s[i] != '+')
            i++;
        if (i - start >= sizeof(v->pre) || !idents_valid(s + start, i - start, 1)) return 0;
        memcpy(v->pre, s + start, i - start);
        v->pre[i - start] = '\0';
    }
    if (i < n && s[i] == '+') {
        size_t start = ++i;
        i = n;
        if (i - start >= sizeof(v->build) || !idents_valid(s + start, i - start, 0)) return 0;
        memcpy(v->build, s + start, i - start);
        v->build[i - start] = '\0';
    }
    return i == n;
}

static void quote(char *buf, size_t cap, const char *s, size_t n) {
    if (n > 48)
        snprintf(buf, cap, "\"%.48s...\"", s);
    else
        snprintf(buf, cap, "\"%.*s\"", (int)n, s);
}

weft_status weft_semver_parse(const char *text, weft_semver *out, weft_error *err) {
    if (!text || !out) return weft_error_set(err, WEFT_ERR_INVALID, "semver", "no version given");
    size_t n = strlen(text);
    if (!parse_full(text, n, out)) {
        char q[64];
        quote(q, sizeof(q), text, n);
        return weft_error_set(err, WEFT_ERR_FORMAT, "semver",
                              "expected a semver 2.0 version MAJOR.MINOR.PATCH[-PRE][+BUILD] "
                              "(numbers without leading zeros), found %s",
                              q);
    }
    return WEFT_OK;
}

/* Compares two dot-separated pre-release strings by the spec's rules. */
static int compare_pre(const char *a, const char *b) {
    if (!a[0] && !b[0]) return 0;
    if (!a[0]) return 1; /* a release outranks its pre-releases */
    if (!b[0]) return -1;
    while (1) {
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");
        int na = 1, nb = 1;
        for (size_t i = 0; i < la; i++)
            if (!is_digit(a[i])) na = 0;
        for (size_t i = 0; i < lb; i++)
            if (!is_digit(b[i])) nb = 0;
        int c;
        if (na && nb) {
            /* no leading zeros, so the longer number is larger */
            c = la != lb ? (la < lb ? -1 : 1) : memcmp(a, b, la);
        } else if (na != nb) {
            c = na ? -1 : 1; /* numeric identifiers sort before alphanumeric ones */
        } else {
            size_t m = la < lb ? la : lb;
            c = memcmp(a, b, m);
            if (!c && la != lb) c = la < lb ? -1 : 1;
        }
        if (c) return c < 0 ? -1 : 1;
        a += la;
        b += lb;
        if (!*a && !*b) return 0;
        if (!*a) return -1; /* fewer identifiers, all equal: lower precedence */
        if (!*b) return 1;
        a++;
        b++;
    }
}

int weft_semver_compare(const weft_semver *a, const weft_semver *b) {
    if (a->major != b->major) return a->major < b->major ? -1 : 1;
    if (a->minor != b->minor) return a->minor < b->minor ? -1 : 1;
    if (a->patch != b->patch) return a->patch < b->patch ? -1 : 1;
    return compare_pre(a->pre, b->pre);
}

size_t weft_semver_format(const weft_semver *v, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%llu.%llu.%llu%s%s%s%s", (unsigned long long)v->major,
                     (unsigned long long)v->minor, (unsigned long long)v->patch,
                     v->pre[0] ? "-" : "", v->pre, v->build[0] ? "+" : "", v->build);
    return n < 0 ? 0 : (size_t)n;
}

/* ---- ranges ---------------------------------------------------------------------------- */
typedef struct partial {
    uint64_t p[3]; /* WILDCARD where x, * or missing */
    int n_given;   /* numeric parts before the first wildcard */
    char pre[WEFT_SEMVER_PART_MAX];
} partial;

/* Parses a partial version ("1", "1.2", "1.x", "1.2.3-rc.1", "*"). */
static int parse_partial(const char *s, size_t n, partial *out) {
    memset(out, 0, sizeof(*out));
    out->p[0] = out->p[1] = out->p[2] = WILDCARD;
    if (n == 1 && (s[0] == '*' || s[0] == 'x' || s[0] == 'X')) return 1;
    /* a full version with pre-release or build goes through the strict parser */
    if (memchr(s, '-', n) || memchr(s, '+', n)) {
        weft_semver v;
        if (!parse_full(s, n, &v)) return 0;
        out->p[0] = v.major;
        out->p[1] = v.minor;
        out->p[2] = v.patch;
        out->n_given = 3;
        memcpy(out->pre, v.pre, sizeof(out->pre));
        return 1;
    }
    size_t i = 0;
    int wild = 0;
    for (int k = 0; k < 3 && i < n; k++) {
        if (s[i] == 'x' || s[i] == 'X' || s[i] == '*') {
            wild = 1;
            i++;
        } else {
            if (wild) return 0; /* "1.x.3" */
            size_t used = parse_num(s + i, n - i, &out->p[k]);
            if (!used) return 0;
            i += used;
            out->n_given = k + 1;
        }
        if (i < n) {
            if (s[i] != '.' || k == 2) return 0;
            i++;
            if (i == n) return 0; /* trailing dot */
        }
    }
    return i == n;
}

static void set_v(weft_semver *v, uint64_t a, uint64_t b, uint64_t c) {
    memset(v, 0, sizeof(*v));
    v->major = a;
    v->minor = b;
    v->patch = c;
}

static int add_cmp(weft_semver_range *r, uint8_t op, uint8_t set, const weft_semver *v) {
    if (r->n >= WEFT_RANGE_MAX_COMPARATORS) return 0;
    weft_semver_comparator *c = &r->c[r->n++];
    memset(c, 0, sizeof(*c));
    c->op = op;
    c->set = set;
    c->v = *v;
    return 1;
}

/* The version just above every version matching the given parts ("1.2" -> 1.3.0). */
static void bump(const partial *p, weft_semver *v) {
    if (p->n_given <= 1)
        set_v(v, p->p[0] + 1, 0, 0);
    else
        set_v(v, p->p[0], p->p[1] + 1, 0);
}

/* The lowest version matching the parts, pre-release kept for full versions. */
static void floor_of(const partial *p, weft_semver *v) {
    set_v(v, p->n_given >= 1 ? p->p[0] : 0, p->n_given >= 2 ? p->p[1] : 0,
          p->n_given >= 3 ? p->p[2] : 0);
    memcpy(v->pre, p->pre, sizeof(v->pre));
}

/* Desugars one comparator (operator op, version text s[0..n)) into r. Returns 0 with *why set
 * on error. */
static int add_token(weft_semver_range *r, uint8_t set, const char *op, const char *s, size_t n,
                     const char **why) {
    partial p;
    if (!parse_partial(s, n, &p)) {
        *why = "a version like 1.2.3, 1.2, 1.x or *";
        return 0;
    }
    weft_semver lo, hi;
    int ok = 1;
    if (!strcmp(op, "") || !strcmp(op, "=")) {
        if (p.n_given == 0) return 1; /* "*" */
        floor_of(&p, &lo);
        if (p.n_given == 3) {
            ok = add_cmp(r, WEFT_SEMVER_EQ, set, &lo);
        } else {
            bump(&p, &hi);
            ok = add_cmp(r, WEFT_SEMVER_GE, set, &lo) && add_cmp(r, WEFT_SEMVER_LT, set, &hi);
        }
    } else if (!strcmp(op, "^")) {
        if (p.n_given == 0) return 1;
        floor_of(&p, &lo);
        /* the upper bound bumps the first non-zero given part ("^0.2.3" -> <0.3.0) */
        if (p.p[0] > 0 || p.n_given == 1)
            set_v(&hi, p.p[0] + 1, 0, 0);
        else if (p.n_given == 2 || p.p[1] > 0)
            set_v(&hi, 0, p.p[1] + 1, 0);
        else
            set_v(&hi, 0, 0, p.p[2] + 1);
        ok = add_cmp(r, WEFT_SEMVER_GE, set, &lo) && add_cmp(r, WEFT_SEMVER_LT, set, &hi);
    } else if (!strcmp(op, "~")) {
        if (p.n_given == 0) return 1;
        floor_of(&p, &lo);
        if (p.n_given == 1)
            set_v(&hi, p.p[0] + 1, 0, 0);
        else
            set_v(&hi, p.p[0], p.p[1] + 1, 0);
        ok = add_cmp(r, WEFT_SEMVER_GE, set, &lo) && add_cmp(r, WEFT_SEMVER_LT, set, &hi);
    } else {
        if (p.n_given == 0) {
            *why = "a version after the operator (\"*\" cannot be compared)";
            return 0;
        }
        floor_of(&p, &lo);
        if (!strcmp(op, ">="))
            ok = add_cmp(r, WEFT_SEMVER_GE, set, &lo);
        else if (!strcmp(op, "<"))
            ok = add_cmp(r, WEFT_SEMVER_LT, set, &lo);
        else if (!strcmp(op, ">")) {
            if (p.n_given == 3)
                ok = add_cmp(r, WEFT_SEMVER_GT, set, &lo);
            else {
                bump(&p, &hi); /* ">1.2" = ">=1.3.0" */
                ok = add_cmp(r, WEFT_SEMVER_GE, set, &hi);
            }
        } else { /* "<=" */
            if (p.n_given == 3)
                ok = add_cmp(r, WEFT_SEMVER_LE, set, &lo);
            else {
                bump(&p, &hi); /* "<=1.2" = "<1.3.0" */
                ok = add_cmp(r, WEFT_SEMVER_LT, set, &hi);
            }
        }
    }
    if (!ok) *why = "at most 16 comparators in a range";
    return ok;
}

void weft_semver_range_any(weft_semver_range *out) {
    memset(out, 0, sizeof(*out));
    memcpy(out->text, "*", 2);
    out->n_sets = 1;
}

static int is_space(char c) {
    return c == ' ' || c == '\t';
}

weft_status weft_semver_range_parse(const char *text, weft_semver_range *out, weft_error *err) {
    if (!text || !out)
        return weft_error_set(err, WEFT_ERR_INVALID, "semver", "no version range given");
    memset(out, 0, sizeof(*out));
    const char *s = text;
    size_t n = strlen(text);
    while (n && is_space(*s))
        s++, n--;
    while (n && is_space(s[n - 1]))
        n--;
    char q[64];
    quote(q, sizeof(q), text, strlen(text));
    if (n == 0)
        return weft_error_set(err, WEFT_ERR_FORMAT, "semver",
                              "expected a version range such as \">=1.2.0 <2.0.0\" or \"^1.2\", "
                              "found an empty string");
    if (n >= sizeof(out->text))
        return weft_error_set(err, WEFT_ERR_FORMAT, "semver",
                              "expected a version range of at most %zu characters, found %s",
                              sizeof(out->text) - 1, q);
    memcpy(out->text, s, n);
    out->text[n] = '\0';

    uint8_t set = 0;
    size_t i = 0;
    int set_has_token = 0;
    while (1) {
        while (i < n && is_space(s[i]))
            i++;
        if (i == n || (i + 1 < n && s[i] == '|' && s[i + 1] == '|')) {
            if (!set_has_token)
                return weft_error_set(err, WEFT_ERR_FORMAT, "semver",
                                      "expected a comparator on each side of \"||\", found %s", q);
            if (i == n) break;
            if (set + 1 >= WEFT_RANGE_MAX_COMPARATORS)
                return weft_error_set(err, WEFT_ERR_FORMAT, "semver",
                                      "expected at most %d alternatives, found %s",
                                      WEFT_RANGE_MAX_COMPARATORS, q);
            set++;
            set_has_token = 0;
            i += 2;
            continue;
        }
        /* a token: an operator, optional spaces, then the version */
        size_t start = i;
        while (i < n && strchr("<>=^~", s[i]))
            i++;
        size_t op_end = i;
        while (i < n && is_space(s[i]))
            i++;
        size_t vstart = i;
        while (i < n && !is_space(s[i]) && s[i] != '|')
            i++;
        char op[3] = "";
        size_t oplen = op_end - start;
        if (oplen <= 2) {
            memcpy(op, s + start, oplen);
            op[oplen] = '\0';
        }
        static const char *const ops[] = {"", "=", "<", "<=", ">", ">=", "^", "~"};
        int op_ok = 0;
        for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
            if (oplen <= 2 && !strcmp(op, ops[k])) op_ok = 1;
        if (!op_ok || i == vstart) {
            return weft_error_set(err, WEFT_ERR_FORMAT, "semver",
                                  "expected comparators like \">=1.2.0\", \"^1.2\", \"~1.2.3\", "
                                  "\"1.x\" or \"*\", found %s",
                                  q);
        }
        const char *why = NULL;
        if (!add_token(out, set, op, s + vstart, i - vstart, &why)) {
            if (start == 0 && i == n)
                return weft_error_set(err, WEFT_ERR_FORMAT, "semver", "expected %s, found %s", why,
                                      q);
            return weft_error_set(err, WEFT_ERR_FORMAT, "semver",
                                  "expected %s, found \"%.*s%.*s\" in %s", why, (int)oplen,
                                  s + start, (int)(i - vstart), s + vstart, q);
        }
        set_has_token = 1;
    }
    out->n_sets = (uint32_t)set + 1;
    return WEFT_OK;
}

static int cmp_holds(const weft_semver_comparator *c, const weft_semver *v) {
    int d = weft_semver_compare(v, &c->v);
    switch (c->op) {
    case WEFT_SEMVER_EQ:
        return d == 0;
    case WEFT_SEMVER_LT:
        return d < 0;
    case WEFT_SEMVER_LE:
        return d <= 0;
    case WEFT_SEMVER_GT:
        return d > 0;
    case WEFT_SEMVER_GE:
        return d >= 0;
    default:
        return 0;
    }
}

int weft_semver_satisfies(const weft_semver_range *r, const weft_semver *v) {
    if (!r || !v) return 0;
    uint32_t sets = r->n_sets ? r->n_sets : 1;
    for (uint32_t s = 0; s < sets; s++) {
        int all = 1, pre_allowed = v->pre[0] == '\0';
        for (uint32_t i = 0; i < r->n && i < WEFT_RANGE_MAX_COMPARATORS; i++) {
            const weft_semver_comparator *c = &r->c[i];
            if (c->set != s) continue;
            if (!cmp_holds(c, v)) all = 0;
            if (c->v.pre[0] && c->v.major == v->major && c->v.minor == v->minor &&
                c->v.patch == v->patch)
                pre_allowed = 1;
        }
        if (all && pre_allowed) return 1;
    }
    return 0;
}
