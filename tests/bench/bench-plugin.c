/* SPDX-License-Identifier: Apache-2.0 */
/* NodePrepareResources latency against the GetInfo round trip, with 1 and 8
 * concurrent clients, and the daemon's memory: `make bench`. The plugin
 * runs as its own process; claims come from a claims directory. */
#include "config.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/dra_v1.pb-c.h"
#include "proto/pluginregistration.pb-c.h"
#include "tests/plugin/kubelet.h"

#define NODE "bench-node"
#define ROUNDS 400

static char root[96], cdi[160];
static char kubelet[128], claims[128], cpu_sock[320], mem_sock[320], cpu_reg[320];

static double
now_us (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec * 1e6 + (double) t.tv_nsec / 1e3;
}

static int
cmp (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

static void
percentiles (double *v, size_t n, double *p50, double *p99)
{
  qsort (v, n, sizeof (double), cmp);
  *p50 = v[n / 2];
  *p99 = v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
}

struct job
{
  int id, rounds;
  double *prep; /* microseconds per prepare, both drivers (or the one in `only`) */
  int errors;
  int only; /* 0: both drivers; 1: the CPU driver only; 2: the memory driver only */
};

static void *
run_job (void *arg)
{
  struct job *j = arg;
  grpc_channel *cpu = kc_connect (cpu_sock), *mem = kc_connect (mem_sock);
  char name[32], uid[64];
  snprintf (name, sizeof (name), "claim%d", j->id);
  snprintf (uid, sizeof (uid), "00000000-0000-4000-8000-%012d", j->id);
  size_t plen, ulen;
  const char *names[] = { name }, *uids[] = { uid };
  uint8_t *p = kc_pack_claims ("bench", names, uids, 1, false, &plen);
  uint8_t *u = kc_pack_claims ("bench", names, uids, 1, true, &ulen);
  for (int i = 0; i < j->rounds; i++)
    {
      struct kc_reply r1, r2, r3, r4;
      if (j->only)
        {
          grpc_channel *ch = j->only == 1 ? cpu : mem;
          double t0 = now_us ();
          int e = kc_unary (ch, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", p, plen, 10000, &r1);
          j->prep[i] = now_us () - t0;
          if (e || r1.status || r1.len < 60)
            j->errors++;
          kc_unary (ch, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", u, ulen, 10000, &r3);
          kc_reply_done (&r1);
          kc_reply_done (&r3);
          continue;
        }
      double t0 = now_us ();
      int e = kc_unary (cpu, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", p, plen, 10000, &r1);
      e |= kc_unary (mem, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", p, plen, 10000, &r2);
      j->prep[i] = now_us () - t0;
      if (e || r1.status || r2.status || r1.len < 60 || r2.len < 60)
        j->errors++;
      kc_unary (cpu, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", u, ulen, 10000, &r3);
      kc_unary (mem, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", u, ulen, 10000, &r4);
      kc_reply_done (&r1);
      kc_reply_done (&r2);
      kc_reply_done (&r3);
      kc_reply_done (&r4);
    }
  free (p);
  free (u);
  kc_close (cpu);
  kc_close (mem);
  return NULL;
}

/* One run of `threads` clients, `rounds` prepares in all; their latencies
 * go to lat[] (rounds of them). Returns the run's wall time in
 * microseconds. */
static double
run_clients (int threads, int only, int rounds, double *lat, int *errors)
{
  pthread_t th[8];
  struct job jobs[8];
  int per = rounds / threads;
  double t0 = now_us ();
  for (int i = 0; i < threads; i++)
    {
      jobs[i] = (struct job){ i, per, lat + i * per, 0, only };
      pthread_create (&th[i], NULL, run_job, &jobs[i]);
    }
  *errors = 0;
  for (int i = 0; i < threads; i++)
    {
      pthread_join (th[i], NULL);
      *errors += jobs[i].errors;
    }
  return now_us () - t0;
}

static void
prepare_round (int threads, double *p50, double *p99, int *errors)
{
  double *all = calloc ((size_t) ROUNDS, sizeof (double));
  run_clients (threads, 0, ROUNDS, all, errors);
  percentiles (all, ROUNDS, p50, p99);
  free (all);
}

/* Group commit: per driver, 8 clients at once against one. The runs
 * alternate (1, 8, 1, 8, ...) in short runs, so that both settings see the
 * same disk: its flush times drift by 2-3x within a minute on a shared
 * virtual disk. Each setting's p99 is taken over all its prepares (PAIRS x
 * PER_RUN), its throughput over all its wall time. Goals: p99 at most 3x
 * and throughput at least 2x those of one client. */
#define PAIRS 10
#define PER_RUN 200
static int
concurrency (void)
{
  int errors = 0;
  for (int only = 1; only <= 2; only++)
    {
      double *lat[2], wall[2] = { 0, 0 }, p50[2], p99[2];
      for (int t = 0; t < 2; t++)
        lat[t] = calloc (PAIRS * PER_RUN, sizeof (double));
      for (int run = 0; run < PAIRS; run++)
        for (int t = 0; t < 2; t++)
          {
            int e;
            wall[t] += run_clients (t ? 8 : 1, only, PER_RUN, lat[t] + run * PER_RUN, &e);
            errors += e;
          }
      for (int t = 0; t < 2; t++)
        {
          percentiles (lat[t], PAIRS * PER_RUN, &p50[t], &p99[t]);
          free (lat[t]);
        }
      double ratio = p99[1] / p99[0], thr = wall[0] / wall[1];
      printf ("  %s driver, 8 clients against 1 (%d alternating runs of %d prepares each): prepare p99 %.3f ms against "
              "%.3f ms = %.2fx (goal <= 3x: %s); throughput %.2fx (goal >= 2x: %s)\n",
              only == 1 ? "CPU" : "memory", PAIRS, PER_RUN, p99[1] / 1e3, p99[0] / 1e3, ratio,
              ratio <= 3 ? "met" : "not met", thr, thr >= 2 ? "met" : "not met");
    }
  return errors;
}

static long
status_kib (pid_t pid, const char *field)
{
  char path[64], line[256];
  long v = -1;
  snprintf (path, sizeof (path), "/proc/%d/status", (int) pid);
  FILE *f = fopen (path, "r");
  while (f && fgets (line, sizeof (line), f))
    if (strncmp (line, field, strlen (field)) == 0)
      v = strtol (line + strlen (field) + 1, NULL, 10);
  if (f)
    fclose (f);
  return v;
}

int
main (int argc, char **argv)
{
  if (argc < 3)
    {
      fprintf (stderr, "usage: bench-plugin NRM TOPOLOGY.xml\n");
      return 2;
    }
  /* NRM_BENCH_DIR puts the state (and its fsyncs) on another file system. */
  snprintf (root, sizeof (root), "%s/nrm-bench-XXXXXX", getenv ("NRM_BENCH_DIR") ? getenv ("NRM_BENCH_DIR") : "/tmp");
  if (mkdtemp (root) == NULL)
    return 1;
  snprintf (kubelet, sizeof (kubelet), "%s/kubelet", root);
  snprintf (claims, sizeof (claims), "%s/claims", root);
  mkdir (claims, 0700);
  for (int i = 0; i < 8; i++)
    {
      char path[320];
      snprintf (path, sizeof (path), "%s/bench_claim%d.json", claims, i);
      FILE *f = fopen (path, "w");
      fprintf (f,
               "{\"metadata\":{\"namespace\":\"bench\",\"name\":\"claim%d\",\"uid\":\"00000000-0000-4000-8000-%012d\"},"
               "\"status\":{\"allocation\":{\"devices\":{\"results\":["
               "{\"request\":\"cpus\",\"driver\":\"cpu.nrm.io\",\"pool\":\"" NODE "\",\"device\":\"numa%d\","
               "\"consumedCapacity\":{\"cpus\":\"2\"}},"
               "{\"request\":\"mem\",\"driver\":\"memory.nrm.io\",\"pool\":\"" NODE "\",\"device\":\"numa%d\","
               "\"consumedCapacity\":{\"memory\":\"256Mi\"}}]}}}}",
               i, i, i % 2, i % 2);
      fclose (f);
    }
  snprintf (cpu_sock, sizeof (cpu_sock), "%s/plugins/cpu.nrm.io/dra.sock", kubelet);
  snprintf (mem_sock, sizeof (mem_sock), "%s/plugins/memory.nrm.io/dra.sock", kubelet);
  snprintf (cpu_reg, sizeof (cpu_reg), "%s/plugins_registry/cpu.nrm.io-reg.sock", kubelet);

  /* The CDI specs on a tmpfs, as /var/run/cdi is on a node; the state on
   * the disk (or NRM_BENCH_DIR). */
  snprintf (cdi, sizeof (cdi), "/dev/shm/%s-cdi", strrchr (root, '/') + 1);
  mkdir (cdi, 0755);
  pid_t pid = fork ();
  if (pid == 0)
    {
      char state[160];
      snprintf (state, sizeof (state), "%s/state", root);
      mkdir (state, 0700);
      int null = open ("/dev/null", O_WRONLY);
      dup2 (null, 2);
      execl (argv[1], argv[1], "plugin", "--topology", argv[2], "--node-name", NODE, "--kubelet-dir", kubelet,
             "--cdi-dir", cdi, "--state-dir", state, "--claims-dir", claims, "--log-level", "error", NULL);
      _exit (127);
    }
  grpc_init ();
  for (int i = 0; i < 300 && access (mem_sock, F_OK) != 0; i++)
    usleep (20000);
  if (access (mem_sock, F_OK) != 0)
    {
      fprintf (stderr, "bench-plugin: the plugin did not start (run it by hand with the same flags to see why)\n");
      kill (pid, SIGKILL);
      return 1;
    }

  /* The floor: GetInfo round trips on one connection. */
  grpc_channel *reg = kc_connect (cpu_reg);
  Pluginregistration__InfoRequest in = PLUGINREGISTRATION__INFO_REQUEST__INIT;
  uint8_t buf[8];
  size_t len = protobuf_c_message_pack (&in.base, buf);
  double info[ROUNDS], ip50, ip99;
  for (int i = 0; i < ROUNDS; i++)
    {
      struct kc_reply r;
      double t0 = now_us ();
      kc_unary (reg, "/pluginregistration.Registration/GetInfo", buf, len, 5000, &r);
      info[i] = now_us () - t0;
      kc_reply_done (&r);
    }
  percentiles (info, ROUNDS, &ip50, &ip99);
  kc_close (reg);

  double p50_1, p99_1, p50_8, p99_8;
  int e1, e8;
  prepare_round (1, &p50_1, &p99_1, &e1);
  prepare_round (8, &p50_8, &p99_8, &e8);
  long rss = status_kib (pid, "VmRSS:"), hwm = status_kib (pid, "VmHWM:");

  printf ("plugin (2 drivers, claim of 2 CPUs + 256Mi memory, %d prepares per run, each one call per driver, "
          "state in %s, CDI specs in %s)\n",
          ROUNDS, root, cdi);
  printf ("  GetInfo round trip           p50 %7.3f ms  p99 %7.3f ms\n", ip50 / 1e3, ip99 / 1e3);
  printf ("  prepare, 1 client            p50 %7.3f ms  p99 %7.3f ms  errors %d\n", p50_1 / 1e3, p99_1 / 1e3, e1);
  printf ("  prepare, 8 clients           p50 %7.3f ms  p99 %7.3f ms  errors %d\n", p50_8 / 1e3, p99_8 / 1e3, e8);
  printf ("  per-driver prepare p99 / GetInfo p99: %.1fx with 1 client (goal <= 3x, p99 < 1 ms)\n", p99_1 / 2 / ip99);
  printf ("  daemon RSS %.1f MiB, peak %.1f MiB (goal < 20 MiB)\n", (double) rss / 1024, (double) hwm / 1024);
  fflush (stdout);
  int ec = concurrency ();

  kill (pid, SIGTERM);
  waitpid (pid, NULL, 0);
  grpc_shutdown ();
  char cmd[320];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s' '%s'", root, cdi);
  if (system (cmd) != 0)
    return 1;
  return e1 + e8 + ec ? 1 : 0;
}
