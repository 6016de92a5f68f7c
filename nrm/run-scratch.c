/* SPDX-License-Identifier: Apache-2.0 */
/* nrm run --dry-run's scratch copy of the state directory: a dry run
 * prepares in it, so that the same code picks the CPUs and the real
 * checkpoints are only read. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/kubelet/checkpoint.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "nrm/run-internal.h"

void
nrm_run_scratch_remove (const char *dir)
{
  static const char *const sub[] = { "runs", "" };
  for (size_t k = 0; k < 2; k++)
    {
      cleanup_free char *d = sub[k][0] ? xasprintf ("%s/%s", dir, sub[k]) : xstrdup (dir);
      DIR *dh = opendir (d);
      struct dirent *de;
      while (dh && (de = readdir (dh)) != NULL)
        if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
          {
            cleanup_free char *f = xasprintf ("%s/%s", d, de->d_name);
            unlink (f);
          }
      if (dh)
        closedir (dh);
      rmdir (d);
    }
}

static int
copy_file (const char *from, const char *to, nrm_error_t *err)
{
  cleanup_free char *text = NULL;
  size_t len = 0;
  nrm_error_t rerr = NULL;
  if (nrm_read_file (from, NRM_CHECKPOINT_MAX, &text, &len, &rerr) < 0)
    {
      bool missing = rerr->status == ENOENT;
      if (missing)
        {
          nrm_error_release (&rerr);
          return 0;
        }
      *err = rerr;
      return -1;
    }
  return nrm_write_atomic (to, text, len, 0600, err);
}

/* The scratch state: the checkpoints of the two drivers and the run
 * records of from (NULL: nothing held). */
char *
nrm_run_scratch_make (const char *from, const char *const names[2], nrm_error_t *err)
{
  const char *tmp = getenv ("TMPDIR");
  cleanup_free char *runs = from ? nrm_run_record_dir (from) : NULL;
  DIR *d = NULL;
  char *dir = xasprintf ("%s/nrm-dry-run.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp (dir) == NULL)
    {
      nrm_error_errno (err, errno, "dry run: cannot create `%s`", dir);
      free (dir);
      return NULL;
    }
  for (size_t i = 0; from && i < 2; i++)
    {
      cleanup_free char *a = nrm_checkpoint_path (from, names[i]);
      cleanup_free char *b = nrm_checkpoint_path (dir, names[i]);
      if (copy_file (a, b, err) < 0)
        goto fail;
    }
  d = runs ? opendir (runs) : NULL;
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      size_t len = strlen (de->d_name);
      if (de->d_name[0] == '.' || len <= 5 || strcmp (de->d_name + len - 5, ".json") != 0)
        continue;
      cleanup_free char *a = xasprintf ("%s/%s", runs, de->d_name);
      cleanup_free char *bd = nrm_run_record_dir (dir);
      cleanup_free char *b = xasprintf ("%s/%s", bd, de->d_name);
      if (nrm_mkdir_p (bd, 0700, err) < 0 || copy_file (a, b, err) < 0)
        {
          closedir (d);
          goto fail;
        }
    }
  if (d)
    closedir (d);
  return dir;
fail:
  nrm_error_wrap (err, "dry run");
  nrm_run_scratch_remove (dir);
  free (dir);
  return NULL;
}
