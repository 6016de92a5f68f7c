/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_DRIVER_H
#define NRM_DRIVER_H

/* The driver interface: everything a driver is, for the whole life of its
 * devices. The framework (registry, kubelet plugin, publisher, status,
 * metrics) knows a driver only through this table, so a new driver is one
 * folder and one line in driver/registry.c, or a shared object that
 * exports NRM_DRIVER_SYMBOL. Tables, callbacks and JSON (jansson 2.x) are
 * the ABI; a change of any of them bumps NRM_DRIVER_ABI. */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/devices.h"
#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "nrm/base/hugetlb.h"
#include "nrm/base/log.h"
#include "topology/topology.h"

#define NRM_DRIVER_ABI 5
#define NRM_DRIVER_SYMBOL "nrm_driver_component"

/* What the framework hands every driver; borrowed, valid until free(). */
struct nrm_driver_host
{
  const struct nrm_topology *topo;
  /* Node-wide settings: the node name and the API server's gates and
   * release. A driver's own settings come in settings, below. */
  const struct nrm_publish_options *node;
  const char *name; /* this driver's name, a DNS subdomain (cpu.nrm.io) */
  /* Where /sys, /dev and /proc are: this machine, or a tree standing for
   * it (NULL: this machine); read through the nrm_fsroot_*() functions. */
  const struct nrm_fsroot *fsroot;
  bool live; /* topo is this machine, not a recorded one */
  nrm_log_fn log;
  void *log_ctx;
  /* This driver's section of the configuration (the key named by its id,
   * checked by the driver's new()), or NULL. */
  json_t *settings;
  const char *kubelet_dir; /* the kubelet's folder (/var/lib/kubelet) */
  const char *state_dir;   /* nrm's durable state (/var/lib/nrm); a driver
                            * keeps its own files under <state_dir>/<name>.* */
};

/* Whether the driver may read the machine's sysfs under h->fsroot: on
 * this machine, or a tree standing for a recorded one; a recorded machine
 * served without a tree has no sysfs here. */
bool nrm_driver_host_sysfs (const struct nrm_driver_host *h);

/* One allocated device of a claim. */
struct nrm_alloc_result
{
  const char *driver;
  const char *request; /* as allocated, "req" or "req/subrequest" */
  const char *pool;
  const char *device;
  const char *share_id; /* or NULL */
  json_t *consumed;     /* consumedCapacity: name -> quantity string, or NULL */
};

/* A claim as a driver sees it at prepare: its own results, every result of
 * the allocation (other drivers', foreign ones such as gpu.nvidia.com
 * too), so that a driver can align with a device it does not own. */
struct nrm_claim_view
{
  const char *uid, *ns, *name;
  const struct nrm_alloc_result *results; /* this driver's */
  size_t n_results;
  const struct nrm_alloc_result *all; /* every driver's, in allocation order */
  size_t n_all;
  json_t *config; /* opaque configuration entries for this driver (an array) */
  json_t *claim;  /* the whole ResourceClaim */
  bool metadata;  /* the containers get device metadata: fill nrm_prepared.metadata */
};

/* The cgroup limits the commit hook writes for a claim's containers,
 * typed: the framework adds them to the containers' environment after the
 * driver's env (NRM_MEMORY_MAX, NRM_MEMORY_MIN, NRM_HUGETLB_<size>, each
 * with its per-claim copy), and hands them as they are to a caller in the
 * same process (nrm run), which so reads no variable back. */
struct nrm_container_limits
{
  uint64_t memory_max, memory_min; /* bytes: memory.max, memory.min; 0: none */
  size_t n_hugetlb;
  struct
  {
    char size[12]; /* "2MB": the kernel's name of the page size */
    uint64_t max;  /* bytes: hugetlb.<size>.max */
  } hugetlb[NRM_HUGETLB_SIZES_MAX];
};

/* CDI containerEdits of one prepared claim; each member an owned JSON array
 * or NULL. commit_hook asks for the framework's cgroup commit hook
 * (nrm-hook), which binds the container to the claim's CPUs and memory,
 * and to limits. */
struct nrm_container_edits
{
  json_t *env;          /* ["NAME=value", ...] */
  json_t *device_nodes; /* [{path, hostPath?, type?, major?, minor?, permissions?}] */
  json_t *mounts;       /* [{hostPath, containerPath, options?}] */
  json_t *hooks;        /* [{hookName, path, args?}] */
  bool commit_hook;
  struct nrm_container_limits limits;
};

/* What prepare returns; all owned. */
struct nrm_prepared
{
  json_t *state; /* driver-private, kept in the checkpoint */
  struct nrm_container_edits edits;
  /* Per device of the claim: the DeviceAttribute map a container reads in
   * its metadata file ({device name: {attr: {int|string|...}}}), or NULL. */
  json_t *metadata;
};

