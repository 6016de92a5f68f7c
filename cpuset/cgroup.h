/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CGROUP_H
#define NRM_CGROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "memory/commit.h"
#include "nrm/base/error.h"

/* cgroup v2 through one root: every path is relative to <fsroot>/sys/fs/cgroup,
 * opened with openat() from a directory handle, so tests run on a plain
 * directory tree and nothing follows a symbolic link out of it. */
struct nrm_cgroupfs;

int nrm_cgroupfs_open (const char *fsroot, struct nrm_cgroupfs **ret, nrm_error_t *err);
void nrm_cgroupfs_close (struct nrm_cgroupfs *fs);
const char *nrm_cgroupfs_root (const struct nrm_cgroupfs *fs);

/* A cgroup path relative to the root: no "..", no "." components, no empty
 * ones, printable characters only; a leading "/" is allowed and ignored. */
bool nrm_cgroup_path_valid (const char *path);

/* Reads a control file (trailing newline removed); the caller frees. */
int nrm_cgroup_read (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, char **ret, nrm_error_t *err);
/* Writes a control file in one write(2), as the kernel wants it. */
int nrm_cgroup_write (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, const char *value,
                      nrm_error_t *err);
bool nrm_cgroup_exists (struct nrm_cgroupfs *fs, const char *cgroup);

/* What a container is bound to; NULL fields are left alone. */
struct nrm_binding
{
  const char *cpus; /* cpuset.cpus */
  struct nrm_memory_binding memory;
};

/* Applies a binding to a cgroup, all or nothing: the old values are read
 * first, and if a later write fails the earlier ones are put back. The
 * error names the cgroup, the file and the kernel's reason. */
int nrm_cgroup_apply (struct nrm_cgroupfs *fs, const char *cgroup, const struct nrm_binding *b, nrm_error_t *err);

/* The cgroup v2 path of a process, from /proc/<pid>/cgroup under fsroot. */
int nrm_cgroup_of_pid (const char *fsroot, int pid, char **ret, nrm_error_t *err);

#endif
