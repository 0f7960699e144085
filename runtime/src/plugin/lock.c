/* Locks (lock.h): freezing a resolved candidate, the JSON form and its canonical id, parsing
 * with field-path errors, re-hash checks and diffs. JSON was chosen over YAML because its
 * canonical form is unambiguous (sorted keys, no whitespace, no scalar typing rules), which is
 * what the candidate id hashes; jansson writes the human form in a fixed, logical key order. */
#include "plugin/lock.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "util/error.h"
#include "util/file.h"

const char *weft_lock_role_name(uint32_t role) {
    switch (role) {
    case WEFT_ROLE_BACKEND:
        return "backend";
    case WEFT_ROLE_MODEL:
        return "model";
    case WEFT_ROLE_TECHNIQUE:
        return "technique";
    default:
        return NULL;
    }
}

static uint32_t role_from_name(const char *s) {
    for (uint32_t r = WEFT_ROLE_BACKEND; r <= WEFT_ROLE_TECHNIQUE; r++)
        if (!strcmp(s, weft_lock_role_name(r))) return r;
    return 0;
}

static uint32_t kind_from_name(const char *s) {
    for (uint32_t k = WEFT_KIND_BACKEND; k <= WEFT_KIND_FEATURE; k++) {
        const char *n = weft_plugin_kind_name(k);
        if (n && !strcmp(s, n)) return k;
    }
    return 0;
}

void weft_lock_free(weft_lock *l) {
    if (!l) return;
    for (uint32_t i = 0; i < l->n_plugins; i++)
        weft_options_free(&l->plugins[i].options);
    free(l->plugins);
    free(l->model_files);
    free(l);
}

void weft_lock_default_path(const char *manifest_path, const char *candidate, char *out,
                            size_t cap) {
    const char *slash = manifest_path ? strrchr(manifest_path, '/') : NULL;
    if (slash)
        snprintf(out, cap, "%.*s/frozen/%s.lock", (int)(slash - manifest_path), manifest_path,
                 candidate);
    else
        snprintf(out, cap, "frozen/%s.lock", candidate);
}

/* ---- freezing --------------------------------------------------------------------------- */
static int wanted_model_file(const char *name) {
    static const char *exact[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                  "generation_config.json", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (!strcmp(name, exact[i])) return 1;
    size_t n = strlen(name), s = strlen(".safetensors");
    return n > s && !strcmp(name + n - s, ".safetensors");
}

static int cmp_model_file(const void *a, const void *b) {
    return strcmp(((const weft_lock_model_file *)a)->name, ((const weft_lock_model_file *)b)->name);
}

static weft_status hash_model_files(weft_lock *l, weft_error *err) {
    DIR *d = opendir(l->model_dir);
    if (!d)
        return weft_error_set(err, WEFT_ERR_IO, l->model_dir, "cannot list model directory: %s",
                              strerror(errno));
    size_t cap = 0;
    weft_status st = WEFT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!wanted_model_file(e->d_name)) continue;
        if (strlen(e->d_name) >= sizeof(l->model_files[0].name)) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", l->model_dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (l->n_model_files == cap) {
            cap = cap ? 2 * cap : 8;
            weft_lock_model_file *m = realloc(l->model_files, cap * sizeof(*m));
            if (!m) {
                st = weft_error_set(err, WEFT_ERR_NOMEM, "lock", "out of memory");
                break;
            }
            l->model_files = m;
        }
        weft_lock_model_file *f = &l->model_files[l->n_model_files];
        memset(f, 0, sizeof(*f));
        snprintf(f->name, sizeof(f->name), "%s", e->d_name);
        f->bytes = (uint64_t)sb.st_size;
        st = weft_hash_sha256_file_cached(path, f->sha256, NULL, err);
        if (st != WEFT_OK) break;
        l->n_model_files++;
    }
    closedir(d);
    if (st == WEFT_OK && l->n_model_files)
        qsort(l->model_files, l->n_model_files, sizeof(*l->model_files), cmp_model_file);
    return st;
}