enum nrm_health
{
  NRM_HEALTH_UNKNOWN = 0,
  NRM_HEALTH_HEALTHY = 1,
  NRM_HEALTH_UNHEALTHY = 2,
};

enum nrm_taint_effect
{
  NRM_TAINT_NONE_SET = 0, /* no taint */
  NRM_TAINT_NONE,         /* informational: effect None */
  NRM_TAINT_NO_SCHEDULE,
  NRM_TAINT_NO_EXECUTE,
};

/* The health of one device; strings owned (malloc'd). */
struct nrm_device_health
{
  char *device;
  enum nrm_health health;
  char *message; /* at most 1024 characters reach the kubelet; or NULL */
  /* The taint the framework publishes on the device while this holds: key
   * <driver name>/<taint>, with this effect; NRM_TAINT_NONE_SET for none. */
  char *taint;
  enum nrm_taint_effect effect;
};

struct nrm_health_report
{
  struct nrm_device_health *devices;
  size_t n;
};

struct nrm_driver_ops
{
  unsigned abi;             /* NRM_DRIVER_ABI */
  const char *id;           /* registry name: "cpu", a DNS label */
  const char *default_name; /* "cpu.nrm.io" */
  const char *summary;      /* one line for --help */

  int (*new) (const struct nrm_driver_host *h, void **ret, nrm_error_t *err);
  void (*free) (void *self);

  /* The pool for publication, in preference order. held: the prepared
   * claims of this driver ({uid: state}, from its checkpoint; may be NULL),
   * which a driver may use to order its devices by room. The framework adds
   * taints from health() and splits the pool into slices. */
  int (*pool) (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err);

  /* The kubelet side. reset forgets every claim (the framework then
   * restores the completed ones); prepare takes what a claim needs or
   * nothing; restore takes again what a completed claim holds after a
   * restart; unprepare gives it back. */
  void (*reset) (void *self);
  int (*prepare) (void *self, const struct nrm_claim_view *c, struct nrm_prepared *out, nrm_error_t *err);
  int (*restore) (void *self, const char *uid, json_t *state, nrm_error_t *err);
  void (*unprepare) (void *self, const char *uid, json_t *state);

  /* Health of every device in one pass (optional: NULL means always
   * healthy). health_fd (optional) is a descriptor that becomes readable
   * when health may have changed; health_event then drains it. */
  int (*health) (void *self, struct nrm_health_report *ret, nrm_error_t *err);
  int (*health_fd) (void *self);
  void (*health_event) (void *self);

  /* Binding conditions (KEP-5007, optional): a claim allocated to this
   * node is not yet bound to its pod, and some of this driver's devices
   * carry bindingConditions. The driver makes them ready (or finds it
   * cannot) and returns their AllocatedDeviceStatus entries, [{driver,
   * pool, device, shareID?, conditions: [metav1.Condition], data?}], for
   * the framework to write to the claim's status. Called from a thread of
   * its own, possibly beside prepare: the driver locks what it shares. */
  int (*bind) (void *self, const struct nrm_claim_view *c, json_t **ret_devices, nrm_error_t *err);

  /* What a claim holds, for nrm status and /metrics (a new reference):
   * {"cpus": "0-3" (CPUs held exclusively), "memoryNodes": "0",
   *  "devices": {name: {capacity name: amount (a number)}},
   *  "deviceCPUs": {name: "0-1" (its CPUs of the claim)},
   *  "placement": {name: {what was chosen of the device, for the claim's
   *  status.devices[].data (docs/kubernetes-api.md, placement)}}}; every
   *  key optional. Built from state and the machine, so that a restart
   *  tells the same. Called from other threads than prepare's (the
   *  reconciler, the placement writer). Optional: without it, devices are
   *  listed as held. */
  json_t *(*describe) (void *self, const char *uid, json_t *state);

  /* The devices every other driver publishes on this node, as the API
   * server has them ({driver name: {device name: attributes}}, borrowed
   * for the call), whenever they change (optional; only with the API).
   * Called from a thread of its own: the driver locks what it shares.
   * The PCI driver leaves out the functions another driver publishes. */
  void (*node_devices) (void *self, json_t *devices);
};

/* A shared-object driver exports this (hwloc's component pattern). */
extern const struct nrm_driver_ops nrm_driver_component;

void nrm_container_edits_done (struct nrm_container_edits *e);
void nrm_prepared_done (struct nrm_prepared *p);
void nrm_health_report_done (struct nrm_health_report *r);

/* The DeviceTaint effect names of the API. */
const char *nrm_taint_effect_name (enum nrm_taint_effect e);

#endif
