/* Tokenizer for chat templates. It reproduces Jinja2's lexer as transformers configures it
 * (trim_blocks, lstrip_blocks, keep_trailing_newline off): the whitespace control decisions
 * are made here, so the parser only ever sees final template data. Offsets index the source
 * after newline normalization, which is what error positions are computed from. */
#include "text/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void jsrc_where(const jsource *src, size_t pos, char *out, size_t cap) {
    size_t line = 1, col = 1;
    if (pos > src->len) pos = src->len;
    for (size_t i = 0; i < pos; i++) {
        unsigned char c = (unsigned char)src->text[i];
        if (c == '\n') {
            line++;
            col = 1;
        } else if ((c & 0xC0) != 0x80) {
            col++;
        }
    }
    snprintf(out, cap, "%s:%zu:%zu", src->name ? src->name : "template", line, col);
}

typedef struct lx {
    const char *s;
    size_t len;
    jarena *a;
    const jsource *src;
    weft_error *err;
    jtok *t;
    size_t n, cap;
} lx;

static int lx_fail(lx *l, size_t pos, const char *fmt, const char *arg) {
    char where[320], msg[256];
    jsrc_where(l->src, pos, where, sizeof where);
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    weft_error_set(l->err, WEFT_ERR_FORMAT, "chat template", "%s: %s", where, msg);
    return -1;
}

static jtok *lx_push(lx *l, int type, size_t pos, size_t end) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        jtok *t = realloc(l->t, cap * sizeof(jtok));
        if (!t) {
            weft_error_set(l->err, WEFT_ERR_NOMEM, "chat template", "out of memory tokenizing");
            return NULL;
        }
        l->t = t;
        l->cap = cap;
    }
    jtok *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->pos = (uint32_t)pos;
    t->end = (uint32_t)end;
    return t;
}

static int lx_nomem(lx *l) {
    weft_error_set(l->err, WEFT_ERR_NOMEM, "chat template", "out of memory tokenizing");
    return -1;
}

/* Byte length of the Python-whitespace character at i, 0 when it is not whitespace. */
static size_t ws_at(const char *s, size_t len, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return ju_isspace(c) ? 1 : 0;
    size_t j = i;
    uint32_t cp = ju_next(s, len, &j);
    return ju_isspace(cp) ? j - i : 0;
}

static size_t skip_ws(const char *s, size_t len, size_t i) {
    size_t w;
    while (i < len && (w = ws_at(s, len, i)) > 0)
        i += w;
    return i;
}

/* End of text after Python's str.rstrip() on [start, end). */
static size_t rstrip_end(const char *s, size_t start, size_t end) {
    while (end > start) {
        size_t k = end - 1;
        while (k > start && ((unsigned char)s[k] & 0xC0) == 0x80)
            k--;
        if (ws_at(s, end, k) != end - k) break;
        end = k;
    }
    return end;
}

static int emit_data(lx *l, size_t start, size_t end) {
    if (end <= start) return 0;
    jtok *t = lx_push(l, T_DATA, start, end);
    if (!t) return -1;
    t->str = js_new(l->a, l->s + start, end - start);
    return t->str ? 0 : lx_nomem(l);
}

/* Whitespace control for the data before a tag: '-' strips everything, otherwise
 * lstrip_blocks strips a line's indentation before a block or comment tag. */
static size_t strip_before(lx *l, size_t start, size_t end, char sign, int is_var,
                           int line_starting) {
    if (sign == '-') return rstrip_end(l->s, start, end);
    if (sign == '+' || is_var) return end;
    size_t lpos = end;
    while (lpos > start && l->s[lpos - 1] != '\n')
        lpos--;
    if (lpos > start || line_starting) {
        if (lpos < end && skip_ws(l->s, end, lpos) == end) return lpos;
    }
    return end;
}

static int is_ident_start(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}
static int is_ident(unsigned char c) {
    return is_ident_start(c) || (c >= '0' && c <= '9');
}
static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* (\d+_)*\d+ ; returns the end or start when nothing matched */
static size_t digits_us(const char *s, size_t len, size_t i) {
    if (i >= len || !is_digit(s[i])) return i;
    size_t j = i;
    for (;;) {
        while (j < len && is_digit(s[j]))
            j++;
        if (j + 1 < len && s[j] == '_' && is_digit(s[j + 1])) {
            j++;
            continue;
        }
        return j;
    }
}

