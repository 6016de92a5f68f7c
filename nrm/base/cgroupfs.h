/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_CGROUPFS_H
#define NRM_BASE_CGROUPFS_H

#include <stdbool.h>
#include <stddef.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* cgroup v2 through one root: every path is relative to /sys/fs/cgroup below the root,
 * opened with openat() from a directory handle, so tests run on a plain
 * directory tree and nothing follows a symbolic link out of it. Files and
 * values only: what a binding writes is its owner's (cpuset/, memory/). */
struct nrm_cgroupfs;

int nrm_cgroupfs_open (const struct nrm_fsroot *root, struct nrm_cgroupfs **ret, nrm_error_t *err);
void nrm_cgroupfs_close (struct nrm_cgroupfs *fs);
const char *nrm_cgroupfs_root (const struct nrm_cgroupfs *fs);

/* Whether the root is cgroup v2 (it has cgroup.controllers) and whether
 * controller ("cpuset") is enabled there. */
enum nrm_cgroup_v2
{
  NRM_CGROUP_V2_NONE,    /* no cgroup v2 (cgroup v1, or nothing mounted) */
  NRM_CGROUP_V2_WITHOUT, /* cgroup v2 without the controller (a hybrid host, with it on v1) */
  NRM_CGROUP_V2_WITH,
};
enum nrm_cgroup_v2 nrm_cgroupfs_controller (struct nrm_cgroupfs *fs, const char *controller);
/* The same for /sys/fs/cgroup below the root, opened here: NONE where it cannot be. */
enum nrm_cgroup_v2 nrm_cgroup_v2_controller (const struct nrm_fsroot *root, const char *controller);

/* A cgroup path relative to the root: no "..", no "." components, no empty
 * ones, printable characters only; a leading "/" is allowed and ignored. */
bool nrm_cgroup_path_valid (const char *path);

/* Reads a control file (trailing newline removed); the caller frees. */
int nrm_cgroup_read (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, char **ret, nrm_error_t *err);
/* Writes a control file in one write(2), as the kernel wants it. */
int nrm_cgroup_write (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, const char *value,
                      nrm_error_t *err);
bool nrm_cgroup_exists (struct nrm_cgroupfs *fs, const char *cgroup);

/* Makes a cgroup (its parent must exist; one that exists is fine), and
 * removes one (only an empty one goes: the kernel refuses the rest). */
int nrm_cgroup_mkdir (struct nrm_cgroupfs *fs, const char *cgroup, nrm_error_t *err);
int nrm_cgroup_rmdir (struct nrm_cgroupfs *fs, const char *cgroup, nrm_error_t *err);

/* A control file's value as a byte count: false for "max" and anything
 * but plain digits that fit. */
bool nrm_cgroup_value_bytes (const char *s, unsigned long long *v);

/* The cgroup v2 path of a process, from /proc/<pid>/cgroup below the root. */
int nrm_cgroup_of_pid (const struct nrm_fsroot *root, int pid, char **ret, nrm_error_t *err);

#endif