weft_status weft_lock_freeze(const weft_resolved_candidate *c, weft_lock **out, weft_error *err) {
    *out = NULL;
    weft_lock *l = calloc(1, sizeof(*l));
    if (!l) return weft_error_set(err, WEFT_ERR_NOMEM, "lock", "out of memory");
    l->format = WEFT_LOCK_FORMAT;
    snprintf(l->candidate, sizeof(l->candidate), "%s", c->name);
    char real[PATH_MAX];
    /* absolute, so `weft candidate check` works from any directory */
    snprintf(l->source.path, sizeof(l->source.path), "%s",
             realpath(c->path, real) ? real : c->path);
    snprintf(l->model, sizeof(l->model), "%s", c->model);
    snprintf(l->model_dir, sizeof(l->model_dir), "%s", c->model_dir);
    snprintf(l->backend, sizeof(l->backend), "%s", c->backend);
    l->max_model_len = c->max_model_len;
    l->max_concurrency = c->max_concurrency;
    l->threads = c->threads;
    l->has_mean_kl = c->has_mean_kl;
    l->has_p99_kl = c->has_p99_kl;
    l->has_ppl_ratio = c->has_ppl_ratio;
    l->mean_kl = c->mean_kl;
    l->p99_kl = c->p99_kl;
    l->ppl_ratio = c->ppl_ratio;
    weft_status st = weft_hash_sha256_file(c->path, l->source.sha256, err);
    if (st != WEFT_OK) goto fail;
    l->plugins = calloc(c->n_plugins ? c->n_plugins : 1, sizeof(*l->plugins));
    if (!l->plugins) {
        st = weft_error_set(err, WEFT_ERR_NOMEM, "lock", "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < c->n_plugins; i++) {
        const weft_resolved_plugin *rp = &c->plugins[i];
        weft_lock_plugin *p = &l->plugins[i];
        snprintf(p->name, sizeof(p->name), "%s", rp->name);
        snprintf(p->version, sizeof(p->version), "%s", rp->version);
        p->role = rp->role;
        p->kind = rp->manifest ? rp->manifest->kind : 0;
        p->slots = rp->slots;
        p->abi_min = rp->manifest ? rp->manifest->abi_min : 0;
        p->abi_max = rp->manifest ? rp->manifest->abi_max : 0;
        p->order = (int32_t)i;
        snprintf(p->bundle_dir, sizeof(p->bundle_dir), "%s", rp->bundle_dir);
        snprintf(p->library.path, sizeof(p->library.path), "%s", rp->library_path);
        snprintf(p->manifest.path, sizeof(p->manifest.path), "%s", rp->manifest_path);
        l->n_plugins = i + 1; /* options below are then freed on failure */
        if ((st = weft_options_dup(&rp->options, &p->options, err)) != WEFT_OK) goto fail;
        struct stat sb;
        if (stat(p->library.path, &sb) != 0) {
            st = weft_error_set(err, WEFT_ERR_NOT_FOUND, p->name,
                                "plugin %s %s: library %s does not exist: build the bundle, or "
                                "pin a built version in %s",
                                p->name, p->version, p->library.path, c->path);
            goto fail;
        }
        if ((st = weft_hash_sha256_file(p->library.path, p->library.sha256, err)) != WEFT_OK ||
            (st = weft_hash_sha256_file(p->manifest.path, p->manifest.sha256, err)) != WEFT_OK) {
            weft_error_prefix(err, "plugin %s %s", p->name, p->version);
            goto fail;
        }
    }
    if (l->model_dir[0] && (st = hash_model_files(l, err)) != WEFT_OK) goto fail;
    if ((st = weft_lock_compute_id(l, l->id, err)) != WEFT_OK) goto fail;
    *out = l;
    return WEFT_OK;
fail:
    weft_lock_free(l);
    return st;
}

/* ---- to JSON ---------------------------------------------------------------------------- */
static json_t *file_json(const weft_lock_file *f) {
    return json_pack("{s:s, s:s}", "path", f->path, "sha256", f->sha256);
}

static json_t *options_json(const weft_options *o, const char *plugin, weft_error *err) {
    json_t *obj = json_object();
    for (uint32_t i = 0; obj && i < o->count; i++) {
        const weft_option *it = &o->items[i];
        json_t *v = NULL;
        switch (it->type) {
        case WEFT_OPTION_BOOL:
            v = json_boolean(it->i != 0);
            break;
        case WEFT_OPTION_INT:
            v = json_integer((json_int_t)it->i);
            break;
        case WEFT_OPTION_FLOAT:
            v = isfinite(it->f) ? json_real(it->f) : NULL;
            break;
        case WEFT_OPTION_STRING:
            v = json_string(it->s ? it->s : "");
            break;
        default:
            break;
        }
        if (!v || !it->key || json_object_set_new(obj, it->key, v) != 0) {
            weft_error_set(err, WEFT_ERR_INVALID, plugin,
                           "plugin %s: option %s has type %u or a value JSON cannot hold", plugin,
                           it->key ? it->key : "(null)", (unsigned)it->type);
            json_decref(obj);
            return NULL;
        }
    }
    return obj;
}

static json_t *slots_json(uint32_t slots) {
    json_t *a = json_array();
    for (uint32_t bit = 1; a && bit; bit <<= 1)
        if (slots & bit) {
            const char *n = weft_slot_name(bit);
            json_array_append_new(a, json_string(n ? n : "?"));
        }
    return a;
}

static json_t *lock_json(const weft_lock *l, int with_id, weft_error *err) {
    json_t *root = json_object();
    if (!root) return NULL;
    json_object_set_new(root, "format", json_integer(l->format));
    if (with_id) json_object_set_new(root, "id", json_string(l->id));
    json_object_set_new(root, "candidate", json_string(l->candidate));
    json_object_set_new(root, "manifest", file_json(&l->source));
    json_object_set_new(root, "backend", json_string(l->backend));
    json_t *files = json_array();
    for (uint32_t i = 0; i < l->n_model_files; i++)
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", l->model_files[i].name,
                                               "bytes", (json_int_t)l->model_files[i].bytes,
                                               "sha256", l->model_files[i].sha256));
    json_object_set_new(
        root, "model",
        json_pack("{s:s, s:s, s:o}", "source", l->model, "dir", l->model_dir, "files", files));
    json_t *plugins = json_array();
    json_t *chains = json_object();
    for (uint32_t i = 0; i < l->n_plugins; i++) {
        const weft_lock_plugin *p = &l->plugins[i];
        json_t *opts = options_json(&p->options, p->name, err);
        if (!opts) {
            json_decref(plugins);
            json_decref(chains);
            json_decref(root);
            return NULL;
        }
        const char *role = weft_lock_role_name(p->role), *kind = weft_plugin_kind_name(p->kind);
        json_array_append_new(
            plugins,
            json_pack("{s:s, s:s, s:s, s:s, s:o, s:{s:i, s:i}, s:i, s:s, s:o, s:o, s:o}", "name",
                      p->name, "version", p->version, "role", role ? role : "?", "kind",
                      kind ? kind : "?", "slots", slots_json(p->slots), "abi", "min",
                      (int)p->abi_min, "max", (int)p->abi_max, "order", (int)p->order, "bundle",
                      p->bundle_dir, "library", file_json(&p->library), "manifest",
                      file_json(&p->manifest), "options", opts));
        for (uint32_t bit = 1; bit; bit <<= 1) {
            if (!(p->slots & bit) || !weft_slot_is_chain(bit)) continue;
            const char *sn = weft_slot_name(bit);
            json_t *chain = json_object_get(chains, sn);
            if (!chain) {
                chain = json_array();
                json_object_set_new(chains, sn, chain);
            }
            json_array_append_new(chain, json_string(p->name));
        }
    }
    json_object_set_new(root, "plugins", plugins);
    json_object_set_new(root, "chains", chains);
    json_object_set_new(root, "serving",
                        json_pack("{s:i, s:i, s:i}", "max_model_len", (int)l->max_model_len,
                                  "max_concurrency", (int)l->max_concurrency, "threads",
                                  (int)l->threads));
    json_t *q = json_object();
    if (l->has_mean_kl) json_object_set_new(q, "mean_kl", json_real(l->mean_kl));
    if (l->has_p99_kl) json_object_set_new(q, "p99_kl", json_real(l->p99_kl));
    if (l->has_ppl_ratio) json_object_set_new(q, "ppl_ratio", json_real(l->ppl_ratio));
    json_object_set_new(root, "quality", q);
    return root;
}