static size_t match_float(const char *s, size_t len, size_t i) {
    if (i > 0 && s[i - 1] == '.') return 0;
    size_t j = digits_us(s, len, i);
    if (j == i) return 0;
    /* fractional part */
    size_t k = j;
    if (k < len && s[k] == '.') {
        size_t m = digits_us(s, len, k + 1);
        if (m > k + 1) k = m;
    }
    /* exponent */
    if (k < len && (s[k] == 'e' || s[k] == 'E')) {
        size_t m = k + 1;
        if (m < len && (s[m] == '+' || s[m] == '-')) m++;
        size_t e = digits_us(s, len, m);
        if (e > m) return e - i;
    }
    return k > j ? k - i : 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Integer literal: decimal, 0b, 0o, 0x with optional single underscores. */
static size_t match_int(const char *s, size_t len, size_t i, int64_t *out, int *overflow) {
    int base = 10;
    size_t j = i;
    *overflow = 0;
    if (s[i] == '0' && i + 1 < len) {
        char p = s[i + 1];
        if (p == 'b' || p == 'B')
            base = 2;
        else if (p == 'o' || p == 'O')
            base = 8;
        else if (p == 'x' || p == 'X')
            base = 16;
    }
    uint64_t v = 0;
    if (base != 10) {
        j = i + 2;
        size_t nd = 0;
        for (;;) {
            size_t k = j;
            if (k < len && s[k] == '_') k++;
            int d = k < len ? hexval(s[k]) : -1;
            if (d < 0 || d >= base) break;
            if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) *overflow = 1;
            v = v * (uint64_t)base + (uint64_t)d;
            j = k + 1;
            nd++;
        }
        if (nd == 0) { /* no digits after the prefix: just the "0" */
            j = i + 1;
            v = 0;
        }
    } else if (s[i] == '0') {
        j = i + 1;
        while (j < len && (s[j] == '0' || (s[j] == '_' && j + 1 < len && s[j + 1] == '0')))
            j++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        for (;;) {
            size_t k = j;
            if (k > i && k < len && s[k] == '_') k++;
            if (k >= len || !is_digit(s[k])) break;
            uint64_t d = (uint64_t)(s[k] - '0');
            if (v > (UINT64_MAX - d) / 10) *overflow = 1;
            v = v * 10 + d;
            j = k + 1;
        }
    } else {
        return 0;
    }
    if (v > (uint64_t)INT64_MAX) *overflow = 1;
    *out = (int64_t)v;
    return j - i;
}

/* Python's "unicode-escape" decoding of a literal's body, after Jinja2 first turns every
 * non-ASCII character into its backslash escape (so "\é" decodes to a backslash, then "xe9"). */
