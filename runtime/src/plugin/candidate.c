/* Loading candidates (candidate.h): from a lock, everything is verified before anything runs
 * (each manifest is read once and hashed in memory, then parsed from those same bytes; model
 * files are re-hashed through the hash cache; each library is hashed on the descriptor it is
 * loaded from); from a candidate manifest (development), the resolver's choice is loaded as is.
 * Plugins are created in candidate order and destroyed in reverse. */
#include "plugin/candidate.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin/loader.h"
#include "plugin/lock.h"
#include "plugin/manifest.h"
#include "plugin/registry.h"
#include "plugin/resolve.h"
#include "util/error.h"
#include "util/hash.h"

void weft_candidate_unload(weft_candidate *c) {
    if (!c) return;
    for (size_t i = c->n_plugins; i-- > 0;)
        weft_plugin_close(&c->plugins[i]);
    free(c->plugins);
    free(c);
}

const weft_loaded_plugin *weft_candidate_slot(const weft_candidate *c, uint32_t slot) {
    if (!c) return NULL;
    /* A chain slot: its first plugin. Another slot: its last filler, since a technique
     * layered on another (resolve.c, check_set) comes after it. */
    const weft_loaded_plugin *found = NULL;
    for (size_t i = 0; i < c->n_plugins; i++)
        if (c->plugins[i].slots & slot) {
            found = &c->plugins[i];
            if (weft_slot_is_chain(slot)) break;
        }
    return found;
}

