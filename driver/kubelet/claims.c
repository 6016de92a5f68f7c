/* SPDX-License-Identifier: Apache-2.0 */
/* The plugin's claim sources: a directory of ResourceClaim files
 * (--claims-dir), or the API server. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "driver/k8s/kube.h"
#include "driver/kubelet/claims.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

#define MAX_CLAIM_FILE (4 << 20)

/* A directory of ResourceClaim files. A claim is looked for first in
 * <namespace>_<name>.json, then through an index of every *.json file by
 * the claim it holds. The index is rebuilt only after the directory
 * changed (inotify), so unknown claims cost one failed open each, not a
 * read of the whole directory. Only regular files are read: a FIFO, a
 * device or a link is skipped without blocking. */
struct nrm_claims_dir
{
  char *dir;
  pthread_mutex_t lock;
  json_t *index; /* "<namespace>/<name>" -> file name */
  int inotify;   /* -1: no inotify, every miss rescans */
  bool stale;
};

struct nrm_claims_dir *
nrm_claims_dir_new (const char *dir)
{
  struct nrm_claims_dir *cd = xcalloc (1, sizeof (*cd));
  cd->dir = xstrdup (dir);
  pthread_mutex_init (&cd->lock, NULL);
  cd->index = json_object ();
  cd->stale = true;
  cd->inotify = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  if (cd->inotify >= 0
      && inotify_add_watch (cd->inotify, dir,
                            IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY
                                | IN_DELETE_SELF | IN_MOVE_SELF)
             < 0)
    {
      close (cd->inotify);
      cd->inotify = -1;
    }
  return cd;
}

void
nrm_claims_dir_free (struct nrm_claims_dir *cd)
{
  if (cd == NULL)
    return;
  if (cd->inotify >= 0)
    close (cd->inotify);
  json_decref (cd->index);
  pthread_mutex_destroy (&cd->lock);
  free (cd->dir);
  free (cd);
}

static bool
matches (json_t *claim, const char *ns, const char *name)
{
  json_t *meta = json_object_get (claim, "metadata");
  const char *cns = json_string_value (json_object_get (meta, "namespace"));
  const char *cname = json_string_value (json_object_get (meta, "name"));
  return cns && cname && strcmp (cns, ns) == 0 && strcmp (cname, name) == 0;
}

/* The claim in file `name` of the directory, or NULL when it is not a
 * regular file or holds no JSON. */
static json_t *
load_at (int dfd, const char *name)
{
  cleanup_free char *text = NULL;
  nrm_error_t ignored = NULL;
  if (nrm_read_regular_at (dfd, name, MAX_CLAIM_FILE, &text, NULL, &ignored) < 0)
    {
      nrm_error_release (&ignored);
      return NULL;
    }
  return json_loads (text, 0, NULL);
}

/* Whether the directory changed since the index was built: drains the
 * inotify queue. Called with the lock held. */
static bool
changed (struct nrm_claims_dir *cd)
{
  char buf[4096] __attribute__ ((aligned (__alignof__(struct inotify_event))));
  if (cd->inotify < 0)
    return true;
  while (read (cd->inotify, buf, sizeof (buf)) > 0)
    cd->stale = true;
  return cd->stale;
}

static void
rescan (struct nrm_claims_dir *cd, int dfd)
{
  json_object_clear (cd->index);
  cd->stale = false;
  DIR *d = nrm_opendir_at (dfd);
  struct dirent *de;
  if (d == NULL)
    {
      cd->stale = true;
      return;
    }
  while ((de = readdir (d)) != NULL)
    {
      size_t n = strlen (de->d_name);
      if (n < 6 || strcmp (de->d_name + n - 5, ".json") != 0 || de->d_name[0] == '.')
        continue;
      cleanup_json json_t *claim = load_at (dfd, de->d_name);
      json_t *meta = json_object_get (claim, "metadata");
      const char *ns = json_string_value (json_object_get (meta, "namespace"));
      const char *name = json_string_value (json_object_get (meta, "name"));
      if (ns && name)
        {
          cleanup_free char *key = xasprintf ("%s/%s", ns, name);
          json_object_set_new (cd->index, key, json_string (de->d_name));
        }
    }
  closedir (d);
}

/* The file the index names for ns/name (a copy), or NULL. */
static char *
indexed (struct nrm_claims_dir *cd, int dfd, const char *ns, const char *name, bool force)
{
  cleanup_free char *key = xasprintf ("%s/%s", ns, name);
  pthread_mutex_lock (&cd->lock);
  if (changed (cd) || force)
    rescan (cd, dfd);
  const char *file = json_string_value (json_object_get (cd->index, key));
  char *ret = file ? xstrdup (file) : NULL;
  pthread_mutex_unlock (&cd->lock);
  return ret;
}

static int
dir_get (void *self, const char *ns, const char *name, json_t **ret, nrm_error_t *err)
{
  struct nrm_claims_dir *cd = self;
  if (!nrm_is_dns_label (ns) || !nrm_is_dns_subdomain (name, 253))
    return nrm_error_set (err, EINVAL, "invalid claim reference %.63s/%.253s", ns, name);
  cleanup_close int dfd = open (cd->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return nrm_error_errno (err, errno, "cannot read the claims directory `%s`", cd->dir);

  cleanup_free char *direct = xasprintf ("%s_%s.json", ns, name);
  json_t *claim = load_at (dfd, direct);
  if (claim && matches (claim, ns, name))
    return *ret = claim, 0;
  json_decref (claim);

  /* A file that no longer holds what the index says: the index is out of
   * date (a file rewritten in place), so it is rebuilt once. */
  for (int attempt = 0; attempt < 2; attempt++)
    {
      cleanup_free char *file = indexed (cd, dfd, ns, name, attempt > 0);
      if (file == NULL)
        break;
      claim = load_at (dfd, file);
      if (claim && matches (claim, ns, name))
        return *ret = claim, 0;
      json_decref (claim);
    }
  return nrm_error_set (err, ENOENT, "ResourceClaim %s/%s not found in `%s`", ns, name, cd->dir);
}

void
nrm_claim_source_dir (struct nrm_claim_source *src, struct nrm_claims_dir *cd)
{
  src->get = dir_get;
  src->self = cd;
}

/* --- from the API server ------------------------------------------------- */

static int
kube_claim_get (void *self, const char *ns, const char *name, json_t **ret, nrm_error_t *err)
{
  struct nrm_kube *k = self;
  cleanup_free char *path = NULL;
  cleanup_json json_t *body = NULL;
  if (!nrm_is_dns_subdomain (ns, 253) || !nrm_is_dns_subdomain (name, 253))
    return nrm_error_set (err, EINVAL, "invalid claim reference %s/%s", ns, name);
  path = xasprintf ("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", ns, name);
  int code = nrm_kube_call (k, "GET", path, NULL, &body, err);
  if (code < 0)
    return nrm_error_wrap (err, "ResourceClaim %s/%s", ns, name);
  if (code == 404)
    return nrm_error_set (err, ENOENT, "ResourceClaim %s/%s not found", ns, name);
  if (code != 200)
    return nrm_error_set (err, EIO, "ResourceClaim %s/%s: HTTP %d: %s", ns, name, code,
                          nrm_kube_status_message (body, code));
  if (!json_is_object (body))
    return nrm_error_set (err, EPROTO, "ResourceClaim %s/%s: the answer is not an object", ns, name);
  *ret = TAKE_PTR (body);
  return 0;
}

void
nrm_claim_source_kube (struct nrm_claim_source *src, struct nrm_kube *k)
{
  src->get = kube_claim_get;
  src->self = k;
}
