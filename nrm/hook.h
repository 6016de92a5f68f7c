/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_HOOK_H
#define NRM_HOOK_H

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* The OCI state a runtime writes on a hook's stdin (id, pid, bundle,
 * annotations) is at most this large. */
#define NRM_HOOK_STATE_MAX (1 << 20)

/* nrm-hook and nrm hook: reads the OCI state from stdin and binds the
 * container (nrm_hook_run); *summary as there. */
int nrm_hook_stdin (const struct nrm_fsroot *root, const char *state_dir, char **summary, nrm_error_t *err);

#endif
