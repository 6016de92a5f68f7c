/* SPDX-License-Identifier: Apache-2.0 */
/* Crash consistency: `nrm plugin` is stopped at the k-th file system call
 * that changes its state (tests/crash/crashfs.so), while several clients
 * prepare and unprepare claims over its sockets, for k = 1, 2, ... Half the
 * runs are a kill -9 (the kernel keeps what was written); half are a power
 * cut, which also loses what was not flushed. After each crash the plugin
 * starts again and must show: every prepare and unprepare it answered as
 * done, and nothing else; no CPU in two claims; a CDI spec for exactly the
 * prepared claims; no temporary file; the claims idempotent. Every third
 * run is neither: one fsync fails with EIO (a disk's write error), and the
 * plugin goes on serving. The calls it refused may have happened or not;
 * what it answered as done must be in its files, and its picture must be
 * theirs: every claim unprepares, all of them prepare again without a CPU
 * in two claims, and the same holds after a restart. Arguments:
 * [rounds [clients]] (default: a short run for make check). */
#include "config.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>
#include <jansson.h>

#include "proto/dra_v1.pb-c.h"
#include "tests/plugin/harness.h"
#include "tests/plugin/kubelet.h"

#define CLAIMS_PER_CLIENT 3
#define MAX_CLIENTS 8

static struct nh h;
static int failures;
static bool eio_round; /* a refused call is an outcome, not a failure */

#define CHECK(cond, ...)                                                                                               \
  do                                                                                                                   \
    if (!(cond))                                                                                                       \
      {                                                                                                                \
        fprintf (stderr, "FAIL: " __VA_ARGS__);                                                                        \
        fputc ('\n', stderr);                                                                                          \
        failures++;                                                                                                    \
      }                                                                                                                \
  while (0)

/* What a client was told about each of its claims. */
enum ack
{
  UNKNOWN, /* a call was in flight at the crash: either outcome is right */
  PREPARED,
  UNPREPARED
};

#define STEPS 6

struct client
{
  int id;
  const char *sock;
  bool cpu;
  enum ack ack[CLAIMS_PER_CLIENT];
  /* What it called and was told, with wall-clock times as the plugin's
   * log and crashfs's trace have them: printed when a round fails. */
  char trace[STEPS][96];
  int n_trace;
};

static void
claim_name (const struct client *c, int i, char *name, char *uid)
{
  snprintf (name, 32, "c%d-%d", c->id, i);
  snprintf (uid, 40, "00000000-0000-4000-8000-%06d%06d", c->id, i);
}

static void
write_claims (int n_clients)
{
  for (int id = 0; id < n_clients; id++)
    for (int i = 0; i < CLAIMS_PER_CLIENT; i++)
      {
        struct client c = { .id = id };
        char name[32], uid[40], file[48], results[512];
        claim_name (&c, i, name, uid);
        snprintf (file, sizeof (file), "%s.json", name);
        /* Even clients take CPUs of either node, odd ones memory. */
        if (id % 2 == 0)
          snprintf (results, sizeof (results),
                    "[{\"request\":\"r\",\"driver\":\"" NH_CPU_DRIVER "\",\"pool\":\"" NH_NODE
                    "\",\"device\":\"numa%d\","
                    "\"consumedCapacity\":{\"cpus\":\"%d\"}}]",
                    i % 2, 1 + i % 2);
        else
          snprintf (results, sizeof (results),
                    "[{\"request\":\"r\",\"driver\":\"" NH_MEM_DRIVER "\",\"pool\":\"" NH_NODE
                    "\",\"device\":\"numa%d\","
                    "\"consumedCapacity\":{\"memory\":\"%dMi\"}}]",
                    i % 2, 64 * (i + 1));
        nh_write_claim (&h, file, name, uid, results);
      }
}

static double
wall_now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_REALTIME, &t);
  return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

