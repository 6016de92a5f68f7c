/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_FSROOT_H
#define NRM_BASE_FSROOT_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>

#include "nrm/base/error.h"

/* The root under which nrm reads the machine's /sys, /proc and /dev and
 * writes its cgroups: the live machine's "/", or a plain directory tree that
 * stands for it (--fsroot: tests, a node's root mounted elsewhere). One
 * handle, opened once, is passed down instead of a path, so that no other
 * code compares a root with "/" or glues a prefix to a path: every path
 * below is absolute as on the machine ("/sys/..."), and resolved here.
 *
 * NULL stands for the live machine in every function but nrm_fsroot_open(). */
struct nrm_fsroot;

/* Opens the root dir: NULL, "" or "/" is the live machine; anything else
 * must be an existing directory (an absolute path is kept as given, a
 * relative one made absolute). */
int nrm_fsroot_open (const char *dir, struct nrm_fsroot **ret, nrm_error_t *err);
void nrm_fsroot_free (struct nrm_fsroot *root);

/* Whether the root is the live machine's "/". */
bool nrm_fsroot_live (const struct nrm_fsroot *root);
/* The root as given to nrm_fsroot_open(), "/" for the live machine: for
 * messages and for libraries that take a root path (hwloc). */
const char *nrm_fsroot_dir (const struct nrm_fsroot *root);
/* A directory descriptor on the root (open as long as the handle). */
int nrm_fsroot_fd (const struct nrm_fsroot *root);

/* The path on this host of the machine's path given as a format ("/sys/
 * devices/system/node/node%u/meminfo"): itself on the live machine, below
 * the tree otherwise. The format must start with '/'. Allocated. */
char *nrm_fsroot_path (const struct nrm_fsroot *root, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

/* openat() of the machine's path relative to the root's descriptor. */
int nrm_fsroot_openat (const struct nrm_fsroot *root, const char *path, int flags);
/* nrm_read_file() of the machine's path. */
int nrm_fsroot_read (const struct nrm_fsroot *root, const char *path, size_t max, char **ret, size_t *len,
                     nrm_error_t *err);
/* Whether the machine's path exists. */
bool nrm_fsroot_exists (const struct nrm_fsroot *root, const char *path);
/* opendir() of the machine's path; NULL with errno set. */
DIR *nrm_fsroot_opendir (const struct nrm_fsroot *root, const char *path);

#endif
