/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/plugin.h"
#include "nrm/cleanup.h"
#include "nrm/fs.h"

#define MAX_CLAIM_FILE (4 << 20)

/* Claims are matched by their content, never by a path built from the
 * request: a claim name cannot lead outside the directory. */
static int
dir_get (void *self, const char *ns, const char *name, json_t **ret, nrm_error_t *err)
{
  const char *dir = self;
  DIR *d = opendir (dir);
  struct dirent *de;

  if (d == NULL)
    return nrm_error_errno (err, errno, "cannot read the claims directory `%s`", dir);
  while ((de = readdir (d)) != NULL)
    {
      size_t n = strlen (de->d_name);
      cleanup_free char *path = NULL, *text = NULL;
      json_error_t jerr;
      if (n < 6 || strcmp (de->d_name + n - 5, ".json") != 0 || de->d_name[0] == '.')
        continue;
      if (asprintf (&path, "%s/%s", dir, de->d_name) < 0)
        break;
      nrm_error_t ignored = NULL;
      if (nrm_read_file (path, MAX_CLAIM_FILE, &text, NULL, &ignored) < 0)
        {
          /* A file that vanished or cannot be read is not this claim. */
          nrm_error_release (&ignored);
          continue;
        }
      json_t *claim = json_loads (text, 0, &jerr);
      if (claim == NULL)
        continue;
      json_t *meta = json_object_get (claim, "metadata");
      const char *cns = json_string_value (json_object_get (meta, "namespace"));
      const char *cname = json_string_value (json_object_get (meta, "name"));
      if (cns && cname && strcmp (cns, ns) == 0 && strcmp (cname, name) == 0)
        {
          closedir (d);
          *ret = claim;
          return 0;
        }
      json_decref (claim);
    }
  closedir (d);
  return nrm_error_set (err, ENOENT, "ResourceClaim %s/%s not found in `%s`", ns, name, dir);
}

void
nrm_claim_source_dir (struct nrm_claim_source *src, const char *dir)
{
  src->get = dir_get;
  src->self = (void *) dir;
}
