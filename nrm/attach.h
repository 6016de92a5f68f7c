/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_ATTACH_H
#define NRM_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "nrm/base/error.h"

/* nrm run --pid: a running process moved onto the run's CPUs (taskset -p
 * for every thread), held until it exits. */
struct nrm_attach
{
  pid_t pid;
  int pidfd;                       /* pins the process: a pid reused later is not it; -1 without pidfd_open */
  unsigned long long start;        /* its start time (clock ticks since boot), to tell a reused pid */
  char comm[32];                   /* its name, for messages */
  size_t n_threads;                /* threads when it was opened */
  struct nrm_attach_thread *saved; /* each thread's affinity before the move */
  size_t n_saved;
  char *old_cgroup; /* cgroup v2: where it was before the move, or NULL */
};

/* Opens the process and checks it can be attached, before anything is
 * taken: it exists, is not PID 1, this process or a kernel thread, is not a
 * zombie, and its CPUs may be changed by this user (EPERM otherwise). Every
 * error names the pid. */
int nrm_attach_open (pid_t pid, struct nrm_attach *a, nrm_error_t *err);

/* Whether the process still runs (its pidfd, else its start time). */
bool nrm_attach_alive (const struct nrm_attach *a);

/* Saves every thread's affinity as it is now, for nrm_attach_restore: before
 * a move into a cgroup, which changes it. */
void nrm_attach_save (struct nrm_attach *a);

/* Sets the affinity of every thread to cpus (a CPU list), until a pass
 * over /proc/PID/task finds no thread left to move; the old affinities are
 * saved. All or nothing: on failure the threads moved are put back. */
int nrm_attach_pin (struct nrm_attach *a, const char *cpus, size_t *ret_threads, nrm_error_t *err);

/* Moves the process's pages from other nodes to the nodes of mems
 * (migrate_pages(2)); *ret_left is the count the kernel could not move. */
int nrm_attach_migrate (struct nrm_attach *a, const char *mems, long *ret_left, nrm_error_t *err);

/* Puts every thread saved by nrm_attach_pin back to its old affinity, and
 * threads started since to the main thread's old one; threads gone are
 * skipped. */
void nrm_attach_restore (struct nrm_attach *a);

/* Waits until the process exits (0) or one of SIGINT, SIGTERM, SIGHUP,
 * SIGQUIT arrives (*ret_sig, which the caller has blocked). */
int nrm_attach_wait (struct nrm_attach *a, int *ret_sig, nrm_error_t *err);

void nrm_attach_close (struct nrm_attach *a);

#endif
