/* SPDX-License-Identifier: Apache-2.0 */
/* The cost of reading a machine, against a floor measured in the same run,
 * the two measured in alternation so that a change of load on the machine
 * falls on both. Used by `make bench`. Two modes:
 *
 *   bench-scan --command CMD --baseline CMD [--runs N] [--label TEXT]
 *     each run a fresh process with its output discarded: median and 90th
 *     percentile wall time, peak RSS, and the user-space instructions the
 *     process ran where the machine counts them;
 *
 *   bench-scan --drivers LIST [--config FILE] [--runs N] MACHINE.xml...
 *     in this process: nrm's scan of the recorded machine and the slices of
 *     the drivers in LIST (what `nrm slices` does) against hwloc's own load
 *     of the same XML with the same settings (I/O objects kept as nrm keeps
 *     them, hwloc's own XML reader), goal 1.2x.
 *
 * Instructions come from a perf counter (user space only, so
 * perf_event_paranoid 2 allows it); where there is none (a VM without a
 * virtual PMU, perf_event_paranoid 3) the ratio is of CPU time and the
 * output says so. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "driver/registry.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/conf.h"
#include "topology/topology.h"

#define SCAN_GOAL 1.2

/* One sample of each measure. */
struct sample
{
  double wall_ms, cpu_ms, instructions;
};

struct series
{
  struct sample *s;
  int n;
  long max_rss_kib;
};

static char counter_why[160]; /* why there are no instruction counts, or "" */

static int
counter_open (pid_t pid, bool on_exec)
{
  struct perf_event_attr a = { 0 };
  a.size = sizeof (a);
  a.type = PERF_TYPE_HARDWARE;
  a.config = PERF_COUNT_HW_INSTRUCTIONS;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.disabled = 1;
  a.inherit = on_exec;
  a.enable_on_exec = on_exec;
  int fd = (int) syscall (SYS_perf_event_open, &a, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0 && counter_why[0] == '\0')
    {
      int e = errno;
      char paranoid[16] = "?";
      FILE *f = fopen ("/proc/sys/kernel/perf_event_paranoid", "r");
      if (f != NULL)
        {
          if (fscanf (f, "%15s", paranoid) != 1)
            strcpy (paranoid, "?");
          fclose (f);
        }
      snprintf (counter_why, sizeof (counter_why), "perf_event_open: %s, perf_event_paranoid %s", strerror (e),
                paranoid);
    }
  return fd;
}

static double
counter_read (int fd)
{
  uint64_t v = 0;
  if (fd < 0 || read (fd, &v, sizeof (v)) != (ssize_t) sizeof (v))
    return 0;
  return (double) v;
}