/* One call for one claim: 1 done, 0 refused with an error, -1 no answer. */
static int
call_one (grpc_channel *ch, const struct client *c, int i, bool unprepare)
{
  char name[32], uid[40];
  claim_name (c, i, name, uid);
  const char *names[] = { name }, *uids[] = { uid };
  size_t len;
  uint8_t *req = kc_pack_claims ("default", names, uids, 1, unprepare, &len);
  struct kc_reply r;
  memset (&r, 0, sizeof (r));
  int rc = -1;
  bool made = kc_unary (ch, unprepare ? NH_UNPREPARE : NH_PREPARE, req, len, 5000, &r) == 0;
  if (made && r.status == GRPC_STATUS_OK)
    {
      const char *err = NULL;
      if (unprepare)
        {
          K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *u
              = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack (NULL, r.len, r.data);
          if (u && u->n_claims == 1)
            rc = u->claims[0]->value->error[0] ? 0 : 1, err = u->claims[0]->value->error;
          if (rc == 0)
            fprintf (stderr, "unprepare %s: %s\n", name, err);
          k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked (u, NULL);
        }
      else
        {
          K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *p
              = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack (NULL, r.len, r.data);
          if (p && p->n_claims == 1)
            rc = p->claims[0]->value->error[0] ? 0 : 1, err = p->claims[0]->value->error;
          if (rc == 0)
            fprintf (stderr, "prepare %s: %s\n", name, err);
          k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (p, NULL);
        }
    }
  if (made)
    kc_reply_done (&r);
  free (req);
  return rc;
}

/* call_one, traced. */
static int
call_traced (grpc_channel *ch, struct client *c, int i, bool unprepare)
{
  double t0 = wall_now ();
  int rc = call_one (ch, c, i, unprepare);
  if (c->n_trace < STEPS)
    snprintf (c->trace[c->n_trace++], sizeof (c->trace[0]), "%.6f-%.6f %s c%d-%d: %s", t0, wall_now (),
              unprepare ? "unprepare" : "prepare", c->id, i,
              rc > 0    ? "done"
              : rc == 0 ? "refused"
                        : "no answer");
  return rc;
}

/* Prepares all its claims, unprepares the first, prepares it again,
 * unprepares the last: until the plugin stops answering. */
static void *
client_main (void *arg)
{
  struct client *c = arg;
  grpc_channel *ch = kc_connect (c->sock);
  struct
  {
    int claim;
    bool unprepare;
  } steps[STEPS] = { { 0, false }, { 1, false }, { 2, false }, { 0, true }, { 0, false }, { 2, true } };
  for (size_t s = 0; s < sizeof (steps) / sizeof (steps[0]); s++)
    {
      int i = steps[s].claim;
      enum ack before = c->ack[i];
      c->ack[i] = UNKNOWN;
      int rc = call_traced (ch, c, i, steps[s].unprepare);
      if (rc < 0)
        break; /* the plugin is gone; this call's outcome is unknown */
      if (rc == 0 && eio_round)
        continue; /* refused after the failed sync: either outcome */
      if (rc == 0)
        {
          /* Refused: nothing changed. */
          c->ack[i] = before;
          fprintf (stderr, "FAIL: client %d claim %d refused\n", c->id, i);
          failures++;
          break;
        }
      c->ack[i] = steps[s].unprepare ? UNPREPARED : PREPARED;
    }
  kc_close (ch);
  return NULL;
}

static char *
spec_cpus (const char *uid)
{
  char path[700];
  snprintf (path, sizeof (path), "%s/" NH_CPU_DRIVER "-%s.json", h.cdi_dir, uid);
  json_t *spec = json_load_file (path, 0, NULL);
  char *ret = NULL;
  json_t *env = json_object_get (
      json_object_get (json_array_get (json_object_get (spec, "devices"), 0), "containerEdits"), "env");
  for (size_t i = 0; i < json_array_size (env); i++)
    {
      const char *kv = json_string_value (json_array_get (env, i));
      if (kv && strncmp (kv, "NRM_CPUS=", 9) == 0)
        ret = strdup (kv + 9);
    }
  json_decref (spec);
  return ret;
}

