/* The host side of weft_host_services: one weft_host per engine owns the table handed to every
 * plugin's create() and the registry of versioned services (graph, ops, weights, device, ...)
 * the engine registers as it builds them. A plugin finds a service with
 * host->get_service(host, id, min_version); the host resolves the table pointer back to its
 * weft_host, so two engines in one process never see each other's services. */
#ifndef WEFT_PLUGIN_HOST_H
#define WEFT_PLUGIN_HOST_H

#include <stdint.h>

#include "weft/plugin.h"

typedef struct weft_host weft_host;

/* A host with the base services (log, error_set, alloc, free, option, get_service) and no
 * registered services. NULL when out of memory. */
weft_host *weft_host_new(void);
void weft_host_free(weft_host *h);

/* Registers (or replaces) service `id` (a weft_service_id, or any id above them for services
 * an engine adds later). table starts with uint32_t size, uint32_t version (the convention of
 * every service table in plugin.h) and must outlive the host or be replaced; NULL unregisters.
 * Returns WEFT_ERR_INVALID for h == NULL, id == 0, or a table whose size is smaller than those
 * two fields or whose version is 0; WEFT_ERR_NOMEM when the registry cannot grow. */
weft_status weft_host_register_service(weft_host *h, uint32_t id, const void *table);

const weft_host_services *weft_host_services_of(weft_host *h);
/* The weft_host that owns a services table, or NULL when table is not one of a live host's. */
weft_host *weft_host_from_services(const weft_host_services *table);

#endif
