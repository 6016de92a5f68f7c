/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_WATCH_H
#define NRM_WATCH_H

#include "nrm/base/cgroupfs.h"
#include "nrm/base/error.h"

/* inotify on the pod cgroup tree: a new container cgroup wakes the shared
 * pool reconciler at once instead of at its next periodic pass. */
struct nrm_kubepods_watch;

int nrm_kubepods_watch_open (struct nrm_cgroupfs *fs, struct nrm_kubepods_watch **ret, nrm_error_t *err);
void nrm_kubepods_watch_close (struct nrm_kubepods_watch *w);
/* The file descriptor to poll for reading. */
int nrm_kubepods_watch_fd (struct nrm_kubepods_watch *w);
/* Reads what is pending and watches new directories; returns how many
 * cgroups appeared (0 if the events were about something else). */
int nrm_kubepods_watch_drain (struct nrm_kubepods_watch *w);

#endif