static int
count_temps (const char *dir, int depth)
{
  DIR *d = opendir (dir);
  struct dirent *de;
  int n = 0;
  if (d == NULL)
    return 0;
  while ((de = readdir (d)) != NULL)
    {
      char path[1200];
      struct stat st;
      if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || de->d_name[1] == '.'))
        continue;
      snprintf (path, sizeof (path), "%s/%s", dir, de->d_name);
      if (lstat (path, &st) == 0 && S_ISDIR (st.st_mode) && depth > 0)
        n += count_temps (path, depth - 1);
      else if (strstr (de->d_name, ".tmp.") || strstr (de->d_name, ".crashfs-"))
        {
          fprintf (stderr, "left over: %s\n", path);
          n++;
        }
    }
  closedir (d);
  return n;
}

/* The state after a restart, against what the clients were told. */
static void
check_state (struct client *clients, int n_clients, const char *what)
{
  char path[600];
  hwloc_bitmap_t used = hwloc_bitmap_alloc ();
  for (int d = 0; d < 2; d++)
    {
      const char *driver = d == 0 ? NH_CPU_DRIVER : NH_MEM_DRIVER;
      snprintf (path, sizeof (path), "%s/%s.checkpoint.json", h.state_dir, driver);
      json_t *cp = json_load_file (path, 0, NULL);
      json_t *claims = json_object_get (cp, "claims");
      CHECK (cp != NULL || access (path, F_OK) != 0, "%s: %s checkpoint unreadable", what, driver);
      for (int id = d; id < n_clients; id += 2)
        for (int i = 0; i < CLAIMS_PER_CLIENT; i++)
          {
            char name[32], uid[40];
            claim_name (&clients[id], i, name, uid);
            json_t *e = json_object_get (claims, uid);
            const char *phase = json_string_value (json_object_get (e, "phase"));
            bool held = e && phase && strcmp (phase, "PrepareCompleted") == 0;
            CHECK (e == NULL || held, "%s: %s in phase %s after the restart", what, name, phase);
            if (clients[id].ack[i] == PREPARED)
              CHECK (held, "%s: %s was prepared, and is lost", what, name);
            if (clients[id].ack[i] == UNPREPARED)
              CHECK (e == NULL, "%s: %s was unprepared, and is back", what, name);
            CHECK (held == nh_spec_exists (&h, driver, uid), "%s: %s %s a CDI spec", what, name,
                   held ? "lacks" : "has an orphan");
            if (d == 0 && held)
              {
                char *cpus = spec_cpus (uid);
                hwloc_bitmap_t set = hwloc_bitmap_alloc ();
                CHECK (cpus && hwloc_bitmap_list_sscanf (set, cpus) == 0, "%s: %s has no CPUs", what, name);
                CHECK (!hwloc_bitmap_intersects (set, used), "%s: CPUs %s of %s are doubled", what, cpus, name);
                hwloc_bitmap_or (used, used, set);
                hwloc_bitmap_free (set);
                free (cpus);
              }
          }
      json_decref (cp);
    }
  hwloc_bitmap_free (used);
  int temps = count_temps (h.state_dir, 2) + count_temps (h.cdi_dir, 0) + count_temps (h.kubelet_dir, 4);
  CHECK (temps == 0, "%s: %d temporary files left", what, temps);
}

/* A call as the kubelet makes it: one refused (the failed sync of an EIO
 * run may come only now) is made again. */
static int
call_retry (grpc_channel *ch, const struct client *c, int i, bool unprepare)
{
  int rc = call_one (ch, c, i, unprepare);
  return rc == 0 ? call_one (ch, c, i, unprepare) : rc;
}

/* Prepares every claim of every client (its ack then says so). */
static void
prepare_all (struct client *clients, int n_clients)
{
  grpc_channel *cpu = kc_connect (h.cpu_sock), *mem = kc_connect (h.mem_sock);
  for (int id = 0; id < n_clients; id++)
    for (int i = 0; i < CLAIMS_PER_CLIENT; i++)
      {
        CHECK (call_retry (id % 2 ? mem : cpu, &clients[id], i, false) == 1, "prepare of client %d claim %d failed", id,
               i);
        clients[id].ack[i] = PREPARED;
      }
  kc_close (cpu);
  kc_close (mem);
}

