/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_HOOK_H
#define NRM_HOOK_H

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* nrm-hook and nrm hook: reads the OCI state from stdin and binds the
 * container (nrm_hook_run, nrm/commit.h); *summary as there. */
int nrm_hook_stdin (const struct nrm_fsroot *root, const char *state_dir, char **summary, nrm_error_t *err);

#endif
