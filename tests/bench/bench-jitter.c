/* SPDX-License-Identifier: Apache-2.0 */
/* Jitter: the wake-up latency of a timer loop (clock_nanosleep to absolute
 * times on a fixed grid, as cyclictest measures it) beside a noisy
 * neighbour, with the probe unpinned, pinned by sched_setaffinity (what
 * taskset does), run through `nrm run --cpus 1`, in an isolated cgroup v2
 * partition of this bench's own (a local one, any kernel) and in nrm run's
 * (--partition isolated, Linux 6.7+), against the floor: the probe alone, measured in the same
 * rounds. The scenarios alternate round by round, so that other load on the
 * host falls on all of them alike. `make bench` (short); docs/jitter.md.
 *
 *   bench-jitter [--nrm PATH] [--seconds S] [--rounds N] [--interval-us U]
 *                [--hog mem|spin] [--neighbours N] [--fifo PRIO] [--state-dir DIR]
 *                [--nrm-arg ARG]...
 *
 * The probe is this program again (--probe), so that `nrm run` starts it as
 * it starts any command. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nrm/base/clock.h"
#include "nrm/base/xalloc.h"
#include "tests/bench/jitter-stats.h"

#define HOG_BYTES (32u << 20)
#define CGROUP "/sys/fs/cgroup"

enum scenario
{
  FLOOR,
  NRM_RUN,
  UNPINNED,
  TASKSET,
  PARTITION,
  NRM_PARTITION, /* nrm run --partition isolated: nrm's own partition (Linux 6.7+) */
  N_SCENARIOS
};

struct series
{
  uint64_t *ns;
  size_t n;
  char skip[1024];  /* why not measured, when not */
  char rounds[256]; /* each round's p99.99, to show how much they differ */
  double steal_ms;  /* CPU time the hypervisor took during the runs */
};

static struct series series[N_SCENARIOS];
static char tmp[64] = "/tmp/nrm-bench-jitter-XXXXXX";
static char self[PATH_MAX];
static char nrm_said[4096]; /* nrm run's log of the first run measured */

/* The steal time of all CPUs so far (/proc/stat), in ms; 0 on bare metal. */
static double
steal_ms (void)
{
  char buf[512];
  unsigned long long v[8] = { 0 };
  int fd = open ("/proc/stat", O_RDONLY | O_CLOEXEC);
  ssize_t r = fd < 0 ? -1 : read (fd, buf, sizeof (buf) - 1);
  if (fd >= 0)
    close (fd);
  if (r <= 0)
    return 0;
  buf[r] = '\0';
  if (sscanf (buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
              &v[7])
      != 8)
    return 0;
  return (double) v[7] * 1e3 / (double) sysconf (_SC_CLK_TCK);
}

static void
cpus_text (const cpu_set_t *set, char *out, size_t size)
{
  size_t len = 0;
  out[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE; c++)
    {
      if (!CPU_ISSET (c, set))
        continue;
      int e = c;
      while (e + 1 < CPU_SETSIZE && CPU_ISSET (e + 1, set))
        e++;
      int w = e > c ? snprintf (out + len, size - len, "%s%d-%d", len ? "," : "", c, e)
                    : snprintf (out + len, size - len, "%s%d", len ? "," : "", c);
      if (w < 0 || (size_t) w >= size - len)
        break;
      len += (size_t) w;
      c = e;
    }
  if (len == 0)
    snprintf (out, size, "-");
}

static int
cpus_parse (const char *text, cpu_set_t *set)
{
  CPU_ZERO (set);
  const char *p = text;
  while (*p && *p != '\n')
    {
      char *end;
      long a = strtol (p, &end, 10), b = a;
      if (end == p || a < 0 || a >= CPU_SETSIZE)
        return -1;
      if (*end == '-')
        {
          p = end + 1;
          b = strtol (p, &end, 10);
          if (end == p || b < a || b >= CPU_SETSIZE)
            return -1;
        }
      for (long c = a; c <= b; c++)
        CPU_SET ((int) c, set);
      p = *end == ',' ? end + 1 : end;
    }
  return CPU_COUNT (set) ? 0 : -1;
}

static int
write_file (const char *path, const char *text)
{
  int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -1;
  ssize_t w = write (fd, text, strlen (text));
  int saved = errno;
  close (fd);
  errno = saved;
  return w == (ssize_t) strlen (text) ? 0 : -1;
}