/* Unprepares everything, so that the next round starts empty. */
static void
reset (struct client *clients, int n_clients)
{
  grpc_channel *cpu = kc_connect (h.cpu_sock), *mem = kc_connect (h.mem_sock);
  for (int id = 0; id < n_clients; id++)
    for (int i = 0; i < CLAIMS_PER_CLIENT; i++)
      CHECK (call_retry (id % 2 ? mem : cpu, &clients[id], i, true) == 1, "reset: unprepare failed");
  kc_close (cpu);
  kc_close (mem);
  CHECK (nh_checkpoint_claims (&h, NH_CPU_DRIVER) == 0 && nh_checkpoint_claims (&h, NH_MEM_DRIVER) == 0,
         "reset: claims left");
}

/* A line in the plugin's log, where each round's lines begin. */
static void
log_mark (const char *what)
{
  FILE *f = fopen (h.log_path, "a");
  if (f)
    {
      fprintf (f, "=== %s\n", what);
      fclose (f);
    }
}

/* crashfs's backups that a process stopped from outside (not by its own
 * crash) left in the root: they only keep old files alive, and would pile
 * up over hundreds of rounds. */
static void
remove_backups (void)
{
  DIR *d = opendir (h.root);
  struct dirent *de;
  if (d == NULL)
    return;
  while ((de = readdir (d)) != NULL)
    if (strncmp (de->d_name, ".crashfs-", 9) == 0)
      unlinkat (dirfd (d), de->d_name, 0);
  closedir (d);
}

/* What a failed round leaves to read: the clients' calls, and the state
 * as the check saw it; the plugin's log has crashfs's calls and the
 * batches (which generation answered which claim) after the round's mark. */
static void
report_round (const struct client *clients, int n_clients, int k, const char *what)
{
  fprintf (stderr, "%s failed; the clients' calls:\n", what);
  for (int id = 0; id < n_clients; id++)
    for (int s = 0; s < clients[id].n_trace; s++)
      fprintf (stderr, "  %s\n", clients[id].trace[s]);
  char cmd[1400];
  snprintf (cmd, sizeof (cmd), "cp -a '%s' '%s/failed-round-%d'", h.state_dir, h.root, k);
  if (system (cmd) != 0)
    fprintf (stderr, "cannot keep the state of round %d\n", k);
  fprintf (stderr, "its state: %s/failed-round-%d; its log: %s after \"=== %s\"\n", h.root, k, h.log_path, what);
}

