/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_SETUP_H
#define NRM_SETUP_H

/* What the commands share to set themselves up from their settings: the
 * machine, the enabled drivers, the kubelet's settings, the state dir. */

#include <jansson.h>

#include "driver/registry.h"
#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "nrm/conf.h"
#include "topology/topology.h"

/* The machine (--topology, or this one) with the node's settings applied;
 * root is c->fsroot opened (nrm_fsroot_open), borrowed by what is set up. */
int nrm_setup_machine (const struct nrm_config *c, const struct nrm_fsroot *root, struct nrm_topology **ret,
                       nrm_error_t *err);

/* The registry and the enabled drivers of this node, for the machine t;
 * nrm_setup_close_drivers() undoes it (also after a failure). */
int nrm_setup_drivers (const struct nrm_config *c, const struct nrm_fsroot *root, const struct nrm_topology *t,
                       struct nrm_registry **reg, struct nrm_drivers *d, nrm_error_t *err);
void nrm_setup_close_drivers (struct nrm_registry *reg, struct nrm_drivers *d);

/* The kubelet's reserved CPUs and memory, adopted or compared
 * (nrm_config_import_kubelet); the lines it has to say go to the log at
 * level, or nowhere when level is negative. *kubelet as there. */
int nrm_setup_kubelet (struct nrm_config *c, const char *cmd, int level, json_t **kubelet, nrm_error_t *err);

/* A state directory that does not exist is most likely a typo: created, it
 * would split the bookkeeping from the plugin's and the runs'. The default
 * is nrm's own and is created; any other only when asked for. */
int nrm_setup_check_state_dir (const struct nrm_config *c, const char *cmd, nrm_error_t *err);

#endif