static int unescape(lx *l, size_t start, size_t end, jstr **out) {
    jbuf b = {0};
    const char *s = l->s;
    size_t i = start;
    char enc[4];
    while (i < end) {
        if (s[i] != '\\') {
            size_t j = i;
            while (j < end && s[j] != '\\')
                j++;
            jb_put(&b, s + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 >= end) { /* cannot happen: the closing quote would be escaped */
            jb_putc(&b, '\\');
            i++;
            continue;
        }
        unsigned char c = (unsigned char)s[i + 1];
        i += 2;
        uint32_t cp = 0;
        int n = 0;
        switch (c) {
        case '\n':
            continue;
        case '\\':
            jb_putc(&b, '\\');
            continue;
        case '\'':
            jb_putc(&b, '\'');
            continue;
        case '"':
            jb_putc(&b, '"');
            continue;
        case 'a':
            jb_putc(&b, '\a');
            continue;
        case 'b':
            jb_putc(&b, '\b');
            continue;
        case 'f':
            jb_putc(&b, '\f');
            continue;
        case 'n':
            jb_putc(&b, '\n');
            continue;
        case 'r':
            jb_putc(&b, '\r');
            continue;
        case 't':
            jb_putc(&b, '\t');
            continue;
        case 'v':
            jb_putc(&b, '\v');
            continue;
        case 'x':
            n = 2;
            break;
        case 'u':
            n = 4;
            break;
        case 'U':
            n = 8;
            break;
        case 'N':
            jb_free(&b);
            return lx_fail(l, i - 2, "%s", "\\N{...} escapes are not supported");
        default:
            if (c >= '0' && c <= '7') {
                cp = c - '0';
                for (int k = 0; k < 2 && i < end && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                jb_put(&b, enc, ju_encode(cp, enc));
                continue;
            }
            if (c >= 0x80) {
                /* the backslash escapes the backslash Jinja2 inserted before this char */
                size_t j = i - 1;
                uint32_t u = ju_next(s, end, &j);
                char tmp[16];
                if (u < 0x100)
                    snprintf(tmp, sizeof tmp, "\\x%02x", u);
                else if (u < 0x10000)
                    snprintf(tmp, sizeof tmp, "\\u%04x", u);
                else
                    snprintf(tmp, sizeof tmp, "\\U%08x", u);
                jb_puts(&b, tmp); /* "\\" decoded to one backslash, the rest is literal */
                i = j;
                continue;
            }
            jb_putc(&b, '\\');
            jb_putc(&b, (char)c);
            continue;
        }
        for (int k = 0; k < n; k++) {
            int h = i < end ? hexval(s[i]) : -1;
            if (h < 0) {
                jb_free(&b);
                return lx_fail(l, i, "%s", "truncated \\xXX / \\uXXXX / \\UXXXXXXXX escape");
            }
            cp = cp * 16 + (uint32_t)h;
            i++;
        }
        if (cp > 0x10FFFF) {
            jb_free(&b);
            return lx_fail(l, i, "%s", "illegal Unicode character in escape");
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            jb_free(&b);
            return lx_fail(l, i, "%s",
                           "surrogate code points in string literals are not supported");
        }
        jb_put(&b, enc, ju_encode(cp, enc));
    }
    if (b.failed) {
        jb_free(&b);
        return lx_nomem(l);
    }
    *out = jb_to_str(l->a, &b);
    jb_free(&b);
    return *out ? 0 : lx_nomem(l);
}

static const struct {
    const char *text;
    uint8_t op;
} OPS[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW},   {"==", OP_EQ},      {"!=", OP_NE},      {">=", OP_GE},
    {"<=", OP_LE},       {"+", OP_ADD},    {"-", OP_SUB},      {"/", OP_DIV},      {"*", OP_MUL},
    {"%", OP_MOD},       {"~", OP_TILDE},  {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN},
    {")", OP_RPAREN},    {"{", OP_LBRACE}, {"}", OP_RBRACE},   {">", OP_GT},       {"<", OP_LT},
    {"=", OP_ASSIGN},    {".", OP_DOT},    {":", OP_COLON},    {"|", OP_PIPE},     {",", OP_COMMA},
    {";", OP_SEMICOLON},
};

enum { LX_MAX_NEST = 256 };

/* Lexes the inside of {{ }} or {% %} starting at *pos; on return *pos is past the end tag and
 * *nl tells whether what was consumed ended with a newline. */
static int lex_tag(lx *l, size_t *pos, int is_block, size_t tag_start, int *nl) {
    const char *s = l->s;
    size_t len = l->len, i = *pos;
    char stack[LX_MAX_NEST];
    size_t depth = 0;
    for (;;) {
        if (i >= len)
            return lx_fail(l, tag_start, "%s",
                           is_block ? "unexpected end of template: this tag has no '%}'"
                                    : "unexpected end of template: this tag has no '}}'");
        if (depth == 0) {
            size_t e = 0;
            int strip = 0, trim = 0;
            if (is_block) {
                if ((s[i] == '+' || s[i] == '-') && i + 2 < len && s[i + 1] == '%' &&
                    s[i + 2] == '}') {
                    e = 3;
                    strip = s[i] == '-';
                } else if (s[i] == '%' && i + 1 < len && s[i + 1] == '}') {
                    e = 2;
                    trim = 1;
                }
            } else {
                if (s[i] == '-' && i + 2 < len && s[i + 1] == '}' && s[i + 2] == '}') {
                    e = 3;
                    strip = 1;
                } else if (s[i] == '}' && i + 1 < len && s[i + 1] == '}') {
                    e = 2;
                }
            }
            if (e) {
                if (!lx_push(l, is_block ? T_BLOCK_END : T_VAR_END, i, i + e)) return -1;
                i += e;
                if (strip)
                    i = skip_ws(s, len, i);
                else if (trim && i < len && s[i] == '\n')
                    i++;
                *nl = s[i - 1] == '\n';
                *pos = i;
                return 0;
            }
        }
        size_t w = ws_at(s, len, i);
        if (w) {
            i = skip_ws(s, len, i);
            continue;
        }
        unsigned char c = (unsigned char)s[i];
        size_t m;
        if (is_digit((char)c) && (m = match_float(s, len, i)) > 0) {
            /* the literal without its underscores; a long one (Python reads any length) is
             * copied whole rather than cut, which would change its value */
            char small[128], *num = m < sizeof(small) ? small : malloc(m + 1);
            if (!num) return lx_fail(l, i, "%s", "out of memory");
            size_t k = 0;
            for (size_t j = i; j < i + m; j++)
                if (s[j] != '_') num[k++] = s[j];
            num[k] = '\0';
            jtok *t = lx_push(l, T_FLOAT, i, i + m);
            if (t) t->f = strtod(num, NULL);
            if (num != small) free(num);
            if (!t) return -1;
            i += m;
            continue;
        }
        if (is_digit((char)c)) {
            int64_t v = 0; /* match_int sets it: c is a digit, so it matches at least one */
            int ovf;
            m = match_int(s, len, i, &v, &ovf);
            if (ovf) return lx_fail(l, i, "%s", "integer literal does not fit in 64 bits");
            jtok *t = lx_push(l, T_INT, i, i + m);
            if (!t) return -1;
            t->i = v;
            i += m;
            continue;
        }
        if (is_ident_start(c)) {
            size_t j = i;
            while (j < len) {
                unsigned char d = (unsigned char)s[j];
                if (d < 0x80) {
                    if (!is_ident(d)) break;
                    j++;
                } else {
                    if (ws_at(s, len, j)) break;
                    ju_next(s, len, &j);
                }
            }
            jtok *t = lx_push(l, T_NAME, i, j);
            if (!t) return -1;
            t->str = js_new(l->a, s + i, j - i);
            if (!t->str) return lx_nomem(l);
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < len && s[j] != (char)c)
                j += s[j] == '\\' ? 2 : 1;
            if (j >= len) {
                char q[2] = {(char)c, 0};
                return lx_fail(l, i, "unexpected char '%s' (unterminated string)", q);
            }
            jstr *v;
            if (unescape(l, i + 1, j, &v)) return -1;
            jtok *t = lx_push(l, T_STRING, i, j + 1);
            if (!t) return -1;
            t->str = v;
            i = j + 1;
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof(OPS) / sizeof(OPS[0]); k++) {
            size_t n = strlen(OPS[k].text);
            if (i + n <= len && memcmp(s + i, OPS[k].text, n) == 0) break;
        }
        if (k == sizeof(OPS) / sizeof(OPS[0])) {
            char ch[8] = {0};
            size_t j = i;
            ju_next(s, len, &j);
            memcpy(ch, s + i, j - i < 7 ? j - i : 7);
            return lx_fail(l, i, "unexpected char '%s'", ch);
        }
        size_t n = strlen(OPS[k].text);
        uint8_t op = OPS[k].op;
        if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
            if (depth == LX_MAX_NEST) return lx_fail(l, i, "%s", "brackets nested too deeply");
            stack[depth++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
        } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
            char ch[2] = {(char)c, 0};
            if (depth == 0) return lx_fail(l, i, "unexpected '%s'", ch);
            if (stack[depth - 1] != (char)c) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", c, stack[depth - 1]);
                return lx_fail(l, i, "%s", msg);
            }
            depth--;
        }
        jtok *t = lx_push(l, T_OP, i, i + n);
        if (!t) return -1;
        t->op = op;
        i += n;
    }
}