weft_status weft_lock_to_json(const weft_lock *l, int canonical, char **text, weft_error *err) {
    *text = NULL;
    json_t *root = lock_json(l, !canonical, err);
    if (!root) return err && err->code ? err->code : WEFT_ERR_NOMEM;
    size_t flags =
        canonical ? (JSON_COMPACT | JSON_SORT_KEYS) : (JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    *text = json_dumps(root, flags | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!*text) return weft_error_set(err, WEFT_ERR_NOMEM, "lock", "cannot serialise the lock");
    return WEFT_OK;
}

weft_status weft_lock_compute_id(const weft_lock *l, char id[WEFT_XXH128_HEX_LEN + 1],
                                 weft_error *err) {
    char *text;
    weft_status st = weft_lock_to_json(l, 1, &text, err);
    if (st != WEFT_OK) return st;
    weft_hash_xxh3_128_hex(text, strlen(text), id);
    free(text);
    return WEFT_OK;
}

static int mkdirs_parent(const char *path) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp)) return -1;
    char *slash = strrchr(tmp, '/');
    if (!slash || slash == tmp) return 0;
    *slash = '\0';
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

weft_status weft_lock_write(weft_lock *l, const char *path, weft_error *err) {
    weft_status st = weft_lock_compute_id(l, l->id, err);
    if (st != WEFT_OK) return st;
    char *text;
    if ((st = weft_lock_to_json(l, 0, &text, err)) != WEFT_OK) return st;
    if (mkdirs_parent(path) != 0) {
        free(text);
        return weft_error_set(err, WEFT_ERR_IO, path, "cannot create the lock's directory: %s",
                              strerror(errno));
    }
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f) {
        free(text);
        return weft_error_set(err, WEFT_ERR_IO, path, "cannot write: %s", strerror(errno));
    }
    int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return weft_error_set(err, WEFT_ERR_IO, path, "cannot write: %s", strerror(e));
    }
    snprintf(l->path, sizeof(l->path), "%s", path);
    return WEFT_OK;
}

