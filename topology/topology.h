/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TOPOLOGY_H
#define NRM_TOPOLOGY_H

#include <hwloc.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* nrm's own model of a machine, filled from hwloc once and then read-only.
 * Every CPU set holds Linux CPU numbers (hwloc os indexes); every index field
 * ("package", "numa", ...) is a position in the matching array below, or -1. */

struct nrm_hugepages
{
  uint64_t size;  /* page size in bytes */
  uint64_t count; /* pages configured on the node */
};

struct nrm_numa_node
{
  unsigned os_index;
  int package;        /* package holding this node's CPUs, or -1 */
  uint64_t memory;    /* bytes; 0 when the source did not record it */
  uint64_t base_page; /* base page size in bytes; 0 when unknown */
  size_t n_hugepages; /* huge page sizes only, the base page is left out */
  struct nrm_hugepages *hugepages;
  char *kind;              /* "DRAM", "HBM", "NVM", ... (hwloc subtype; DRAM when absent) */
  int tier;                /* 0 = fastest memory kind present on the machine */
  hwloc_bitmap_t locality; /* CPUs that hwloc calls local, online or not */
  hwloc_bitmap_t cpus;     /* online CPUs whose home node this is (empty: a CPU-less node) */
  bool allowed;            /* not excluded by the cgroup nrm runs in */
  /* Node settings applied by nrm_topology_apply_settings(). */
  uint64_t reserved_memory;
  uint64_t *reserved_hugepages; /* parallel to hugepages[], bytes */
};

struct nrm_package
{
  unsigned os_index;
  hwloc_bitmap_t cpus;
};

struct nrm_cache
{
  unsigned os_index;
  uint64_t size;
  hwloc_bitmap_t cpus;
};

struct nrm_group
{
  char *kind; /* "Die", "Cluster", "Group" or the hwloc subtype */
  unsigned os_index;
  unsigned depth; /* 0 = outermost group level */
  hwloc_bitmap_t cpus;
};

struct nrm_core
{
  unsigned os_index;
  int package, numa, l3, kind;
  hwloc_bitmap_t cpus; /* online PUs of the core */
};

struct nrm_pu
{
  unsigned os_index;
  int core, package, numa, l3, kind;
  bool allowed;  /* allowed by the cgroup cpuset nrm sees */
  bool reserved; /* node setting: never handed out */
  bool isolated; /* isolcpus / nohz_full style isolation */
};

struct nrm_cpukind
{
  int efficiency;  /* hwloc's ranking, higher is more performant; -1 unknown */
  char *name;      /* "performance" or "efficiency" */
  char *core_type; /* hwloc CoreType info (e.g. IntelAtom), or NULL */
  hwloc_bitmap_t cpus;
};

struct nrm_pci_device
{
  char bus_id[16];    /* extended BDF, DDDD:BB:DD.F */
  char pcie_root[16]; /* pciDDDD:BB of the host bridge, "" when unknown */
  uint16_t class_id, vendor_id, device_id;
  int numa;             /* index of the only local NUMA node, or -1 */
  hwloc_bitmap_t nodes; /* os indexes of local NUMA nodes */
  char *os_names;       /* comma-separated OS device names (eth0, card0), or NULL */
  char *os_kind;        /* "gpu", "network", "openfabrics", "coprocessor", "storage", "dma", or NULL */
  /* hwloc's PCIVendor / PCIDevice infos (pci.ids names), printable; NULL when unknown. */
  char *vendor_name;
  char *device_name;
  /* The CPUs near the function: the cpuset of its first non-I/O ancestor
   * (a package, a NUMA node, or smaller: a die, an L3); every CPU when
   * hwloc does not know. */
  hwloc_bitmap_t cpus;
};

struct nrm_topology
{
  char *source; /* "live" or the XML path */
  char *arch;

  size_t n_packages, n_numa, n_l3, n_groups, n_cores, n_pus, n_kinds, n_pci;
  struct nrm_package *packages;
  struct nrm_numa_node *numa; /* ordered by os_index */
  struct nrm_cache *l3;
  struct nrm_group *groups;
  struct nrm_core *cores;
  struct nrm_pu *pus; /* online PUs, ordered by os_index */
  struct nrm_cpukind *kinds;
  struct nrm_pci_device *pci;

  uint64_t *distances; /* n_numa x n_numa, or NULL when the source has none */
  bool distances_from_os;

  hwloc_bitmap_t online;     /* online CPUs */
  hwloc_bitmap_t offline;    /* present but offline CPUs */
  hwloc_bitmap_t disallowed; /* online but outside nrm's cgroup cpuset */
  hwloc_bitmap_t reserved;   /* node setting */
  hwloc_bitmap_t isolated;   /* node setting or /sys/devices/system/cpu/isolated */
};