int jlex(jarena *a, const jsource *src, jtok **toks, size_t *ntoks, weft_error *err) {
    lx l = {src->text, src->len, a, src, err, NULL, 0, 0};
    const char *s = l.s;
    size_t len = l.len, pos = 0;
    int line_starting = 1;
    while (pos < len) {
        size_t p = pos;
        while (p + 1 < len &&
               !(s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')))
            p++;
        if (p + 1 >= len) {
            if (emit_data(&l, pos, len)) goto fail;
            break;
        }
        char kind = s[p + 1];
        char sign = p + 2 < len && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
        size_t body = p + 2 + (sign ? 1 : 0);

        /* {% raw %} ... {% endraw %} */
        int raw = 0;
        size_t raw_body = 0;
        if (kind == '%') {
            size_t q = skip_ws(s, len, body);
            if (q + 3 <= len && memcmp(s + q, "raw", 3) == 0) {
                size_t r = skip_ws(s, len, q + 3);
                if (r + 3 <= len && s[r] == '-' && s[r + 1] == '%' && s[r + 2] == '}') {
                    raw = 1;
                    raw_body = skip_ws(s, len, r + 3);
                } else if (r + 2 <= len && s[r] == '%' && s[r + 1] == '}') {
                    raw = 1;
                    raw_body = r + 2;
                }
            }
        }
        size_t text_end = strip_before(&l, pos, p, sign, kind == '{', line_starting);
        if (emit_data(&l, pos, text_end)) goto fail;

        if (raw) {
            /* find {%[-+]? \s* endraw \s* (+%}|-%}\s*|%}\n?) */
            size_t q = raw_body, end_tag = 0, after = 0;
            char esign = 0;
            for (; q + 1 < len; q++) {
                if (s[q] != '{' || s[q + 1] != '%') continue;
                size_t r = q + 2;
                char sg = 0;
                if (r < len && (s[r] == '-' || s[r] == '+')) sg = s[r++];
                r = skip_ws(s, len, r);
                if (r + 6 > len || memcmp(s + r, "endraw", 6) != 0) continue;
                r = skip_ws(s, len, r + 6);
                if (r + 3 <= len && s[r] == '+' && s[r + 1] == '%' && s[r + 2] == '}') {
                    after = r + 3;
                } else if (r + 3 <= len && s[r] == '-' && s[r + 1] == '%' && s[r + 2] == '}') {
                    after = skip_ws(s, len, r + 3);
                } else if (r + 2 <= len && s[r] == '%' && s[r + 1] == '}') {
                    after = r + 2;
                    if (after < len && s[after] == '\n') after++;
                } else {
                    continue;
                }
                end_tag = q;
                esign = sg;
                break;
            }
            if (!end_tag) {
                lx_fail(&l, p, "%s", "missing end of raw directive");
                goto fail;
            }
            int ls = raw_body > 0 && s[raw_body - 1] == '\n';
            size_t te = strip_before(&l, raw_body, end_tag, esign, 0, ls);
            if (emit_data(&l, raw_body, te)) goto fail;
            pos = after;
            line_starting = s[after - 1] == '\n';
            continue;
        }
        if (kind == '#') {
            size_t q = body, after = 0;
            for (; q + 1 < len; q++) {
                if (s[q] != '#' || s[q + 1] != '}') continue;
                if (q > body && s[q - 1] == '-')
                    after = skip_ws(s, len, q + 2);
                else if (q > body && s[q - 1] == '+')
                    after = q + 2;
                else {
                    after = q + 2;
                    if (after < len && s[after] == '\n') after++;
                }
                break;
            }
            if (!after) {
                lx_fail(&l, p, "%s", "missing end of comment tag");
                goto fail;
            }
            pos = after;
            line_starting = s[after - 1] == '\n';
            continue;
        }
        if (!lx_push(&l, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, p, body)) goto fail;
        pos = body;
        if (lex_tag(&l, &pos, kind == '%', p, &line_starting)) goto fail;
    }
    if (!lx_push(&l, T_EOF, len, len)) goto fail;
    *toks = l.t;
    *ntoks = l.n;
    return 0;
fail:
    free(l.t);
    return -1;
}
