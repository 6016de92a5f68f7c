/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CLAIMS_H
#define NRM_CLAIMS_H

#include <jansson.h>

#include "nrm/base/error.h"

/* Where the plugin's claims come from: the Kubernetes API or a directory
 * of JSON files. */
struct nrm_claim_source
{
  /* A new reference to the resource.k8s.io/v1 ResourceClaim, or an error. */
  int (*get) (void *self, const char *ns, const char *name, json_t **ret, nrm_error_t *err);
  void *self;
};

/* Reads ResourceClaims from *.json files in a directory (regular files
 * only, indexed). One nrm_claims_dir may serve several sources and
 * threads. */
struct nrm_claims_dir;
struct nrm_claims_dir *nrm_claims_dir_new (const char *dir);
void nrm_claims_dir_free (struct nrm_claims_dir *cd);
void nrm_claim_source_dir (struct nrm_claim_source *src, struct nrm_claims_dir *cd);

/* Reads ResourceClaims from the API server (GET by namespace and name). */
struct nrm_kube;
void nrm_claim_source_kube (struct nrm_claim_source *src, struct nrm_kube *k);

#endif
