/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_DEVICES_H
#define NRM_DEVICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "nrm/base/error.h"
#include "topology/topology.h"

#define NRM_DEFAULT_DOMAIN "nrm.io"
#define NRM_STD_NUMA_ATTR "resource.kubernetes.io/numaNode"
#define NRM_STD_PCIE_ROOT_ATTR "resource.kubernetes.io/pcieRoot"
/* Attribute values a device may carry in all, a list counting each element
 * (resource.k8s.io/v1 ResourceSliceMaxAttributeValuesPerDevice). */
#define NRM_MAX_ATTR_VALUES 48

/* What every driver's devices are written for: the node and the API
 * server. Settings of one driver are its own (nrm_driver_host.settings). */
struct nrm_publish_options
{
  const char *node_name;
  /* API server feature gates the output may rely on (alpha in 1.36, off by default). */
  bool list_attributes;  /* DRAListTypeAttributes */
  bool node_allocatable; /* DRANodeAllocatableResources (KEP-5517) */
  /* The API server's minor version (36 for 1.36, the default): a field
   * whose shape changed between releases is written as that server reads
   * it. 1.37 replaced nodeAllocatableResourceMappings with
   * nodeAllocatableResources. */
  unsigned api_minor;
};

/* The devices of one driver's pool on this node, in preference order, and
 * the counter sets they consume. */
struct nrm_pool
{
  char *driver;
  json_t *devices;      /* array of resource.k8s.io/v1 Device objects */
  json_t *counter_sets; /* array of CounterSet objects */
};

void nrm_publish_options_init (struct nrm_publish_options *o);

void nrm_pool_done (struct nrm_pool *p);

/* NUMA node positions in the order devices are offered: nodes without
 * reserved CPUs and without local accelerators first, then by id. The
 * caller frees. */
size_t *nrm_numa_preference (const struct nrm_topology *t);

/* The same, and within a class the nodes with the fewest free CPUs first
 * (free_cpus: per NUMA node index; NULL: none known), except that a node
 * whose free CPUs lie in several L3 groups comes after the nodes with a
 * larger free L3 group (free_cell: the most free CPUs of the node in one
 * L3 group; NULL: not known). Offered in this order, a scheduler's first
 * fit is a best fit: the fullest node that holds the claim, in one L3 group
 * when some node can, and empty nodes stay whole for large claims. */
size_t *nrm_numa_preference_by_room (const struct nrm_topology *t, const uint64_t *free_cpus,
                                     const uint64_t *free_cell);

/* The free CPUs of each node (allocatable ones in free_set) into
 * free_cpus, and the most of them in one L3 group into free_cell (the whole
 * node on machines without L3 groups); both per NUMA node index. */
void nrm_numa_room (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, uint64_t *free_cpus,
                    uint64_t *free_cell);

/* The NUMA node index of a consumable CPU or memory device named
 * "numa<N>" (and, when isolated is not NULL, of "numa<N>-isolated", telling
 * which), or -1 for any other name or an unknown node. */
int nrm_numa_device_index (const struct nrm_topology *t, const char *name, bool *isolated);

/* Sets resource.kubernetes.io/numaNode on a device whose CPUs or memory lie
 * on the NUMA nodes nodes[] (positions; nodes[0] is its own): an int, or
 * with o->list_attributes the KEP-6072 list of nrm_topology_near_nodes()
 * for nodes[0], then the device's other nodes that list lacks. Call it after
 * every other attribute of the device: the list gets the values those leave
 * of NRM_MAX_ATTR_VALUES and is cut at its end to fit (the own node stays
 * first), so the device never exceeds the limit through it. */
void nrm_device_numa_attribute (const struct nrm_topology *t, const struct nrm_publish_options *o, json_t *attrs,
                                const size_t *nodes, size_t n_nodes);

/* Maps the node-allocatable resource (KEP-5517, gate
 * DRANodeAllocatableResources) onto the device dev: consuming the device's
 * capacity capacity_key times multiplier, or with capacity_key NULL,
 * multiplier per device allocated (a quantity string, or NULL for 1), in the
 * form of o->api_minor: 1.36's nodeAllocatableResourceMappings
 * (capacityKey, allocationMultiplier), 1.37's nodeAllocatableResources
 * (mapping: capacityKey and capacityMultiplier, or deviceMultiplier). The
 * multiplier is always written: 1.36 defaults it to "1", 1.37 requires it
 * beside a capacityKey, and a slice must read back as sent, or its
 * publisher would rewrite it at every look. */
void nrm_device_allocatable_mapping (const struct nrm_publish_options *o, json_t *dev, const char *resource,
                                     const char *capacity_key, const char *multiplier);

/* Splits the pools into ResourceSlices within the API limits and returns
 * them as one {"apiVersion":"v1","kind":"List","items":[...]} document. */
int nrm_slices_build (const struct nrm_pool *pools, size_t n_pools, const struct nrm_publish_options *o, json_t **ret,
                      nrm_error_t *err);

/* Whether the device lowers its slice's limit to 64 devices (taints,
 * counter consumption or list-typed attributes). */
bool nrm_device_is_advanced (json_t *dev);

/* Checks a List of ResourceSlices against every resource.k8s.io/v1 limit
 * and rule nrm relies on; the error names the slice, device and field. */
int nrm_slices_validate (json_t *list, nrm_error_t *err);

/* Adds taints[device] (an array of DeviceTaint) to each named device. */
void nrm_pool_taint (struct nrm_pool *p, json_t *taints);

#endif