int
main (int argc, char **argv)
{
  int rounds = argc > 1 ? atoi (argv[1]) : 48, n_clients = argc > 2 ? atoi (argv[2]) : 3;
  if (n_clients < 1 || n_clients > MAX_CLIENTS || rounds < 1)
    {
      fprintf (stderr, "usage: test-crash [rounds [clients (1-%d)]]\n", MAX_CLIENTS);
      return 2;
    }
  const char *shim = getenv ("NRM_CRASHFS");
  if (shim == NULL || access (shim, R_OK) != 0)
    {
      fprintf (stderr, "SKIP: NRM_CRASHFS (the crashfs.so library) is not set\n");
      return 77;
    }
  nh_init (&h, "crash");
  grpc_init ();
  write_claims (n_clients);
  struct client clients[MAX_CLIENTS];
  int crashes = 0, restarts = 0, eios = 0;
  /* Debug: each batch logs its claims and the generation it wrote. */
  const char *const debug[] = { "--log-level", "debug", NULL };
  for (int k = 1; k <= rounds && failures == 0; k++)
    {
      eio_round = k % 3 == 0;
      bool lose = !eio_round && k % 2 == 0;
      /* The call to stop at: spread over the workload's first ~200 (of
       * them about 60 syncs). */
      long at = eio_round ? (long) (k * 7919 % 61) + 1 : (long) (k * 7919 % 211) + 1;
      char env_at[32], what[96];
      snprintf (env_at, sizeof (env_at), "%ld", at);
      snprintf (what, sizeof (what), "round %d (%s %ld)", k,
                eio_round ? "EIO at fsync"
                : lose    ? "power cut at call"
                          : "kill -9 at call",
                at);
      setenv ("LD_PRELOAD", shim, 1);
      setenv ("NRM_CRASH_DIR", h.root, 1);
      setenv (eio_round ? "NRM_CRASH_EIO_AT" : "NRM_CRASH_AT", env_at, 1);
      setenv ("NRM_CRASH_LOSE", lose ? "1" : "0", 1);
      setenv ("NRM_CRASH_VERBOSE", "1", 1);
      /* A sanitizer runtime wants to be first; the shim does not care. */
      setenv ("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
      int failed_before = failures;
      log_mark (what);
      bool up = nh_start (&h, debug);
      unsetenv ("LD_PRELOAD");
      unsetenv ("NRM_CRASH_VERBOSE");
      unsetenv ("NRM_CRASH_AT");
      unsetenv ("NRM_CRASH_EIO_AT");
      if (up)
        {
          pthread_t threads[MAX_CLIENTS];
          for (int id = 0; id < n_clients; id++)
            {
              clients[id] = (struct client){ .id = id, .sock = id % 2 ? h.mem_sock : h.cpu_sock, .cpu = id % 2 == 0 };
              for (int i = 0; i < CLAIMS_PER_CLIENT; i++)
                clients[id].ack[i] = UNPREPARED;
              pthread_create (&threads[id], NULL, client_main, &clients[id]);
            }
          for (int id = 0; id < n_clients; id++)
            pthread_join (threads[id], NULL);
        }
      else
        /* It died while starting: nothing was prepared in this round. */
        for (int id = 0; id < n_clients; id++)
          {
            clients[id] = (struct client){ .id = id, .sock = id % 2 ? h.mem_sock : h.cpu_sock };
            for (int i = 0; i < CLAIMS_PER_CLIENT; i++)
              clients[id].ack[i] = UNPREPARED;
          }
      /* Still serving after the failed sync: its files hold what it
       * answered, and its picture is theirs. */
      if (eio_round && h.pid > 0 && kc_wait_exit (h.pid, 200) < 0)
        {
          char live[128];
          snprintf (live, sizeof (live), "%s, serving", what);
          eios++;
          eio_round = false;
          check_state (clients, n_clients, live);
          reset (clients, n_clients);
          prepare_all (clients, n_clients);
          check_state (clients, n_clients, live);
          reset (clients, n_clients);
          for (int id = 0; id < n_clients; id++)
            for (int i = 0; i < CLAIMS_PER_CLIENT; i++)
              clients[id].ack[i] = UNPREPARED;
        }
      eio_round = false;
      /* Gone by itself: the crash came during the workload (or the start). */
      if (h.pid <= 0 || kc_wait_exit (h.pid, 200) >= 0)
        {
          crashes++;
          h.pid = -1;
        }
      else
        nh_stop (&h, SIGKILL);
      remove_backups ();
      /* Up again without the shim: the picture it rebuilds. */
      if (!nh_start (&h, debug))
        {
          char *log = kc_slurp (h.log_path);
          fprintf (stderr, "FAIL: %s: the plugin does not start again:\n%s\n", what,
                   log ? log + (strlen (log) > 2000 ? strlen (log) - 2000 : 0) : "");
          free (log);
          failures++;
          break;
        }
      restarts++;
      check_state (clients, n_clients, what);
      if (failures > failed_before)
        report_round (clients, n_clients, k, what);
      reset (clients, n_clients);
      nh_stop (&h, SIGTERM);
    }
  printf ("# %d rounds, %d crashes, %d restarts, %d served on after a failed sync, %d clients: %d failures\n", rounds,
          crashes, restarts, eios, n_clients, failures);
  grpc_shutdown ();
  if (failures == 0)
    nh_cleanup (&h);
  else
    fprintf (stderr, "state kept in %s\n", h.root);
  return failures ? 1 : 0;
}
