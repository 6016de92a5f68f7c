/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_REGISTRY_H
#define NRM_REGISTRY_H

#include <jansson.h>
#include <stddef.h>

#include "driver/driver.h"

/* The drivers nrm knows: the built-in ones and those loaded from shared
 * objects, each one ops table. */
struct nrm_registry;

int nrm_registry_new (struct nrm_registry **ret, nrm_error_t *err);
void nrm_registry_free (struct nrm_registry *r);

/* Loads one driver from a shared object (dlopen; it exports
 * NRM_DRIVER_SYMBOL), refusing a table of another ABI version, an invalid
 * or a duplicate id; the error names the file. */
int nrm_registry_load (struct nrm_registry *r, const char *path, nrm_error_t *err);
/* Every *.so of a directory, in name order. */
int nrm_registry_load_dir (struct nrm_registry *r, const char *dir, nrm_error_t *err);

size_t nrm_registry_size (const struct nrm_registry *r);
const struct nrm_driver_ops *nrm_registry_at (const struct nrm_registry *r, size_t i);
const struct nrm_driver_ops *nrm_registry_find (const struct nrm_registry *r, const char *id);

/* Which drivers serve on this node, and under which names. */
struct nrm_driver_selection
{
  const char *ids;  /* "cpu,memory"; NULL: every registered driver */
  json_t *names;    /* id -> driver name; a driver not named takes its default */
  json_t *settings; /* id -> the driver's settings (nrm_driver_host.settings); may be NULL */
};

/* The ids of a driver list (--drivers, "cpu,memory"), each a driver id (a
 * DNS label): a new JSON array, or NULL and *err for an empty entry or a
 * bad id. The one reader of such a list. */
json_t *nrm_driver_ids_parse (const char *list, nrm_error_t *err);
/* Whether the list enables the driver with this id (NULL: every one). */
bool nrm_driver_ids_enable (const char *list, const char *id);

/* The names the selected drivers serve under, in registry order (a new
 * JSON array), without making the drivers; an unknown id is an error. */
json_t *nrm_registry_names (const struct nrm_registry *reg, const struct nrm_driver_selection *sel, nrm_error_t *err);

/* One enabled driver. */
struct nrm_driver_slot
{
  const struct nrm_driver_ops *ops;
  void *self;
  char *name;
};

struct nrm_drivers
{
  size_t n;
  struct nrm_driver_slot *slots;
};

/* Instantiates the selected drivers in registry order; base is the host
 * each gets, with its own name filled in. Names must be distinct. */
int nrm_drivers_open (const struct nrm_registry *reg, const struct nrm_driver_selection *sel,
                      const struct nrm_driver_host *base, struct nrm_drivers *ret, nrm_error_t *err);
void nrm_drivers_close (struct nrm_drivers *d);
struct nrm_driver_slot *nrm_drivers_find (const struct nrm_drivers *d, const char *id);

/* The DeviceTaints a health report asks for ({device: [DeviceTaint]}, a new
 * reference; keys <driver name>/<taint>). */
json_t *nrm_health_taints (const char *driver, const struct nrm_health_report *r);

/* The pool of every driver, tainted and split into ResourceSlices, as one
 * List (nrm_slices_build()), checked against the API limits. held:
 * {driver name: {uid: state}}, taints: {driver name: {device: [taint]}};
 * either may be NULL. */
int nrm_drivers_slices (const struct nrm_drivers *d, const struct nrm_publish_options *o, json_t *held, json_t *taints,
                        json_t **ret, nrm_error_t *err);

/* The slices of every built-in driver under its default name, for a
 * recorded or live machine with no claims (tests); settings: driver id ->
 * the driver's settings, or NULL. */
int nrm_node_slices (const struct nrm_topology *t, const struct nrm_publish_options *o, json_t *settings, json_t **ret,
                     nrm_error_t *err);

#endif
