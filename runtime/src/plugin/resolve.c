/* Candidate resolution (see resolve.h): picks one bundle per named plugin from the registry,
 * then checks the set as a whole: kinds, ABI, backend and platform, options, requires,
 * conflicts, one provider per non-chain slot, and orders techniques by `after`. Checks run in
 * a fixed order so that the first refusal is the most basic one (a missing plugin before its
 * options), and every refusal is one sentence that says what to change in which file. */
#include "plugin/resolve.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include "util/cache.h"
#include "util/error.h"
#include "util/file.h"

#define SRC "resolve"

const char *weft_host_arch(void) {
#if defined(__x86_64__)
    return "x86_64";
#elif defined(__aarch64__)
    return "aarch64";
#else
    static char machine[65];
    struct utsname u;
    if (!machine[0] && uname(&u) == 0) snprintf(machine, sizeof(machine), "%s", u.machine);
    return machine;
#endif
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- model directories ---------------------------------------------------------------------- */
weft_status weft_model_cache_dir(char *buf, size_t cap, weft_error *err) {
    return weft_cache_path("models", buf, cap, err);
}

static int hub_part_valid(const char *s, size_t n) {
    if (n == 0 || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static weft_status finish_dir(const char *path, char *out, size_t cap, weft_error *err) {
    char real[PATH_MAX];
    const char *p = realpath(path, real) ? real : path;
    if (strlen(p) >= cap)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "model path %s is too long", p);
    snprintf(out, cap, "%s", p);
    return WEFT_OK;
}

weft_status weft_model_dir_resolve(const char *model, const char *manifest_path, char *out,
                                   size_t cap, weft_error *err) {
    if (!model || !model[0] || !out || !cap)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no model given");
    out[0] = '\0';
    char path[PATH_MAX];
    int explicit_path = model[0] == '/' || !strncmp(model, "./", 2) || !strncmp(model, "../", 3) ||
                        !strcmp(model, ".") || !strcmp(model, "..");
    const char *slash = strchr(model, '/');
    if (model[0] == '/') {
        snprintf(path, sizeof(path), "%s", model);
    } else if (slash) {
        /* relative to the manifest's directory */
        char base[PATH_MAX] = ".";
        if (manifest_path) {
            const char *cut = strrchr(manifest_path, '/');
            if (cut)
                snprintf(base, sizeof(base), "%.*s", (int)(cut - manifest_path), manifest_path);
            if (cut == manifest_path) snprintf(base, sizeof(base), "/");
        }
        snprintf(path, sizeof(path), "%s/%s", base, model);
    } else {
        path[0] = '\0';
    }
    if (path[0] && is_dir(path)) return finish_dir(path, out, cap, err);
    if (explicit_path)
        return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                              "model directory %s not found: check the path or use a model name "
                              "from the cache",
                              path);
    /* a cache name, or a hub id org/name stored as org--name */
    char cache[PATH_MAX], entry[PATH_MAX];
    weft_status st = weft_model_cache_dir(cache, sizeof(cache), err);
    if (st) return st;
    if (slash) {
        size_t org = (size_t)(slash - model);
        const char *name = slash + 1;
        if (!hub_part_valid(model, org) || !hub_part_valid(name, strlen(name)))
            return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                                  "model %s is neither a directory (%s) nor a hub id org/name: "
                                  "fix the model field",
                                  model, path);
        snprintf(entry, sizeof(entry), "%s/%.*s--%s", cache, (int)org, model, name);
    } else {
        if (!hub_part_valid(model, strlen(model)))
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "model name %s has characters outside [A-Za-z0-9._-]: fix the "
                                  "model field",
                                  model);
        snprintf(entry, sizeof(entry), "%s/%s", cache, model);
    }
    if (is_dir(entry)) return finish_dir(entry, out, cap, err);
    return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                          "model %s not found in %s: run `weft pull %s`", model, cache, model);
}

/* architectures[0] of DIR/config.json into arch ("" when there is no config.json). */
static weft_status read_architecture(const char *dir, char *arch, size_t cap, weft_error *err) {
    arch[0] = '\0';
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *root;
    weft_error fe = {.size = sizeof(fe)};
    weft_status rs = weft_file_absent_ok(
        weft_file_read_json(path, 16u << 20, JSON_REJECT_DUPLICATES, SRC, &root, &fe), &fe, err);
    if (rs || !root) return rs; /* an error, or no config.json */
    json_t *a = json_object_get(root, "architectures");
    json_t *first = json_is_array(a) ? json_array_get(a, 0) : NULL;
    weft_status st = WEFT_OK;
    if (a && !json_is_string(first))
        st = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                            "%s: architectures: expected a list of architecture names, found "
                            "another value",
                            path);
    else if (first)
        snprintf(arch, cap, "%s", json_string_value(first));
    json_decref(root);
    return st;
}

