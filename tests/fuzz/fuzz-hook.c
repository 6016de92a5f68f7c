/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: what nrm-hook reads from the container runtime: the
 * OCI state (the input up to the first newline; "@BUNDLE@" in it stands
 * for this run's bundle directory) and the bundle's config.json (the
 * rest), against a fake cgroup tree where pid 1 is a container. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nrm/commit.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);
int LLVMFuzzerInitialize (int *argc, char ***argv);

static char root[] = "/dev/shm/nrm-fuzz-hook-XXXXXX";
static struct nrm_fsroot *tree; /* root, opened */

static void
put (const char *rel, const char *text)
{
  char path[512], cmd[700];
  snprintf (path, sizeof (path), "%s/%s", root, rel);
  snprintf (cmd, sizeof (cmd), "mkdir -p \"$(dirname '%s')\"", path);
  if (system (cmd) != 0)
    abort ();
  FILE *f = fopen (path, "w");
  if (f == NULL)
    abort ();
  fputs (text, f);
  fclose (f);
}

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  if (mkdtemp (root) == NULL)
    abort ();
  put ("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory hugetlb");
  const char *files[] = { "cpuset.cpus",     "cpuset.mems",          "memory.max",  "memory.min",
                          "hugetlb.2MB.max", "hugetlb.2MB.rsvd.max", "cgroup.procs" };
  for (size_t i = 0; i < sizeof (files) / sizeof (files[0]); i++)
    {
      char rel[256];
      snprintf (rel, sizeof (rel), "sys/fs/cgroup/kubepods/pod1/c1/%s", files[i]);
      put (rel, "");
    }
  put ("proc/1/cgroup", "0::/kubepods/pod1/c1\n");
  nrm_error_t err = NULL;
  if (nrm_fsroot_open (root, &tree, &err) < 0)
    abort ();
  /* The machine the memory bounds are checked against: two nodes. */
  put ("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:        1048576 kB\n");
  put ("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:        1048576 kB\n");
  put ("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "4\n");
  put ("sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "4\n");
  put ("state/shared-cpus", "0-3");
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const uint8_t *nl = memchr (data, '\n', size);
  size_t slen = nl ? (size_t) (nl - data) : size;
  char bundle[600], path[700], state_dir[600];
  snprintf (bundle, sizeof (bundle), "%s/bundle", root);
  snprintf (path, sizeof (path), "%s/config.json", bundle);
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  mkdir (bundle, 0700);
  FILE *f = fopen (path, "w");
  if (f == NULL)
    return 0;
  if (nl)
    fwrite (nl + 1, 1, size - slen - 1, f);
  fclose (f);
  /* The state with the bundle's real path in place of @BUNDLE@. */
  size_t bl = strlen (bundle);
  char *st = malloc (slen / 8 * bl + slen + 1);
  if (st == NULL)
    return 0;
  size_t n = 0;
  for (size_t i = 0; i < slen;)
    if (slen - i >= 8 && memcmp (data + i, "@BUNDLE@", 8) == 0)
      {
        memcpy (st + n, bundle, bl);
        n += bl;
        i += 8;
      }
    else
      st[n++] = (char) data[i++];
  nrm_error_t err = NULL;
  char *summary = NULL;
  nrm_hook_run (tree, st, n, state_dir, &summary, &err);
  free (summary);
  free (st);
  nrm_error_release (&err);
  return 0;
}