static double
now_ms (clockid_t clock)
{
  struct timespec t;
  clock_gettime (clock, &t);
  return (double) t.tv_sec * 1e3 + (double) t.tv_nsec / 1e6;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

/* The q-quantile (0.5: median) of one measure of a series. */
static double
quantile (const struct series *r, size_t field, double q)
{
  double *v = calloc ((size_t) r->n, sizeof (double));
  for (int i = 0; i < r->n; i++)
    v[i] = *(const double *) ((const char *) &r->s[i] + field);
  qsort (v, (size_t) r->n, sizeof (double), cmp_double);
  int k = (int) (q * r->n);
  double x = v[k < r->n ? k : r->n - 1];
  free (v);
  return x;
}

#define MEDIAN(r, f) quantile (r, offsetof (struct sample, f), 0.5)

/* --- process mode -------------------------------------------------------- */

static char **
split (char *copy)
{
  static char *argv[64];
  char *save = NULL;
  int argc = 0;
  for (char *tok = strtok_r (copy, " ", &save); tok && argc < 63; tok = strtok_r (NULL, " ", &save))
    argv[argc++] = tok;
  argv[argc] = NULL;
  return argv;
}

/* One run of cmdline, appended to r. */
static int
run_once (const char *cmdline, struct series *r)
{
  cleanup_free char *copy = strdup (cmdline);
  char **argv = split (copy);
  int go[2];
  struct rusage ru;
  int status;
  if (pipe2 (go, O_CLOEXEC) < 0)
    return -1;
  double w0 = now_ms (CLOCK_MONOTONIC);
  pid_t pid = fork ();
  if (pid == 0)
    {
      char c;
      int null = open ("/dev/null", O_WRONLY);
      dup2 (null, 1);
      close (go[1]);
      /* Wait until the counter is on this process: it starts at exec. */
      if (read (go[0], &c, 1) < 0)
        _exit (126);
      execv (argv[0], argv);
      _exit (127);
    }
  close (go[0]);
  int fd = pid > 0 ? counter_open (pid, true) : -1;
  if (pid > 0 && write (go[1], "x", 1) < 0)
    kill (pid, SIGKILL);
  close (go[1]);
  if (pid < 0 || wait4 (pid, &status, 0, &ru) < 0 || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
    {
      if (fd >= 0)
        close (fd);
      fprintf (stderr, "bench-scan: `%s` failed\n", cmdline);
      return -1;
    }
  struct sample *s = &r->s[r->n++];
  s->wall_ms = now_ms (CLOCK_MONOTONIC) - w0;
  s->cpu_ms = (double) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3
              + (double) (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  s->instructions = counter_read (fd);
  if (fd >= 0)
    close (fd);
  if (ru.ru_maxrss > r->max_rss_kib)
    r->max_rss_kib = ru.ru_maxrss;
  return 0;
}

static int
bench_processes (const char *label, const char *baseline, const char *command, int runs)
{
  struct series rc = { calloc ((size_t) runs + 2, sizeof (struct sample)), 0, 0 };
  struct series rb = { calloc ((size_t) runs + 2, sizeof (struct sample)), 0, 0 };
  int r = -1;
  /* Two runs each warm the page cache; then the two alternate. */
  for (int i = 0; i < 2; i++)
    if (run_once (baseline, &rb) < 0 || run_once (command, &rc) < 0)
      goto out;
  rb.n = rc.n = 0;
  for (int i = 0; i < runs; i++)
    if (run_once (baseline, &rb) < 0 || run_once (command, &rc) < 0)
      goto out;
  printf ("%s\n", label);
  printf ("  nrm slices            median %7.2f ms  p90 %7.2f ms  peak RSS %6.2f MiB\n", MEDIAN (&rc, wall_ms),
          quantile (&rc, offsetof (struct sample, wall_ms), 0.9), (double) rc.max_rss_kib / 1024);
  printf ("  hwloc load+export     median %7.2f ms  p90 %7.2f ms  peak RSS %6.2f MiB\n", MEDIAN (&rb, wall_ms),
          quantile (&rb, offsetof (struct sample, wall_ms), 0.9), (double) rb.max_rss_kib / 1024);
  double ratio = MEDIAN (&rc, wall_ms) / MEDIAN (&rb, wall_ms);
  printf ("  time ratio %.2fx (goal <= 1.5x: %s), RSS %.2f MiB (goal < 10 MiB: %s), %d runs each, alternating\n", ratio,
          ratio <= 1.5 ? "met" : "NOT met", (double) rc.max_rss_kib / 1024,
          rc.max_rss_kib < 10 * 1024 ? "met" : "NOT met", runs);
  if (counter_why[0] == '\0')
    printf ("  instructions (user space): nrm %.1fM, hwloc %.1fM, ratio %.2fx (whole processes, start-up included)\n",
            MEDIAN (&rc, instructions) / 1e6, MEDIAN (&rb, instructions) / 1e6,
            MEDIAN (&rc, instructions) / MEDIAN (&rb, instructions));
  else
    printf ("  no instruction counts here (%s): wall time, as measured always\n", counter_why);
  r = 0;
out:
  free (rc.s);
  free (rb.s);
  return r;
}

/* --- in-process mode ----------------------------------------------------- */

/* hwloc's own load of the XML, with nrm's settings (topology/scan.c). */
static int
hwloc_load (const char *xml)
{
  hwloc_topology_t h = NULL;
  if (hwloc_topology_init (&h) < 0)
    return -1;
  hwloc_topology_set_flags (h, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  hwloc_topology_set_io_types_filter (h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  int r = hwloc_topology_set_xml (h, xml) < 0 || hwloc_topology_load (h) < 0 ? -1 : 0;
  hwloc_topology_destroy (h);
  return r;
}

/* What `nrm slices --topology XML` does: scan, open the drivers, build the
 * slices; *counts (when asked) "driver N, ..." of the devices published,
 * *n_pci the functions hwloc keeps. */
static int
nrm_scan_slices (struct nrm_config *c, char **counts, size_t *n_pci, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  struct nrm_driver_selection sel;
  cleanup_json json_t *list = NULL;
  int r = -1;
  struct nrm_fsroot *root = NULL;
  if (nrm_fsroot_open (c->fsroot, &root, err) < 0)
    return -1;
  if (nrm_topology_load (c->topology, &t, err) < 0)
    {
      nrm_fsroot_free (root);
      return -1;
    }
  struct nrm_driver_host h
      = { .topo = t, .node = &c->publish, .fsroot = root, .live = false, .log = NULL, .kubelet_dir = c->kubelet_dir };
  nrm_config_drivers (c, &sel);
  if (nrm_topology_apply_settings (t, &c->node, root, err) == 0 && nrm_registry_new (&reg, err) == 0
      && nrm_drivers_open (reg, &sel, &h, &d, err) == 0)
    r = nrm_drivers_slices (&d, &c->publish, NULL, NULL, &list, err);
  if (r == 0 && counts != NULL)
    {
      size_t i;
      json_t *s, *n = json_object ();
      json_array_foreach (json_object_get (list, "items"), i, s)
      {
        json_t *spec = json_object_get (s, "spec");
        const char *drv = json_string_value (json_object_get (spec, "driver"));
        json_int_t k = json_integer_value (json_object_get (n, drv));
        json_object_set_new (n, drv,
                             json_integer (k + (json_int_t) json_array_size (json_object_get (spec, "devices"))));
      }
      for (size_t j = 0; j < d.n; j++)
        {
          char *prev = *counts;
          json_int_t k = json_integer_value (json_object_get (n, d.slots[j].name));
          *counts = xasprintf ("%s%s%s %lld", prev ? prev : "", prev ? ", " : "", d.slots[j].name, (long long) k);
          free (prev);
        }
      json_decref (n);
      *n_pci = t->n_pci;
    }
  nrm_drivers_close (&d);
  nrm_registry_free (reg);
  nrm_topology_free (t);
  nrm_fsroot_free (root);
  return r;
}

struct meter
{
  int fd;
  double w, c, i;
};

static void
meter_start (struct meter *m)
{
  if (m->fd >= 0)
    ioctl (m->fd, PERF_EVENT_IOC_RESET, 0), ioctl (m->fd, PERF_EVENT_IOC_ENABLE, 0);
  m->w = now_ms (CLOCK_MONOTONIC);
  m->c = now_ms (CLOCK_PROCESS_CPUTIME_ID);
}

static void
meter_stop (struct meter *m, struct series *r)
{
  struct sample *s = &r->s[r->n++];
  if (m->fd >= 0)
    ioctl (m->fd, PERF_EVENT_IOC_DISABLE, 0);
  s->cpu_ms = now_ms (CLOCK_PROCESS_CPUTIME_ID) - m->c;
  s->wall_ms = now_ms (CLOCK_MONOTONIC) - m->w;
  s->instructions = counter_read (m->fd);
}

static int
bench_in_process (const char *xml, const char *drivers, const char *config, int runs)
{
  struct nrm_config c;
  nrm_error_t err = NULL;
  struct series rn = { calloc ((size_t) runs, sizeof (struct sample)), 0, 0 };
  struct series rh = { calloc ((size_t) runs, sizeof (struct sample)), 0, 0 };
  struct series rs = { calloc ((size_t) runs, sizeof (struct sample)), 0, 0 };
  struct meter m = { .fd = counter_open (0, false) };
  cleanup_free char *counts = NULL;
  size_t n_pci = 0;
  int r = -1;

  nrm_config_init (&c);
  if ((config != NULL && nrm_config_load_file (&c, config, &err) < 0)
      || nrm_config_set_string (&c.topology, xml, &err) < 0 || nrm_config_set_string (&c.node_name, "bench", &err) < 0
      || (drivers != NULL && nrm_config_set_string (&c.drivers, drivers, &err) < 0) || nrm_config_finish (&c, &err) < 0)
    goto out;
  /* Warm both (page cache, the allocator's arenas, the registry's first use). */
  if (hwloc_load (xml) < 0)
    {
      fprintf (stderr, "bench-scan: hwloc cannot load `%s`\n", xml);
      goto out;
    }
  if (nrm_scan_slices (&c, &counts, &n_pci, &err) < 0)
    goto out;
  for (int i = 0; i < runs; i++)
    {
      meter_start (&m);
      hwloc_load (xml);
      meter_stop (&m, &rh);
      meter_start (&m);
      if (nrm_scan_slices (&c, NULL, NULL, &err) < 0)
        goto out;
      meter_stop (&m, &rn);
      /* The scan alone, to tell it from the drivers' part. */
      struct nrm_topology *t = NULL;
      meter_start (&m);
      if (nrm_topology_load (xml, &t, &err) < 0)
        goto out;
      nrm_topology_free (t);
      meter_stop (&m, &rs);
    }
  const char *base = strrchr (xml, '/') ? strrchr (xml, '/') + 1 : xml;
  printf ("%s: %zu PCI functions kept by hwloc; devices published: %s%s%s\n", base, n_pci, counts,
          config ? "; config " : "", config ? config : "");
  bool counted = m.fd >= 0;
  double ratio;
  if (counted)
    {
      ratio = MEDIAN (&rn, instructions) / MEDIAN (&rh, instructions);
      printf ("  instructions (user space): scan + slices %.2fM (scan alone %.2fM), hwloc load %.2fM\n",
              MEDIAN (&rn, instructions) / 1e6, MEDIAN (&rs, instructions) / 1e6, MEDIAN (&rh, instructions) / 1e6);
    }
  else
    ratio = MEDIAN (&rn, cpu_ms) / MEDIAN (&rh, cpu_ms);
  printf ("  CPU time median: scan + slices %.2f ms (scan alone %.2f ms), hwloc load %.2f ms; wall %.2f / %.2f ms\n",
          MEDIAN (&rn, cpu_ms), MEDIAN (&rs, cpu_ms), MEDIAN (&rh, cpu_ms), MEDIAN (&rn, wall_ms),
          MEDIAN (&rh, wall_ms));
  printf ("  %s ratio %.2fx (goal <= %.1fx: %s), %d runs each, alternating%s%s%s\n",
          counted ? "instruction" : "CPU-time", ratio, SCAN_GOAL, ratio <= SCAN_GOAL ? "met" : "NOT met", runs,
          counted ? "" : "; no instruction counts (", counted ? "" : counter_why, counted ? "" : ")");
  r = 0;
out:
  if (err != NULL)
    fprintf (stderr, "bench-scan: %s: %s\n", xml, nrm_error_msg (err));
  nrm_error_release (&err);
  nrm_config_done (&c);
  if (m.fd >= 0)
    close (m.fd);
  free (rn.s);
  free (rh.s);
  free (rs.s);
  return r;
}

int
main (int argc, char **argv)
{
  static const struct option opts[] = { { "runs", required_argument, NULL, 'n' },
                                        { "label", required_argument, NULL, 'l' },
                                        { "baseline", required_argument, NULL, 'b' },
                                        { "command", required_argument, NULL, 'c' },
                                        { "drivers", required_argument, NULL, 'd' },
                                        { "config", required_argument, NULL, 'f' },
                                        { NULL, 0, NULL, 0 } };
  const char *label = "", *baseline = NULL, *command = NULL, *drivers = NULL, *config = NULL;
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
      case 'd':
        drivers = optarg;
        break;
      case 'f':
        config = optarg;
        break;
      default:
        return 2;
      }
  bool processes = command != NULL && baseline != NULL && optind == argc;
  if ((!processes && (command != NULL || baseline != NULL || optind == argc)) || runs < 1)
    {
      fprintf (stderr, "usage: bench-scan --command CMD --baseline CMD [--runs N] [--label TEXT]\n"
                       "       bench-scan [--drivers LIST] [--config FILE] [--runs N] MACHINE.xml...\n");
      return 2;
    }
  if (processes)
    return bench_processes (label, baseline, command, runs) < 0;
  /* nrm reads XML with hwloc's own reader (topology/scan.c); the floor too. */
  setenv ("HWLOC_LIBXML_IMPORT", "0", 0);
  for (int i = optind; i < argc; i++)
    if (bench_in_process (argv[i], drivers, config, runs) < 0)
      return 1;
  if (counter_why[0] != '\0')
    printf ("(instruction counts are not available on this machine: %s; the ratios are of CPU time, measured in "
            "the same run, alternating)\n",
            counter_why);
  return 0;
}
