/* The plugin's side of the health service (dra/health.h), for service.c and
 * plugin.c. Loop thread. */
#ifndef KDEV_DRA_HEALTH_INTERNAL_H
#define KDEV_DRA_HEALTH_INTERNAL_H

struct kdev_dra_plugin;
struct kdev_rpc_server;

/* Creates the plugin's health state when it has none. 0 or -ENOMEM. */
int kdev_dra_health_init(struct kdev_dra_plugin *p);

/* Registers NodeWatchResources (v1alpha1 and v1 paths) on |srv|. 0 or
 * -ENOMEM. */
int kdev_dra_health_add_methods(struct kdev_dra_plugin *p, struct kdev_rpc_server *srv);

/* Frees the health state (NULL-safe state); call once the servers closed. */
void kdev_dra_health_free(struct kdev_dra_plugin *p);

#endif /* KDEV_DRA_HEALTH_INTERNAL_H */
