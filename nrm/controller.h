/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CONTROLLER_H
#define NRM_CONTROLLER_H

#include <signal.h>

#include "driver/k8s/kube.h"
#include "nrm/base/error.h"

/* nrm controller: one leader in the cluster (a coordination.k8s.io Lease)
 * watches every ResourceClaim and labels those allocated with binding
 * conditions on a device of one of drivers (a JSON array of driver names)
 * with their node (driver/k8s/binding.h says why). Runs until a signal of set
 * arrives; leadership lost is an error (the Deployment starts it again). */
int nrm_cmd_controller (struct nrm_kube *kube, json_t *drivers, const char *lease_namespace, const char *identity,
                        const sigset_t *set, nrm_error_t *err);

#endif