/* ---- resolution ----------------------------------------------------------------------------- */
typedef struct pick {
    const weft_registry_entry *entry;
    const weft_candidate_ref *ref; /* NULL for a model plugin chosen by architecture */
    uint32_t role;
    char field[64]; /* "backend", "model_plugin", "techniques[2]" */
} pick;

typedef struct rctx {
    const weft_candidate_manifest *m;
    const weft_registry *reg;
    weft_error *err;
} rctx;

/* What to do about a plugin that cannot be used, by its role in the candidate. */
static const char *remedy(uint32_t role) {
    if (role == WEFT_ROLE_BACKEND) return "choose another backend in";
    if (role == WEFT_ROLE_MODEL) return "choose another model_plugin in";
    return "remove it from";
}

static const char *role_word(uint32_t role, uint32_t kind) {
    if (role == WEFT_ROLE_BACKEND) return "backend";
    if (role == WEFT_ROLE_MODEL) return "model plugin";
    return kind == WEFT_KIND_FEATURE ? "feature" : "technique";
}

static void installed_versions(const weft_registry *reg, const char *name, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < reg->n; i++) {
        const weft_registry_entry *e = &reg->entries[i];
        if (e->status != WEFT_BUNDLE_OK || strcmp(e->manifest->name, name)) continue;
        int w =
            snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", e->manifest->version_text);
        if (w < 0 || (size_t)w >= cap - used) break;
        used += (size_t)w;
    }
}

/* The registry entry for a reference, or a refusal naming what to do. */
static weft_status find_ref(rctx *c, const weft_candidate_ref *ref, const char *field,
                            uint32_t role, const weft_registry_entry **out) {
    const weft_registry_entry *e = weft_registry_find(c->reg, ref->name, &ref->range);
    const char *what = role == WEFT_ROLE_BACKEND ? "backend"
                       : role == WEFT_ROLE_MODEL ? "model plugin"
                                                 : "technique";
    if (e) {
        *out = e;
        return WEFT_OK;
    }
    if (weft_registry_has_name(c->reg, ref->name)) {
        char have[256];
        installed_versions(c->reg, ref->name, have, sizeof(have));
        return weft_error_set(c->err, WEFT_ERR_NOT_FOUND, SRC,
                              "%s:%u:%u: %s: no installed version of %s %s matches \"%s\" "
                              "(installed: %s): change the version range in %s",
                              c->m->path, ref->pos.line, ref->pos.column, field, what, ref->name,
                              ref->range.text, have, c->m->path);
    }
    /* broken bundles of that name: say so, it is the likely cause */
    for (size_t i = 0; i < c->reg->n; i++) {
        const weft_registry_entry *b = &c->reg->entries[i];
        if (b->status != WEFT_BUNDLE_BROKEN) continue;
        const char *base = strrchr(b->bundle_dir, '/');
        if (base && !strcmp(base + 1, ref->name))
            return weft_error_set(c->err, WEFT_ERR_FORMAT, SRC,
                                  "%s:%u:%u: %s: %s %s is installed in %s but its manifest is "
                                  "broken (%s): fix that manifest",
                                  c->m->path, ref->pos.line, ref->pos.column, field, what,
                                  ref->name, b->bundle_dir, b->error.message);
    }
    char near[200];
    uint32_t kind = role == WEFT_ROLE_BACKEND ? WEFT_KIND_BACKEND
                    : role == WEFT_ROLE_MODEL ? WEFT_KIND_MODEL
                                              : 0;
    int n = weft_registry_suggest(c->reg, ref->name, kind, near, sizeof(near));
    if (n)
        return weft_error_set(c->err, WEFT_ERR_NOT_FOUND, SRC,
                              "%s:%u:%u: %s: no %s named %s on the plugin path: did you mean %s?",
                              c->m->path, ref->pos.line, ref->pos.column, field, what, ref->name,
                              near);
    return weft_error_set(c->err, WEFT_ERR_NOT_FOUND, SRC,
                          "%s:%u:%u: %s: no %s named %s on the plugin path (%zu dirs searched): "
                          "build it or add its bundle directory to WEFT_PLUGIN_PATH",
                          c->m->path, ref->pos.line, ref->pos.column, field, what, ref->name,
                          c->reg->n_dirs);
}

