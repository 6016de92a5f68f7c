/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TOPOLOGY_PCI_H
#define NRM_TOPOLOGY_PCI_H

/* What sysfs says about a PCI function beyond hwloc's model: its kernel
 * driver, IOMMU group, SR-IOV, device nodes, link and AER counters. Every
 * path is read below a root (nrm/base/fsroot.h: this machine or a tree
 * standing for it), so that the same code reads this machine and the
 * trees of the tests. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* A bus id as the standard attribute has it: 4-digit domain, lowercase. */
#define NRM_PCI_BUS_ID_LEN 13 /* "dddd:bb:dd.f" and its NUL */

struct nrm_pci_facts
{
  char bus_id[NRM_PCI_BUS_ID_LEN];
  uint16_t vendor_id, device_id;
  uint32_t class_code;             /* 24 bits: class, subclass, prog-if */
  int numa_node;                   /* sysfs numa_node; -1 unknown */
  char pcie_root[16];              /* pciDDDD:BB, the host bridge of the sysfs path; "" unknown */
  char *local_cpus;                /* local_cpulist ("0-7"), or NULL */
  char *driver;                    /* bound kernel driver, or NULL */
  int iommu_group;                 /* -1: none */
  int sriov_total;                 /* sriov_totalvfs; -1: not an SR-IOV PF */
  int sriov_enabled;               /* sriov_numvfs; -1 as above */
  char physfn[NRM_PCI_BUS_ID_LEN]; /* the PF of a VF, "" otherwise */
  char *link_speed;                /* current_link_speed ("16.0 GT/s PCIe"), or NULL */
  char *max_link_speed;            /* or NULL */
  int link_width, max_link_width;  /* lanes; -1 unknown */
  /* AER totals since boot (TOTAL_ERR_FATAL, _NONFATAL, _COR); -1: no AER. */
  int64_t aer_fatal, aer_nonfatal, aer_correctable;
  /* Device nodes the function's kernel driver made, as paths in /dev
   * ("/dev/dri/card0"), sorted; those that do not exist are left out. */
  char **nodes;
  size_t n_nodes;
  char **netdevs; /* network interfaces of the function, sorted */
  size_t n_netdevs;
  /* Whether some interface has carrier: 1 yes, 0 none has, -1 unknown
   * (no interface, or none says). */
  int carrier;
  /* Why the host itself uses the function, or NULL: an NVMe namespace (or
   * partition) that is mounted, swap, or under a device mapper or md; a
   * network interface that is up. */
  char *in_use;
};

/* Facts that say nothing: zeroes, NULLs, and -1 for every "unknown". */
void nrm_pci_facts_init (struct nrm_pci_facts *f);

/* Reads the facts of one function. ENOENT: no such function (removed);
 * anything else unreadable is left unknown, not an error. bus_id must be
 * a valid id (nrm_pci_bus_id_valid). */
int nrm_pci_facts_read (const struct nrm_fsroot *root, const char *bus_id, struct nrm_pci_facts *ret, nrm_error_t *err);
void nrm_pci_facts_done (struct nrm_pci_facts *f);

/* The vendor id and 24-bit class code of a function alone (what decides
 * whether nrm serves it), without the rest of its facts; ENOENT: no such
 * function. */
int nrm_pci_read_ids (const struct nrm_fsroot *root, const char *bus_id, uint16_t *vendor_id, uint32_t *class_code,
                      nrm_error_t *err);

/* A function's local_cpulist alone ("0-7"; NULL when it has none), for
 * placement at prepare. */
int nrm_pci_read_local_cpus (const struct nrm_fsroot *root, const char *bus_id, char **ret, nrm_error_t *err);

/* The functions in /sys/bus/pci/devices below the root, sorted; ENOENT when
 * the folder is missing (a recorded machine, a tree without PCI). Names
 * that are not valid bus ids are skipped. */
int nrm_pci_list (const struct nrm_fsroot *root, char ***ret, size_t *n, nrm_error_t *err);
void nrm_pci_list_free (char **list, size_t n);

/* Whether s is "dddd:bb:dd.f" in lowercase hex (device < 0x20, function < 8). */
bool nrm_pci_bus_id_valid (const char *s);

/* The class nrm publishes a function as: "gpu", "nic", "ib", "nvme",
 * "accel", "fpga", "coproc"; NULL for every other class (bridges, USB,
 * SATA, ...). class_code is 24 bits; vendor decides FPGAs. */
const char *nrm_pci_class_name (uint32_t class_code, uint16_t vendor_id);

/* How a claim's PCI functions are found among the devices of any driver,
 * so that a driver aligns with them without including another's header. */

/* The device name of a function as nrm's PCI drivers publish it:
 * "<class>-dddd-bb-dd-f" (dots and colons as dashes), into buf of at least
 * 40 bytes. */
void nrm_pci_device_name (const char *class, const char *bus_id, char *buf, size_t size);

/* The bus id ("dddd:bb:dd.f") a device name of that form names, into buf;
 * false, buf empty, for any other name (numa0, gpu-0). */
bool nrm_pci_bus_id_of_device (const char *name, char buf[NRM_PCI_BUS_ID_LEN]);

/* The PCI bus id a device of any driver carries in its attributes (the
 * standard resource.kubernetes.io/pciBusID, or dranet's and AMD's own
 * names), lowercased into buf (NRM_PCI_BUS_ID_LEN bytes); false if none. */
bool nrm_pci_bus_id_of_attributes (json_t *attrs, char *buf);

#endif