static weft_candidate *candidate_new(size_t n_plugins, weft_error *err) {
    weft_candidate *c = calloc(1, sizeof(*c));
    if (c) c->plugins = calloc(n_plugins ? n_plugins : 1, sizeof(*c->plugins));
    if (!c || !c->plugins) {
        free(c);
        weft_error_set(err, WEFT_ERR_NOMEM, "loader", "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n_plugins; i++)
        c->plugins[i].fd = -1;
    return c;
}

/* Reads a whole (small) file through one descriptor. */
static weft_status read_small(const char *path, char **text, size_t *len, weft_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, path,
                              "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > WEFT_MANIFEST_MAX_BYTES) {
        close(fd);
        return weft_error_set(err, WEFT_ERR_FORMAT, path,
                              "expected a regular file of at most %u bytes",
                              WEFT_MANIFEST_MAX_BYTES);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    size_t n = 0;
    while (buf && n < (size_t)sb.st_size) {
        ssize_t got = read(fd, buf + n, (size_t)sb.st_size - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (!buf) return weft_error_set(err, WEFT_ERR_NOMEM, path, "out of memory");
    if (n != (size_t)sb.st_size) {
        free(buf);
        return weft_error_set(err, WEFT_ERR_IO, path, "short read: %zu of %lld bytes", n,
                              (long long)sb.st_size);
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return WEFT_OK;
}

/* A lock's typed option back into the manifest value form, so weft_options_build re-validates
 * it against the (hash-checked) manifest's schema. */
static weft_status value_of(const weft_option *o, weft_manifest_value *v, weft_error *err) {
    char num[64];
    const char *text = num;
    memset(v, 0, sizeof(*v));
    snprintf(v->key, sizeof(v->key), "%s", o->key ? o->key : "");
    switch (o->type) {
    case WEFT_OPTION_BOOL:
        text = o->i ? "true" : "false";
        break;
    case WEFT_OPTION_INT:
        snprintf(num, sizeof(num), "%" PRId64, o->i);
        break;
    case WEFT_OPTION_FLOAT:
        snprintf(num, sizeof(num), "%.17g", o->f);
        if (!strpbrk(num, ".eEn")) strcat(num, ".0");
        break;
    case WEFT_OPTION_STRING:
        text = o->s ? o->s : "";
        v->quoted = 1;
        break;
    default:
        return weft_error_set(err, WEFT_ERR_FORMAT, "lock", "option %s has unknown type %u", v->key,
                              (unsigned)o->type);
    }
    v->text = strdup(text);
    return v->text ? WEFT_OK : weft_error_set(err, WEFT_ERR_NOMEM, "lock", "out of memory");
}

static weft_status lock_options(const weft_lock *l, uint32_t index, const weft_plugin_manifest *m,
                                weft_options *out, weft_error *err) {
    const weft_options *src = &l->plugins[index].options;
    weft_manifest_value *vals = calloc(src->count ? src->count : 1, sizeof(*vals));
    if (!vals) return weft_error_set(err, WEFT_ERR_NOMEM, "lock", "out of memory");
    weft_status st = WEFT_OK;
    for (uint32_t i = 0; i < src->count && st == WEFT_OK; i++)
        st = value_of(&src->items[i], &vals[i], err);
    char field[64];
    snprintf(field, sizeof(field), "plugins[%u].options", (unsigned)index);
    if (st == WEFT_OK) st = weft_options_build(m, vals, src->count, l->path, field, out, err);
    for (uint32_t i = 0; i < src->count; i++)
        free(vals[i].text);
    free(vals);
    return st;
}

static weft_status verify_model(const weft_lock *l, weft_error *err) {
    for (uint32_t i = 0; i < l->n_model_files; i++) {
        char path[WEFT_LOCK_PATH_MAX + 300], hex[WEFT_SHA256_HEX_LEN + 1];
        snprintf(path, sizeof(path), "%s/%s", l->model_dir, l->model_files[i].name);
        weft_status st = weft_hash_sha256_file_cached(path, hex, NULL, err);
        if (st != WEFT_OK) {
            weft_error_prefix(err, "model file of lock %s", l->path);
            return st;
        }
        if (strcmp(hex, l->model_files[i].sha256) != 0)
            return weft_error_set(err, WEFT_ERR_MISMATCH, path,
                                  "model file hash differs from lock: expected %s, found %s (%s)",
                                  l->model_files[i].sha256, hex, path);
    }
    return WEFT_OK;
}

static weft_status load_locked_plugin(const weft_lock *l, uint32_t i,
                                      const weft_host_services *host, weft_loaded_plugin *lp,
                                      weft_error *err) {
    const weft_lock_plugin *p = &l->plugins[i];
    char *text = NULL, hex[WEFT_SHA256_HEX_LEN + 1];
    size_t len = 0;
    weft_status st = read_small(p->manifest.path, &text, &len, err);
    if (st != WEFT_OK) {
        weft_error_prefix(err, "plugin %s %s: manifest", p->name, p->version);
        return st;
    }
    weft_hash_sha256_buf(text, len, hex);
    if (strcmp(hex, p->manifest.sha256) != 0) {
        free(text);
        return weft_error_set(err, WEFT_ERR_MISMATCH, p->name,
                              "plugin %s %s: manifest hash differs from lock: expected %s, found "
                              "%s (%s)",
                              p->name, p->version, p->manifest.sha256, hex, p->manifest.path);
    }
    weft_plugin_manifest *m = NULL;
    st = weft_plugin_manifest_parse(text, len, p->manifest.path, &m, err);
    free(text);
    if (st != WEFT_OK) return st;
    if (strcmp(m->name, p->name) != 0 || strcmp(m->version_text, p->version) != 0) {
        st =
            weft_error_set(err, WEFT_ERR_MISMATCH, p->name, "plugin %s %s: manifest %s names %s %s",
                           p->name, p->version, p->manifest.path, m->name, m->version_text);
        weft_plugin_manifest_free(m);
        return st;
    }
    weft_options opts = {0, NULL};
    st = lock_options(l, i, m, &opts, err);
    if (st == WEFT_OK) {
        weft_plugin_expect ex = {m->name,    m->version_text, m->kind,          m->slots,
                                 m->abi_min, m->abi_max,      p->library.sha256};
        st = weft_plugin_open(p->library.path, &ex, lp, err);
        if (st == WEFT_OK) st = weft_plugin_instantiate(lp, host, &opts, err);
        if (st == WEFT_OK) {
            snprintf(lp->bundle_dir, sizeof(lp->bundle_dir), "%s", p->bundle_dir);
            lp->order = (int32_t)i;
        }
    }
    weft_options_free(&opts);
    weft_plugin_manifest_free(m);
    return st;
}

weft_status weft_candidate_load_lock(const char *lock_path, const weft_host_services *host,
                                     weft_candidate **out, weft_error *err) {
    *out = NULL;
    if (!lock_path || !host)
        return weft_error_set(err, WEFT_ERR_INVALID, "loader",
                              "a lock path and host services "
                              "are required");
    weft_lock *l = NULL;
    weft_status st = weft_lock_load(lock_path, &l, err);
    if (st != WEFT_OK) return st;
    if ((st = verify_model(l, err)) != WEFT_OK) {
        weft_lock_free(l);
        return st;
    }
    weft_candidate *c = candidate_new(l->n_plugins, err);
    if (!c) {
        weft_lock_free(l);
        return WEFT_ERR_NOMEM;
    }
    snprintf(c->id, sizeof(c->id), "%s", l->id);
    snprintf(c->path, sizeof(c->path), "%s", lock_path);
    snprintf(c->model_dir, sizeof(c->model_dir), "%s", l->model_dir);
    snprintf(c->backend, sizeof(c->backend), "%s", l->backend);
    c->max_model_len = l->max_model_len;
    c->max_concurrency = l->max_concurrency;
    c->threads = l->threads;
    for (uint32_t i = 0; i < l->n_plugins && st == WEFT_OK; i++) {
        st = load_locked_plugin(l, i, host, &c->plugins[i], err);
        if (st == WEFT_OK)
            c->n_plugins = i + 1;
        else
            weft_plugin_close(&c->plugins[i]); /* opened but not created */
    }
    weft_lock_free(l);
    if (st != WEFT_OK) {
        weft_candidate_unload(c);
        return st;
    }
    *out = c;
    return WEFT_OK;
}

weft_status weft_candidate_load_manifest(const char *manifest_path, const char *model_dir,
                                         const weft_host_services *host, weft_candidate **out,
                                         weft_error *err) {
    *out = NULL;
    if (!manifest_path || !host)
        return weft_error_set(err, WEFT_ERR_INVALID, "loader",
                              "a candidate manifest path and host services are required");
    weft_registry *reg = NULL;
    weft_status st = weft_registry_discover(NULL, 0, 0, &reg, err);
    if (st != WEFT_OK) return st;
    weft_resolve_options ro;
    memset(&ro, 0, sizeof(ro));
    ro.size = sizeof(ro);
    ro.model_dir = model_dir;
    weft_resolved_candidate *rc = NULL;
    st = weft_resolve_file(manifest_path, reg, &ro, &rc, err);
    weft_registry_free(reg);
    if (st != WEFT_OK) return st;
    weft_candidate *c = candidate_new(rc->n_plugins, err);
    if (!c) {
        weft_resolved_free(rc);
        return WEFT_ERR_NOMEM;
    }
    snprintf(c->path, sizeof(c->path), "%s", manifest_path);
    snprintf(c->model_dir, sizeof(c->model_dir), "%s", rc->model_dir);
    snprintf(c->backend, sizeof(c->backend), "%s", rc->backend);
    c->max_model_len = rc->max_model_len;
    c->max_concurrency = rc->max_concurrency;
    c->threads = rc->threads;
    for (uint32_t i = 0; i < rc->n_plugins && st == WEFT_OK; i++) {
        const weft_resolved_plugin *rp = &rc->plugins[i];
        const weft_plugin_manifest *m = rp->manifest;
        weft_plugin_expect ex = {m->name,    m->version_text, m->kind, m->slots,
                                 m->abi_min, m->abi_max,      NULL};
        weft_loaded_plugin *lp = &c->plugins[i];
        st = weft_plugin_open(rp->library_path, &ex, lp, err);
        if (st == WEFT_OK) st = weft_plugin_instantiate(lp, host, &rp->options, err);
        if (st == WEFT_OK) {
            snprintf(lp->bundle_dir, sizeof(lp->bundle_dir), "%s", rp->bundle_dir);
            lp->order = (int32_t)i;
            c->n_plugins = i + 1;
        } else {
            weft_plugin_close(lp);
        }
    }
    weft_resolved_free(rc);
    if (st != WEFT_OK) {
        weft_candidate_unload(c);
        return st;
    }
    *out = c;
    return WEFT_OK;
}