/* Kind, ABI, backend and platform of one picked plugin. */
static weft_status check_pick(rctx *c, const pick *p, const char *arch) {
    const weft_plugin_manifest *pm = p->entry->manifest;
    const char *word = role_word(p->role, pm->kind);
    uint32_t line = p->ref ? p->ref->pos.line : c->m->model_pos.line;
    uint32_t col = p->ref ? p->ref->pos.column : c->m->model_pos.column;
    const char *backend = c->m->backend.name;
    uint32_t want_kind = p->role == WEFT_ROLE_BACKEND ? WEFT_KIND_BACKEND
                         : p->role == WEFT_ROLE_MODEL ? WEFT_KIND_MODEL
                                                      : 0;
    if (want_kind && pm->kind != want_kind)
        return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                              "%s:%u:%u: %s: %s is a %s plugin, not a %s: name a %s plugin there",
                              c->m->path, line, col, p->field, pm->name,
                              weft_plugin_kind_name(pm->kind), weft_plugin_kind_name(want_kind),
                              weft_plugin_kind_name(want_kind));
    if (!want_kind && (pm->kind == WEFT_KIND_BACKEND || pm->kind == WEFT_KIND_MODEL))
        return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                              "%s:%u:%u: %s: %s is a %s plugin, not a technique: set it as %s "
                              "instead",
                              c->m->path, line, col, p->field, pm->name,
                              weft_plugin_kind_name(pm->kind),
                              pm->kind == WEFT_KIND_BACKEND ? "backend" : "model_plugin");
    if (pm->abi_max < WEFT_ABI_VERSION_MIN || pm->abi_min > WEFT_ABI_VERSION)
        return weft_error_set(c->err, WEFT_ERR_ABI, SRC,
                              "%s %s %s speaks plugin ABI %u..%u but this runtime speaks %d..%d: "
                              "use a build of %s for this runtime",
                              word, pm->name, pm->version_text, pm->abi_min, pm->abi_max,
                              WEFT_ABI_VERSION_MIN, WEFT_ABI_VERSION, pm->name);
    if (!weft_plugin_manifest_has_backend(pm, backend)) {
        char list[200] = "";
        size_t used = 0;
        for (uint32_t i = 0; i < pm->n_backends && used < sizeof(list); i++)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                     pm->backends[i]);
        return weft_error_set(c->err, WEFT_ERR_UNSUPPORTED, SRC,
                              "%s %s %s runs on backend %s, not %s: %s %s", word, pm->name,
                              pm->version_text, list, backend, remedy(p->role), c->m->path);
    }
    if (pm->n_platforms) {
        int ok = 0;
        for (uint32_t i = 0; i < pm->n_platforms && !ok; i++) {
            const weft_manifest_platform *pl = &pm->platforms[i];
            if (pl->arch[0] && strcmp(pl->arch, arch)) continue;
            /* a CUDA requirement can only hold on the cuda backend; its driver and SM are
             * checked by the loader once the backend is up */
            if (pl->cuda_major && strcmp(backend, "cuda")) continue;
            ok = 1;
        }
        if (!ok) {
            char list[256] = "";
            size_t used = 0;
            for (uint32_t i = 0; i < pm->n_platforms && used + 1 < sizeof(list); i++) {
                const weft_manifest_platform *pl = &pm->platforms[i];
                int w;
                if (pl->cuda_major)
                    w = snprintf(list + used, sizeof(list) - used, "%s%s+cuda%u", i ? ", " : "",
                                 pl->arch[0] ? pl->arch : "any", pl->cuda_major);
                else
                    w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                 pl->arch[0] ? pl->arch : "any");
                if (w < 0) break;
                used += (size_t)w;
            }
            return weft_error_set(c->err, WEFT_ERR_UNSUPPORTED, SRC,
                                  "%s %s %s supports platforms %s, not %s with backend %s: "
                                  "%s %s",
                                  word, pm->name, pm->version_text, list, arch, backend,
                                  remedy(p->role), c->m->path);
        }
    }
    return WEFT_OK;
}