/* ---- parsing ---------------------------------------------------------------------------- */
typedef struct parser {
    const char *file;
    weft_error *err;
} parser;

static json_t *need(parser *p, json_t *obj, const char *key, const char *path, json_type type) {
    json_t *v = json_object_get(obj, key);
    static const char *want[] = {"an object", "an array", "a string", "an integer",
                                 "a number",  "true",     "false",    "null"};
    if (!v) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file, "%s: %s%s%s: missing", p->file, path,
                       path[0] ? "." : "", key);
        return NULL;
    }
    if (json_typeof(v) != type) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file, "%s: %s%s%s: expected %s, found %s",
                       p->file, path, path[0] ? "." : "", key, want[type], weft_json_kind(v));
        return NULL;
    }
    return v;
}

static int get_str(parser *p, json_t *obj, const char *key, const char *path, char *out,
                   size_t cap) {
    json_t *v = need(p, obj, key, path, JSON_STRING);
    if (!v) return -1;
    if (json_string_length(v) >= cap) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                       "%s: %s%s%s: expected at most %zu bytes, found %zu", p->file, path,
                       path[0] ? "." : "", key, cap - 1, json_string_length(v));
        return -1;
    }
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int get_u32(parser *p, json_t *obj, const char *key, const char *path, uint32_t *out) {
    json_t *v = need(p, obj, key, path, JSON_INTEGER);
    if (!v) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > (json_int_t)UINT32_MAX) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                       "%s: %s%s%s: expected an integer in 0..%u, found %" JSON_INTEGER_FORMAT,
                       p->file, path, path[0] ? "." : "", key, UINT32_MAX, x);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

static int get_sha(parser *p, json_t *obj, const char *key, const char *path, char *out) {
    if (get_str(p, obj, key, path, out, WEFT_SHA256_HEX_LEN + 1) != 0) return -1;
    if (!weft_hash_is_hex(out, WEFT_SHA256_HEX_LEN)) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                       "%s: %s.%s: expected 64 lowercase hex digits, found \"%s\"", p->file, path,
                       key, out);
        return -1;
    }
    return 0;
}

static int get_file(parser *p, json_t *obj, const char *key, const char *path, weft_lock_file *f) {
    char sub[256];
    json_t *o = need(p, obj, key, path, JSON_OBJECT);
    if (!o) return -1;
    snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", key);
    return get_str(p, o, "path", sub, f->path, sizeof(f->path)) ||
                   get_sha(p, o, "sha256", sub, f->sha256)
               ? -1
               : 0;
}

static int parse_options(parser *p, json_t *obj, const char *path, weft_options *out) {
    size_t n = json_object_size(obj);
    weft_option *items = calloc(n ? n : 1, sizeof(*items));
    if (!items) {
        weft_error_set(p->err, WEFT_ERR_NOMEM, "lock", "out of memory");
        return -1;
    }
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach(obj, key, v) {
        weft_option *o = &items[i++];
        o->key = key;
        switch (json_typeof(v)) {
        case JSON_TRUE:
        case JSON_FALSE:
            o->type = WEFT_OPTION_BOOL;
            o->i = json_is_true(v);
            break;
        case JSON_INTEGER:
            o->type = WEFT_OPTION_INT;
            o->i = (int64_t)json_integer_value(v);
            break;
        case JSON_REAL:
            o->type = WEFT_OPTION_FLOAT;
            o->f = json_real_value(v);
            break;
        case JSON_STRING:
            o->type = WEFT_OPTION_STRING;
            o->s = json_string_value(v);
            break;
        default:
            weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                           "%s: %s.%s: expected a boolean, number or string, found %s", p->file,
                           path, key, weft_json_kind(v));
            free(items);
            return -1;
        }
    }
    weft_options tmp = {(uint32_t)n, items};
    weft_status st = weft_options_dup(&tmp, out, p->err);
    free(items);
    return st == WEFT_OK ? 0 : -1;
}

