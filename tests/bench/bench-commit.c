/* SPDX-License-Identifier: Apache-2.0 */
/* The cost of committing to cgroup v2, on a fake cgroupfs tree: the OCI hook
 * from process start to cgroup written (nrm-hook run as the runtime runs
 * it), and one reconcile pass over 500 containers. `make bench`. */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpuset/cgroup.h"
#include "cpuset/commit.h"

#define CONTAINERS 500
#define RUNS 50

static char root[64] = "/tmp/nrm-bench-commit-XXXXXX";

static double
now_ms (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec * 1e3 + (double) t.tv_nsec / 1e6;
}

static void
put (const char *rel, const char *text)
{
  char path[1024];
  snprintf (path, sizeof (path), "%s/%s", root, rel);
  for (char *p = path + strlen (root) + 1; *p; p++)
    if (*p == '/')
      {
        *p = '\0';
        mkdir (path, 0755);
        *p = '/';
      }
  FILE *f = fopen (path, "w");
  if (f == NULL)
    exit (1);
  fputs (text, f);
  fclose (f);
}

static int
cmp (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

int
main (int argc, char **argv)
{
  if (argc < 2 || mkdtemp (root) == NULL)
    {
      fprintf (stderr, "usage: bench-commit NRM-HOOK\n");
      return 2;
    }
  char rel[512], state_dir[128];
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  put ("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory");
  for (int i = 0; i < CONTAINERS; i++)
    {
      const char *files[] = { "cpuset.cpus", "cpuset.mems", "cgroup.procs" };
      for (int f = 0; f < 3; f++)
        {
          snprintf (rel, sizeof (rel),
                    "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%04d.slice/"
                    "cri-containerd-c%04d.scope/%s",
                    i / 2, i, files[f]);
          put (rel, f == 0 ? "0-63" : "");
        }
    }

  /* The hook, as a runtime runs it: a new process with the state on stdin. */
  put ("proc/4242/cgroup", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0000.slice/"
                           "cri-containerd-c0000.scope\n");
  put ("bundle/config.json", "{\"process\":{\"env\":[\"NRM_CPUS=2-5\",\"NRM_CPU_NODES=0\"]}}");
  char state[512];
  snprintf (state, sizeof (state), "{\"ociVersion\":\"1.0.2\",\"id\":\"c0000\",\"pid\":4242,\"bundle\":\"%s/bundle\"}",
            root);
  double hook[RUNS];
  for (int i = 0; i < RUNS; i++)
    {
      int pipefd[2];
      if (pipe (pipefd) < 0)
        return 1;
      double t0 = now_ms ();
      pid_t pid = fork ();
      if (pid == 0)
        {
          dup2 (pipefd[0], 0);
          close (pipefd[1]);
          execl (argv[1], argv[1], "--fsroot", root, "--state-dir", state_dir, NULL);
          _exit (127);
        }
      close (pipefd[0]);
      if (write (pipefd[1], state, strlen (state)) < 0)
        return 1;
      close (pipefd[1]);
      int status;
      waitpid (pid, &status, 0);
      hook[i] = now_ms () - t0;
      if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
        {
          fprintf (stderr, "nrm-hook failed\n");
          return 1;
        }
    }
  qsort (hook, RUNS, sizeof (double), cmp);

  /* In-process, the hook's own work without process start. */
  double inproc[RUNS];
  for (int i = 0; i < RUNS; i++)
    {
      nrm_error_t err = NULL;
      double t0 = now_ms ();
      if (nrm_hook_run (root, state, strlen (state), state_dir, NULL, &err) < 0)
        return 1;
      inproc[i] = now_ms () - t0;
    }
  qsort (inproc, RUNS, sizeof (double), cmp);

  /* Reconcile passes over 500 containers: the first rewrites every shared
   * container, the later ones only read. */
  struct nrm_cgroupfs *fs = NULL;
  nrm_error_t err = NULL;
  if (nrm_cgroupfs_open (root, &fs, &err) < 0)
    return 1;
  struct nrm_reconcile_stats st;
  double t0 = now_ms ();
  if (nrm_reconcile (fs, state_dir, "0-1,6-63", NULL, NULL, &st, NULL, &err) < 0)
    return 1;
  double first = now_ms () - t0;
  size_t updated = st.updated;
  double steady[RUNS];
  for (int i = 0; i < RUNS; i++)
    {
      t0 = now_ms ();
      nrm_reconcile (fs, state_dir, "0-1,6-63", NULL, NULL, &st, NULL, &err);
      steady[i] = now_ms () - t0;
    }
  qsort (steady, RUNS, sizeof (double), cmp);
  nrm_cgroupfs_close (fs);

  printf ("cgroup v2 commit on a fake tree (%d containers)\n", CONTAINERS);
  printf ("  nrm-hook, process start to cgroup written  p50 %6.2f ms  p90 %6.2f ms (goal < 2 ms)\n", hook[RUNS / 2],
          hook[RUNS * 9 / 10]);
  printf ("  hook work in process                        p50 %6.3f ms\n", inproc[RUNS / 2]);
  printf ("  reconcile pass, %zu containers rewritten     %6.2f ms\n", updated, first);
  printf ("  reconcile pass, nothing to change           p50 %6.2f ms  p90 %6.2f ms (goal < 50 ms)\n", steady[RUNS / 2],
          steady[RUNS * 9 / 10]);
  char cmd[128];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s'", root);
  return system (cmd) == 0 ? 0 : 1;
}
