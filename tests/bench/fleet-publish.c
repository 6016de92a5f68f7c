/* SPDX-License-Identifier: Apache-2.0 */
/* Many simulated nodes publishing from one process: per node one kube
 * client (its own kubeconfig, so its requests carry that node's token) and
 * per node and driver one of nrm's real ResourceSlice publishers
 * (driver/k8s/publish.h, what `nrm plugin` runs), with the slices that
 * `nrm slices` printed for the node. A fleet of `nrm plugin` processes
 * costs a process each; this reaches the node counts a control plane is
 * meant to hold on one machine.
 *
 *   fleet-publish [options] MANIFEST
 *
 * MANIFEST (JSON): {"nodes": [{"name": NODE, "kubeconfig": FILE,
 * "slices": [FILE, ...]}, ...]}; each slices file a List as `nrm slices
 * --node-name NODE` prints it (one file with every driver, or one per
 * driver). Prints "synced: ..." once every publisher holds its slices on
 * the API server, then "status: ..." on SIGUSR1 and every --status-every
 * seconds; SIGTERM or SIGINT stops the publishers and exits 0.
 *
 * With --state-dir, each node's drivers take the publisher role through
 * nrm's handover (driver/k8s/handover.h) in STATE/NODE, as a DaemonSet
 * pod does on its node: a second fleet-publish on the same state
 * directory, started later, takes over every node (the rolling update),
 * and the first one takes the role back when the second stops.
 *
 * With --spread S the nodes start one after another over S seconds, as
 * the pods of a fleet restarted "within S seconds" do, instead of at
 * once. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "driver/k8s/handover.h"
#include "driver/k8s/kube.h"
#include "driver/k8s/publish.h"
#include "nrm/base/clock.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/error.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

/* A publisher thread runs libcurl and OpenSSL and jansson's recursion over
 * a slice: far below this; the default (RLIMIT_STACK, 8 MiB) would reserve
 * 16 GiB of address space for 2,000 publishers. */
#define DEFAULT_STACK_KIB 512

struct pub
{
  char *label; /* "NODE/DRIVER", the log's context */
  struct nrm_publisher *p;
  struct nrm_handover *h;
};

struct node
{
  char *name;
  struct nrm_kube *kube;
  char *lock_link; /* the instance lock's link in the node's state directory */
  size_t n;
  struct pub *pubs;
};

struct fleet
{
  size_t n;
  struct node *nodes;
  char *lock_path;
  int lock_fd;
};

static int log_level = NRM_LOG_WARNING;

static void fleet_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

static void
fleet_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
{
  static const char *const names[] = { "error", "warning", "info", "debug" };
  if ((int) level > log_level)
    return;
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *msg = xvasprintf (fmt, ap);
  va_end (ap);
  fprintf (stderr, "%-7s %s: %s\n", names[level], (const char *) ctx, msg);
}

static bool
may_write (void *ctx)
{
  return nrm_handover_active (ctx);
}

/* The slices of every file, grouped by driver: {driver: [slice, ...]}, in
 * the order of the files (the publisher keeps each driver's order). */
static int
load_slices (json_t *files, json_t **ret, nrm_error_t *err)
{
  cleanup_json json_t *by = json_object ();
  size_t i;
  json_t *f;
  if (!json_is_array (files) || json_array_size (files) == 0)
    return nrm_error_set (err, EINVAL, "\"slices\" is not a list of files");
  json_array_foreach (files, i, f)
  {
    const char *path = json_string_value (f);
    json_error_t jerr;
    if (path == NULL)
      return nrm_error_set (err, EINVAL, "slices[%zu] is not a file name", i);
    cleanup_json json_t *list = json_load_file (path, 0, &jerr);
    if (list == NULL)
      return nrm_error_set (err, EINVAL, "%s:%d: %s", path, jerr.line, jerr.text);
    json_t *items = json_object_get (list, "items");
    if (!json_is_array (items))
      return nrm_error_set (err, EINVAL, "%s: not a List of ResourceSlices", path);
    size_t j;
    json_t *s;
    json_array_foreach (items, j, s)
    {
      const char *d = json_string_value (json_object_get (json_object_get (s, "spec"), "driver"));
      if (d == NULL)
        return nrm_error_set (err, EINVAL, "%s: items[%zu] has no spec.driver", path, j);
      json_t *arr = json_object_get (by, d);
      if (arr == NULL)
        json_object_set_new (by, d, arr = json_array ());
      json_array_append (arr, s);
    }
  }
  *ret = TAKE_PTR (by);
  return 0;
}

