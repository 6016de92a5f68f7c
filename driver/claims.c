/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/names.h"
#include "driver/plugin.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"

#define MAX_CLAIM_FILE (4 << 20)

static bool
matches (json_t *claim, const char *ns, const char *name)
{
  json_t *meta = json_object_get (claim, "metadata");
  const char *cns = json_string_value (json_object_get (meta, "namespace"));
  const char *cname = json_string_value (json_object_get (meta, "name"));
  return cns && cname && strcmp (cns, ns) == 0 && strcmp (cname, name) == 0;
}

/* A claim is looked for first in <namespace>_<name>.json (the framework
 * passes only names that are valid DNS subdomains, which cannot leave the
 * directory), then in every *.json file, matched by content. */
static int
dir_get (void *self, const char *ns, const char *name, json_t **ret, nrm_error_t *err)
{
  const char *dir = self;
  cleanup_free char *direct = NULL, *dtext = NULL;
  nrm_error_t unread = NULL;
  json_error_t djerr;
  if (!nrm_is_dns_subdomain (ns, 253) || !nrm_is_dns_subdomain (name, 253))
    return nrm_error_set (err, EINVAL, "invalid claim reference %s/%s", ns, name);
  direct = xasprintf ("%s/%s_%s.json", dir, ns, name);
  if (nrm_read_file (direct, MAX_CLAIM_FILE, &dtext, NULL, &unread) == 0)
    {
      json_t *claim = json_loads (dtext, 0, &djerr);
      if (claim && matches (claim, ns, name))
        {
          *ret = claim;
          return 0;
        }
      json_decref (claim);
    }
  nrm_error_release (&unread);

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
      path = xasprintf ("%s/%s", dir, de->d_name);
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
      if (matches (claim, ns, name))
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
