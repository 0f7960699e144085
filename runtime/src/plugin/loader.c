/* Loads one plugin library (loader.h): open once, hash the descriptor, dlopen that descriptor,
 * negotiate, check the descriptor against the manifest and the ABI rules, create. The required
 * hooks of each vtable are listed here from plugin.h: a hook marked "(optional)" there may be
 * NULL, every other one must be set, so a plugin missing a required hook is refused at load and
 * not discovered by a NULL call in the middle of a step. */
#define _GNU_SOURCE /* dlinfo, RTLD_DI_LINKMAP */
#include "plugin/loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "plugin/manifest.h"
#include "util/error.h"
#include "util/hash.h"

/* A vtable bigger than this is taken for garbage in the size field, not a future version. */
#define VTABLE_SIZE_MAX 4096u

typedef struct hook {
    const char *name;
    size_t offset;
} hook;

#define HOOK(type, member)                                                                         \
    { #member, offsetof(type, member) }

static const hook backend_required[] = {
    HOOK(weft_backend_vtable, device_info), HOOK(weft_backend_vtable, register_ops),
    HOOK(weft_backend_vtable, alloc),       HOOK(weft_backend_vtable, free),
    HOOK(weft_backend_vtable, copy),        HOOK(weft_backend_vtable, upload),
    HOOK(weft_backend_vtable, download),    HOOK(weft_backend_vtable, synchronize),
    HOOK(weft_backend_vtable, stream)};
static const hook model_required[] = {HOOK(weft_model_vtable, configure),
                                      HOOK(weft_model_vtable, build_graph)};
static const hook scheduler_required[] = {HOOK(weft_scheduler_vtable, schedule)};
static const hook kv_required[] = {HOOK(weft_kv_vtable, init), HOOK(weft_kv_vtable, open),
                                   HOOK(weft_kv_vtable, reserve), HOOK(weft_kv_vtable, close),
                                   HOOK(weft_kv_vtable, view)};
static const hook pass_required[] = {HOOK(weft_pass_vtable, run)};
static const hook opset_required[] = {HOOK(weft_opset_vtable, register_ops)};
static const hook executor_required[] = {HOOK(weft_executor_vtable, prepare),
                                         HOOK(weft_executor_vtable, run),
                                         HOOK(weft_executor_vtable, release)};
static const hook sampler_required[] = {HOOK(weft_sampler_vtable, sample)};
static const hook decoder_required[] = {HOOK(weft_decoder_vtable, draft)};
static const hook drafter_required[] = {HOOK(weft_drafter_vtable, load),
                                        HOOK(weft_drafter_vtable, propose)};
static const hook placement_required[] = {HOOK(weft_placement_vtable, place)};
static const hook parallel_required[] = {HOOK(weft_parallel_vtable, init),
                                         HOOK(weft_parallel_vtable, shard),
                                         HOOK(weft_parallel_vtable, collective)};

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* One row per slot: its descriptor member, the v1 size of its vtable and its required hooks. */
typedef struct slot_rule {
    uint32_t bit;
    const char *name;
    size_t desc_offset;
    uint32_t v1_size;
    const hook *required;
    size_t n_required;
} slot_rule;

#define SLOT(bit, name, member, type, req)                                                         \
    { bit, name, offsetof(weft_plugin_descriptor, member), (uint32_t)sizeof(type), req, N(req) }
#define SLOT0(bit, name, member, type)                                                             \
    { bit, name, offsetof(weft_plugin_descriptor, member), (uint32_t)sizeof(type), NULL, 0 }

static const slot_rule slot_rules[] = {
    SLOT(WEFT_SLOT_BACKEND, "backend", backend, weft_backend_vtable, backend_required),
    SLOT(WEFT_SLOT_MODEL, "model", model, weft_model_vtable, model_required),
    SLOT(WEFT_SLOT_SCHEDULER, "scheduler", scheduler, weft_scheduler_vtable, scheduler_required),
    SLOT(WEFT_SLOT_KV, "kv", kv, weft_kv_vtable, kv_required),
    SLOT(WEFT_SLOT_PASS, "pass", pass, weft_pass_vtable, pass_required),
    SLOT(WEFT_SLOT_OPS, "ops", opset, weft_opset_vtable, opset_required),
    SLOT(WEFT_SLOT_EXECUTOR, "executor", executor, weft_executor_vtable, executor_required),
    SLOT(WEFT_SLOT_SAMPLER, "sampler", sampler, weft_sampler_vtable, sampler_required),
    SLOT(WEFT_SLOT_DECODER, "decoder", decoder, weft_decoder_vtable, decoder_required),
    SLOT(WEFT_SLOT_DRAFTER, "drafter", drafter, weft_drafter_vtable, drafter_required),
    SLOT(WEFT_SLOT_PLACEMENT, "placement", placement, weft_placement_vtable, placement_required),
    SLOT(WEFT_SLOT_PARALLEL, "parallel", parallel, weft_parallel_vtable, parallel_required),
    SLOT0(WEFT_SLOT_FEATURE, "feature", feature, weft_feature_vtable),
};

static uint32_t known_slots(void) {
    uint32_t all = 0;
    for (size_t i = 0; i < N(slot_rules); i++)
        all |= slot_rules[i].bit;
    return all;
}

static const char *kind_label(uint32_t kind) {
    switch (kind) {
    case WEFT_KIND_BACKEND:
        return "backend";
    case WEFT_KIND_MODEL:
        return "model";
    case WEFT_KIND_TECHNIQUE:
        return "technique";
    case WEFT_KIND_FEATURE:
        return "feature";
    default:
        return "unknown";
    }
}

static void slots_text(uint32_t slots, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N(slot_rules); i++) {
        if (!(slots & slot_rules[i].bit)) continue;
        int n = snprintf(buf + used, cap - used, "%s%s", used ? "," : "", slot_rules[i].name);
        if (n < 0 || (size_t)n >= cap - used) return;
        used += (size_t)n;
    }
    uint32_t unknown = slots & ~known_slots();
    if (unknown) snprintf(buf + used, cap - used, "%sbits 0x%x", used ? "," : "", unknown);
    if (!buf[0]) snprintf(buf, cap, "none");
}

