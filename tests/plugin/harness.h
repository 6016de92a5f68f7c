/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TEST_HARNESS_H
#define NRM_TEST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

/* One `nrm plugin` process with the CPU and memory drivers on a recorded
 * machine (24em64t-2n6c2t-pci: CPU 0 reserved, 23 isolated), its folders
 * under a fresh temporary root, claims read from a claims directory. */
struct nh
{
  char root[256], kubelet_dir[300], cdi_dir[300], state_dir[300], claims_dir[300], log_path[300];
  char cpu_sock[512], cpu_reg[512], mem_sock[512], mem_reg[512];
  pid_t pid;
};

#define NH_CPU_DRIVER "cpu.nrm.io"
#define NH_MEM_DRIVER "memory.nrm.io"
#define NH_NODE "node-1"
#define NH_PREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
#define NH_UNPREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"

/* Makes the folders; exits 77 outside `make check`. */
void nh_init (struct nh *h, const char *tag);
/* Starts the plugin (extra: more flags, NULL-terminated, or NULL) and
 * returns its pid without waiting. */
pid_t nh_spawn (struct nh *h, const char *const *extra);
/* Starts it and waits until both drivers answer; false when they do not
 * within 15 s. */
bool nh_start (struct nh *h, const char *const *extra);
/* Sends sig and returns the exit status (128 + signal), or -1. */
int nh_stop (struct nh *h, int sig);
bool nh_log_contains (struct nh *h, const char *needle);
/* Writes <claims_dir>/<file> holding a ResourceClaim of namespace default;
 * results is a JSON array text (NULL: not allocated). */
void nh_write_claim (struct nh *h, const char *file, const char *name, const char *uid, const char *results);
/* The number of claims in a driver's checkpoint (-1: unreadable). */
int nh_checkpoint_claims (struct nh *h, const char *driver);
/* Whether a driver's CDI spec of claim uid exists. */
bool nh_spec_exists (struct nh *h, const char *driver, const char *uid);
/* Removes the root unless NRM_KEEP_TMP is set. */
void nh_cleanup (struct nh *h);

#endif