/* The model plugin for an architecture: every ok model plugin listing it and the backend. */
static weft_status pick_model_by_arch(rctx *c, const char *arch, const char *model_dir,
                                      const weft_registry_entry **out) {
    const weft_registry_entry *best = NULL;
    const char *backend = c->m->backend.name;
    for (size_t i = 0; i < c->reg->n; i++) {
        const weft_registry_entry *e = &c->reg->entries[i];
        if (e->status != WEFT_BUNDLE_OK || e->manifest->kind != WEFT_KIND_MODEL) continue;
        int has = 0;
        for (uint32_t k = 0; k < e->manifest->n_architectures; k++)
            if (!strcmp(e->manifest->architectures[k], arch)) has = 1;
        if (!has || !weft_plugin_manifest_has_backend(e->manifest, backend)) continue;
        if (best && strcmp(best->manifest->name, e->manifest->name))
            return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                                  "architecture %s is run by model plugins %s and %s: name one "
                                  "as model_plugin in %s",
                                  arch, best->manifest->name, e->manifest->name, c->m->path);
        if (!best || weft_semver_compare(&e->manifest->version, &best->manifest->version) > 0)
            best = e;
    }
    if (!best)
        return weft_error_set(c->err, WEFT_ERR_NOT_FOUND, SRC,
                              "no model plugin on the plugin path runs architecture %s (from "
                              "%s/config.json) on backend %s: install one or name model_plugin "
                              "in %s",
                              arch, model_dir, backend, c->m->path);
    *out = best;
    return WEFT_OK;
}

static const pick *find_pick(const pick *picks, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(picks[i].entry->manifest->name, name)) return &picks[i];
    return NULL;
}

static int lists_name(const weft_manifest_dep *deps, uint32_t n, const char *name) {
    for (uint32_t k = 0; k < n; k++)
        if (!strcmp(deps[k].name, name)) return 1;
    return 0;
}

static int lists_after(const weft_plugin_manifest *m, const char *name) {
    for (uint32_t k = 0; k < m->n_after; k++)
        if (!strcmp(m->after[k], name)) return 1;
    return 0;
}

/* x layers on base: x requires base and runs after it, so x may fill a slot base also fills
 * and x is that slot's provider (kv.prefix-cache extends the kv slot of kv.paged, whose
 * attention ops it needs). Slot lookups return the last filler in chain order. */
static int layers_on(const weft_plugin_manifest *x, const weft_plugin_manifest *base) {
    return x->kind == WEFT_KIND_TECHNIQUE && base->kind == WEFT_KIND_TECHNIQUE &&
           lists_name(x->requires, x->n_requires, base->name) && lists_after(x, base->name);
}

static weft_status check_set(rctx *c, const pick *picks, uint32_t n) {
    /* one provider per non-chain slot, unless one technique layers on the other */
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < i; j++) {
            uint32_t shared = picks[i].entry->manifest->slots & picks[j].entry->manifest->slots;
            for (uint32_t bit = 1; shared && bit; bit <<= 1) {
                if (!(shared & bit) || weft_slot_is_chain(bit)) continue;
                const weft_plugin_manifest *a = picks[j].entry->manifest,
                                           *b = picks[i].entry->manifest;
                if (layers_on(a, b) || layers_on(b, a)) continue;
                return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                                      "%s %s %s conflicts with %s %s (both fill slot %s): "
                                      "remove one of them from %s",
                                      role_word(picks[i].role, b->kind), b->name, b->version_text,
                                      a->name, a->version_text, weft_slot_name(bit), c->m->path);
            }
        }
    /* declared conflicts, from either side */
    for (uint32_t i = 0; i < n; i++) {
        const weft_plugin_manifest *a = picks[i].entry->manifest;
        for (uint32_t k = 0; k < a->n_conflicts; k++) {
            const weft_manifest_dep *d = &a->conflicts[k];
            const pick *q = find_pick(picks, n, d->name);
            if (!q || !weft_semver_satisfies(&d->range, &q->entry->manifest->version)) continue;
            return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                                  "%s %s %s conflicts with %s %s (its manifest says so): remove "
                                  "one of them from %s",
                                  role_word(picks[i].role, a->kind), a->name, a->version_text,
                                  q->entry->manifest->name, q->entry->manifest->version_text,
                                  c->m->path);
        }
    }
    /* requirements */
    for (uint32_t i = 0; i < n; i++) {
        const weft_plugin_manifest *a = picks[i].entry->manifest;
        for (uint32_t k = 0; k < a->n_requires; k++) {
            const weft_manifest_dep *d = &a->requires[k];
            const pick *q = find_pick(picks, n, d->name);
            const char *word = role_word(picks[i].role, a->kind);
            int any = !strcmp(d->range.text, "*");
            if (!q)
                return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                                      "%s %s %s requires %s%s%s, which the candidate does not "
                                      "include: add %s to techniques in %s",
                                      word, a->name, a->version_text, d->name, any ? "" : " ",
                                      any ? "" : d->range.text, d->name, c->m->path);
            if (!weft_semver_satisfies(&d->range, &q->entry->manifest->version))
                return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                                      "%s %s %s requires %s %s but the candidate selects %s %s: "
                                      "select a version of %s matching %s or remove %s from %s",
                                      word, a->name, a->version_text, d->name, d->range.text,
                                      d->name, q->entry->manifest->version_text, d->name,
                                      d->range.text, a->name, c->m->path);
        }
    }
    return WEFT_OK;
}

