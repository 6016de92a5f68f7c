/* SPDX-License-Identifier: Apache-2.0 */
/* nrm-hook: the OCI createRuntime hook on its own, without the libraries
 * the daemon needs (gRPC alone costs several milliseconds to load), since
 * it runs before every container with an nrm claim starts. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/commit.h"
#include "nrm/hook.h"

static const char usage[] = "Usage: nrm-hook [--fsroot DIR] [--state-dir DIR] < OCI-STATE\n"
                            "\n"
                            "Binds a new container to the CPUs and memory nodes of its nrm claims, from the\n"
                            "NRM_CPUS / NRM_MEMS / NRM_CPU_NODES variables in its bundle's config.json;\n"
                            "for NRM_HUGETLB_<size>, also raises the pod's (and kubepods') hugetlb limits;\n"
                            "for NRM_PARTITION (root, isolated), makes it a cpuset partition where the\n"
                            "kernel can (Linux 6.7+), or says on stderr why not.\n"
                            "The runtime runs it as a createRuntime hook from the claim's CDI spec.\n"
                            "\n"
                            "  --fsroot DIR      prefix of /proc and /sys/fs/cgroup (default /)\n"
                            "  --state-dir DIR   where containers and the huge page journal are recorded for\n"
                            "                    the reconciler (/var/lib/nrm)\n";

int
main (int argc, char **argv)
{
  static const struct option opts[] = { { "fsroot", required_argument, NULL, 'f' },
                                        { "state-dir", required_argument, NULL, 's' },
                                        { "help", no_argument, NULL, 'h' },
                                        { NULL, 0, NULL, 0 } };
  const char *fsroot = "/", *state_dir = "/var/lib/nrm";
  int c;
  nrm_json_abort_on_oom ();
  while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1)
    switch (c)
      {
      case 'f':
        fsroot = optarg;
        break;
      case 's':
        state_dir = optarg;
        break;
      case 'h':
        fputs (usage, stdout);
        return 0;
      default:
        fputs (usage, stderr);
        return 2;
      }
  if (state_dir[0] != '/' || fsroot[0] != '/')
    {
      fprintf (stderr, "nrm-hook: --fsroot and --state-dir must be absolute paths\n");
      return 2;
    }
  nrm_error_t err = NULL;
  cleanup_free char *summary = NULL;
  struct nrm_fsroot *root = NULL;
  int r = nrm_fsroot_open (fsroot, &root, &err) < 0 ? -1 : nrm_hook_stdin (root, state_dir, &summary, &err);
  nrm_fsroot_free (root);
  if (r < 0)
    {
      fprintf (stderr, "nrm-hook: %s\n", nrm_error_msg (err));
      nrm_error_release (&err);
      return 1;
    }
  /* A partition asked for by the node's setting and not had: the container
   * runs, and the runtime's log says why it has no partition. */
  if (strstr (summary, "; partition: unavailable"))
    fprintf (stderr, "nrm-hook: %s\n", summary);
  return 0;
}
