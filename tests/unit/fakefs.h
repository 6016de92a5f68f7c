/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TESTS_FAKEFS_H
#define NRM_TESTS_FAKEFS_H

/* Fake sysfs, /proc and /dev trees under a root prefix, for the tests of
 * code that reads them there. Needs cmocka's asserts. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

/* Writes text to <root>/<rel>, making its folders. */
static inline void
fake_put (const char *root, const char *rel, const char *text)
{
  nrm_error_t err = NULL;
  cleanup_free char *path = xasprintf ("%s/%s", root, rel);
  cleanup_free char *dir = xstrdup (path);
  *strrchr (dir, '/') = '\0';
  assert_int_equal (nrm_mkdir_p (dir, 0755, &err), 0);
  FILE *f = fopen (path, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);
}

/* Makes <root>/<rel> a link to target (replacing what was there). */
static inline void
fake_link (const char *root, const char *rel, const char *target)
{
  nrm_error_t err = NULL;
  cleanup_free char *path = xasprintf ("%s/%s", root, rel);
  cleanup_free char *dir = xstrdup (path);
  *strrchr (dir, '/') = '\0';
  assert_int_equal (nrm_mkdir_p (dir, 0755, &err), 0);
  unlink (path);
  assert_int_equal (symlink (target, path), 0);
}

/* A cgroup v2 control file under <root>/sys/fs/cgroup ("" is the root). */
static inline void
fake_cg_put (const char *root, const char *cg, const char *file, const char *text)
{
  cleanup_free char *rel = xasprintf ("sys/fs/cgroup/%s%s%s", cg, *cg ? "/" : "", file);
  fake_put (root, rel, text);
}

/* Its text without trailing newlines, or "(none)"; the caller frees. */
static inline char *
fake_cg_get (const char *root, const char *cg, const char *file)
{
  cleanup_free char *path = xasprintf ("%s/sys/fs/cgroup/%s%s%s", root, cg, *cg ? "/" : "", file);
  char buf[4096] = { 0 };
  FILE *f = fopen (path, "r");
  if (f == NULL)
    return xstrdup ("(none)");
  size_t n = fread (buf, 1, sizeof (buf) - 1, f);
  fclose (f);
  while (n > 0 && buf[n - 1] == '\n')
    buf[--n] = '\0';
  return xstrdup (buf);
}

/* The cgroupfs of the tree at root; the test fails when it cannot be had. */
static inline struct nrm_cgroupfs *
fake_cgroupfs (const char *root)
{
  struct nrm_cgroupfs *fs = NULL;
  nrm_error_t err = NULL;
  if (nrm_cgroupfs_open (root, &fs, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return fs;
}

/* Removes the tree at root: a teardown's result. */
static inline int
fake_remove (const char *root)
{
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", root);
  return system (cmd) == 0 ? 0 : -1;
}

#endif