/* Orders picks[first..n) so that every `after` name among them comes earlier; ties keep the
 * manifest order. order receives pick indices. */
static weft_status order_chain(rctx *c, const pick *picks, uint32_t first, uint32_t n,
                               uint32_t *order) {
    uint32_t placed_n = 0;
    char *placed = calloc(n ? n : 1, 1);
    if (!placed) return weft_error_set(c->err, WEFT_ERR_NOMEM, SRC, "out of memory");
    for (uint32_t i = 0; i < first; i++) {
        placed[i] = 1;
        order[placed_n++] = i;
    }
    while (placed_n < n) {
        int progress = 0;
        for (uint32_t i = first; i < n; i++) {
            if (placed[i]) continue;
            const weft_plugin_manifest *a = picks[i].entry->manifest;
            int ready = 1;
            for (uint32_t k = 0; k < a->n_after && ready; k++)
                for (uint32_t j = first; j < n; j++)
                    if (!placed[j] && j != i &&
                        !strcmp(picks[j].entry->manifest->name, a->after[k]))
                        ready = 0;
            if (!ready) continue;
            placed[i] = 1;
            order[placed_n++] = i;
            progress = 1;
            break; /* restart so that earlier manifest entries win ties */
        }
        if (progress) continue;
        /* every unplaced one waits for another unplaced one: walk the waits to a cycle */
        uint32_t start = first;
        while (placed[start])
            start++;
        uint32_t path[64], len = 0, cur = start;
        int seen_at = -1;
        while (len < 64 && seen_at < 0) {
            for (uint32_t k = 0; k < len; k++)
                if (path[k] == cur) seen_at = (int)k;
            if (seen_at >= 0) break;
            path[len++] = cur;
            const weft_plugin_manifest *a = picks[cur].entry->manifest;
            uint32_t next = cur;
            for (uint32_t k = 0; k < a->n_after && next == cur; k++)
                for (uint32_t j = first; j < n; j++)
                    if (!placed[j] && j != cur &&
                        !strcmp(picks[j].entry->manifest->name, a->after[k])) {
                        next = j;
                        break;
                    }
            cur = next;
        }
        char cyc[320] = "";
        size_t used = 0;
        for (uint32_t k = seen_at < 0 ? 0 : (uint32_t)seen_at; k < len; k++) {
            int w = snprintf(cyc + used, sizeof(cyc) - used, "%s%s", used ? " after " : "",
                             picks[path[k]].entry->manifest->name);
            if (w < 0 || (size_t)w >= sizeof(cyc) - used) break;
            used += (size_t)w;
        }
        if (seen_at >= 0 && used < sizeof(cyc))
            snprintf(cyc + used, sizeof(cyc) - used, " after %s",
                     picks[path[seen_at]].entry->manifest->name);
        free(placed);
        return weft_error_set(c->err, WEFT_ERR_INVALID, SRC,
                              "the `after` lists of the techniques form a cycle (%s), so no "
                              "order satisfies them: remove one of these techniques from %s",
                              cyc, c->m->path);
    }
    free(placed);
    return WEFT_OK;
}