const char *weft_plugin_label(const weft_plugin_expect *ex, char *buf, size_t cap) {
    snprintf(buf, cap, "plugin %s %s", ex && ex->name ? ex->name : "?",
             ex && ex->version ? ex->version : "?");
    return buf;
}

static const char *source_of(const weft_plugin_expect *ex) {
    return ex && ex->name ? ex->name : "loader";
}

weft_status weft_plugin_check_descriptor(const weft_plugin_descriptor *d, uint32_t negotiated,
                                         const weft_plugin_expect *ex, weft_error *err) {
    char who[160], a[160], b[160];
    const char *src = source_of(ex);
    weft_plugin_label(ex, who, sizeof(who));
    if (!d)
        return weft_error_set(err, WEFT_ERR_ABI, src, "%s: negotiation returned no descriptor",
                              who);
    if (d->size < WEFT_DESCRIPTOR_V1_SIZE)
        return weft_error_set(err, WEFT_ERR_ABI, src,
                              "%s: descriptor size %" PRIu32 " is smaller than the ABI v1 "
                              "descriptor (%" PRIu32 " bytes)",
                              who, d->size, WEFT_DESCRIPTOR_V1_SIZE);
    if (d->abi_version != negotiated)
        return weft_error_set(err, WEFT_ERR_ABI, src,
                              "%s: descriptor says ABI %" PRIu32 " but negotiation chose %" PRIu32,
                              who, d->abi_version, negotiated);
    for (size_t i = 0; i < N(d->reserved); i++)
        if (d->reserved[i] != 0)
            return weft_error_set(err, WEFT_ERR_ABI, src,
                                  "%s: descriptor reserved[%zu] is 0x%" PRIx64
                                  ", expected 0 (reserved fields must be zero)",
                                  who, i, d->reserved[i]);
    if (!d->name || strcmp(d->name, ex->name) != 0)
        return weft_error_set(err, WEFT_ERR_MISMATCH, src,
                              "%s: descriptor name '%s' differs from manifest name '%s'", who,
                              d->name ? d->name : "(null)", ex->name);
    if (!d->version || strcmp(d->version, ex->version) != 0)
        return weft_error_set(err, WEFT_ERR_MISMATCH, src,
                              "%s: descriptor version '%s' differs from manifest version '%s'", who,
                              d->version ? d->version : "(null)", ex->version);
    if (d->kind != ex->kind)
        return weft_error_set(err, WEFT_ERR_MISMATCH, src,
                              "%s: descriptor kind %" PRIu32 " (%s) differs from manifest kind "
                              "%" PRIu32 " (%s)",
                              who, d->kind, kind_label(d->kind), ex->kind, kind_label(ex->kind));
    if (d->slots != ex->slots) {
        slots_text(d->slots, a, sizeof(a));
        slots_text(ex->slots, b, sizeof(b));
        return weft_error_set(err, WEFT_ERR_MISMATCH, src,
                              "%s: descriptor slots '%s' differ from manifest slots '%s'", who, a,
                              b);
    }
    if (d->slots & ~known_slots())
        return weft_error_set(err, WEFT_ERR_ABI, src,
                              "%s: slot bits 0x%" PRIx32 " are unknown to ABI v%" PRIu32, who,
                              d->slots & ~known_slots(), negotiated);
    if (!d->create)
        return weft_error_set(err, WEFT_ERR_ABI, src, "%s: descriptor has no create function", who);
    for (size_t i = 0; i < N(slot_rules); i++) {
        const slot_rule *r = &slot_rules[i];
        const void *vt;
        memcpy(&vt, (const char *)d + r->desc_offset, sizeof(vt));
        if (!(d->slots & r->bit)) {
            if (vt)
                return weft_error_set(err, WEFT_ERR_ABI, src,
                                      "%s: descriptor has a %s vtable but does not declare the "
                                      "'%s' slot",
                                      who, r->name, r->name);
            continue;
        }
        if (!vt)
            return weft_error_set(err, WEFT_ERR_ABI, src,
                                  "%s: slot '%s' is declared but its vtable is NULL", who, r->name);
        uint32_t size;
        memcpy(&size, vt, sizeof(size));
        if (size < r->v1_size || size > VTABLE_SIZE_MAX)
            return weft_error_set(err, WEFT_ERR_ABI, src,
                                  "%s: %s vtable size %" PRIu32 " is outside %" PRIu32
                                  "..%u (its ABI v1 size up to a sane maximum)",
                                  who, r->name, size, r->v1_size, VTABLE_SIZE_MAX);
        for (size_t k = 0; k < r->n_required; k++) {
            void (*fn)(void);
            memcpy(&fn, (const char *)vt + r->required[k].offset, sizeof(fn));
            if (!fn)
                return weft_error_set(err, WEFT_ERR_ABI, src,
                                      "%s: %s vtable hook '%s' is NULL but required", who, r->name,
                                      r->required[k].name);
        }
    }
    return WEFT_OK;
}

