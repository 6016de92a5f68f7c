/* SPDX-License-Identifier: Apache-2.0 */
/* The checkpoint file: its path, its one reader and its writer. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/kubelet/checkpoint.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"

#define CHECKPOINT_VERSION 1

char *
nrm_checkpoint_path (const char *state_dir, const char *driver)
{
  return xasprintf ("%s/%s.checkpoint.json", state_dir, driver);
}

json_t *
nrm_checkpoint_new (const char *driver)
{
  return json_pack ("{s:i, s:s, s:I, s:{}}", "version", CHECKPOINT_VERSION, "driver", driver, "generation",
                    (json_int_t) 0, "claims");
}

int
nrm_checkpoint_read (const char *path, const char *driver, json_t **ret, nrm_error_t *err)
{
  cleanup_free char *text = NULL;
  json_error_t jerr;
  nrm_error_t rerr = NULL;

  if (nrm_read_file (path, NRM_CHECKPOINT_MAX, &text, NULL, &rerr) < 0)
    {
      if (rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          *ret = nrm_checkpoint_new (driver);
          return 0;
        }
      *err = rerr;
      return -1;
    }
  json_t *cp = json_loads (text, 0, &jerr);
  const char *why = NULL;
  if (cp == NULL)
    why = jerr.text;
  else if (json_integer_value (json_object_get (cp, "version")) != CHECKPOINT_VERSION)
    why = "unsupported version";
  else if (!json_is_string (json_object_get (cp, "driver"))
           || strcmp (json_string_value (json_object_get (cp, "driver")), driver) != 0)
    why = "it belongs to another driver";
  else if (!json_is_object (json_object_get (cp, "claims")) || !json_is_integer (json_object_get (cp, "generation")))
    why = "claims or generation missing";
  if (why != NULL)
    {
      nrm_error_set (err, EINVAL,
                     "checkpoint `%s` is corrupt (%s); it was left untouched: inspect it, move it away and "
                     "restart to begin with no prepared claims",
                     path, why);
      json_decref (cp);
      return -1;
    }
  *ret = cp;
  return 0;
}

char *
nrm_checkpoint_text (json_t *cp, json_int_t *gen)
{
  *gen = json_integer_value (json_object_get (cp, "generation")) + 1;
  json_object_set_new (cp, "generation", json_integer (*gen));
  return json_dumps (cp, JSON_INDENT (1) | JSON_SORT_KEYS);
}

/* Every write is durable: one that replaced the file without a sync could
 * leave it empty after a power cut, and then the plugin could not start,
 * and the completed claims in it would be lost. */
int
nrm_checkpoint_write (const char *path, json_t *cp, json_int_t *gen, nrm_error_t *err)
{
  cleanup_free char *text = nrm_checkpoint_text (cp, gen);
  if (nrm_write_atomic (path, text, strlen (text), 0600, err) < 0)
    {
      json_object_set_new (cp, "generation", json_integer (*gen - 1));
      return -1;
    }
  return 0;
}

json_t *
nrm_checkpoint_claims (const char *state_dir, const char *driver, nrm_error_t *err)
{
  cleanup_free char *path = nrm_checkpoint_path (state_dir, driver);
  cleanup_json json_t *cp = NULL;
  if (nrm_checkpoint_read (path, driver, &cp, err) < 0)
    return NULL;
  return json_incref (json_object_get (cp, "claims"));
}

bool
nrm_checkpoint_completed (json_t *entry)
{
  const char *phase = json_string_value (json_object_get (entry, "phase"));
  return phase && strcmp (phase, "PrepareCompleted") == 0;
}

/* {uid: entry[key]} of the completed claims. */
static json_t *
completed (json_t *claims, const char *key)
{
  json_t *out = json_object ();
  const char *uid;
  json_t *c;
  json_object_foreach (claims, uid, c)
  {
    if (nrm_checkpoint_completed (c))
      json_object_set (out, uid, json_object_get (c, key));
  }
  return out;
}

json_t *
nrm_checkpoint_held (json_t *claims)
{
  return completed (claims, "state");
}

json_t *
nrm_checkpoint_answers (json_t *claims)
{
  return completed (claims, "devices");
}
