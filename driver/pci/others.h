/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_PCI_OTHERS_H
#define NRM_PCI_OTHERS_H

/* Coexistence: which PCI functions another DRA driver or a classic device
 * plugin on this node already serves, so that the PCI driver does not
 * publish them a second time. The sources are the kubelet's own folders
 * (docs/coexistence.md has the upstream facts behind each):
 *
 * - <kubelet_dir>/plugins_registry/: a DRA driver's registration socket,
 *   <driver>-reg.sock or <driver>-<suffix>-reg.sock (rolling updates); the
 *   hashed dra-<hash>-reg.sock, which hides the name, is resolved through
 *   <kubelet_dir>/plugins/<driver>/dra*.sock. Known drivers map to rules
 *   (gpu.nvidia.com: vendor 10de, class gpu; ...).
 * - <kubelet_dir>/device-plugins/kubelet_internal_checkpoint: the kubelet's
 *   resources and their device ids (a resource whose ids are PCI addresses
 *   takes exactly those functions; known names take a vendor and class).
 * - the device plugins' sockets in device-plugins/ and plugins_registry/
 *   (nvidia-gpu.sock, gpu.intel.com-i915.sock, amd.com_gpu, and the SR-IOV
 *   network device plugin's <prefix>_<name>.sock).
 * - the configuration: extra rules, grammar below.
 *
 * Rule grammar (one string each; a bad one is an error naming it):
 *   DDDD:BB:DD.F          that PCI function (hex, 4-digit domain)
 *   TERM[,TERM...]        every function that matches all terms, where
 *                         TERM is vendor:HHHH (4 hex digits), class:NAME
 *                         (gpu, nic, ib, nvme, accel, coproc, fpga) or vf
 *                         (SR-IOV virtual functions only)
 *   driver:NAME           as if DRA driver NAME (a known one) registered
 *   resource:NAME         as if device-plugin resource NAME (a known name)
 *                         were registered
 *   own:DOMAIN            a registration named DOMAIN or *.DOMAIN is one
 *                         of nrm's own (names ending in .nrm.io always are)
 * For example "vendor:10de", "class:gpu", "vendor:1002,class:accel",
 * "0000:3b:00.0", "driver:gpu.nvidia.com". */

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "nrm/base/error.h"

struct nrm_pci_others;

/* kubelet_dir: /var/lib/kubelet (already below any --fsroot tree), or NULL
 * for the configuration's rules alone. skip: the configuration's rules, a
 * NULL-terminated list (NULL for none). Missing kubelet folders are no
 * error (no kubelet yet). */
int nrm_pci_others_new (const char *kubelet_dir, const char *const *skip, struct nrm_pci_others **ret,
                        nrm_error_t *err);
void nrm_pci_others_free (struct nrm_pci_others *o);

/* An inotify descriptor that becomes readable when the plugin registry or
 * the device-plugin folder changes (or, while they are missing, the folder
 * that would hold them), or -1 when inotify is not available. */
int nrm_pci_others_fd (struct nrm_pci_others *o);

/* Reads every source again and drains the fd. On error (a malformed
 * checkpoint, an unreadable folder) the last good state stays. */
int nrm_pci_others_refresh (struct nrm_pci_others *o, nrm_error_t *err);

/* Who serves this function, or NULL: a short text, valid until the next
 * refresh or free, such as "gpu.nvidia.com (DRA driver registered with the
 * kubelet)", "nvidia.com/gpu (device plugin)" or "configuration:
 * vendor:10de". class_name: the PCI driver's class (gpu, nic, ib, nvme,
 * accel, coproc, fpga); bus_id: "0000:3b:00.0"; is_vf: an SR-IOV VF. */
const char *nrm_pci_others_owner (const struct nrm_pci_others *o, uint16_t vendor, const char *class_name,
                                  const char *bus_id, bool is_vf);

/* Every rule and every registration seen, as a new JSON array of
 * {"who": ..., "what": ...}; what is "not matched" for a registration or
 * resource that takes nothing. */
json_t *nrm_pci_others_describe (const struct nrm_pci_others *o);

/* For the fuzzer and the tests: parses one rule, or a checkpoint's text as
 * the kubelet writes it, without any file. */
int nrm_pci_others_check_rule (const char *rule, nrm_error_t *err);
int nrm_pci_others_check_checkpoint (const char *text, size_t len, nrm_error_t *err);

#endif
