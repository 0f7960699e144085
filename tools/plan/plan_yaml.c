/* Plan files are YAML for people and JSON inside: this turns a libyaml document into a jansson
 * tree so the planner reads plans, results and checks with one set of accessors. Plain scalars
 * that read as numbers or booleans become numbers and booleans; quoted scalars stay strings.
 * Duplicate keys, non-scalar keys, aliases and nesting deeper than 32 are refused with the line. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "plan/plan.h"
#include "util/error.h"

static json_t *scalar(const yaml_node_t *n) {
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return json_stringn(s, len);
    if (!strcmp(s, "true") || !strcmp(s, "True")) return json_true();
    if (!strcmp(s, "false") || !strcmp(s, "False")) return json_false();
    if (len == 0 || !strcmp(s, "null") || !strcmp(s, "~")) return json_null();
    char *end = NULL;
    errno = 0;
    if (strspn(s, "+-0123456789") == len && len < 19) {
        long long v = strtoll(s, &end, 10);
        if (end && !*end && !errno) return json_integer(v);
    }
    double d = strtod(s, &end);
    if (end && !*end && !errno && strspn(s, "+-0123456789.eE") == len) return json_real(d);
    return json_stringn(s, len);
}

static json_t *convert(yaml_document_t *doc, yaml_node_t *n, int depth, const char *name,
                       unsigned char *seen, weft_error *err) {
    if (!n) {
        weft_error_set(err, WEFT_ERR_FORMAT, name, "a node refers to nothing");
        return NULL;
    }
    /* an alias is a second visit of the same node: it would let a small file expand */
    size_t idx = (size_t)(n - doc->nodes.start);
    if (seen[idx]) {
        weft_error_set(err, WEFT_ERR_FORMAT, name, "line %zu: aliases are not allowed in a plan",
                       n->start_mark.line + 1);
        return NULL;
    }
    seen[idx] = 1;
    if (depth > 32) {
        weft_error_set(err, WEFT_ERR_FORMAT, name, "line %zu: nested deeper than 32 levels",
                       n->start_mark.line + 1);
        return NULL;
    }
    if (n->type == YAML_SCALAR_NODE) return scalar(n);
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++) {
            json_t *v = convert(doc, yaml_document_get_node(doc, *it), depth + 1, name, seen, err);
            if (!v) {
                json_decref(a);
                return NULL;
            }
            json_array_append_new(a, v);
        }
        return a;
    }
    if (n->type == YAML_MAPPING_NODE) {
        json_t *o = json_object();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE) {
                weft_error_set(err, WEFT_ERR_FORMAT, name, "line %zu: expected a plain key",
                               (k ? k->start_mark.line : n->start_mark.line) + 1);
                json_decref(o);
                return NULL;
            }
            const char *key = (const char *)k->data.scalar.value;
            if (json_object_get(o, key)) {
                weft_error_set(err, WEFT_ERR_FORMAT, name, "line %zu: key '%s' given twice",
                               k->start_mark.line + 1, key);
                json_decref(o);
                return NULL;
            }
            json_t *v =
                convert(doc, yaml_document_get_node(doc, p->value), depth + 1, name, seen, err);
            if (!v) {
                json_decref(o);
                return NULL;
            }
            json_object_set_new(o, key, v);
        }
        return o;
    }
    weft_error_set(err, WEFT_ERR_FORMAT, name, "line %zu: unexpected YAML node",
                   n->start_mark.line + 1);
    return NULL;
}

weft_status weft_plan_yaml_parse(const char *text, size_t len, const char *name, json_t **out,
                                 weft_error *err) {
    *out = NULL;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p))
        return weft_error_set(err, WEFT_ERR_NOMEM, name, "cannot start the YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &doc)) {
        weft_status st = weft_error_set(err, WEFT_ERR_FORMAT, name, "line %zu column %zu: %s",
                                        p.problem_mark.line + 1, p.problem_mark.column + 1,
                                        p.problem ? p.problem : "invalid YAML");
        yaml_parser_delete(&p);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    size_t nn = (size_t)(doc.nodes.top - doc.nodes.start);
    unsigned char *seen = calloc(nn ? nn : 1, 1);
    weft_status st = WEFT_OK;
    if (!seen)
        st = weft_error_set(err, WEFT_ERR_NOMEM, name, "out of memory");
    else if (!root)
        st = weft_error_set(err, WEFT_ERR_FORMAT, name, "the file is empty");
    else if (!(*out = convert(&doc, root, 0, name, seen, err)))
        st = err ? err->code : WEFT_ERR_FORMAT;
    free(seen);
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    return st;
}

weft_status weft_plan_yaml_load(const char *path, json_t **out, weft_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error_set(err, WEFT_ERR_IO, path, "cannot open: %s", strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (cap > (16u << 20)) {
                free(buf);
                fclose(f);
                return weft_error_set(err, WEFT_ERR_FORMAT, path, "larger than 16 MiB");
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return weft_error_set(err, WEFT_ERR_NOMEM, path, "out of memory");
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    fclose(f);
    weft_status st = weft_plan_yaml_parse(buf ? buf : "", len, path, out, err);
    free(buf);
    return st;
}
