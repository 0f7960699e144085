/* Per-engine host services (host.h). The services table is the first member of weft_host, so
 * the table pointer a plugin passes back to get_service is also the host's address; a global
 * list of live hosts (under a mutex) is what makes that conversion safe: a pointer that is not
 * a live host's table is answered with NULL instead of being dereferenced as one. */
#include "plugin/host.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

typedef struct service_entry {
    uint32_t id;
    const void *table;
} service_entry;

struct weft_host {
    weft_host_services services; /* first: &h->services == (void *)h */
    service_entry *entries;
    size_t n_entries, cap_entries;
    pthread_mutex_t lock; /* registration may race with lookups from plugin threads */
    struct weft_host *next_live;
};

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static weft_host *live_hosts;

static void host_log(int level, const char *source, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_log_v(level, source, fmt, ap);
    va_end(ap);
}

static void host_error_set(weft_error *err, int32_t code, const char *source, const char *fmt,
                           ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_error_vset(err, code, source, fmt, ap);
    va_end(ap);
}

static void *host_alloc(size_t bytes) {
    return malloc(bytes ? bytes : 1);
}

static void host_free(void *p) {
    free(p);
}

/* The same lookup as weft_options_find (manifest.h), kept here so the services table depends
 * on nothing but this file. */
static const weft_option *host_option(const weft_options *opts, const char *key) {
    if (!opts || !key || (!opts->items && opts->count)) return NULL;
    for (uint32_t i = 0; i < opts->count; i++)
        if (opts->items[i].key && !strcmp(opts->items[i].key, key)) return &opts->items[i];
    return NULL;
}

weft_host *weft_host_from_services(const weft_host_services *table) {
    weft_host *found = NULL;
    pthread_mutex_lock(&live_lock);
    for (weft_host *h = live_hosts; h; h = h->next_live)
        if (&h->services == table) {
            found = h;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    return found;
}

static const void *host_get_service(const weft_host_services *table, uint32_t id,
                                    uint32_t min_version) {
    weft_host *h = weft_host_from_services(table);
    if (!h) return NULL;
    const void *out = NULL;
    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->n_entries; i++) {
        if (h->entries[i].id != id) continue;
        const uint32_t *head = h->entries[i].table;
        if (head[1] >= min_version) out = head;
        break;
    }
    pthread_mutex_unlock(&h->lock);
    return out;
}

weft_host *weft_host_new(void) {
    weft_host *h = calloc(1, sizeof(*h));
    if (!h) return NULL;
    h->services.size = sizeof(h->services);
    h->services.abi_version = WEFT_ABI_VERSION;
    h->services.log = host_log;
    h->services.error_set = host_error_set;
    h->services.alloc = host_alloc;
    h->services.free = host_free;
    h->services.get_service = host_get_service;
    h->services.option = host_option;
    if (pthread_mutex_init(&h->lock, NULL) != 0) {
        free(h);
        return NULL;
    }
    pthread_mutex_lock(&live_lock);
    h->next_live = live_hosts;
    live_hosts = h;
    pthread_mutex_unlock(&live_lock);
    return h;
}

void weft_host_free(weft_host *h) {
    if (!h) return;
    pthread_mutex_lock(&live_lock);
    for (weft_host **p = &live_hosts; *p; p = &(*p)->next_live)
        if (*p == h) {
            *p = h->next_live;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    pthread_mutex_destroy(&h->lock);
    free(h->entries);
    free(h);
}

const weft_host_services *weft_host_services_of(weft_host *h) {
    return h ? &h->services : NULL;
}

weft_status weft_host_register_service(weft_host *h, uint32_t id, const void *table) {
    if (!h || id == 0) return WEFT_ERR_INVALID;
    if (table) {
        const uint32_t *head = table;
        if (head[0] < 2 * sizeof(uint32_t) || head[1] == 0) return WEFT_ERR_INVALID;
    }
    weft_status st = WEFT_OK;
    pthread_mutex_lock(&h->lock);
    size_t i = 0;
    while (i < h->n_entries && h->entries[i].id != id)
        i++;
    if (i < h->n_entries) {
        if (table) {
            h->entries[i].table = table;
        } else {
            h->entries[i] = h->entries[h->n_entries - 1];
            h->n_entries--;
        }
    } else if (table) {
        if (h->n_entries == h->cap_entries) {
            size_t cap = h->cap_entries ? 2 * h->cap_entries : 16;
            service_entry *e = realloc(h->entries, cap * sizeof(*e));
            if (!e) {
                st = WEFT_ERR_NOMEM;
                goto out;
            }
            h->entries = e;
            h->cap_entries = cap;
        }
        h->entries[h->n_entries].id = id;
        h->entries[h->n_entries].table = table;
        h->n_entries++;
    }
out:
    pthread_mutex_unlock(&h->lock);
    return st;
}
