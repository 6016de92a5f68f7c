/* SPDX-License-Identifier: Apache-2.0 */
/* The checkpoint as other readers see it. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/checkpoint.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"

json_t *
nrm_checkpoint_claims (const char *state_dir, const char *driver, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/%s.checkpoint.json", state_dir, driver), *text = NULL;
  nrm_error_t rerr = NULL;
  if (nrm_read_file (path, NRM_CHECKPOINT_MAX, &text, NULL, &rerr) < 0)
    {
      if (rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          return json_object ();
        }
      *err = rerr;
      return NULL;
    }
  cleanup_json json_t *cp = json_loads (text, 0, NULL);
  if (!json_is_object (json_object_get (cp, "claims")))
    {
      nrm_error_set (err, EINVAL, "checkpoint `%s` is corrupt", path);
      return NULL;
    }
  return json_incref (json_object_get (cp, "claims"));
}

bool
nrm_checkpoint_completed (json_t *entry)
{
  const char *phase = json_string_value (json_object_get (entry, "phase"));
  return phase && strcmp (phase, "PrepareCompleted") == 0;
}

json_t *
nrm_checkpoint_held (json_t *claims)
{
  json_t *held = json_object ();
  const char *uid;
  json_t *c;
  json_object_foreach (claims, uid, c)
  {
    if (nrm_checkpoint_completed (c))
      json_object_set (held, uid, json_object_get (c, "state"));
  }
  return held;
}