static int parse_plugin(parser *p, json_t *o, uint32_t index, weft_lock_plugin *pl) {
    char path[64], buf[64];
    snprintf(path, sizeof(path), "plugins[%u]", (unsigned)index);
    if (!json_is_object(o)) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file, "%s: %s: expected an object, found %s",
                       p->file, path, weft_json_kind(o));
        return -1;
    }
    if (get_str(p, o, "name", path, pl->name, sizeof(pl->name)) ||
        get_str(p, o, "version", path, pl->version, sizeof(pl->version)) ||
        get_str(p, o, "bundle", path, pl->bundle_dir, sizeof(pl->bundle_dir)) ||
        get_file(p, o, "library", path, &pl->library) ||
        get_file(p, o, "manifest", path, &pl->manifest))
        return -1;
    if (get_str(p, o, "role", path, buf, sizeof(buf))) return -1;
    if (!(pl->role = role_from_name(buf))) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                       "%s: %s.role: expected backend, model or technique, found \"%s\"", p->file,
                       path, buf);
        return -1;
    }
    if (get_str(p, o, "kind", path, buf, sizeof(buf))) return -1;
    if (!(pl->kind = kind_from_name(buf))) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                       "%s: %s.kind: expected backend, model, technique or feature, found \"%s\"",
                       p->file, path, buf);
        return -1;
    }
    json_t *slots = need(p, o, "slots", path, JSON_ARRAY);
    if (!slots) return -1;
    size_t k;
    json_t *s;
    json_array_foreach(slots, k, s) {
        uint32_t bit = json_is_string(s) ? weft_slot_from_name(json_string_value(s)) : 0;
        if (!bit) {
            weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                           "%s: %s.slots[%zu]: expected a slot name, found %s", p->file, path, k,
                           json_is_string(s) ? json_string_value(s) : weft_json_kind(s));
            return -1;
        }
        pl->slots |= bit;
    }
    json_t *abi = need(p, o, "abi", path, JSON_OBJECT);
    char sub[96];
    snprintf(sub, sizeof(sub), "%s.abi", path);
    if (!abi || get_u32(p, abi, "min", sub, &pl->abi_min) ||
        get_u32(p, abi, "max", sub, &pl->abi_max))
        return -1;
    uint32_t order;
    if (get_u32(p, o, "order", path, &order)) return -1;
    if (order != index) {
        weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                       "%s: %s.order: expected %u (plugins are listed in chain order), found %u",
                       p->file, path, (unsigned)index, (unsigned)order);
        return -1;
    }
    pl->order = (int32_t)order;
    json_t *opts = need(p, o, "options", path, JSON_OBJECT);
    snprintf(sub, sizeof(sub), "%s.options", path);
    return opts ? parse_options(p, opts, sub, &pl->options) : -1;
}

static weft_status parse_root(parser *p, json_t *root, weft_lock *l) {
    if (!json_is_object(root))
        return weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                              "%s: expected a JSON object at the top, found %s", p->file,
                              weft_json_kind(root));
    if (get_u32(p, root, "format", "", &l->format)) return WEFT_ERR_FORMAT;
    if (l->format != WEFT_LOCK_FORMAT)
        return weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                              "%s: format: expected %d, found %u (written by another weft)",
                              p->file, WEFT_LOCK_FORMAT, (unsigned)l->format);
    if (get_str(p, root, "id", "", l->id, sizeof(l->id)) ||
        get_str(p, root, "candidate", "", l->candidate, sizeof(l->candidate)) ||
        get_file(p, root, "manifest", "", &l->source) ||
        get_str(p, root, "backend", "", l->backend, sizeof(l->backend)))
        return WEFT_ERR_FORMAT;
    json_t *model = need(p, root, "model", "", JSON_OBJECT);
    if (!model || get_str(p, model, "source", "model", l->model, sizeof(l->model)) ||
        get_str(p, model, "dir", "model", l->model_dir, sizeof(l->model_dir)))
        return WEFT_ERR_FORMAT;
    json_t *files = need(p, model, "files", "model", JSON_ARRAY);
    if (!files) return WEFT_ERR_FORMAT;
    l->model_files = calloc(json_array_size(files) + 1, sizeof(*l->model_files));
    if (!l->model_files) return weft_error_set(p->err, WEFT_ERR_NOMEM, "lock", "out of memory");
    size_t i;
    json_t *v;
    json_array_foreach(files, i, v) {
        char path[64];
        snprintf(path, sizeof(path), "model.files[%zu]", i);
        weft_lock_model_file *f = &l->model_files[i];
        json_t *bytes = json_is_object(v) ? need(p, v, "bytes", path, JSON_INTEGER) : NULL;
        if (!json_is_object(v))
            return weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                                  "%s: %s: expected an object, found %s", p->file, path,
                                  weft_json_kind(v));
        if (!bytes || json_integer_value(bytes) < 0 ||
            get_str(p, v, "name", path, f->name, sizeof(f->name)) ||
            get_sha(p, v, "sha256", path, f->sha256) || strchr(f->name, '/'))
            return p->err && p->err->code ? p->err->code
                                          : weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                                                           "%s: %s: invalid entry", p->file, path);
        f->bytes = (uint64_t)json_integer_value(bytes);
        for (size_t j = 0; j < i; j++) /* check and diff find files by name */
            if (!strcmp(l->model_files[j].name, f->name))
                return weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                                      "%s: %s.name: \"%s\" is also model.files[%zu]", p->file, path,
                                      f->name, j);
        l->n_model_files++;
    }
    json_t *plugins = need(p, root, "plugins", "", JSON_ARRAY);
    if (!plugins) return WEFT_ERR_FORMAT;
    l->plugins = calloc(json_array_size(plugins) + 1, sizeof(*l->plugins));
    if (!l->plugins) return weft_error_set(p->err, WEFT_ERR_NOMEM, "lock", "out of memory");
    json_array_foreach(plugins, i, v) {
        l->n_plugins = (uint32_t)i + 1;
        if (parse_plugin(p, v, (uint32_t)i, &l->plugins[i])) return WEFT_ERR_FORMAT;
        for (size_t j = 0; j < i; j++) /* a candidate holds a plugin once; diff finds by name */
            if (!strcmp(l->plugins[j].name, l->plugins[i].name))
                return weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                                      "%s: plugins[%zu].name: \"%s\" is also plugins[%zu]", p->file,
                                      i, l->plugins[i].name, j);
    }
    json_t *serving = need(p, root, "serving", "", JSON_OBJECT);
    if (!serving || get_u32(p, serving, "max_model_len", "serving", &l->max_model_len) ||
        get_u32(p, serving, "max_concurrency", "serving", &l->max_concurrency) ||
        get_u32(p, serving, "threads", "serving", &l->threads))
        return WEFT_ERR_FORMAT;
    json_t *q = need(p, root, "quality", "", JSON_OBJECT);
    if (!q) return WEFT_ERR_FORMAT;
    const char *names[] = {"mean_kl", "p99_kl", "ppl_ratio"};
    uint32_t *has[] = {&l->has_mean_kl, &l->has_p99_kl, &l->has_ppl_ratio};
    double *val[] = {&l->mean_kl, &l->p99_kl, &l->ppl_ratio};
    for (int k = 0; k < 3; k++) {
        json_t *x = json_object_get(q, names[k]);
        if (!x) continue;
        if (!json_is_number(x))
            return weft_error_set(p->err, WEFT_ERR_FORMAT, p->file,
                                  "%s: quality.%s: expected a number, found %s", p->file, names[k],
                                  weft_json_kind(x));
        *has[k] = 1;
        *val[k] = json_number_value(x);
    }
    return WEFT_OK;
}

