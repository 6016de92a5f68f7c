/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_STATUS_H
#define NRM_STATUS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "driver/registry.h"
#include "nrm/conf.h"
#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "topology/topology.h"

/* Per driver and pool, the devices and what claims hold of them (the counts
 * of a KEP-5677 ResourcePoolStatus); every claim and run with its CPUs and
 * memory nodes; exclusive, shared, reserved and isolated CPUs. */
int nrm_status (struct nrm_config *c, const struct nrm_fsroot *root, const struct nrm_topology *t,
                const struct nrm_drivers *drivers, bool as_json, FILE *out, nrm_error_t *err);

#endif