/* One instance lock for the whole process, held as long as it runs, and a
 * hard link to it in each node's state directory: the handover reads a
 * lock by name there, and a link is the same inode, so the kernel's flock
 * says for every node at once whether this process is alive (one fd
 * instead of one a node). */
static int
take_instance_lock (struct fleet *f, const char *state_dir, const char *uid, nrm_error_t *err)
{
  if (nrm_mkdir_p (state_dir, 0755, err) < 0)
    return -1;
  f->lock_path = xasprintf ("%s/fleet-%s.instance.lock", state_dir, uid);
  f->lock_fd = open (f->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (f->lock_fd < 0)
    return nrm_error_errno (err, errno, "%s", f->lock_path);
  if (flock (f->lock_fd, LOCK_EX | LOCK_NB) < 0)
    return nrm_error_errno (err, errno, "%s: another fleet-publish with instance UID %s runs", f->lock_path, uid);
  return 0;
}

static int
node_handover (struct fleet *f, struct node *nd, const char *state_dir, const char *uid, nrm_error_t *err)
{
  cleanup_free char *dir = xasprintf ("%s/%s", state_dir, nd->name);
  if (nrm_mkdir_p (dir, 0755, err) < 0)
    return -1;
  nd->lock_link = xasprintf ("%s/fleet-%s.instance.lock", dir, uid);
  unlink (nd->lock_link);
  if (link (f->lock_path, nd->lock_link) < 0)
    {
      int e = errno;
      free (TAKE_PTR (nd->lock_link));
      return nrm_error_errno (err, e, "linking the instance lock into %s", dir);
    }
  for (size_t i = 0; i < nd->n; i++)
    {
      struct pub *pb = &nd->pubs[i];
      const char *driver = strchr (pb->label, '/') + 1;
      struct nrm_handover_config hc = { .state_dir = dir,
                                        .driver = driver,
                                        .instance_lock = nd->lock_link,
                                        .instance_uid = uid,
                                        .settings = "fleet-publish",
                                        .log = fleet_log,
                                        .log_ctx = pb->label };
      if (nrm_handover_claim (&hc, &pb->h, err) < 0)
        return nrm_error_wrap (err, "%s", pb->label);
    }
  return 0;
}

struct opts
{
  const char *manifest, *state_dir, *instance_uid;
  int resync_s, status_every_s;
  double qps, spread_s;
  int burst;
};

static int
start_node (struct fleet *f, struct node *nd, json_t *spec, const struct opts *o, nrm_error_t *err)
{
  const char *name = json_string_value (json_object_get (spec, "name"));
  const char *kc = json_string_value (json_object_get (spec, "kubeconfig"));
  if (name == NULL || kc == NULL)
    return nrm_error_set (err, EINVAL, "a node without \"name\" or \"kubeconfig\"");
  nd->name = xstrdup (name);
  cleanup_json json_t *by = NULL;
  if (load_slices (json_object_get (spec, "slices"), &by, err) < 0)
    return nrm_error_wrap (err, "node %s", name);

  struct nrm_kube_options ko;
  nrm_kube_options_init (&ko);
  ko.kubeconfig = kc;
  ko.qps = o->qps;
  ko.burst = o->burst;
  ko.user_agent = "nrm-fleet-publish";
  if (nrm_kube_new (&ko, &nd->kube, err) < 0)
    return nrm_error_wrap (err, "node %s: %s", name, kc);

  nd->n = json_object_size (by);
  nd->pubs = xcalloc (nd->n, sizeof (*nd->pubs));
  const char *driver;
  json_t *slices;
  size_t i = 0;
  json_object_foreach (by, driver, slices) { nd->pubs[i++].label = xasprintf ("%s/%s", name, driver); }
  if (o->state_dir && node_handover (f, nd, o->state_dir, o->instance_uid, err) < 0)
    return nrm_error_wrap (err, "node %s", name);
  i = 0;
  json_object_foreach (by, driver, slices)
  {
    struct pub *pb = &nd->pubs[i++];
    struct nrm_publisher_config pc = { .kube = nd->kube,
                                       .driver = driver,
                                       .node_name = name,
                                       .resync_s = o->resync_s,
                                       .log = fleet_log,
                                       .log_ctx = pb->label,
                                       .may_write = pb->h ? may_write : NULL,
                                       .may_write_ctx = pb->h };
    if (nrm_publisher_start (&pc, slices, &pb->p, err) < 0)
      return nrm_error_wrap (err, "%s", pb->label);
  }
  return 0;
}

/* Publishers are stopped by a few threads at once: a stop waits for the
 * publisher's call in flight, and one after the other that adds up over
 * thousands. The clients are not cancelled first, which would make every
 * watch and call end in an error before its publisher knows it stops. */
#define STOPPERS 16
#define STOP_GRACE_S 5

struct stopper
{
  struct fleet *f;
  size_t next; /* the next node to stop (atomic) */
  size_t done; /* nodes stopped (atomic) */
};

static void *
stopper_main (void *arg)
{
  struct stopper *st = arg;
  size_t i;
  while ((i = __atomic_fetch_add (&st->next, 1, __ATOMIC_RELAXED)) < st->f->n)
    {
      struct node *nd = &st->f->nodes[i];
      for (size_t j = 0; j < nd->n; j++)
        nrm_publisher_stop (TAKE_PTR (nd->pubs[j].p));
      __atomic_fetch_add (&st->done, 1, __ATOMIC_RELAXED);
    }
  return NULL;
}

static void
stop_publishers (struct fleet *f)
{
  struct stopper st = { .f = f };
  pthread_t threads[STOPPERS];
  size_t started = 0;
  for (; started < STOPPERS && started < f->n; started++)
    if (pthread_create (&threads[started], NULL, stopper_main, &st) != 0)
      break;
  if (started == 0)
    stopper_main (&st);
  /* Calls that still run after the grace period (a server that does not
   * answer, retries with backoff) are cut short. */
  double deadline = nrm_mono_s () + STOP_GRACE_S;
  while (__atomic_load_n (&st.done, __ATOMIC_RELAXED) < f->n && nrm_mono_s () < deadline)
    {
      struct timespec ts = { .tv_sec = 0, .tv_nsec = 20000000L };
      nanosleep (&ts, NULL);
    }
  if (__atomic_load_n (&st.done, __ATOMIC_RELAXED) < f->n)
    for (size_t i = 0; i < f->n; i++)
      if (f->nodes[i].kube)
        nrm_kube_cancel (f->nodes[i].kube);
  for (size_t i = 0; i < started; i++)
    pthread_join (threads[i], NULL);
}

static void
fleet_stop (struct fleet *f)
{
  stop_publishers (f);
  for (size_t i = 0; i < f->n; i++)
    {
      struct node *nd = &f->nodes[i];
      /* Nothing of this process writes any more: another may take over. */
      for (size_t j = 0; j < nd->n; j++)
        {
          nrm_handover_release (nd->pubs[j].h);
          free (nd->pubs[j].label);
        }
      free (nd->pubs);
      nrm_kube_free (nd->kube);
      if (nd->lock_link)
        unlink (nd->lock_link);
      free (nd->lock_link);
      free (nd->name);
    }
  free (f->nodes);
  if (f->lock_path)
    unlink (f->lock_path);
  free (f->lock_path);
  if (f->lock_fd >= 0)
    close (f->lock_fd);
}

struct tally
{
  size_t pubs, synced, standby, connected;
  long long writes, errors, api_errors;
  char *last_error; /* of one publisher, malloc'd */
};

static void
fleet_tally (struct fleet *f, struct tally *t)
{
  memset (t, 0, sizeof (*t));
  for (size_t i = 0; i < f->n; i++)
    for (size_t j = 0; j < f->nodes[i].n; j++)
      {
        struct nrm_publisher_status st;
        nrm_publisher_status (f->nodes[i].pubs[j].p, &st);
        t->pubs++;
        t->synced += st.synced;
        t->standby += st.standby;
        t->connected += st.connected;
        t->writes += st.writes;
        t->errors += st.errors;
        t->api_errors += st.api_errors;
        if (st.error && !st.synced && t->last_error == NULL)
          t->last_error = xasprintf ("%s: %s", f->nodes[i].pubs[j].label, st.error);
        free (st.error);
      }
}

static long
rss_kib (void)
{
  cleanup_free char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file ("/proc/self/status", 1 << 16, &text, NULL, &err) < 0)
    {
      nrm_error_release (&err);
      return -1;
    }
  const char *p = strstr (text, "VmRSS:");
  return p ? strtol (p + 6, NULL, 10) : -1;
}