/* Node settings that shape what is allocatable. */
struct nrm_reserved_memory
{
  unsigned numa_node; /* os index */
  char *resource;     /* "memory" or "hugepages-<size>" */
  uint64_t bytes;
};

struct nrm_node_settings
{
  hwloc_bitmap_t reserved_cpus; /* NULL: none */
  hwloc_bitmap_t isolated_cpus; /* NULL: read from the live machine, else none */
  size_t n_reserved_memory;
  struct nrm_reserved_memory *reserved_memory;
};

/* Scans the live machine (xml_path == NULL) or an hwloc XML export. */
int nrm_topology_load (const char *xml_path, struct nrm_topology **ret, nrm_error_t *err);

/* Checks the settings against the machine and records them in the model; on
 * error the model is left as it was. /sys/devices/system/cpu/isolated is
 * read below root (NULL: this machine) for a live machine. */
int nrm_topology_apply_settings (struct nrm_topology *topo, const struct nrm_node_settings *s,
                                 const struct nrm_fsroot *root, nrm_error_t *err);

struct nrm_topology *nrm_topology_free (struct nrm_topology *topo);

/* Position of the PU with this Linux CPU number, or -1. */
int nrm_topology_pu_index (const struct nrm_topology *topo, unsigned cpu);
/* Position of the NUMA node with this os index, or -1. */
int nrm_topology_numa_index (const struct nrm_topology *topo, unsigned os_index);

/* CPUs of the node that may be handed out: home CPUs, allowed, not reserved. */
hwloc_bitmap_t nrm_topology_node_allocatable (const struct nrm_topology *topo, size_t numa);
/* Bytes in the node's huge page pools. */
uint64_t nrm_topology_node_hugepage_bytes (const struct nrm_topology *topo, size_t numa);
/* Bytes of ordinary memory that may be handed out on the node: its memory
 * less the huge page pools and the reservation. */
uint64_t nrm_topology_node_allocatable_memory (const struct nrm_topology *topo, size_t numa);

/* Distance between two NUMA nodes (array positions); 10/20 when unknown. */
uint64_t nrm_topology_distance (const struct nrm_topology *topo, size_t a, size_t b);

/* The list form of resource.kubernetes.io/numaNode (KEP-6072) for the node at
 * position numa, as os indexes: the node itself, then, in ascending order,
 * the nodes at the smallest distance from it except those whose socket (the
 * package of the node's first CPU) is known and differs from its own known
 * socket; CPU-less nodes have no socket, so they are kept, and a CPU-less
 * node keeps every node at that distance. Just the node without a distance
 * matrix. Returns the count written, at most max; the whole list never
 * holds more than topo->n_numa nodes. */
size_t nrm_topology_near_nodes (const struct nrm_topology *topo, size_t numa, int64_t *out, size_t max);

/* Human summary and full JSON model. */
int nrm_topology_print_summary (const struct nrm_topology *topo, FILE *out, nrm_error_t *err);
json_t *nrm_topology_to_json (const struct nrm_topology *topo);
/* numactl -H's layout: the node count, each node's CPUs, size and free
 * memory (MemFree of /sys/devices/system/node/nodeN/meminfo below root on the
 * live machine; "unknown" for a recorded one or a missing file), the
 * distance table. */
int nrm_topology_print_hardware (const struct nrm_topology *topo, const struct nrm_fsroot *root, FILE *out,
                                 nrm_error_t *err);

/* "0-3,8" for a set; the caller frees. */
char *nrm_cpulist_format (hwloc_const_bitmap_t set);
/* Parses a Linux CPU list ("0-3,8,10-11"); empty text gives an empty set. */
int nrm_cpulist_parse (const char *text, hwloc_bitmap_t *ret, nrm_error_t *err);
/* Adds to set the CPU list under key of every member of the JSON object
 * map (claims by uid, say); a member without one, or with a list that does
 * not parse, adds nothing. */
void nrm_cpulist_union_members (hwloc_bitmap_t set, json_t *map, const char *key);

/* Set operations on two CPU (or node) lists as text, as cgroup files hold
 * them. NULL or false when either is not a list. */
enum nrm_cpulist_op
{
  NRM_CPULIST_UNION,
  NRM_CPULIST_INTERSECTION,
};
char *nrm_cpulist_combine (const char *a, const char *b, enum nrm_cpulist_op op);
bool nrm_cpulist_subset (const char *a, const char *b); /* a ⊆ b */
bool nrm_cpulist_equal (const char *a, const char *b);

/* "2Mi" style name of a page size; the caller frees. */
char *nrm_pagesize_name (uint64_t size);

#endif
