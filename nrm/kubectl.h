/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_KUBECTL_H
#define NRM_KUBECTL_H

/* nrm kubectl (and kubectl nrm, through the kubectl-nrm link): what the
 * scheduler and nrm's drivers decided, read from the API server with the
 * operator's kubeconfig. Sub-commands nodes, claim NAME and pods; the views
 * are computed in nrm/kubectl-view.c. */

#include <jansson.h>
#include <stdio.h>

#include "nrm/base/error.h"
#include "nrm/cli.h"

int nrm_cli_kubectl (struct nrm_cli *cli, nrm_error_t *err);

/* A JSON document as YAML (libyaml's emitter), for -o yaml. */
int nrm_kubectl_yaml (json_t *doc, FILE *out, nrm_error_t *err);

/* The columns of a view, aligned, for the default output; view is what
 * nrm/kubectl-view.c made for sub-command sub. */
void nrm_kubectl_print (const char *sub, json_t *view, FILE *out);

#endif