weft_status weft_lock_parse(const char *text, size_t len, const char *name, weft_lock **out,
                            weft_error *err) {
    *out = NULL;
    const char *file = name ? name : "<lock>";
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return weft_error_set(err, WEFT_ERR_FORMAT, file, "%s:%d:%d: not valid JSON: %s", file,
                              je.line, je.column, je.text);
    weft_lock *l = calloc(1, sizeof(*l));
    if (!l) {
        json_decref(root);
        return weft_error_set(err, WEFT_ERR_NOMEM, "lock", "out of memory");
    }
    parser p = {file, err};
    weft_status st = parse_root(&p, root, l);
    json_decref(root);
    if (st == WEFT_OK) {
        char id[WEFT_XXH128_HEX_LEN + 1];
        st = weft_lock_compute_id(l, id, err);
        if (st == WEFT_OK && strcmp(id, l->id) != 0)
            st = weft_error_set(err, WEFT_ERR_MISMATCH, file,
                                "%s: id differs from the lock's content: expected %s, found %s "
                                "(the lock was edited after `weft candidate freeze`)",
                                file, id, l->id);
    }
    if (st != WEFT_OK) {
        weft_lock_free(l);
        return st;
    }
    snprintf(l->path, sizeof(l->path), "%s", file);
    *out = l;
    return WEFT_OK;
}

weft_status weft_lock_load(const char *path, weft_lock **out, weft_error *err) {
    *out = NULL;
    char *buf;
    size_t n;
    weft_status st = weft_file_read(path, 64u << 20, "a lock", NULL, &buf, &n, err);
    if (st) return st;
    st = weft_lock_parse(buf, n, path, out, err);
    free(buf);
    return st;
}

/* ---- check ------------------------------------------------------------------------------ */
typedef struct reporter {
    weft_lock_report_fn fn;
    void *ctx;
    uint32_t n;
} reporter;

static void say(reporter *r, const char *fmt, ...) WEFT_PRINTF(2, 3);
static void say(reporter *r, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    r->n++;
    if (r->fn) r->fn(r->ctx, line);
}

/* Compares one file's hash with the lock's; reports missing, unreadable or different. */
static void check_file(reporter *r, const char *who, const char *what, const weft_lock_file *f,
                       int cached) {
    char hex[WEFT_SHA256_HEX_LEN + 1];
    weft_error e;
    weft_error_clear(&e);
    weft_status st = cached ? weft_hash_sha256_file_cached(f->path, hex, NULL, &e)
                            : weft_hash_sha256_file(f->path, hex, &e);
    if (st == WEFT_ERR_NOT_FOUND)
        say(r, "%s: %s missing: %s", who, what, f->path);
    else if (st != WEFT_OK)
        say(r, "%s: %s unreadable: %s", who, what, e.message);
    else if (strcmp(hex, f->sha256) != 0)
        say(r, "%s: %s hash differs from lock: expected %s, found %s (%s)", who, what, f->sha256,
            hex, f->path);
}

