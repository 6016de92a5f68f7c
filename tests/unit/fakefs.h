/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TESTS_FAKEFS_H
#define NRM_TESTS_FAKEFS_H

/* Fake sysfs, /proc, /dev and cgroup trees under a root prefix, for the
 * tests of code that reads them there, and the files a test reads back.
 * Needs cmocka's asserts. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/fsroot.h"
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

/* Replaces <root>/<rel> by a whole new file renamed over it, as the
 * kubelet writes its files (a watcher sees a rename, not a write). */
static inline void
fake_replace (const char *root, const char *rel, const char *text)
{
  cleanup_free char *tmp = xasprintf ("%s.new", rel);
  cleanup_free char *from = xasprintf ("%s/%s", root, tmp), *to = xasprintf ("%s/%s", root, rel);
  fake_put (root, tmp, text);
  assert_int_equal (rename (from, to), 0);
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

/* The text of <root>/<rel> without trailing newlines, or NULL where there
 * is no such file; the caller frees. */
static inline char *
fake_get (const char *root, const char *rel)
{
  cleanup_free char *path = xasprintf ("%s/%s", root, rel);
  char buf[4096] = { 0 };
  FILE *f = fopen (path, "r");
  if (f == NULL)
    return NULL;
  size_t n = fread (buf, 1, sizeof (buf) - 1, f);
  fclose (f);
  while (n > 0 && buf[n - 1] == '\n')
    buf[--n] = '\0';
  return xstrdup (buf);
}

/* A cgroup control file's text as fake_get() has it, or "(none)". */
static inline char *
fake_cg_get (const char *root, const char *cg, const char *file)
{
  cleanup_free char *rel = xasprintf ("sys/fs/cgroup/%s%s%s", cg, *cg ? "/" : "", file);
  char *text = fake_get (root, rel);
  return text ? text : xstrdup ("(none)");
}

/* The root handle of the tree at dir, for what takes one where a test has
 * the tree's path: opened once per tree (a tree removed and made again at
 * the same path is a new one) and kept until the test program exits. */
static inline const struct nrm_fsroot *
fake_root (const char *dir)
{
  static struct nrm_fsroot *roots[256];
  static size_t n;
  struct stat want, have;
  nrm_error_t err = NULL;
  assert_int_equal (stat (dir, &want), 0);
  for (size_t i = 0; i < n; i++)
    if (strcmp (nrm_fsroot_dir (roots[i]), dir) == 0 && fstat (nrm_fsroot_fd (roots[i]), &have) == 0
        && have.st_dev == want.st_dev && have.st_ino == want.st_ino)
      return roots[i];
  assert_true (n < sizeof (roots) / sizeof (roots[0]));
  if (nrm_fsroot_open (dir, &roots[n], &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return roots[n++];
}

/* The cgroupfs of the tree at root; the test fails when it cannot be had. */
static inline struct nrm_cgroupfs *
fake_cgroupfs (const char *root)
{
  struct nrm_cgroupfs *fs = NULL;
  nrm_error_t err = NULL;
  if (nrm_cgroupfs_open (fake_root (root), &fs, &err) < 0)
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
