/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_DRIVER_PCI_H
#define NRM_DRIVER_PCI_H

/* The PCI driver (pci.nrm.io): one device per PCI function of the classes
 * nrm serves (GPUs, accelerators, FPGAs, co-processors, InfiniBand, and
 * when configured NICs and NVMe), with the standard attributes, prepared
 * as CDI device nodes. Its operations are public so that a vendor driver
 * is this driver with a vendor part: a shared object whose new() calls
 * nrm_pci_driver_new() with its struct nrm_pci_vendor and whose other
 * operations are the ones below (driver/nvidia is one). While a vendor
 * driver serves a function, the generic driver leaves it out. */

#include <jansson.h>
#include <stdbool.h>

#include "driver/driver.h"
#include "topology/pci.h"

/* One published function, as prepare and the vendor part see it. */
struct nrm_pci_function
{
  char name[40];     /* device name: <class>-dddd-bb-dd-f */
  const char *class; /* nrm_pci_class_name() */
  bool present;      /* false: removed, kept while a claim holds it */
  bool passthrough;  /* the VFIO twin of the function (name ends in -vfio) */
  struct nrm_pci_facts facts;
};

struct nrm_pci_vendor
{
  const char *name; /* for the log and nrm status: "nvidia" */
  /* Whether the vendor part serves this function. */
  bool (*match) (const struct nrm_pci_function *fn);
  /* Adds what a container needs of one prepared function beyond its own
   * device nodes (control nodes, environment); optional. fsroot is the
   * driver host's. */
  int (*edits) (const struct nrm_fsroot *fsroot, const struct nrm_pci_function *fn, struct nrm_container_edits *e,
                nrm_error_t *err);
  /* Adds attributes to the published device; optional. */
  void (*attributes) (const struct nrm_fsroot *fsroot, const struct nrm_pci_function *fn, json_t *attrs);
};

/* new() of the generic driver (vendor NULL) or of a vendor driver. */
int nrm_pci_driver_new (const struct nrm_driver_host *h, const struct nrm_pci_vendor *vendor, void **ret,
                        nrm_error_t *err);
void nrm_pci_driver_free (void *self);
int nrm_pci_driver_pool (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err);
void nrm_pci_driver_reset (void *self);
int nrm_pci_driver_prepare (void *self, const struct nrm_claim_view *c, struct nrm_prepared *out, nrm_error_t *err);
int nrm_pci_driver_restore (void *self, const char *uid, json_t *state, nrm_error_t *err);
void nrm_pci_driver_unprepare (void *self, const char *uid, json_t *state);
int nrm_pci_driver_health (void *self, struct nrm_health_report *ret, nrm_error_t *err);
int nrm_pci_driver_health_fd (void *self);
void nrm_pci_driver_health_event (void *self);
json_t *nrm_pci_driver_describe (void *self, const char *uid, json_t *state);
int nrm_pci_driver_bind (void *self, const struct nrm_claim_view *c, json_t **ret, nrm_error_t *err);
void nrm_pci_driver_node_devices (void *self, json_t *devices);

/* One kernel uevent (the netlink message: "ACTION@DEVPATH\0KEY=VALUE\0..."),
 * as health_event reads them: a DRM device's WEDGED=<recovery> (Linux 6.15
 * and later) marks its function wedged until its card is added again. */
void nrm_pci_driver_uevent (void *self, const char *msg, size_t len);

/* The functions of the served classes that this driver (generic or vendor)
 * leaves out because another driver, a device plugin or a configuration
 * rule serves them, as of its last pool: a new object {bus id: who}, who
 * as nrm_pci_others_owner() says it ("gpu.nvidia.com (DRA driver
 * registered with the kubelet)"). For nrm status; never in the slices. */
json_t *nrm_pci_driver_left_out (void *self);

/* Every operation of a driver table but abi, id, names and new: the PCI
 * driver's, for its own table and a vendor driver's, so that an operation
 * added to the PCI driver reaches every vendor driver:
 *   const struct nrm_driver_ops nrm_driver_component = { .abi = NRM_DRIVER_ABI, .id = "x", ...,
 *                                                        .new = x_new, NRM_PCI_DRIVER_OPERATIONS };  */
#define NRM_PCI_DRIVER_OPERATIONS                                                                                      \
  .free = nrm_pci_driver_free, .pool = nrm_pci_driver_pool, .reset = nrm_pci_driver_reset,                             \
  .prepare = nrm_pci_driver_prepare, .restore = nrm_pci_driver_restore, .unprepare = nrm_pci_driver_unprepare,         \
  .health = nrm_pci_driver_health, .health_fd = nrm_pci_driver_health_fd, .health_event = nrm_pci_driver_health_event, \
  .describe = nrm_pci_driver_describe, .bind = nrm_pci_driver_bind, .node_devices = nrm_pci_driver_node_devices

/* A device node entry of CDI containerEdits for path (a /dev path),
 * with hostPath below the root when it is a tree, not this machine. */
json_t *nrm_pci_device_node (const struct nrm_fsroot *fsroot, const char *path);

#endif
