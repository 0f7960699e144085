/* Chat templates: the public face of the Jinja2-subset interpreter (jinja_*.c). Loads a
 * model's template and special tokens from tokenizer_config.json (or chat_template.jinja),
 * turns JSON messages into template values and renders them the way transformers'
 * apply_chat_template does, under a C numeric locale so float text never depends on the host
 * application's setlocale. */
#include "text/chat.h"

#include <jansson.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"
#include "util/error.h"
#include "util/file.h"

enum {
    CHAT_MAX_SOURCE = 4 * 1024 * 1024,
    CHAT_PARSE_DEPTH = 200,
    CHAT_JSON_DEPTH = 512,
};

#define CHAT_DEFAULT_OUTPUT ((size_t)16 * 1024 * 1024)
#define CHAT_DEFAULT_MEMORY ((size_t)256 * 1024 * 1024)
#define CHAT_DEFAULT_ITERATIONS ((uint64_t)1000000)

struct weft_chat_template {
    jarena arena; /* syntax tree and its strings */
    jsource src;
    jnode *root;
    json_t *defaults; /* special tokens from tokenizer_config.json, or NULL */
    jlimits lim;
    char name[256];
};

static const char SRC[] = "chat template";

/* ---- locale ------------------------------------------------------------------------------ */
typedef struct cloc {
    locale_t c, saved;
} cloc;

static void cloc_enter(cloc *l) {
    l->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (l->c) l->saved = uselocale(l->c);
}

static void cloc_leave(cloc *l) {
    if (l->c) {
        uselocale(l->saved);
        freelocale(l->c);
    }
}

/* ---- parsing ----------------------------------------------------------------------------- */
static void raw_where(const char *s, size_t pos, size_t *line, size_t *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (s[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

weft_status weft_chat_template_parse(const char *source, size_t len, const char *name,
                                     weft_chat_template **out, weft_error *err) {
    if (!out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "chat_template_parse: out is NULL");
    *out = NULL;
    if (!source && len)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "chat_template_parse: source is NULL");
    if (!name) name = "template";
    if (len > CHAT_MAX_SOURCE)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "%s: template is %zu bytes, more than the %d allowed", name, len,
                              CHAT_MAX_SOURCE);
    size_t bad;
    if (!ju_valid(source ? source : "", len, &bad)) {
        size_t line, col;
        raw_where(source, bad, &line, &col);
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s:%zu:%zu: template is not valid UTF-8 (byte 0x%02x)", name, line,
                              col, (unsigned char)source[bad]);
    }
    weft_chat_template *t = calloc(1, sizeof *t);
    if (!t) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    snprintf(t->name, sizeof t->name, "%s", name);
    t->src.name = t->name;
    t->lim.max_output = CHAT_DEFAULT_OUTPUT;
    t->lim.max_memory = CHAT_DEFAULT_MEMORY;
    t->lim.max_iterations = CHAT_DEFAULT_ITERATIONS;
    t->lim.max_depth = CHAT_PARSE_DEPTH;

    /* Jinja2 turns \r\n and \r into \n and drops one trailing newline (keep_trailing_newline
     * is off); offsets in errors refer to this normalized text, whose lines are the same. */
    t->src.text = malloc(len + 1);
    if (!t->src.text) {
        free(t);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            t->src.text[k++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n') i++;
        } else {
            t->src.text[k++] = source[i];
        }
    }
    if (k > 0 && t->src.text[k - 1] == '\n') k--;
    t->src.text[k] = '\0';
    t->src.len = k;

    cloc l;
    cloc_enter(&l);
    jtok *toks = NULL;
    size_t ntoks = 0;
    weft_status st = WEFT_OK;
    if (jlex(&t->arena, &t->src, &toks, &ntoks, err) ||
        jparse(&t->arena, &t->src, toks, ntoks, CHAT_PARSE_DEPTH, &t->root, err))
        st = err && err->code ? err->code : WEFT_ERR_FORMAT;
    cloc_leave(&l);
    free(toks);
    if (st) {
        weft_chat_template_free(t);
        return st;
    }
    *out = t;
    return WEFT_OK;
}

void weft_chat_template_free(weft_chat_template *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t->src.text);
    if (t->defaults) json_decref(t->defaults);
    free(t);
}

void weft_chat_template_set_limits(weft_chat_template *t, const weft_chat_limits *limits) {
    if (!t || !limits) return;
    t->lim.max_output = limits->max_output_bytes ? limits->max_output_bytes : CHAT_DEFAULT_OUTPUT;
    t->lim.max_memory = limits->max_memory_bytes ? limits->max_memory_bytes : CHAT_DEFAULT_MEMORY;
    t->lim.max_iterations =
        limits->max_iterations ? limits->max_iterations : CHAT_DEFAULT_ITERATIONS;
}

/* ---- loading ------------------------------------------------------------------------------ */
/* A special token is a string or an AddedToken object {"content": ...}. */
static const char *token_text(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return json_string_value(c);
    }
    return NULL;
}

