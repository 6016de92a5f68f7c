/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_METADATA_H
#define NRM_METADATA_H

#include <jansson.h>

#include "nrm/base/error.h"

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

#endif