/* The mapping that holds addr must be the file open on fd: guards against the dynamic linker
 * handing back an earlier library that was loaded under the same /proc/self/fd/N name. */
static int address_in_file(const void *addr, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 1; /* no procfs to ask: the name check of the dynamic linker stands */
    char line[1024];
    int ok = 0;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi, maj, min, ino;
        char perms[8];
        unsigned long long off;
        if (sscanf(line, "%lx-%lx %7s %llx %lx:%lx %lu", &lo, &hi, perms, &off, &maj, &min, &ino) !=
            7)
            continue;
        if (a < lo || a >= hi) continue;
        ok = ino == (unsigned long)st.st_ino && maj == major(st.st_dev) && min == minor(st.st_dev);
        break;
    }
    fclose(f);
    return ok;
}

/* dlopen()s the file open on fd through procfs. The dynamic linker matches an already-loaded
 * object by name before it looks at the file, so "/proc/self/fd/N" can name an earlier library
 * that is still loaded (its N was closed and reused since). The loaded object is therefore
 * checked against fd, and on a mismatch the load is retried under an equivalent, textually new
 * name ("/proc/self/fd/../fd/N", ...). */
static weft_status load_fd(int fd, const char *who, const char *src, const char *library,
                           void **out, weft_error *err) {
    char path[64 + 6 * 16];
    for (int k = 0; k < 16; k++) {
        int used = snprintf(path, sizeof(path), "/proc/self/fd/");
        for (int i = 0; i < k; i++)
            used += snprintf(path + used, sizeof(path) - (size_t)used, "../fd/");
        snprintf(path + used, sizeof(path) - (size_t)used, "%d", fd);
        dlerror();
        void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!dl) {
            const char *why = dlerror();
            return weft_error_set(err, WEFT_ERR_IO, src, "%s: cannot load library %s: %s", who,
                                  library, why ? why : "unknown dlopen error");
        }
        struct link_map *lm = NULL;
        if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) != 0 || !lm || address_in_file(lm->l_ld, fd)) {
            *out = dl;
            return WEFT_OK;
        }
        dlclose(dl); /* an older library answered to this name: try a fresh one */
    }
    return weft_error_set(err, WEFT_ERR_INTERNAL, src,
                          "%s: cannot load library %s under a name no loaded library uses", who,
                          library);
}

