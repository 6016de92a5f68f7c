/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_METADATA_H
#define NRM_METADATA_H

#include <jansson.h>
#include <stdbool.h>

#include "driver/driver.h"
#include "nrm/base/error.h"
#include "nrm/base/log.h"

/* Device metadata in containers (KEP-5304, Kubernetes 1.36, as
 * k8s.io/dynamic-resource-allocation v0.36 writes it): for each (claim, base
 * request) a JSON file on the host, and a CDI spec that bind-mounts it
 * read-only into the container at
 *   <root>/resourceclaims/<claim>/<base request>/<driver>-metadata.json, or
 *   <root>/resourceclaimtemplates/<pod claim name>/<base request>/<driver>-metadata.json
 * for a claim generated from a template. The base request of "req/sub" is
 * "req". Every name that becomes part of a path is checked first; nothing is
 * written when one is refused. */

#define NRM_METADATA_CONTAINER_ROOT "/var/run/kubernetes.io/dra-device-attributes"
#define NRM_METADATA_POD_CLAIM_NAME_ANNOTATION "resource.kubernetes.io/pod-claim-name"

/* Writes the metadata of one request of a claim: the file
 * <plugin_data_dir>/dra-device-metadata/<ns>_<name>/<base request>/metadata.json
 * and the CDI spec <cdi_dir>/<driver>_metadata_<uid>_<base request>.json.
 * request is the full request reference as allocated ("req" or "req/sub");
 * devices is an array of {"driver", "pool", "name", "attributes"?} objects
 * (attributes as in a ResourceSlice). pod_claim_name is NULL for a claim
 * referenced by name. Rewriting the same request bumps metadata.generation.
 * On success *ret_cdi_id (when ret_cdi_id is not NULL) is the CDI device id
 * "<driver>/metadata=<uid>_<base request>", for the caller to free. */
int nrm_metadata_write (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *ns,
                        const char *name, const char *uid, const char *pod_claim_name, const char *request,
                        json_t *devices, char **ret_cdi_id, nrm_error_t *err);

/* Removes all metadata of a claim: the directory
 * <plugin_data_dir>/dra-device-metadata/<ns>_<name> with what it holds
 * (symbolic links are removed, never followed) and every
 * <cdi_dir>/<driver>_metadata_<uid>_*.json. What is already gone is fine. */
int nrm_metadata_remove (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *ns,
                         const char *name, const char *uid, nrm_error_t *err);

/* The pod claim name of a ResourceClaim object (the value of its
 * resource.kubernetes.io/pod-claim-name annotation), or NULL. The string
 * belongs to claim. */
const char *nrm_metadata_pod_claim_name (json_t *claim);

/* The metadata of a claim as the plugin prepares it: one entry per base
 * request, {request (as allocated), podClaimName?, devices: [{driver, pool,
 * name, attributes?}]}, with the attributes the driver gave (by device
 * name; may be NULL). New reference. */
json_t *nrm_metadata_entries (const char *driver, const struct nrm_claim_view *v, json_t *attrs);

/* Writes the files and specs of every entry, and adds each one's CDI id to
 * the first device of its request in devs (the kubelet's reply: objects
 * with requestNames and cdiDeviceIDs). As upstream, a failure is logged
 * and the claim is prepared without it. */
void nrm_metadata_write_claim (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *ns,
                               const char *name, const char *uid, json_t *entries, json_t *devs, nrm_log_fn log,
                               void *log_ctx);

/* Removes the metadata of a claim's checkpoint entry (its namespace and
 * name). A completed entry says whether metadata was written ("metadata"):
 * one without it costs no scan of the CDI directory. An entry of an
 * interrupted prepare may have left files either way (all = true). A
 * failure is logged. */
void nrm_metadata_remove_entry (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *uid,
                                json_t *entry, bool all, nrm_log_fn log, void *log_ctx);

/* Removes the metadata of claims that claims (uid -> checkpoint entry) no
 * longer has (a crash between unprepare's checkpoint write and the
 * removal): their specs <driver>_metadata_<uid>_<request>.json and their
 * folders <ns>_<name>. */
void nrm_metadata_remove_orphans (const char *plugin_data_dir, const char *cdi_dir, const char *driver, json_t *claims,
                                  nrm_log_fn log, void *log_ctx);

#endif
