/* SPDX-License-Identifier: Apache-2.0 */
/* Times a command against a baseline command: median and 90th percentile
 * wall time over N runs, and peak RSS, each run a fresh process with its
 * output discarded. Used by `make bench`. */
#include "config.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct result
{
  double median_ms, p90_ms;
  long max_rss_kib;
};

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

static int
run (const char *cmdline, int runs, struct result *r)
{
  char *copy = strdup (cmdline), *argv[64], *save = NULL;
  int argc = 0;
  double *ms = calloc ((size_t) runs, sizeof (double));
  for (char *tok = strtok_r (copy, " ", &save); tok && argc < 63; tok = strtok_r (NULL, " ", &save))
    argv[argc++] = tok;
  argv[argc] = NULL;
  r->max_rss_kib = 0;
  for (int i = 0; i < runs; i++)
    {
      struct timespec a, b;
      struct rusage ru;
      int status;
      clock_gettime (CLOCK_MONOTONIC, &a);
      pid_t pid = fork ();
      if (pid == 0)
        {
          int null = open ("/dev/null", O_WRONLY);
          dup2 (null, 1);
          execv (argv[0], argv);
          _exit (127);
        }
      if (pid < 0 || wait4 (pid, &status, 0, &ru) < 0 || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
        {
          fprintf (stderr, "bench: `%s` failed\n", cmdline);
          free (copy);
          free (ms);
          return -1;
        }
      clock_gettime (CLOCK_MONOTONIC, &b);
      ms[i] = (double) (b.tv_sec - a.tv_sec) * 1e3 + (double) (b.tv_nsec - a.tv_nsec) / 1e6;
      if (ru.ru_maxrss > r->max_rss_kib)
        r->max_rss_kib = ru.ru_maxrss;
    }
  qsort (ms, (size_t) runs, sizeof (double), cmp_double);
  r->median_ms = ms[runs / 2];
  r->p90_ms = ms[(runs * 9) / 10 < runs ? (runs * 9) / 10 : runs - 1];
  free (copy);
  free (ms);
  return 0;
}

int
main (int argc, char **argv)
{
  static const struct option opts[] = { { "runs", required_argument, NULL, 'n' },
                                        { "label", required_argument, NULL, 'l' },
                                        { "baseline", required_argument, NULL, 'b' },
                                        { "command", required_argument, NULL, 'c' },
                                        { NULL, 0, NULL, 0 } };
  const char *label = "", *baseline = NULL, *command = NULL;
  int runs = 20, c;
  while ((c = getopt_long (argc, argv, "", opts, NULL)) != -1)
    switch (c)
      {
      case 'n':
        runs = atoi (optarg);
        break;
      case 'l':
        label = optarg;
        break;
      case 'b':
        baseline = optarg;
        break;
      case 'c':
        command = optarg;
        break;
      default:
        return 2;
      }
  if (command == NULL || baseline == NULL || runs < 1)
    {
      fprintf (stderr, "usage: bench-scan --command CMD --baseline CMD [--runs N] [--label TEXT]\n");
      return 2;
    }
  struct result rc, rb;
  if (run (baseline, 2, &rb) < 0 || run (command, 2, &rc) < 0) /* warm the page cache */
    return 1;
  if (run (baseline, runs, &rb) < 0 || run (command, runs, &rc) < 0)
    return 1;
  printf ("%s\n", label);
  printf ("  nrm slices            median %7.2f ms  p90 %7.2f ms  peak RSS %6.2f MiB\n", rc.median_ms, rc.p90_ms,
          (double) rc.max_rss_kib / 1024);
  printf ("  hwloc load+export     median %7.2f ms  p90 %7.2f ms  peak RSS %6.2f MiB\n", rb.median_ms, rb.p90_ms,
          (double) rb.max_rss_kib / 1024);
  double ratio = rc.median_ms / rb.median_ms;
  printf ("  time ratio %.2fx (goal <= 1.5x: %s), RSS %.2f MiB (goal < 10 MiB: %s), %d runs each\n", ratio,
          ratio <= 1.5 ? "met" : "missed", (double) rc.max_rss_kib / 1024,
          rc.max_rss_kib < 10 * 1024 ? "met" : "missed", runs);
  return 0;
}