static int
read_file (const char *path, char *out, size_t size)
{
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t r = read (fd, out, size - 1);
  close (fd);
  if (r < 0)
    return -1;
  out[r] = '\0';
  while (r > 0 && (out[r - 1] == '\n' || out[r - 1] == ' '))
    out[--r] = '\0';
  return 0;
}

/* --- the probe ------------------------------------------------------------ */

/* Announces itself in READY (pid and CPUs, renamed into place whole), waits
 * for a byte on the FIFO GO, then sleeps SAMPLES times to the next point of
 * the grid and records how late it woke. A wake-up past the next point
 * skips the points missed, as cyclictest does, so one long stall counts
 * once. */
static int
probe (char **argv)
{
  const char *ready = argv[0], *go = argv[1], *out = argv[2];
  size_t samples = strtoul (argv[3], NULL, 10);
  long interval = strtol (argv[4], NULL, 10);
  int fifo = atoi (argv[5]);
  if (fifo > 0)
    {
      struct sched_param sp = { .sched_priority = fifo };
      if (sched_setscheduler (0, SCHED_FIFO, &sp) < 0)
        {
          fprintf (stderr, "bench-jitter: probe: SCHED_FIFO %d: %s\n", fifo, strerror (errno));
          return 1;
        }
    }
  /* A SCHED_OTHER task's sleeps end up to its timer slack (50 us by
   * default) late on purpose: what is measured is the scheduler's delay. */
  (void) prctl (PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  /* Page faults are not what is measured. */
  (void) mlockall (MCL_CURRENT | MCL_FUTURE);
  uint64_t *lat = xcalloc (samples, sizeof (uint64_t));
  memset (lat, 0, samples * sizeof (uint64_t));

  cpu_set_t set;
  char cpus[1024], line[1100], tmpname[PATH_MAX];
  if (sched_getaffinity (0, sizeof (set), &set) < 0)
    return 1;
  cpus_text (&set, cpus, sizeof (cpus));
  snprintf (line, sizeof (line), "%d %s\n", (int) getpid (), cpus);
  snprintf (tmpname, sizeof (tmpname), "%s.tmp", ready);
  if (write_file (tmpname, line) < 0 || rename (tmpname, ready) < 0)
    return 1;
  int fd = open (go, O_RDONLY | O_CLOEXEC);
  char c;
  if (fd < 0 || read (fd, &c, 1) != 1)
    return 1;
  close (fd);

  struct timespec next, now;
  clock_gettime (CLOCK_MONOTONIC, &next);
  now = next;
  for (size_t i = 0; i < samples; i++)
    {
      /* The next point of the grid that is still ahead. */
      do
        {
          next.tv_nsec += interval;
          while (next.tv_nsec >= 1000000000L)
            {
              next.tv_nsec -= 1000000000L;
              next.tv_sec++;
            }
        }
      while (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec));
      while (clock_nanosleep (CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
        ;
      clock_gettime (CLOCK_MONOTONIC, &now);
      int64_t d = (int64_t) (now.tv_sec - next.tv_sec) * 1000000000 + (now.tv_nsec - next.tv_nsec);
      lat[i] = d > 0 ? (uint64_t) d : 0;
    }
  snprintf (tmpname, sizeof (tmpname), "%s.tmp", out);
  FILE *f = fopen (tmpname, "w");
  if (f == NULL || fwrite (lat, sizeof (uint64_t), samples, f) != samples || fclose (f) != 0
      || rename (tmpname, out) < 0)
    return 1;
  return 0;
}

/* --- the neighbour -------------------------------------------------------- */

struct opts
{
  const char *nrm, *state_dir;
  const char *nrm_args[8];
  int n_nrm_args;
  double seconds;
  int rounds, neighbours, fifo;
  long interval_ns;
  bool spin, keep_awake, c_states;
};

/* One process per CPU of the bench, each on MASK (NULL: unpinned): a loop
 * over 32 MiB of its own (caches and memory bandwidth), or a bare loop. */
static void
neighbours_start (const struct opts *o, const cpu_set_t *mask, pid_t *pids)
{
  for (int i = 0; i < o->neighbours; i++)
    {
      pids[i] = fork ();
      if (pids[i] < 0)
        {
          perror ("bench-jitter: fork");
          exit (1);
        }
      if (pids[i] > 0)
        continue;
      (void) prctl (PR_SET_PDEATHSIG, SIGKILL);
      if (mask && sched_setaffinity (0, sizeof (*mask), mask) < 0)
        _exit (1);
      if (o->spin)
        for (volatile uint64_t n = 0;; n++)
          ;
      volatile unsigned char *buf = xmalloc (HOG_BYTES);
      for (;;)
        for (size_t j = 0; j < HOG_BYTES; j += 64)
          buf[j]++;
    }
}

static void
neighbours_stop (const struct opts *o, pid_t *pids)
{
  for (int i = 0; i < o->neighbours; i++)
    if (pids[i] > 0)
      kill (pids[i], SIGKILL);
  for (int i = 0; i < o->neighbours; i++)
    if (pids[i] > 0)
      waitpid (pids[i], NULL, 0);
}

/* With --keep-awake: a SCHED_IDLE loop on every CPU, in every scenario
 * alike, so that no CPU goes idle. It yields at once to the probe; what it
 * takes away is the CPU's way out of idle (a halted vCPU that the
 * hypervisor must schedule again, a deep C-state). */
static void
keep_awake_start (const cpu_set_t *all, pid_t *pids)
{
  int k = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    {
      if (!CPU_ISSET (c, all))
        continue;
      pid_t p = fork ();
      if (p < 0)
        {
          perror ("bench-jitter: fork");
          exit (1);
        }
      if (p == 0)
        {
          cpu_set_t one;
          CPU_ZERO (&one);
          CPU_SET (c, &one);
          struct sched_param sp = { 0 };
          (void) prctl (PR_SET_PDEATHSIG, SIGKILL);
          if (sched_setaffinity (0, sizeof (one), &one) < 0 || sched_setscheduler (0, SCHED_IDLE, &sp) < 0)
            _exit (1);
          for (volatile uint64_t n = 0;; n++)
            ;
        }
      pids[k++] = p;
    }
}

/* --- the isolated partition ----------------------------------------------- */

/* A child of the cgroup v2 root holding CPU alone as an isolated partition
 * (no load balancing, off every other cgroup's effective CPUs); 0, or -1
 * with why in why. */
static int
partition_make (int cpu, char *dir, size_t dsize, char *why, size_t wsize)
{
  char buf[512], path[300];
  if (read_file (CGROUP "/cgroup.controllers", buf, sizeof (buf)) < 0)
    {
      snprintf (why, wsize, "no " CGROUP "/cgroup.controllers: not a cgroup v2 host (%s)", strerror (errno));
      return -1;
    }
  if (strstr (buf, "cpuset") == NULL)
    {
      snprintf (why, wsize, "cgroup v2 without the cpuset controller (" CGROUP "/cgroup.controllers: %s)", buf);
      return -1;
    }
  if (read_file (CGROUP "/cgroup.subtree_control", buf, sizeof (buf)) < 0
      || (strstr (buf, "cpuset") == NULL && write_file (CGROUP "/cgroup.subtree_control", "+cpuset") < 0))
    {
      snprintf (why, wsize, "cannot enable cpuset in " CGROUP "/cgroup.subtree_control: %s", strerror (errno));
      return -1;
    }
  snprintf (dir, dsize, CGROUP "/nrm-bench-jitter-%d", (int) getpid ());
  if (mkdir (dir, 0755) < 0 && errno != EEXIST)
    {
      snprintf (why, wsize, "mkdir %s: %s", dir, strerror (errno));
      return -1;
    }
  char mems[256], cpus[32];
  snprintf (cpus, sizeof (cpus), "%d", cpu);
  const char *step = "cpuset.mems.effective";
  if (read_file (CGROUP "/cpuset.mems.effective", mems, sizeof (mems)) == 0)
    {
      snprintf (path, sizeof (path), "%s/cpuset.cpus", dir);
      step = "cpuset.cpus";
      if (write_file (path, cpus) == 0)
        {
          snprintf (path, sizeof (path), "%s/cpuset.mems", dir);
          step = "cpuset.mems";
          if (write_file (path, mems) == 0)
            {
              /* Linux 6.7 and later want the CPU claimed as exclusive first. */
              snprintf (path, sizeof (path), "%s/cpuset.cpus.exclusive", dir);
              step = "cpuset.cpus.exclusive";
              if (access (path, F_OK) < 0 || write_file (path, cpus) == 0)
                {
                  snprintf (path, sizeof (path), "%s/cpuset.cpus.partition", dir);
                  step = "cpuset.cpus.partition";
                  if (write_file (path, "isolated") == 0 && read_file (path, buf, sizeof (buf)) == 0
                      && strcmp (buf, "isolated") == 0)
                    return 0;
                  if (read_file (path, buf, sizeof (buf)) == 0)
                    {
                      snprintf (why, wsize, "%s of CPU %d reads `%s`", path, cpu, buf);
                      rmdir (dir);
                      return -1;
                    }
                }
            }
        }
    }
  snprintf (why, wsize, "%s/%s for CPU %d: %s", dir, step, cpu, strerror (errno));
  rmdir (dir);
  return -1;
}

static void
partition_remove (const char *dir)
{
  char path[300];
  snprintf (path, sizeof (path), "%s/cpuset.cpus.partition", dir);
  (void) write_file (path, "member");
  for (int i = 0; i < 100 && rmdir (dir) < 0 && errno == EBUSY; i++)
    usleep (10000);
}

/* --- one measurement ------------------------------------------------------ */

/* Starts the probe (through nrm run for NRM_RUN, on CPU for TASKSET and
 * PARTITION), then the neighbour where the scenario puts it, and appends
 * the probe's samples to its series. *cpu: the probe's CPU (out for
 * NRM_RUN). 0, or -1 with why in the series. */
static int
measure (const struct opts *o, enum scenario s, int *cpu, const cpu_set_t *all, int run)
{
  struct series *se = &series[s];
  bool via_nrm = s == NRM_RUN || s == NRM_PARTITION;
  char ready[256], go[256], out[256], log[256], cg[256] = "";
  snprintf (ready, sizeof (ready), "%s/ready.%d", tmp, run);
  snprintf (go, sizeof (go), "%s/go.%d", tmp, run);
  snprintf (out, sizeof (out), "%s/out.%d", tmp, run);
  snprintf (log, sizeof (log), "%s/nrm-run.log", tmp);
  size_t samples = (size_t) (o->seconds * 1e9 / (double) o->interval_ns);
  if (samples == 0)
    samples = 1;
  if (mkfifo (go, 0600) < 0)
    {
      snprintf (se->skip, sizeof (se->skip), "mkfifo %s: %s", go, strerror (errno));
      return -1;
    }
  if (s == PARTITION && partition_make (*cpu, cg, sizeof (cg), se->skip, sizeof (se->skip)) < 0)
    return -1;

  char n_s[32], iv_s[32], fifo_s[16];
  snprintf (n_s, sizeof (n_s), "%zu", samples);
  snprintf (iv_s, sizeof (iv_s), "%ld", o->interval_ns);
  snprintf (fifo_s, sizeof (fifo_s), "%d", o->fifo);
  pid_t child = fork ();
  if (child < 0)
    {
      perror ("bench-jitter: fork");
      exit (1);
    }
  if (child == 0)
    {
      if (s == TASKSET)
        {
          cpu_set_t one;
          CPU_ZERO (&one);
          CPU_SET (*cpu, &one);
          if (sched_setaffinity (0, sizeof (one), &one) < 0)
            _exit (126);
        }
      if (via_nrm)
        {
          int fd = open (log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          if (fd >= 0)
            dup2 (fd, 2);
          const char *av[40];
          int n = 0;
          const char *head[] = { o->nrm,        "run",         "--cpus",
                                 "1",           "--node-name", "bench-jitter",
                                 "--state-dir", o->state_dir,  "--create-state-dir" };
          for (size_t k = 0; k < sizeof (head) / sizeof (head[0]); k++)
            av[n++] = head[k];
          for (int k = 0; k < o->n_nrm_args; k++)
            av[n++] = o->nrm_args[k];
          if (s == NRM_PARTITION)
            {
              av[n++] = "--partition";
              av[n++] = "isolated";
            }
          const char *tail[] = { "--", self, "--probe", ready, go, out, n_s, iv_s, fifo_s, NULL };
          for (size_t k = 0; k < sizeof (tail) / sizeof (tail[0]); k++)
            av[n++] = tail[k];
          execv (o->nrm, (char **) av);
        }
      else
        execl (self, self, "--probe", ready, go, out, n_s, iv_s, fifo_s, (char *) NULL);
      fprintf (stderr, "cannot run %s: %s\n", via_nrm ? o->nrm : self, strerror (errno));
      _exit (127);
    }

  char line[1100];
  int status = 0;
  bool exited = false;
  for (double t0 = nrm_mono_s (); read_file (ready, line, sizeof (line)) < 0;)
    {
      if (waitpid (child, &status, WNOHANG) == child)
        {
          exited = true;
          break;
        }
      if (nrm_mono_s () - t0 > 30)
        {
          kill (child, SIGKILL);
          waitpid (child, &status, 0);
          exited = true;
          break;
        }
      usleep (1000);
    }
  if (exited)
    {
      /* nrm run's last line says why. */
      char msg[4096] = "";
      if (via_nrm && read_file (log, msg, sizeof (msg)) == 0 && strrchr (msg, '\n'))
        memmove (msg, strrchr (msg, '\n') + 1, strlen (strrchr (msg, '\n')));
      msg[400] = '\0';
      snprintf (se->skip, sizeof (se->skip), "the probe%s did not start (status %d)%s%s",
                via_nrm ? " under nrm run" : "", WIFEXITED (status) ? WEXITSTATUS (status) : -1, msg[0] ? ": " : "",
                msg);
      if (cg[0])
        partition_remove (cg);
      return -1;
    }

  /* The probe's pid and CPUs, as it sees them. */
  char *sp = strchr (line, ' ');
  cpu_set_t probe_cpus, shared;
  int probe_pid = atoi (line);
  if (sp == NULL || cpus_parse (sp + 1, &probe_cpus) < 0)
    {
      fprintf (stderr, "bench-jitter: bad ready line `%s`\n", line);
      exit (1);
    }
  if (s == PARTITION)
    {
      char path[300], pid_s[32];
      snprintf (path, sizeof (path), "%s/cgroup.procs", cg);
      snprintf (pid_s, sizeof (pid_s), "%d", probe_pid);
      if (write_file (path, pid_s) < 0)
        {
          snprintf (se->skip, sizeof (se->skip), "%s: %s", path, strerror (errno));
          kill (child, SIGKILL);
          waitpid (child, NULL, 0);
          partition_remove (cg);
          return -1;
        }
    }
  if (via_nrm)
    {
      if (CPU_COUNT (&probe_cpus) != 1)
        {
          snprintf (se->skip, sizeof (se->skip), "nrm run --cpus 1 gave the probe CPUs %s", sp + 1);
          kill (child, SIGKILL);
          waitpid (child, NULL, 0);
          return -1;
        }
      for (int c = 0; s == NRM_RUN && c < CPU_SETSIZE; c++)
        if (CPU_ISSET (c, &probe_cpus))
          *cpu = c;
      if (s == NRM_RUN && nrm_said[0] == '\0')
        (void) read_file (log, nrm_said, sizeof (nrm_said));
    }
  /* What nrm's reconciler does for the shared containers: off the claimed
   * CPU. This bench does it for the neighbour, which is no container. */
  CPU_XOR (&shared, all, &probe_cpus);
  pid_t pids[1024] = { 0 };
  if (s != FLOOR)
    neighbours_start (o, s == NRM_RUN ? &shared : NULL, pids);
  usleep (20000);
  double steal0 = steal_ms ();
  int fd = open (go, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write (fd, "g", 1) != 1)
    {
      perror ("bench-jitter: go");
      exit (1);
    }
  close (fd);
  waitpid (child, &status, 0);
  se->steal_ms += steal_ms () - steal0;
  if (s != FLOOR)
    neighbours_stop (o, pids);
  if (cg[0])
    partition_remove (cg);
  unlink (go);
  unlink (ready);
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    {
      snprintf (se->skip, sizeof (se->skip), "the probe failed (status %d)",
                WIFEXITED (status) ? WEXITSTATUS (status) : -1);
      return -1;
    }
  FILE *f = fopen (out, "r");
  se->ns = xrealloc (se->ns, (se->n + samples) * sizeof (uint64_t));
  if (f == NULL || fread (se->ns + se->n, sizeof (uint64_t), samples, f) != samples)
    {
      fprintf (stderr, "bench-jitter: short or missing probe output %s\n", out);
      exit (1);
    }
  fclose (f);
  unlink (out);
  uint64_t *one = xcalloc (samples, sizeof (uint64_t));
  memcpy (one, se->ns + se->n, samples * sizeof (uint64_t));
  qsort (one, samples, sizeof (uint64_t), jitter_cmp);
  size_t rl = strlen (se->rounds);
  snprintf (se->rounds + rl, sizeof (se->rounds) - rl, "%s%.0f", rl ? " " : "",
            (double) jitter_quantile (one, samples, 999900) / 1e3);
  free (one);
  se->n += samples;
  return 0;
}

/* --- the report ----------------------------------------------------------- */

static const char *names[N_SCENARIOS] = {
  [FLOOR] = "floor: the probe alone, unpinned",
  [UNPINNED] = "(a) unpinned, neighbour unpinned",
  [TASKSET] = "(b) taskset, neighbour unpinned",
  [NRM_RUN] = "(c) nrm run --cpus 1, neighbour on shared",
  [PARTITION] = "(d) isolated partition, neighbour unpinned",
  [NRM_PARTITION] = "(e) nrm run --partition, neighbour unpinned",
};

struct figures
{
  double p50, p99, p9999, max;
};

static struct figures
figures (struct series *se)
{
  qsort (se->ns, se->n, sizeof (uint64_t), jitter_cmp);
  return (struct figures){
    .p50 = (double) jitter_quantile (se->ns, se->n, 500000) / 1e3,
    .p99 = (double) jitter_quantile (se->ns, se->n, 990000) / 1e3,
    .p9999 = (double) jitter_quantile (se->ns, se->n, 999900) / 1e3,
    .max = se->n ? (double) se->ns[se->n - 1] / 1e3 : 0,
  };
}

static void usage (void);

/* A number in [lo, hi], else the program stops naming the option. */
static double
number (const char *opt, const char *v, double lo, double hi)
{
  char *end;
  errno = 0;
  double d = strtod (v, &end);
  if (errno || end == v || *end || d < lo || d > hi)
    {
      fprintf (stderr, "bench-jitter: %s needs a number from %g to %g, not `%s`\n", opt, lo, hi, v);
      exit (2);
    }
  return d;
}

static void
usage (void)
{
  fprintf (stderr, "usage: bench-jitter [--nrm PATH] [--seconds S] [--rounds N] [--interval-us U] [--hog mem|spin]\n"
                   "                    [--neighbours N] [--fifo PRIO] [--state-dir DIR] [--nrm-arg ARG]...\n"
                   "  --seconds S       probe time per scenario and round (default 0.5; $NRM_BENCH_JITTER_SECONDS)\n"
                   "  --rounds N        rounds of all scenarios, alternating (default 3; $NRM_BENCH_JITTER_ROUNDS)\n"
                   "  --interval-us U   the probe's timer interval (default 100)\n"
                   "  --hog mem|spin    the neighbour: loops over 32 MiB each (default), or bare loops\n"
                   "  --neighbours N    neighbour processes (default: one per CPU of the bench)\n"
                   "  --fifo PRIO       the probe under SCHED_FIFO PRIO (default SCHED_OTHER, as a pod gets)\n"
                   "  --nrm PATH        the nrm executable for scenario (c); without it (c) is skipped\n"
                   "  --keep-awake      a SCHED_IDLE loop on every CPU in every scenario: no CPU goes idle\n"
                   "  --c-states        leave /dev/cpu_dma_latency alone (default: held at 0, as cyclictest does)\n"
                   "  --state-dir DIR   nrm run's state directory (default: a temporary one)\n"
                   "  --nrm-arg ARG     one more option for nrm run (up to 8), e.g. --nrm-arg --reserved-cpus=0\n");
  exit (2);
}

int
main (int argc, char **argv)
{
  if (argc == 8 && strcmp (argv[1], "--probe") == 0)
    return probe (argv + 2);

  cpu_set_t all;
  if (sched_getaffinity (0, sizeof (all), &all) < 0)
    return 1;
  struct opts o = {
    .seconds = 0.5,
    .rounds = 3,
    .neighbours = CPU_COUNT (&all),
    .interval_ns = 100000,
  };
  if (getenv ("NRM_BENCH_JITTER_SECONDS"))
    o.seconds = number ("NRM_BENCH_JITTER_SECONDS", getenv ("NRM_BENCH_JITTER_SECONDS"), 0.001, 3600);
  if (getenv ("NRM_BENCH_JITTER_ROUNDS"))
    o.rounds = (int) number ("NRM_BENCH_JITTER_ROUNDS", getenv ("NRM_BENCH_JITTER_ROUNDS"), 1, 10000);
  for (int i = 1; i < argc; i++)
    {
      const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
      if (strcmp (a, "--keep-awake") == 0 || strcmp (a, "--c-states") == 0)
        {
          *(a[2] == 'k' ? &o.keep_awake : &o.c_states) = true;
          continue;
        }
      if (v == NULL)
        {
          fprintf (stderr, "bench-jitter: `%s` needs a value (or is not an option)\n", a);
          usage ();
        }
      i++;
      if (strcmp (a, "--nrm") == 0)
        o.nrm = v;
      else if (strcmp (a, "--seconds") == 0)
        o.seconds = number (a, v, 0.001, 3600);
      else if (strcmp (a, "--rounds") == 0)
        o.rounds = (int) number (a, v, 1, 10000);
      else if (strcmp (a, "--interval-us") == 0)
        o.interval_ns = (long) (number (a, v, 1, 1000000) * 1000);
      else if (strcmp (a, "--hog") == 0 && (strcmp (v, "mem") == 0 || strcmp (v, "spin") == 0))
        o.spin = strcmp (v, "spin") == 0;
      else if (strcmp (a, "--neighbours") == 0)
        o.neighbours = (int) number (a, v, 0, 1024);
      else if (strcmp (a, "--fifo") == 0)
        o.fifo = (int) number (a, v, 0, 99);
      else if (strcmp (a, "--state-dir") == 0)
        o.state_dir = v;
      else if (strcmp (a, "--nrm-arg") == 0 && o.n_nrm_args < 8)
        o.nrm_args[o.n_nrm_args++] = v;
      else
        {
          fprintf (stderr, "bench-jitter: unknown option or value `%s %s`\n", a, v);
          usage ();
        }
    }
  ssize_t len = readlink ("/proc/self/exe", self, sizeof (self) - 1);
  if (len < 0 || mkdtemp (tmp) == NULL)
    {
      perror ("bench-jitter");
      return 1;
    }
  self[len] = '\0';
  char state[PATH_MAX];
  snprintf (state, sizeof (state), "%s/state", tmp);
  if (o.state_dir == NULL)
    o.state_dir = state;
  if (o.nrm == NULL)
    snprintf (series[NRM_RUN].skip, sizeof (series[NRM_RUN].skip), "no --nrm given");
  else if (CPU_COUNT (&all) < 2)
    snprintf (series[NRM_RUN].skip, sizeof (series[NRM_RUN].skip), "one CPU: nothing to keep the neighbour on");
  memcpy (series[NRM_PARTITION].skip, series[NRM_RUN].skip, sizeof (series[NRM_RUN].skip));

  char all_s[1024];
  cpus_text (&all, all_s, sizeof (all_s));
  int last = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET (c, &all))
      last = c;
  struct utsname u;
  uname (&u);
  size_t per = (size_t) (o.seconds * 1e9 / (double) o.interval_ns);
  printf ("jitter: wake-up latency of a %ld us timer loop (clock_nanosleep to absolute times, %s), %d rounds x "
          "%.1f s (%zu samples) per scenario, alternating\n",
          o.interval_ns / 1000, o.fifo ? "SCHED_FIFO" : "SCHED_OTHER", o.rounds, o.seconds, per);
  printf ("  machine: %d CPUs (%s), Linux %s; neighbour: %d %s\n", CPU_COUNT (&all), all_s, u.release, o.neighbours,
          o.spin ? "busy loops" : "loops over 32 MiB each");

  /* As cyclictest: the CPUs stay out of deep idle states while the file is
   * open with 0 in it. */
  char cstates[256] = "left alone (--c-states)";
  int dma = -1;
  if (!o.c_states)
    {
      int32_t zero = 0;
      dma = open ("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
      if (dma >= 0 && write (dma, &zero, sizeof (zero)) == sizeof (zero))
        snprintf (cstates, sizeof (cstates), "/dev/cpu_dma_latency held at 0 us, as cyclictest does");
      else
        snprintf (cstates, sizeof (cstates), "not held: /dev/cpu_dma_latency: %s", strerror (errno));
    }
  printf ("  idle states: %s; %s\n", cstates,
          o.keep_awake ? "a SCHED_IDLE loop on every CPU (--keep-awake)" : "CPUs may go idle (no --keep-awake)");
  pid_t awake[CPU_SETSIZE] = { 0 };
  if (o.keep_awake)
    keep_awake_start (&all, awake);
  fflush (stdout);

  /* Round by round: (c) first, so that (b) and (d) take the CPU nrm run
   * took in the same round. */
  const enum scenario order[] = { FLOOR, NRM_RUN, UNPINNED, TASKSET, PARTITION, NRM_PARTITION };
  int run = 0;
  for (int r = 0; r < o.rounds; r++)
    {
      int cpu = last;
      for (size_t k = 0; k < sizeof (order) / sizeof (order[0]); k++)
        {
          enum scenario s = order[k];
          if (series[s].skip[0] == '\0')
            measure (&o, s, &cpu, &all, run++);
        }
    }

  for (int c = 0; c < CPU_SETSIZE; c++)
    if (awake[c] > 0)
      {
        kill (awake[c], SIGKILL);
        waitpid (awake[c], NULL, 0);
      }
  if (dma >= 0)
    close (dma);

  struct figures f[N_SCENARIOS];
  for (int s = 0; s < N_SCENARIOS; s++)
    f[s] = figures (&series[s]);
  if (series[FLOOR].n == 0)
    {
      fprintf (stderr, "bench-jitter: the floor was not measured: %s\n", series[FLOOR].skip);
      return 1;
    }
  if (series[NRM_RUN].n)
    {
      /* What nrm run said of where the probe runs, once. */
      char *save = NULL;
      int shown = 0;
      for (char *l = strtok_r (nrm_said, "\n", &save); l && shown < 2; l = strtok_r (NULL, "\n", &save))
        {
          char *m = strstr (l, "info ");
          printf ("  nrm run: %s\n", m ? m + 5 + strspn (m + 5, " ") : l);
          shown++;
        }
      printf ("  (c): the neighbour is pinned by this bench to the CPUs nrm run left (what nrm's reconciler does for "
              "shared containers; the neighbour is no container)\n");
    }
  printf ("  p99.99: the sample at rank ceil(0.9999 n) of n, sorted%s; ratios against the floor of the same rounds\n",
          series[FLOOR].n < 10000 ? " (under 10000 samples, the max)" : "");
  printf ("%-44s %7s %7s %8s %10s %9s %13s %9s %9s  %s\n", "scenario", "samples", "p50 us", "p99 us", "p99.99 us",
          "max us", "p99.99/floor", "max/floor", "steal ms", "p99.99 us by round");
  double fl = f[FLOOR].p9999 > 0 ? f[FLOOR].p9999 : 1e-3, flmax = f[FLOOR].max > 0 ? f[FLOOR].max : 1e-3;
  const enum scenario shown[] = { FLOOR, UNPINNED, TASKSET, NRM_RUN, PARTITION, NRM_PARTITION };
  for (size_t k = 0; k < sizeof (shown) / sizeof (shown[0]); k++)
    {
      enum scenario s = shown[k];
      if (series[s].n == 0)
        printf ("%-44s skipped: %s\n", names[s], series[s].skip);
      else
        printf ("%-44s %7zu %7.1f %8.1f %10.1f %9.1f %12.2fx %8.2fx %9.0f  %s\n", names[s], series[s].n, f[s].p50,
                f[s].p99, f[s].p9999, f[s].max, f[s].p9999 / fl, f[s].max / flmax, series[s].steal_ms,
                series[s].rounds);
      if (series[s].n && series[s].skip[0])
        printf ("  %s: stopped before the last round: %s\n", names[s], series[s].skip);
    }
  if (series[NRM_RUN].n && series[TASKSET].n)
    {
      double rf = f[NRM_RUN].p9999 / fl, rt = f[NRM_RUN].p9999 / (f[TASKSET].p9999 > 0 ? f[TASKSET].p9999 : 1e-3);
      printf ("  goal: nrm run's p99.99 <= 2x the floor's and <= taskset's with the neighbour: %.2fx the floor, %.2fx "
              "taskset's: %s\n",
              rf, rt, rf <= 2 && rt <= 1 ? "met" : "NOT met");
    }
  else
    printf ("  goal: nrm run's p99.99 <= 2x the floor's and <= taskset's with the neighbour: not measured (%s)\n",
            series[NRM_RUN].n ? series[TASKSET].skip : series[NRM_RUN].skip);
  char cmd[128];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s'", tmp);
  return system (cmd) == 0 ? 0 : 1;
}
