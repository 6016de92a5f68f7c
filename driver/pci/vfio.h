/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_PCI_VFIO_H
#define NRM_PCI_VFIO_H

/* Passthrough: a PCI function handed to vfio-pci for a claim and given
 * back to its kernel driver afterwards. Every step is journaled first
 * (<dir>/<bus id>.json, written durably): a crash at any point leaves a
 * journal entry, and release() of that entry puts the function back, so
 * a restart rebuilds the same picture. All paths are below the root. */

#include <stdbool.h>
#include <time.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "topology/pci.h"

/* Whether the function can be passed through: it has an IOMMU group that
 * holds it alone, and vfio-pci is loaded. Why not, in *why (static). */
bool nrm_vfio_possible (const struct nrm_fsroot *fsroot, const struct nrm_pci_facts *f, const char **why);

/* Binds the function to vfio-pci for claim uid, journaled in dir; done
 * once the kernel reports vfio-pci as its driver and /dev/vfio/<group>
 * exists (waits up to timeout_ms for both). Bound already: only the
 * journal's claim is updated. On failure the function goes back to the
 * driver it had, and the error says which step failed. */
int nrm_vfio_bind (const struct nrm_fsroot *fsroot, const char *dir, const char *bus_id, const char *uid,
                   int timeout_ms, nrm_error_t *err);

/* Gives a journaled function back: clears driver_override, unbinds it from
 * vfio-pci and lets the kernel probe its own driver; the journal entry goes
 * last. Without a journal entry nothing is done (0). */
int nrm_vfio_release (const struct nrm_fsroot *fsroot, const char *dir, const char *bus_id, int timeout_ms,
                      nrm_error_t *err);

/* The journal entry of a function: the claim and when it was bound (0
 * when unknown); false when there is none. *uid is malloc'd. */
bool nrm_vfio_journaled (const char *dir, const char *bus_id, char **uid, time_t *since);

/* The bus ids with a journal entry, sorted. */
int nrm_vfio_list (const char *dir, char ***ret, size_t *n, nrm_error_t *err);

#endif
