/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_NAMES_H
#define NRM_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* Kubernetes name formats (RFC 1123 as the API server checks them). */
bool nrm_is_dns_label (const char *s);              /* <= 63, [a-z0-9]([-a-z0-9]*[a-z0-9])? */
bool nrm_is_dns_subdomain (const char *s, int max); /* dot-separated RFC 1123 labels, <= max in all */
bool nrm_is_c_identifier (const char *s, int max);  /* [A-Za-z_][A-Za-z0-9_]*, <= max */
bool nrm_is_qualified_name (const char *s);         /* [<subdomain <= 63>/]<identifier <= 32> */

/* The base request "req" of a request reference "req" or "req/sub", as
 * the kubelet's reply and the device metadata name it (malloc'd). */
char *nrm_base_request (const char *request);

/* The devices of one NUMA node (N its OS index): "numa<N>" (its CPUs or
 * memory, and the counter set of its CPUs), "numa<N>-isolated" (its
 * isolated CPUs), "numa<N>-hugepages-<size>" (its huge pages of one size,
 * the size's name lower-cased: 2mi). The one place these names are made
 * and read. */
enum nrm_numa_name_kind
{
  NRM_NUMA_NAME_NODE,
  NRM_NUMA_NAME_ISOLATED,
  NRM_NUMA_NAME_HUGEPAGES,
};
#define NRM_NUMA_NAME_MAX 64

/* Writes the name into buf (size bytes; NRM_NUMA_NAME_MAX fits every one)
 * and returns buf; page_size ("2Mi") only for NRM_NUMA_NAME_HUGEPAGES. */
char *nrm_numa_name (char *buf, size_t size, unsigned node, enum nrm_numa_name_kind kind, const char *page_size);

/* The node and kind of such a name; false for any other name. */
bool nrm_numa_name_parse (const char *name, unsigned *node, enum nrm_numa_name_kind *kind);

#endif