weft_status weft_chat_template_load(const char *dir, weft_chat_template **out, weft_error *err) {
    if (!out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "chat_template_load: out is NULL");
    *out = NULL;
    if (!dir) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "chat_template_load: dir is NULL");
    char path[4096], name[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *cfg = NULL;
    weft_error fe = {.size = sizeof(fe)};
    weft_status rs = weft_file_absent_ok(
        weft_file_read_json(path, 16u << 20, JSON_ALLOW_NUL, NULL, &cfg, &fe), &fe, err);
    if (rs) return rs;
    if (cfg) {
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "%s: expected a JSON object at the top level", path);
        }
    }
    const char *text = NULL;
    size_t text_len = 0;
    char *file_text = NULL;
    json_t *tmpl = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (json_is_string(tmpl)) {
        text = json_string_value(tmpl);
        text_len = json_string_length(tmpl);
        snprintf(name, sizeof name, "%s:chat_template", path);
    } else if (json_is_array(tmpl)) {
        /* named templates: [{"name": "default", "template": "..."}, ...] */
        size_t i;
        json_t *e, *pick = NULL;
        json_array_foreach(tmpl, i, e) {
            json_t *nm = json_object_get(e, "name"), *tx = json_object_get(e, "template");
            if (!json_is_string(tx)) continue;
            if (!pick || (json_is_string(nm) && !strcmp(json_string_value(nm), "default")))
                pick = tx;
        }
        if (pick) {
            text = json_string_value(pick);
            text_len = json_string_length(pick);
            snprintf(name, sizeof name, "%s:chat_template", path);
        }
    } else if (tmpl && !json_is_null(tmpl)) {
        const char *got = json_is_object(tmpl) ? "an object" : "a scalar"; /* before cfg goes */
        json_decref(cfg);
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: chat_template must be a string or a list, got %s", path, got);
    }
    if (!text) {
        snprintf(name, sizeof name, "%s/chat_template.jinja", dir);
        /* a missing file is the error below; an unreadable or oversized one is its own */
        weft_status fs = weft_file_read(name, CHAT_MAX_SOURCE, "a chat template", NULL, &file_text,
                                        &text_len, err);
        if (fs && fs != WEFT_ERR_NOT_FOUND) {
            json_decref(cfg);
            return fs;
        }
        text = file_text;
    }
    if (!text) {
        json_decref(cfg);
        return weft_error_set(
            err, WEFT_ERR_NOT_FOUND, SRC,
            "%s: no chat template (tokenizer_config.json has no chat_template and there is "
            "no chat_template.jinja)",
            dir);
    }
    weft_chat_template *t = NULL;
    weft_status st = weft_chat_template_parse(text, text_len, name, &t, err);
    free(file_text);
    if (st) {
        json_decref(cfg);
        return st;
    }
    json_t *defs = json_object();
    if (!defs) {
        json_decref(cfg);
        weft_chat_template_free(t);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    }
    static const char *const special[] = {"bos_token", "eos_token", "unk_token",  "sep_token",
                                          "pad_token", "cls_token", "mask_token", NULL};
    for (const char *const *k = special; cfg && *k; k++) {
        const char *v = token_text(json_object_get(cfg, *k));
        if (v) json_object_set_new(defs, *k, json_string(v));
    }
    json_t *extra = cfg ? json_object_get(cfg, "additional_special_tokens") : NULL;
    if (json_is_array(extra)) {
        json_t *list = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(extra, i, e) {
            const char *v = token_text(e);
            if (v) json_array_append_new(list, json_string(v));
        }
        json_object_set_new(defs, "additional_special_tokens", list);
    }
    json_decref(cfg);
    t->defaults = defs;
    *out = t;
    return WEFT_OK;
}

/* ---- rendering ------------------------------------------------------------------------------ */
static int from_json(jarena *a, json_t *j, int depth, jv *out) {
    if (depth > CHAT_JSON_DEPTH) return -2;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = jd_new(a);
        if (!d) return -1;
        const char *key;
        json_t *v;
        void *iter = json_object_iter(j);
        while (iter) {
            key = json_object_iter_key(iter);
            v = json_object_iter_value(iter);
            jv kv, vv;
            jstr *ks = js_new(a, key, strlen(key));
            if (!ks) return -1;
            kv = jv_of_str(ks);
            int r = from_json(a, v, depth + 1, &vv);
            if (r) return r;
            if (jd_set(a, d, kv, vv)) return -1;
            iter = json_object_iter_next(j, iter);
        }
        *out = jv_of_dict(d);
        return 0;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jlist *l = jl_new(a, n, JL_LIST);
        if (!l) return -1;
        for (size_t i = 0; i < n; i++) {
            int r = from_json(a, json_array_get(j, i), depth + 1, &l->v[i]);
            if (r) return r;
        }
        l->len = n;
        *out = jv_of_list(l);
        return 0;
    }
    case JSON_STRING: {
        jstr *s = js_new(a, json_string_value(j), json_string_length(j));
        if (!s) return -1;
        *out = jv_of_str(s);
        return 0;
    }
    case JSON_INTEGER:
        *out = jv_int((int64_t)json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = jv_float(json_real_value(j));
        return 0;
    case JSON_TRUE:
        *out = jv_bool(1);
        return 0;
    case JSON_FALSE:
        *out = jv_bool(0);
        return 0;
    default:
        *out = jv_none();
        return 0;
    }
}