static void reset(weft_loaded_plugin *p) {
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

weft_status weft_plugin_open(const char *library, const weft_plugin_expect *ex,
                             weft_loaded_plugin *p, weft_error *err) {
    if (!p) return weft_error_set(err, WEFT_ERR_INVALID, "loader", "no plugin record given");
    reset(p);
    if (!library || !ex || !ex->name || !ex->version)
        return weft_error_set(err, WEFT_ERR_INVALID, "loader",
                              "weft_plugin_open needs a library path and the manifest's name and "
                              "version");
    char who[160];
    const char *src = source_of(ex);
    weft_plugin_label(ex, who, sizeof(who));
    snprintf(p->name, sizeof(p->name), "%s", ex->name);
    snprintf(p->version, sizeof(p->version), "%s", ex->version);
    snprintf(p->library, sizeof(p->library), "%s", library);

    int fd = open(library, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, src,
                              "%s: cannot open library %s: %s", who, library, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return weft_error_set(err, WEFT_ERR_IO, src, "%s: library %s is not a regular file", who,
                              library);
    }
    weft_error herr;
    weft_error_clear(&herr);
    if (weft_hash_sha256_fd(fd, library, p->sha256, &herr) != WEFT_OK) {
        close(fd);
        return weft_error_set(err, herr.code, src, "%s: cannot hash library %s: %s", who, library,
                              herr.message);
    }
    if (ex->sha256 && strcmp(ex->sha256, p->sha256) != 0) {
        close(fd);
        return weft_error_set(err, WEFT_ERR_MISMATCH, src,
                              "%s: library hash differs from lock: expected %s, found %s (%s)", who,
                              ex->sha256, p->sha256, library);
    }

    void *dl = NULL;
    weft_status stc;
    stc = load_fd(fd, who, src, library, &dl, err);
    if (stc != WEFT_OK) {
        close(fd);
        reset(p);
        return stc;
    }
    p->dl = dl;
    p->fd = fd;
    dlerror();
    void *sym = dlsym(dl, WEFT_PLUGIN_ENTRY_NAME);
    if (!sym) {
        stc = weft_error_set(err, WEFT_ERR_ABI, src, "%s: library %s does not export %s", who,
                             library, WEFT_PLUGIN_ENTRY_NAME);
        goto fail;
    }
    if (!address_in_file(sym, fd)) {
        stc = weft_error_set(err, WEFT_ERR_ABI, src,
                             "%s: %s resolves outside library %s (from one of its dependencies)",
                             who, WEFT_PLUGIN_ENTRY_NAME, library);
        goto fail;
    }
    weft_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof(entry));
    uint32_t chosen = 0;
    const weft_plugin_descriptor *d = NULL;
    weft_error perr;
    weft_error_clear(&perr);
    weft_status ns = entry(WEFT_ABI_VERSION_MIN, WEFT_ABI_VERSION, &chosen, &d, &perr);
    if (ns != WEFT_OK || chosen < WEFT_ABI_VERSION_MIN || chosen > WEFT_ABI_VERSION) {
        /* A refusing plugin reports its own highest version in *chosen (docs/ABI.md, rule 5);
         * failing that, the manifest's declared range says what it was built for. */
        char built[64];
        if (chosen)
            snprintf(built, sizeof(built), "%" PRIu32, chosen);
        else if (ex->abi_min && ex->abi_min == ex->abi_max)
            snprintf(built, sizeof(built), "%" PRIu32, ex->abi_min);
        else if (ex->abi_min)
            snprintf(built, sizeof(built), "%" PRIu32 "..%" PRIu32, ex->abi_min, ex->abi_max);
        else
            snprintf(built, sizeof(built), "an unknown version");
        char says[sizeof(perr.message) + 32] = "";
        if (perr.message[0]) snprintf(says, sizeof(says), " (plugin says: %s)", perr.message);
        stc = weft_error_set(err, WEFT_ERR_ABI, src,
                             "%s: built for ABI %s, this runtime speaks %d..%d%s", who, built,
                             WEFT_ABI_VERSION_MIN, WEFT_ABI_VERSION, says);
        goto fail;
    }
    if (ex->abi_min && (chosen < ex->abi_min || chosen > ex->abi_max)) {
        stc = weft_error_set(err, WEFT_ERR_ABI, src,
                             "%s: negotiated ABI %" PRIu32 " is outside its manifest's range "
                             "%" PRIu32 "..%" PRIu32,
                             who, chosen, ex->abi_min, ex->abi_max);
        goto fail;
    }
    stc = weft_plugin_check_descriptor(d, chosen, ex, err);
    if (stc != WEFT_OK) goto fail;
    p->desc = d;
    p->abi_version = chosen;
    p->kind = d->kind;
    p->slots = d->slots;
    return WEFT_OK;
fail:
    dlclose(dl);
    close(fd);
    reset(p);
    return stc;
}