static void
print_status (struct fleet *f, const char *what, double since)
{
  struct tally t;
  fleet_tally (f, &t);
  long threads = 0;
  cleanup_free char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file ("/proc/self/status", 1 << 16, &text, NULL, &err) == 0 && strstr (text, "Threads:"))
    threads = strtol (strstr (text, "Threads:") + 8, NULL, 10);
  nrm_error_release (&err);
  long fds = 0;
  DIR *d = opendir ("/proc/self/fd");
  for (struct dirent *de; d && (de = readdir (d)) != NULL;)
    fds += de->d_name[0] != '.';
  if (d)
    closedir (d);
  printf ("%s: nodes %zu publishers %zu synced %zu standby %zu connected %zu writes %lld errors %lld api_errors %lld "
          "rss_kib %ld threads %ld fds %ld after %.2f s%s%s\n",
          what, f->n, t.pubs, t.synced, t.standby, t.connected, t.writes, t.errors, t.api_errors, rss_kib (), threads,
          fds, nrm_mono_s () - since, t.last_error ? " last_error " : "", t.last_error ? t.last_error : "");
  fflush (stdout);
  free (t.last_error);
}

/* Enough descriptors for a watch (its connection, libcurl's wakeup pair)
 * and an eventfd per publisher, plus each client's pooled connections. */