static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DD[(T| )HH:MM[:SS]]" as seconds since the epoch, read as UTC. */
static int parse_clock(const char *s, int64_t *out) {
    int y, mo, d, h = 0, mi = 0, sec = 0, n = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3) return -1;
    const char *p = s + n;
    if (*p == 'T' || *p == ' ') {
        int m2 = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &h, &mi, &m2) != 2) return -1;
        p += 1 + m2;
        if (*p == ':') {
            if (sscanf(p + 1, "%2d%n", &sec, &m2) != 1) return -1;
            p += 1 + m2;
        }
    }
    if (*p || y < 1 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 59 ||
        h < 0 || mi < 0 || sec < 0)
        return -1;
    *out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
    return 0;
}

static weft_status set_json_var(jarena *a, jdict *vars, const char *key, json_t *v,
                                const char *what, weft_error *err) {
    jv val;
    int r = from_json(a, v, 0, &val);
    if (r == -2)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "%s: JSON nested deeper than %d levels",
                              what, CHAT_JSON_DEPTH);
    jstr *k = r ? NULL : js_new(a, key, strlen(key));
    if (!k || jd_set(a, vars, jv_of_str(k), val))
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory converting JSON", what);
    return WEFT_OK;
}

weft_status weft_chat_render(const weft_chat_template *t, const char *messages_json,
                             int add_generation_prompt, const char *extra_json, char **out,
                             weft_error *err) {
    if (!out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "chat_render: out is NULL");
    *out = NULL;
    if (!t) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "chat_render: template is NULL");
    if (!messages_json)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "chat_render: messages is NULL");
    json_error_t jerr;
    json_t *msgs = json_loads(messages_json, JSON_ALLOW_NUL, &jerr);
    if (!msgs)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "messages: invalid JSON at %d:%d: %s",
                              jerr.line, jerr.column, jerr.text);
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "messages: expected a JSON array of messages");
    }
    json_t *extra = NULL;
    if (extra_json) {
        extra = json_loads(extra_json, JSON_ALLOW_NUL, &jerr);
        if (!extra || !json_is_object(extra)) {
            json_decref(msgs);
            if (extra) json_decref(extra);
            return weft_error_set(err, WEFT_ERR_INVALID, SRC, "extra: expected a JSON object%s%s",
                                  extra ? "" : ", invalid JSON: ", extra ? "" : jerr.text);
        }
    }

    jarena a = {0};
    a.limit = t->lim.max_memory;
    jrender_in in;
    memset(&in, 0, sizeof in);
    in.src = &t->src;
    in.root = t->root;
    in.lim = t->lim;
    in.vars = jd_new(&a);
    weft_status st = in.vars ? WEFT_OK : weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    const char *key;
    json_t *v;
    if (!st && t->defaults) {
        json_object_foreach(t->defaults, key, v) {
            if ((st = set_json_var(&a, in.vars, key, v, key, err))) break;
        }
    }
    int have_tools = 0, have_docs = 0;
    if (!st && extra) {
        json_object_foreach(extra, key, v) {
            if (!strcmp(key, "strftime_now") && json_is_string(v)) {
                if (parse_clock(json_string_value(v), &in.now)) {
                    st = weft_error_set(
                        err, WEFT_ERR_INVALID, SRC,
                        "extra.strftime_now: expected \"YYYY-MM-DD[THH:MM[:SS]]\", got \"%s\"",
                        json_string_value(v));
                    break;
                }
                in.have_now = 1;
                continue;
            }
            have_tools |= !strcmp(key, "tools");
            have_docs |= !strcmp(key, "documents");
            if ((st = set_json_var(&a, in.vars, key, v, key, err))) break;
        }
    }
    if (!st) st = set_json_var(&a, in.vars, "messages", msgs, "messages", err);
    if (!st) {
        json_t *b = json_boolean(add_generation_prompt);
        st = set_json_var(&a, in.vars, "add_generation_prompt", b, "add_generation_prompt", err);
        json_decref(b);
    }
    json_t *null = json_null();
    if (!st && !have_tools) st = set_json_var(&a, in.vars, "tools", null, "tools", err);
    if (!st && !have_docs) st = set_json_var(&a, in.vars, "documents", null, "documents", err);
    json_decref(msgs);
    if (extra) json_decref(extra);

    jbuf buf = {0};
    buf.limit = t->lim.max_output;
    if (!st) {
        cloc l;
        cloc_enter(&l);
        if (jrender(&a, &in, &buf, err)) st = err && err->code ? err->code : WEFT_ERR_INVALID;
        cloc_leave(&l);
    }
    ja_free(&a);
    if (st) {
        jb_free(&buf);
        return st;
    }
    if (!buf.p) {
        buf.p = malloc(1);
        if (!buf.p) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        buf.p[0] = '\0';
    }
    *out = buf.p;
    return WEFT_OK;
}