weft_status weft_plugin_instantiate(weft_loaded_plugin *p, const weft_host_services *host,
                                    const weft_options *opts, weft_error *err) {
    if (!p || !p->desc || !host)
        return weft_error_set(err, WEFT_ERR_INVALID, "loader",
                              "instantiate needs an opened plugin and host services");
    if (p->created)
        return weft_error_set(err, WEFT_ERR_INVALID, p->name, "plugin %s %s is already created",
                              p->name, p->version);
    static const weft_options none = {0, NULL};
    weft_options_free(&p->opts);
    weft_status st = weft_options_dup(opts ? opts : &none, &p->opts, err);
    if (st != WEFT_OK) return st;
    weft_error perr;
    weft_error_clear(&perr);
    void *state = NULL;
    st = p->desc->create(host, &p->opts, &state, &perr);
    if (st != WEFT_OK) {
        return weft_error_set(err, st < 0 ? st : WEFT_ERR_INTERNAL, p->name,
                              "plugin %s %s: create failed: %s", p->name, p->version,
                              perr.message[0] ? perr.message : weft_status_name(st));
    }
    p->state = state;
    p->created = 1;
    return WEFT_OK;
}

void weft_plugin_close(weft_loaded_plugin *p) {
    if (!p) return;
    if (p->created && p->desc && p->desc->destroy) p->desc->destroy(p->state);
    /* fd is only ours while dl is set: a zeroed record must not close descriptor 0. */
    if (p->dl) {
        dlclose(p->dl);
        if (p->fd >= 0) close(p->fd);
    }
    weft_options_free(&p->opts);
    reset(p);
}