static weft_status fill_plugin(rctx *c, const pick *p, const char *field,
                               weft_resolved_plugin *out) {
    const weft_registry_entry *e = p->entry;
    const weft_plugin_manifest *pm = e->manifest;
    snprintf(out->name, sizeof(out->name), "%s", pm->name);
    snprintf(out->version, sizeof(out->version), "%s", pm->version_text);
    out->role = p->role;
    out->slots = pm->slots;
    snprintf(out->bundle_dir, sizeof(out->bundle_dir), "%s", e->bundle_dir);
    snprintf(out->manifest_path, sizeof(out->manifest_path), "%s", e->manifest_path);
    snprintf(out->library_path, sizeof(out->library_path), "%s/%s", e->bundle_dir, pm->library);
    char opt_field[96];
    snprintf(opt_field, sizeof(opt_field), "%s.options", field);
    weft_status st =
        weft_options_build(pm, p->ref ? p->ref->options : NULL, p->ref ? p->ref->n_options : 0,
                           c->m->path, opt_field, &out->options, c->err);
    if (st) return st;
    return weft_plugin_manifest_dup(pm, &out->manifest, c->err);
}

void weft_resolved_free(weft_resolved_candidate *rc) {
    if (!rc) return;
    for (uint32_t i = 0; rc->plugins && i < rc->n_plugins; i++) {
        weft_plugin_manifest_free(rc->plugins[i].manifest);
        weft_options_free(&rc->plugins[i].options);
    }
    free(rc->plugins);
    weft_candidate_manifest_free(rc->manifest);
    free(rc);
}