static int
raise_nofile (size_t pubs, size_t nodes, nrm_error_t *err)
{
  struct rlimit rl;
  rlim_t need = (rlim_t) (pubs * 4 + nodes * 4 + 64);
  if (getrlimit (RLIMIT_NOFILE, &rl) < 0)
    return nrm_error_errno (err, errno, "getrlimit");
  if (rl.rlim_cur < need)
    {
      /* Above the hard limit only with CAP_SYS_RESOURCE (up to
       * fs.nr_open): tried, and the soft limit raised as far as the hard
       * one allows otherwise. More nodes: more processes, each a share. */
      struct rlimit up = { .rlim_cur = need, .rlim_max = need };
      if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need && setrlimit (RLIMIT_NOFILE, &up) == 0)
        rl = up;
      rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
      if (setrlimit (RLIMIT_NOFILE, &rl) < 0)
        return nrm_error_errno (err, errno, "setrlimit RLIMIT_NOFILE");
    }
  if (rl.rlim_cur < need)
    return nrm_error_set (err, EMFILE, "%zu publishers need about %llu open files; the hard limit is %llu", pubs,
                          (unsigned long long) need, (unsigned long long) rl.rlim_max);
  return 0;
}

static void
usage (FILE *out)
{
  fprintf (out, "usage: fleet-publish [--resync S] [--status-every S] [--qps Q] [--burst B] [--stack-kib K]\n"
                "                     [--spread S] [--state-dir DIR [--instance-uid UID]] [--log-level L] MANIFEST\n");
}

