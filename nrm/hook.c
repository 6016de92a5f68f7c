/* SPDX-License-Identifier: Apache-2.0 */
/* The hook's input, for nrm-hook and nrm hook alike (nrm/hook.h). */
#include "config.h"

#include <unistd.h>

#include "nrm/commit.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/hook.h"

int
nrm_hook_stdin (const struct nrm_fsroot *root, const char *state_dir, char **summary, nrm_error_t *err)
{
  cleanup_free char *buf = NULL;
  size_t len = 0;
  if (nrm_read_fd (STDIN_FILENO, "stdin", NRM_HOOK_STATE_MAX, &buf, &len, err) < 0)
    return nrm_error_wrap (err, "the OCI state");
  return nrm_hook_run (root, buf, len, state_dir, summary, err);
}