weft_status weft_resolve(const weft_candidate_manifest *m, const weft_registry *reg,
                         const weft_resolve_options *opts, weft_resolved_candidate **out,
                         weft_error *err) {
    if (!m || !reg || !out)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "no manifest, registry or output given");
    *out = NULL;
    weft_resolve_options o = {sizeof(o), 0, NULL, NULL};
    if (opts) {
        if (opts->size < sizeof(uint32_t) * 2)
            return weft_error_set(err, WEFT_ERR_ABI, SRC, "weft_resolve_options.size too small");
        o.flags = opts->flags;
        if (opts->size >= offsetof(weft_resolve_options, model_dir) + sizeof(char *))
            o.model_dir = opts->model_dir;
        if (opts->size >= offsetof(weft_resolve_options, arch) + sizeof(char *))
            o.arch = opts->arch;
    }
    const char *arch = o.arch ? o.arch : weft_host_arch();
    rctx c = {m, reg, err};
    weft_resolved_candidate *rc = calloc(1, sizeof(*rc));
    pick *picks = calloc(2 + (size_t)m->n_techniques, sizeof(*picks));
    uint32_t *order = calloc(2 + (size_t)m->n_techniques, sizeof(*order));
    weft_status st = WEFT_OK;
    if (!rc || !picks || !order) {
        st = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        goto done;
    }
    snprintf(rc->path, sizeof(rc->path), "%s", m->path);
    snprintf(rc->name, sizeof(rc->name), "%s", m->candidate);
    snprintf(rc->backend, sizeof(rc->backend), "%s", m->backend.name);
    snprintf(rc->model, sizeof(rc->model), "%s", m->model);

    /* the model directory and its architecture */
    if (o.model_dir) {
        if (!is_dir(o.model_dir)) {
            st =
                weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                               "model directory %s not found: check the --model path", o.model_dir);
            goto done;
        }
        char real[PATH_MAX];
        snprintf(rc->model_dir, sizeof(rc->model_dir), "%s",
                 realpath(o.model_dir, real) ? real : o.model_dir);
    } else if (!(o.flags & WEFT_RESOLVE_NO_MODEL)) {
        st = weft_model_dir_resolve(m->model, m->path, rc->model_dir, sizeof(rc->model_dir), err);
        if (st) {
            weft_error_prefix(err, "%s:%u:%u: model", m->path, m->model_pos.line,
                              m->model_pos.column);
            goto done;
        }
    }
    if (rc->model_dir[0] &&
        (st = read_architecture(rc->model_dir, rc->architecture, sizeof(rc->architecture), err)))
        goto done;

    /* pick every plugin */
    uint32_t n = 0;
    picks[n].ref = &m->backend;
    picks[n].role = WEFT_ROLE_BACKEND;
    snprintf(picks[n].field, sizeof(picks[n].field), "backend");
    if ((st = find_ref(&c, &m->backend, "backend", WEFT_ROLE_BACKEND, &picks[n].entry))) goto done;
    if ((st = check_pick(&c, &picks[n], arch))) goto done;
    n++;

    picks[n].role = WEFT_ROLE_MODEL;
    snprintf(picks[n].field, sizeof(picks[n].field), "model_plugin");
    if (m->model_plugin.name[0]) {
        picks[n].ref = &m->model_plugin;
        if ((st = find_ref(&c, &m->model_plugin, "model_plugin", WEFT_ROLE_MODEL, &picks[n].entry)))
            goto done;
    } else if (!rc->architecture[0]) {
        if (rc->model_dir[0])
            st = weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                "%s:%u:%u: model: %s has no config.json naming its "
                                "architecture, so the model plugin cannot be chosen: set "
                                "model_plugin in %s",
                                m->path, m->model_pos.line, m->model_pos.column, rc->model_dir,
                                m->path);
        else
            st = weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                "the model plugin cannot be chosen without reading the model's "
                                "config.json: set model_plugin in %s",
                                m->path);
        goto done;
    } else if ((st = pick_model_by_arch(&c, rc->architecture, rc->model_dir, &picks[n].entry))) {
        goto done;
    }
    if ((st = check_pick(&c, &picks[n], arch))) goto done;
    if (rc->architecture[0]) {
        const weft_plugin_manifest *pm = picks[n].entry->manifest;
        int has = 0;
        for (uint32_t k = 0; k < pm->n_architectures; k++)
            if (!strcmp(pm->architectures[k], rc->architecture)) has = 1;
        if (!has) {
            st = weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC,
                                "model plugin %s %s does not run architecture %s of %s: choose "
                                "another model_plugin in %s",
                                pm->name, pm->version_text, rc->architecture, rc->model_dir,
                                m->path);
            goto done;
        }
    }
    n++;

    for (uint32_t i = 0; i < m->n_techniques; i++) {
        pick *p = &picks[n];
        p->ref = &m->techniques[i];
        p->role = WEFT_ROLE_TECHNIQUE;
        snprintf(p->field, sizeof(p->field), "techniques[%u]", i);
        if ((st = find_ref(&c, p->ref, p->field, WEFT_ROLE_TECHNIQUE, &p->entry))) goto done;
        if ((st = check_pick(&c, p, arch))) goto done;
        n++;
    }
    if ((st = check_set(&c, picks, n))) goto done;
    if ((st = order_chain(&c, picks, 2, n, order))) goto done;

    rc->plugins = calloc(n, sizeof(*rc->plugins));
    if (!rc->plugins) {
        st = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < n; i++) {
        const pick *p = &picks[order[i]];
        st = fill_plugin(&c, p, p->field, &rc->plugins[i]);
        rc->n_plugins = i + 1;
        if (st) goto done;
        rc->plugins[i].order = (int32_t)i;
        rc->filled_slots |= rc->plugins[i].slots;
    }
    rc->max_model_len = m->max_model_len;
    rc->max_concurrency = m->max_concurrency;
    rc->threads = m->threads;
    rc->has_mean_kl = m->has_mean_kl;
    rc->has_p99_kl = m->has_p99_kl;
    rc->has_ppl_ratio = m->has_ppl_ratio;
    rc->mean_kl = m->mean_kl;
    rc->p99_kl = m->p99_kl;
    rc->ppl_ratio = m->ppl_ratio;
    st = weft_candidate_manifest_parse(m->text, m->text_len, m->path, &rc->manifest, err);

done:
    free(picks);
    free(order);
    if (st) {
        weft_resolved_free(rc);
        return st;
    }
    *out = rc;
    return WEFT_OK;
}

weft_status weft_resolve_file(const char *path, const weft_registry *reg,
                              const weft_resolve_options *opts, weft_resolved_candidate **out,
                              weft_error *err) {
    weft_candidate_manifest *m = NULL;
    weft_status st = weft_candidate_manifest_load(path, &m, err);
    if (st) return st;
    st = weft_resolve(m, reg, opts, out, err);
    weft_candidate_manifest_free(m);
    return st;
}

const weft_resolved_plugin *weft_resolved_slot(const weft_resolved_candidate *rc, uint32_t slot) {
    if (!rc) return NULL;
    /* A chain slot: its first plugin. Another slot: its last filler, since a technique
     * layered on another comes after it (check_set). */
    const weft_resolved_plugin *found = NULL;
    for (uint32_t i = 0; i < rc->n_plugins; i++)
        if (rc->plugins[i].slots & slot) {
            found = &rc->plugins[i];
            if (weft_slot_is_chain(slot)) break;
        }
    return found;
}