int
main (int argc, char **argv)
{
  struct opts o = { .resync_s = 600, .qps = 20, .burst = 100 };
  long stack_kib = DEFAULT_STACK_KIB;
  static const struct option longopts[] = {
    { "resync", required_argument, NULL, 'r' },
    { "status-every", required_argument, NULL, 's' },
    { "qps", required_argument, NULL, 'q' },
    { "burst", required_argument, NULL, 'b' },
    { "stack-kib", required_argument, NULL, 'k' },
    { "state-dir", required_argument, NULL, 'd' },
    { "instance-uid", required_argument, NULL, 'u' },
    { "log-level", required_argument, NULL, 'l' },
    { "spread", required_argument, NULL, 'p' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int c;
  while ((c = getopt_long (argc, argv, "h", longopts, NULL)) != -1)
    switch (c)
      {
      case 'r':
        o.resync_s = atoi (optarg);
        break;
      case 's':
        o.status_every_s = atoi (optarg);
        break;
      case 'q':
        o.qps = atof (optarg);
        break;
      case 'b':
        o.burst = atoi (optarg);
        break;
      case 'k':
        stack_kib = atol (optarg);
        break;
      case 'p':
        o.spread_s = atof (optarg);
        break;
      case 'd':
        o.state_dir = optarg;
        break;
      case 'u':
        o.instance_uid = optarg;
        break;
      case 'l':
        log_level = strcmp (optarg, "error") == 0     ? NRM_LOG_ERROR
                    : strcmp (optarg, "warning") == 0 ? NRM_LOG_WARNING
                    : strcmp (optarg, "info") == 0    ? NRM_LOG_INFO
                                                      : NRM_LOG_DEBUG;
        break;
      case 'h':
        usage (stdout);
        return 0;
      default:
        usage (stderr);
        return 2;
      }
  if (optind + 1 != argc || o.resync_s <= 0 || stack_kib < 64 || !(o.spread_s >= 0 && o.spread_s <= 3600))
    {
      usage (stderr);
      return 2;
    }
  o.manifest = argv[optind];
  nrm_json_abort_on_oom ();

  /* The signals are taken by sigtimedwait() below: blocked before any
   * thread starts, so every publisher thread inherits the mask. */
  sigset_t sigs;
  sigemptyset (&sigs);
  sigaddset (&sigs, SIGTERM);
  sigaddset (&sigs, SIGINT);
  sigaddset (&sigs, SIGUSR1);
  pthread_sigmask (SIG_BLOCK, &sigs, NULL);

  pthread_attr_t attr;
  pthread_attr_init (&attr);
  pthread_attr_setstacksize (&attr, (size_t) stack_kib << 10);
  int e = pthread_setattr_default_np (&attr);
  pthread_attr_destroy (&attr);
  if (e != 0)
    {
      fprintf (stderr, "fleet-publish: thread stack size %ld KiB: %s\n", stack_kib, strerror (e));
      return 1;
    }

  nrm_error_t err = NULL;
  json_error_t jerr;
  cleanup_json json_t *manifest = json_load_file (o.manifest, 0, &jerr);
  json_t *nodes = json_object_get (manifest, "nodes");
  if (manifest == NULL || !json_is_array (nodes))
    {
      fprintf (stderr, "fleet-publish: %s: %s\n", o.manifest, manifest ? "no \"nodes\" list" : jerr.text);
      return 1;
    }
  cleanup_free char *pid_uid = NULL;
  if (o.state_dir && o.instance_uid == NULL)
    o.instance_uid = pid_uid = xasprintf ("pid%ld", (long) getpid ());

  struct fleet f = { .lock_fd = -1 };
  f.nodes = xcalloc (json_array_size (nodes) + 1, sizeof (*f.nodes));
  double t0 = nrm_mono_s ();
  int rc = 1;
  /* Three drivers a node at most (cpu, memory, pci); the check is redone
   * below with the real count. */
  if (raise_nofile (json_array_size (nodes) * 3, json_array_size (nodes), &err) < 0)
    goto out;
  if (o.state_dir && take_instance_lock (&f, o.state_dir, o.instance_uid, &err) < 0)
    goto out;
  size_t i, pubs = 0;
  json_t *spec;
  json_array_foreach (nodes, i, spec)
  {
    double at = t0 + o.spread_s * (double) i / (double) json_array_size (nodes);
    while (nrm_mono_s () < at)
      {
        double left = at - nrm_mono_s ();
        struct timespec ts = { .tv_sec = (time_t) left, .tv_nsec = (long) ((left - (double) (time_t) left) * 1e9) };
        nanosleep (&ts, NULL);
      }
    f.n = i + 1;
    if (start_node (&f, &f.nodes[i], spec, &o, &err) < 0)
      goto out;
    pubs += f.nodes[i].n;
  }
  if (raise_nofile (pubs, f.n, &err) < 0)
    goto out;
  printf ("started: nodes %zu publishers %zu in %.2f s (thread stacks %ld KiB)\n", f.n, pubs, nrm_mono_s () - t0,
          stack_kib);
  fflush (stdout);

  bool synced = false;
  double next_status = o.status_every_s > 0 ? nrm_mono_s () + o.status_every_s : 0;
  for (;;)
    {
      struct timespec ts = { .tv_sec = 0, .tv_nsec = 200000000L };
      int sig = sigtimedwait (&sigs, NULL, &ts);
      if (sig == SIGTERM || sig == SIGINT)
        break;
      if (sig == SIGUSR1)
        print_status (&f, "status", t0);
      if (!synced)
        {
          struct tally t;
          fleet_tally (&f, &t);
          free (t.last_error);
          if (t.synced + t.standby == t.pubs)
            {
              synced = true;
              print_status (&f, "synced", t0);
            }
        }
      if (next_status && nrm_mono_s () >= next_status)
        {
          print_status (&f, "status", t0);
          next_status += o.status_every_s;
        }
    }
  rc = 0;
out:
  if (err)
    {
      fprintf (stderr, "fleet-publish: %s\n", nrm_error_msg (err));
      nrm_error_release (&err);
    }
  double t_stop = nrm_mono_s ();
  fleet_stop (&f);
  if (rc == 0)
    printf ("stopped: in %.2f s\n", nrm_mono_s () - t_stop);
  return rc;
}
