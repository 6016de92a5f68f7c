/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_KUBEPODS_H
#define NRM_KUBEPODS_H

#include <stdbool.h>

#include "nrm/base/cgroupfs.h"
#include "nrm/base/error.h"

/* Pod and container cgroups as the kubelet lays them out, for both cgroup
 * drivers and the containerd and CRI-O naming:
 *   systemd:  kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/<runtime>-<id>.scope
 *             (Guaranteed pods sit directly in kubepods.slice; '-' in the UID is '_')
 *   cgroupfs: kubepods/<qos>/pod<uid>/<id>   (Guaranteed: kubepods/pod<uid>/<id>) */

struct nrm_container_cgroup
{
  char path[1024]; /* relative to the cgroup root */
  char pod_uid[64];
  char id[128]; /* container id, runtime prefix and .scope removed */
  char qos[16]; /* guaranteed, burstable, besteffort */
};

/* Recognises a container cgroup path; false for anything else. */
bool nrm_kubepods_parse (const char *path, struct nrm_container_cgroup *out);

/* Calls fn for every container cgroup under kubepods.slice and kubepods;
 * stops at the first non-zero return. */
int nrm_kubepods_walk (struct nrm_cgroupfs *fs, int (*fn) (const struct nrm_container_cgroup *c, void *arg), void *arg,
                       nrm_error_t *err);

#endif