weft_status weft_lock_check(const weft_lock *l, uint32_t flags, weft_lock_report_fn report,
                            void *ctx, uint32_t *n_problems, weft_error *err) {
    reporter r = {report, ctx, 0};
    check_file(&r, "candidate", "manifest", &l->source, 0);
    for (uint32_t i = 0; i < l->n_plugins; i++) {
        const weft_lock_plugin *p = &l->plugins[i];
        char who[160];
        snprintf(who, sizeof(who), "plugin %s %s", p->name, p->version);
        if (p->abi_max < WEFT_ABI_VERSION_MIN || p->abi_min > WEFT_ABI_VERSION ||
            p->abi_min > p->abi_max)
            say(&r, "%s: ABI %u..%u is outside this runtime's %d..%d", who, (unsigned)p->abi_min,
                (unsigned)p->abi_max, WEFT_ABI_VERSION_MIN, WEFT_ABI_VERSION);
        check_file(&r, who, "library", &p->library, 0);
        check_file(&r, who, "manifest", &p->manifest, 0);
    }
    if (l->n_model_files) {
        struct stat sb;
        if (stat(l->model_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            say(&r, "model: directory missing: %s", l->model_dir);
        } else {
            for (uint32_t i = 0; i < l->n_model_files; i++) {
                weft_lock_file f;
                snprintf(f.path, sizeof(f.path), "%s/%s", l->model_dir, l->model_files[i].name);
                memcpy(f.sha256, l->model_files[i].sha256, sizeof(f.sha256));
                if (stat(f.path, &sb) == 0 && (uint64_t)sb.st_size != l->model_files[i].bytes) {
                    say(&r,
                        "model: file size differs from lock: expected %" PRIu64
                        " bytes, found %lld (%s)",
                        l->model_files[i].bytes, (long long)sb.st_size, f.path);
                    continue;
                }
                check_file(&r, "model", "file", &f, !(flags & WEFT_LOCK_CHECK_NO_CACHE));
            }
        }
    }
    if (n_problems) *n_problems = r.n;
    (void)err;
    return WEFT_OK;
}

/* ---- diff ------------------------------------------------------------------------------- */
static void option_text(const weft_option *o, char *buf, size_t cap) {
    switch (o->type) {
    case WEFT_OPTION_BOOL:
        snprintf(buf, cap, "%s", o->i ? "true" : "false");
        break;
    case WEFT_OPTION_INT:
        snprintf(buf, cap, "%" PRId64, o->i);
        break;
    case WEFT_OPTION_FLOAT:
        snprintf(buf, cap, "%.17g", o->f);
        break;
    case WEFT_OPTION_STRING:
        snprintf(buf, cap, "\"%s\"", o->s ? o->s : "");
        break;
    default:
        snprintf(buf, cap, "(type %u)", (unsigned)o->type);
        break;
    }
}

static const weft_lock_plugin *find_plugin(const weft_lock *l, const char *name) {
    for (uint32_t i = 0; i < l->n_plugins; i++)
        if (!strcmp(l->plugins[i].name, name)) return &l->plugins[i];
    return NULL;
}

static const weft_lock_model_file *find_model_file(const weft_lock *l, const char *name) {
    for (uint32_t i = 0; i < l->n_model_files; i++)
        if (!strcmp(l->model_files[i].name, name)) return &l->model_files[i];
    return NULL;
}

static void diff_str(reporter *r, const char *what, const char *a, const char *b) {
    if (strcmp(a, b) != 0) say(r, "%s: %s -> %s", what, a[0] ? a : "(none)", b[0] ? b : "(none)");
}

static void diff_u32(reporter *r, const char *what, uint32_t a, uint32_t b) {
    if (a != b) say(r, "%s: %u -> %u", what, (unsigned)a, (unsigned)b);
}

static void diff_plugin(reporter *r, const weft_lock_plugin *a, const weft_lock_plugin *b) {
    char who[128], buf[160], x[256], y[256];
    snprintf(who, sizeof(who), "plugin %s", a->name);
    snprintf(buf, sizeof(buf), "%s: version", who);
    diff_str(r, buf, a->version, b->version);
    if (a->abi_min != b->abi_min || a->abi_max != b->abi_max)
        say(r, "%s: ABI %u..%u -> %u..%u", who, (unsigned)a->abi_min, (unsigned)a->abi_max,
            (unsigned)b->abi_min, (unsigned)b->abi_max);
    if (a->order != b->order) say(r, "%s: order %d -> %d", who, (int)a->order, (int)b->order);
    if (a->slots != b->slots) {
        weft_slots_format(a->slots, ",", x, sizeof(x));
        weft_slots_format(b->slots, ",", y, sizeof(y));
        say(r, "%s: slots %s -> %s", who, x, y);
    }
    snprintf(buf, sizeof(buf), "%s: bundle", who);
    diff_str(r, buf, a->bundle_dir, b->bundle_dir);
    snprintf(buf, sizeof(buf), "%s: library", who);
    diff_str(r, buf, a->library.path, b->library.path);
    snprintf(buf, sizeof(buf), "%s: library sha256", who);
    diff_str(r, buf, a->library.sha256, b->library.sha256);
    snprintf(buf, sizeof(buf), "%s: manifest sha256", who);
    diff_str(r, buf, a->manifest.sha256, b->manifest.sha256);
    for (uint32_t i = 0; i < a->options.count; i++) {
        const weft_option *oa = &a->options.items[i];
        const weft_option *ob = weft_options_find(&b->options, oa->key);
        option_text(oa, x, sizeof(x));
        if (!ob) {
            say(r, "%s: option %s removed (was %s)", who, oa->key, x);
            continue;
        }
        option_text(ob, y, sizeof(y));
        if (strcmp(x, y) != 0 || oa->type != ob->type)
            say(r, "%s: option %s: %s -> %s", who, oa->key, x, y);
    }
    for (uint32_t i = 0; i < b->options.count; i++) {
        const weft_option *ob = &b->options.items[i];
        if (weft_options_find(&a->options, ob->key)) continue;
        option_text(ob, y, sizeof(y));
        say(r, "%s: option %s added (%s)", who, ob->key, y);
    }
}

weft_status weft_lock_diff(const weft_lock *a, const weft_lock *b, weft_lock_report_fn report,
                           void *ctx, uint32_t *n_diffs, weft_error *err) {
    reporter r = {report, ctx, 0};
    (void)err;
    diff_str(&r, "candidate", a->candidate, b->candidate);
    diff_str(&r, "candidate manifest", a->source.path, b->source.path);
    diff_str(&r, "candidate manifest sha256", a->source.sha256, b->source.sha256);
    diff_str(&r, "backend", a->backend, b->backend);
    diff_str(&r, "model", a->model, b->model);
    diff_str(&r, "model dir", a->model_dir, b->model_dir);
    for (uint32_t i = 0; i < a->n_model_files; i++) {
        const weft_lock_model_file *fa = &a->model_files[i];
        const weft_lock_model_file *fb = find_model_file(b, fa->name);
        if (!fb)
            say(&r, "model file %s removed", fa->name);
        else if (strcmp(fa->sha256, fb->sha256) != 0)
            say(&r, "model file %s: sha256 %s -> %s", fa->name, fa->sha256, fb->sha256);
    }
    for (uint32_t i = 0; i < b->n_model_files; i++)
        if (!find_model_file(a, b->model_files[i].name))
            say(&r, "model file %s added", b->model_files[i].name);
    for (uint32_t i = 0; i < a->n_plugins; i++) {
        const weft_lock_plugin *pb = find_plugin(b, a->plugins[i].name);
        if (!pb)
            say(&r, "plugin %s %s removed", a->plugins[i].name, a->plugins[i].version);
        else
            diff_plugin(&r, &a->plugins[i], pb);
    }
    for (uint32_t i = 0; i < b->n_plugins; i++)
        if (!find_plugin(a, b->plugins[i].name))
            say(&r, "plugin %s %s added", b->plugins[i].name, b->plugins[i].version);
    diff_u32(&r, "serving max_model_len", a->max_model_len, b->max_model_len);
    diff_u32(&r, "serving max_concurrency", a->max_concurrency, b->max_concurrency);
    diff_u32(&r, "serving threads", a->threads, b->threads);
    const char *qn[] = {"quality mean_kl", "quality p99_kl", "quality ppl_ratio"};
    uint32_t ha[] = {a->has_mean_kl, a->has_p99_kl, a->has_ppl_ratio};
    uint32_t hb[] = {b->has_mean_kl, b->has_p99_kl, b->has_ppl_ratio};
    double va[] = {a->mean_kl, a->p99_kl, a->ppl_ratio},
           vb[] = {b->mean_kl, b->p99_kl, b->ppl_ratio};
    for (int k = 0; k < 3; k++) {
        if (ha[k] == hb[k] && (!ha[k] || va[k] == vb[k])) continue;
        char x[64] = "(default)", y[64] = "(default)";
        if (ha[k]) snprintf(x, sizeof(x), "%.17g", va[k]);
        if (hb[k]) snprintf(y, sizeof(y), "%.17g", vb[k]);
        say(&r, "%s: %s -> %s", qn[k], x, y);
    }
    if (n_diffs) *n_diffs = r.n;
    return WEFT_OK;
}
