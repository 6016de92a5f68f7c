/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CHECKPOINT_H
#define NRM_CHECKPOINT_H

#include <jansson.h>
#include <stdbool.h>

#include "nrm/base/error.h"

/* Reading the plugin's checkpoints from outside the plugin (nrm status,
 * the shared-pool reconciler, the slice refresher, nrm run): the plugin
 * owns the format and replaces each file atomically. */

#define NRM_CHECKPOINT_MAX (64 << 20)

/* A driver's claims as its checkpoint file in state_dir has them, read
 * without the plugin (another process may hold it): uid -> entry; a missing
 * checkpoint has none. The plugin replaces the file atomically, so this
 * sees one whole version. */
json_t *nrm_checkpoint_claims (const char *state_dir, const char *driver, nrm_error_t *err);

/* Whether a checkpoint entry is a completed prepare (the others hold
 * nothing). */
bool nrm_checkpoint_completed (json_t *entry);

/* {uid: state} of the completed claims of entries (new reference). */
json_t *nrm_checkpoint_held (json_t *claims);

#endif
