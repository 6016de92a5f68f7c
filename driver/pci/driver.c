/* SPDX-License-Identifier: Apache-2.0 */
/* The PCI driver: PCI functions found in sysfs (or, for a recorded
 * machine, by hwloc), one device each, held whole by one claim at a time
 * and handed to the container as its device nodes. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "driver/jsonattr.h"
#include "driver/kit.h"
#include "driver/pci/others.h"
#include "driver/pci/pci.h"
#include "driver/pci/vfio.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

/* The classes nrm knows, and those it serves unless configured otherwise:
 * NICs and NVMe drives usually carry the node's own network and disks, so
 * they are served only when the configuration names them. */
static const char *const all_classes[] = { "gpu", "accel", "fpga", "coproc", "ib", "nic", "nvme" };
#define N_CLASSES (sizeof (all_classes) / sizeof (all_classes[0]))
#define DEFAULT_CLASSES 0x1fu /* gpu accel fpga coproc ib */

struct pci_driver
{
  char *name;
  const struct nrm_fsroot *fsroot;
  bool sysfs; /* read the functions from sysfs (this machine, or a fake tree) */
  const struct nrm_topology *t;
  const struct nrm_publish_options *o;
  const struct nrm_pci_vendor *vendor; /* NULL: the generic driver */
  unsigned classes;                    /* bit i: all_classes[i] is served */
  int events;                          /* uevent socket or inotify, or -1 */
  struct nrm_pci_others *others;       /* who else serves functions, or NULL */
  int poll;                            /* epoll over events and others, or -1 */
  bool passthrough;                    /* offer a VFIO twin of each function */
  char *journal;                       /* <state_dir>/<name>.vfio, or NULL */
  nrm_log_fn log;
  void *log_ctx;

  pthread_mutex_t lock; /* the fields below */
  struct nrm_pci_function *fns;
  size_t n_fns;
  json_t *holder;  /* bus id -> claim UID (a function and its twin are one) */
  json_t *claims;  /* claim UID -> [{name, busID, class, numaNode?, pcieRoot?}] */
  json_t *left;    /* bus id -> who serves it instead, as last logged */
  json_t *foreign; /* bus id -> the other driver that publishes it */
  json_t *wedged;  /* bus id -> the recovery the kernel asks for (DRM WEDGED uevents) */
};

/* The vendor drivers of this process: while one serves a function, the
 * generic driver leaves it out. */
static pthread_mutex_t vendors_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pci_driver *vendors[16];
static size_t n_vendors;

static int
class_index (const char *class)
{
  for (size_t i = 0; class && i < N_CLASSES; i++)
    if (strcmp (all_classes[i], class) == 0)
      return (int) i;
  return -1;
}

json_t *
nrm_pci_device_node (const struct nrm_fsroot *fsroot, const char *path)
{
  json_t *n = json_pack ("{s:s}", "path", path);
  if (!nrm_fsroot_live (fsroot))
    {
      cleanup_free char *host = nrm_fsroot_path (fsroot, "%s", path);
      json_object_set_new (n, "hostPath", json_string (host));
    }
  return n;
}

static void
function_done (struct nrm_pci_function *fn)
{
  nrm_pci_facts_done (&fn->facts);
}

static void
functions_free (struct nrm_pci_function *fns, size_t n)
{
  for (size_t i = 0; i < n; i++)
    function_done (&fns[i]);
  free (fns);
}

/* The settings: classes, exclude (rules of driver/pci/others.h, into
 * *exclude, NULL-terminated, borrowed from s) and detectOthers. */
static int
settings (struct pci_driver *d, json_t *s, const char ***exclude, bool *detect, nrm_error_t *err)
{
  const char *key;
  json_t *v;
  d->classes = DEFAULT_CLASSES;
  *detect = true;
  json_object_foreach (s, key, v)
  {
    if (strcmp (key, "passthrough") == 0)
      {
        if (!json_is_boolean (v))
          return nrm_error_set (err, EINVAL, "key `pci.passthrough` must be a boolean");
        d->passthrough = json_is_true (v);
        continue;
      }
    if (strcmp (key, "detectOthers") == 0)
      {
        if (!json_is_boolean (v))
          return nrm_error_set (err, EINVAL, "key `pci.detectOthers` must be a boolean");
        *detect = json_is_true (v);
        continue;
      }
    if (strcmp (key, "exclude") == 0)
      {
        size_t i;
        json_t *r;
        if (!json_is_array (v))
          return nrm_error_set (err, EINVAL, "key `pci.exclude` must be a list of rules");
        *exclude = xcalloc (json_array_size (v) + 1, sizeof (**exclude));
        json_array_foreach (v, i, r)
        {
          if (!json_is_string (r))
            return nrm_error_set (err, EINVAL, "key `pci.exclude`: entry %zu is not a string", i);
          (*exclude)[i] = json_string_value (r);
        }
        continue;
      }
    if (strcmp (key, "classes") != 0)
      return nrm_error_set (err, EINVAL, "unknown key `pci.%s` (known: classes, exclude, detectOthers, passthrough)",
                            key);
    if (!json_is_array (v))
      return nrm_error_set (err, EINVAL, "key `pci.classes` must be a list of class names");
    unsigned set = 0;
    size_t i;
    json_t *c;
    json_array_foreach (v, i, c)
    {
      int k = class_index (json_string_value (c));
      if (k < 0)
        return nrm_error_set (err, EINVAL,
                              "key `pci.classes`: `%s` is not a class (gpu, accel, fpga, coproc, ib, nic, nvme)",
                              json_is_string (c) ? json_string_value (c) : "(not a string)");
      set |= 1u << k;
    }
    d->classes = set;
  }
  return 0;
}

/* Events that may change the functions: the kernel's uevents on this
 * machine, the function folder of a fake tree. */
static int
open_events (const struct pci_driver *d)
{
  if (nrm_fsroot_live (d->fsroot))
    {
      int fd = socket (AF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
      struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = 1 };
      if (fd >= 0 && bind (fd, (struct sockaddr *) &sa, sizeof (sa)) < 0)
        {
          close (fd);
          fd = -1;
        }
      return fd;
    }
  int fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  cleanup_free char *dir = nrm_fsroot_path (d->fsroot, "/sys/bus/pci/devices");
  if (fd >= 0 && inotify_add_watch (fd, dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0)
    {
      close (fd);
      fd = -1;
    }
  return fd;
}

int
nrm_pci_driver_new (const struct nrm_driver_host *h, const struct nrm_pci_vendor *vendor, void **ret, nrm_error_t *err)
{
  struct pci_driver *d = xcalloc (1, sizeof (*d));
  d->name = xstrdup (h->name);
  d->fsroot = h->fsroot;
  d->t = h->topo;
  d->o = h->node;
  d->vendor = vendor;
  d->events = -1;
  /* A recorded machine has no sysfs here, unless a fake tree stands in. */
  d->sysfs = nrm_driver_host_sysfs (h);
  pthread_mutex_init (&d->lock, NULL);
  d->holder = json_object ();
  d->claims = json_object ();
  d->left = json_object ();
  d->foreign = json_object ();
  d->wedged = json_object ();
  d->poll = -1;
  d->log = h->log;
  d->log_ctx = h->log_ctx;
  cleanup_free const char **exclude = NULL;
  bool detect;
  if (settings (d, h->settings, &exclude, &detect, err) < 0)
    {
      nrm_pci_driver_free (d);
      return -1;
    }
  if (d->passthrough && !d->sysfs)
    d->passthrough = false; /* a recorded machine has nothing to bind */
  if (h->state_dir)
    d->journal = xasprintf ("%s/%s.vfio", h->state_dir, d->name);
  if (d->passthrough && d->journal == NULL)
    {
      nrm_pci_driver_free (d);
      return nrm_error_set (err, EINVAL, "key `pci.passthrough` needs a state folder for its journal");
    }
  /* The kubelet's folders say who else serves functions: only on a
   * machine nrm reads (this one, or a fake tree). */
  /* The kubelet's folder is a path of this host as given, like the
   * plugin's own sockets in it; by default the one under fsroot. */
  cleanup_free char *kpath
      = h->kubelet_dir ? xstrdup (h->kubelet_dir) : nrm_fsroot_path (d->fsroot, "/var/lib/kubelet");
  if ((exclude || (detect && d->sysfs))
      && nrm_pci_others_new (detect && d->sysfs ? kpath : NULL, exclude, &d->others, err) < 0)
    {
      nrm_pci_driver_free (d);
      return nrm_error_wrap (err, "key `pci.exclude`");
    }
  if (d->sysfs)
    d->events = open_events (d);
  /* One descriptor for the framework: hotplug and the kubelet's folders. */
  int ofd = d->others ? nrm_pci_others_fd (d->others) : -1;
  if ((d->events >= 0 || ofd >= 0) && (d->poll = epoll_create1 (EPOLL_CLOEXEC)) >= 0)
    for (int k = 0; k < 2; k++)
      {
        int fd = k ? ofd : d->events;
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
        if (fd >= 0)
          epoll_ctl (d->poll, EPOLL_CTL_ADD, fd, &ev);
      }
  if (vendor)
    {
      pthread_mutex_lock (&vendors_lock);
      if (n_vendors < sizeof (vendors) / sizeof (vendors[0]))
        vendors[n_vendors++] = d;
      pthread_mutex_unlock (&vendors_lock);
    }
  *ret = d;
  return 0;
}

void
nrm_pci_driver_free (void *self)
{
  struct pci_driver *d = self;
  if (d == NULL)
    return;
  pthread_mutex_lock (&vendors_lock);
  for (size_t i = 0; i < n_vendors; i++)
    if (vendors[i] == d)
      vendors[i] = vendors[--n_vendors];
  pthread_mutex_unlock (&vendors_lock);
  if (d->events >= 0)
    close (d->events);
  if (d->poll >= 0)
    close (d->poll);
  nrm_pci_others_free (d->others);
  json_decref (d->left);
  json_decref (d->foreign);
  json_decref (d->wedged);
  free (d->journal);
  functions_free (d->fns, d->n_fns);
  json_decref (d->holder);
  json_decref (d->claims);
  pthread_mutex_destroy (&d->lock);
  free (d->name);
  free (d);
}

/* Whether a vendor driver other than d serves fn. */
static bool
vendor_serves (const struct pci_driver *d, const struct nrm_pci_function *fn)
{
  bool r = false;
  pthread_mutex_lock (&vendors_lock);
  for (size_t i = 0; i < n_vendors && !r; i++)
    r = vendors[i] != d && vendors[i]->vendor->match (fn);
  pthread_mutex_unlock (&vendors_lock);
  return r;
}

/* The facts of a recorded machine's function: what hwloc recorded. A bus
 * id the standard attribute cannot carry (a 5-digit VMD domain) gives
 * false. */
static bool
recorded_facts (const struct nrm_topology *t, const struct nrm_pci_device *p, struct nrm_pci_facts *f)
{
  nrm_pci_facts_init (f);
  if (!nrm_pci_bus_id_valid (p->bus_id))
    return false;
  memcpy (f->bus_id, p->bus_id, sizeof (f->bus_id));
  f->vendor_id = p->vendor_id;
  f->device_id = p->device_id;
  f->class_code = (uint32_t) p->class_id << 8;
  f->numa_node = p->numa >= 0 ? (int) t->numa[p->numa].os_index : -1;
  snprintf (f->pcie_root, sizeof (f->pcie_root), "%s", p->pcie_root);
  return true;
}

/* Whether d serves functions of this class (pci.classes). */
static bool
serves (const struct pci_driver *d, uint32_t class_code, uint16_t vendor)
{
  int k = class_index (nrm_pci_class_name (class_code, vendor));
  return k >= 0 && (d->classes & (1u << k));
}

/* Whether d publishes a function with these facts; sets its class. */
static bool
wanted (struct pci_driver *d, struct nrm_pci_function *fn)
{
  fn->class = nrm_pci_class_name (fn->facts.class_code, fn->facts.vendor_id);
  if (!serves (d, fn->facts.class_code, fn->facts.vendor_id))
    return false;
  /* A PF whose VFs are enabled is shared by them: its VFs are the devices. */
  if (fn->facts.sriov_enabled > 0)
    return false;
  nrm_pci_device_name (fn->class, fn->facts.bus_id, fn->name, sizeof (fn->name));
  fn->present = true;
  if (d->vendor ? !d->vendor->match (fn) : vendor_serves (d, fn))
    return false;
  /* The host's own disks and network stay the host's. */
  if (fn->facts.in_use)
    {
      json_object_set_new (d->left, fn->facts.bus_id, json_sprintf ("the host (%s)", fn->facts.in_use));
      return false;
    }
  const char *pub = json_string_value (json_object_get (d->foreign, fn->facts.bus_id));
  if (pub)
    {
      json_object_set_new (d->left, fn->facts.bus_id, json_sprintf ("%s (it publishes the function)", pub));
      return false;
    }
  const char *who = d->others ? nrm_pci_others_owner (d->others, fn->facts.vendor_id, fn->class, fn->facts.bus_id,
                                                      fn->facts.physfn[0] != '\0')
                              : NULL;
  if (who)
    json_object_set_new (d->left, fn->facts.bus_id, json_string (who));
  return who == NULL;
}

static char **
strv_dup (char **v, size_t n)
{
  char **r = n ? xcalloc (n, sizeof (*r)) : NULL;
  for (size_t i = 0; i < n; i++)
    r[i] = xstrdup (v[i]);
  return r;
}

static char *
str_dup (const char *s)
{
  return s ? xstrdup (s) : NULL;
}

/* A function's VFIO twin: the same facts, its own name. */
static struct nrm_pci_function
twin_of (const struct nrm_pci_function *fn)
{
  struct nrm_pci_function t = *fn;
  t.facts.local_cpus = str_dup (fn->facts.local_cpus);
  t.facts.driver = str_dup (fn->facts.driver);
  t.facts.link_speed = str_dup (fn->facts.link_speed);
  t.facts.max_link_speed = str_dup (fn->facts.max_link_speed);
  t.facts.in_use = str_dup (fn->facts.in_use);
  t.facts.nodes = strv_dup (fn->facts.nodes, fn->facts.n_nodes);
  t.facts.netdevs = strv_dup (fn->facts.netdevs, fn->facts.n_netdevs);
  /* A class name is at most 6 bytes: the name has room for the suffix. */
  if ((size_t) snprintf (t.name, sizeof (t.name), "%s-vfio", fn->name) >= sizeof (t.name))
    abort ();
  t.passthrough = true;
  return t;
}

/* Whether fn gets a twin: passthrough is on and the function can be
 * handed to vfio-pci, or nrm handed it over already. */
static bool
wants_twin (const struct pci_driver *d, const struct nrm_pci_function *fn)
{
  const char *why;
  if (!d->passthrough)
    return false;
  if (nrm_vfio_journaled (d->journal, fn->facts.bus_id, NULL, NULL))
    return true;
  return (fn->facts.driver == NULL || strcmp (fn->facts.driver, "vfio-pci") != 0)
         && nrm_vfio_possible (d->fsroot, &fn->facts, &why);
}

static void
add_function (struct nrm_pci_function **fns, size_t *n, const struct nrm_pci_function *fn)
{
  *fns = xrealloc (*fns, (*n + 1) * sizeof (**fns));
  (*fns)[(*n)++] = *fn;
}

/* A held function that is gone, from what its claim's state recorded. */
static void
from_state (struct nrm_pci_function *fn, json_t *e)
{
  memset (fn, 0, sizeof (*fn));
  nrm_pci_facts_init (&fn->facts);
  snprintf (fn->name, sizeof (fn->name), "%s", json_string_value (json_object_get (e, "name")));
  snprintf (fn->facts.bus_id, sizeof (fn->facts.bus_id), "%s", json_string_value (json_object_get (e, "busID")));
  int k = class_index (json_string_value (json_object_get (e, "class")));
  fn->class = k >= 0 ? all_classes[k] : "gpu";
  json_t *numa = json_object_get (e, "numaNode");
  fn->facts.numa_node = json_is_integer (numa) ? (int) json_integer_value (numa) : -1;
  const char *root = json_string_value (json_object_get (e, "pcieRoot"));
  snprintf (fn->facts.pcie_root, sizeof (fn->facts.pcie_root), "%s", root ? root : "");
  fn->present = false;
  size_t len = strlen (fn->name);
  fn->passthrough = len > 5 && strcmp (fn->name + len - 5, "-vfio") == 0;
}

static int
cmp_function (const void *a, const void *b)
{
  const struct nrm_pci_function *x = a, *y = b;
  int c = strcmp (x->facts.bus_id, y->facts.bus_id);
  return c ? c : (int) x->passthrough - (int) y->passthrough;
}

/* How long a function bound for a claim that nobody prepared stays bound:
 * the kubelet prepares a claim soon after its pod is bound, and a claim
 * whose pod went away before that is never prepared nor unprepared. */
#define STALE_BIND_S 600
#define VFIO_TIMEOUT_MS 5000

static bool
held_by (const struct pci_driver *d, const char *uid)
{
  return uid && json_object_get (d->claims, uid) != NULL;
}

/* Gives back the functions nrm bound for a claim it does not hold (after
 * a crash, or a pod deleted before its claim was prepared). Call with
 * d->lock held. */
static void
release_stale (struct pci_driver *d)
{
  char **ids = NULL;
  size_t n = 0;
  nrm_error_t e = NULL;
  if (d->journal == NULL || nrm_vfio_list (d->journal, &ids, &n, &e) < 0)
    {
      nrm_error_release (&e);
      return;
    }
  for (size_t i = 0; i < n; i++)
    {
      cleanup_free char *uid = NULL;
      time_t since = 0;
      if (!nrm_vfio_journaled (d->journal, ids[i], &uid, &since) || held_by (d, uid)
          || time (NULL) - since < STALE_BIND_S)
        continue;
      if (nrm_vfio_release (d->fsroot, d->journal, ids[i], VFIO_TIMEOUT_MS, &e) < 0)
        {
          if (d->log)
            d->log (d->log_ctx, NRM_LOG_WARNING, "%s: %s", d->name, nrm_error_msg (e));
          nrm_error_release (&e);
        }
      else if (d->log)
        d->log (d->log_ctx, NRM_LOG_INFO, "%s: gave %s back (bound for claim %s, which this node does not hold)",
                d->name, ids[i], uid ? uid : "?");
    }
  nrm_pci_list_free (ids, n);
}

/* Reads the functions again (hotplug); a held function that is gone stays,
 * marked removed. Call with d->lock held. */
static int
rescan (struct pci_driver *d, nrm_error_t *err)
{
  struct nrm_pci_function *fns = NULL;
  size_t n = 0;
  char **ids = NULL;
  size_t n_ids = 0;
  nrm_error_t e = NULL;
  cleanup_json json_t *was = d->left;
  d->left = json_object ();

  if (d->sysfs && nrm_pci_list (d->fsroot, &ids, &n_ids, &e) < 0)
    {
      /* A tree without PCI has no functions; anything else is an error. */
      if (e->status != ENOENT)
        {
          *err = e;
          return -1;
        }
      nrm_error_release (&e);
    }
  for (size_t i = 0; d->sysfs && i < n_ids; i++)
    {
      struct nrm_pci_function fn = { 0 };
      uint16_t vendor;
      uint32_t class_code;
      /* Bridges, USB and SATA controllers (most functions) are skipped on
       * their ids alone: this runs at every pass of the publisher. */
      if (nrm_pci_read_ids (d->fsroot, ids[i], &vendor, &class_code, &e) < 0 || !serves (d, class_code, vendor))
        {
          nrm_error_release (&e);
          continue;
        }
      if (nrm_pci_facts_read (d->fsroot, ids[i], &fn.facts, &e) < 0)
        {
          /* Removed between the listing and now. */
          nrm_error_release (&e);
          continue;
        }
      if (wanted (d, &fn))
        {
          add_function (&fns, &n, &fn);
          if (wants_twin (d, &fn))
            {
              struct nrm_pci_function t = twin_of (&fn);
              add_function (&fns, &n, &t);
            }
        }
      else
        function_done (&fn);
    }
  nrm_pci_list_free (ids, n_ids);
  for (size_t i = 0; !d->sysfs && i < d->t->n_pci; i++)
    {
      struct nrm_pci_function fn = { 0 };
      if (recorded_facts (d->t, &d->t->pci[i], &fn.facts) && wanted (d, &fn))
        add_function (&fns, &n, &fn);
    }
  release_stale (d);
  /* Held functions that are gone stay published (tainted) until released. */
  const char *uid;
  json_t *list;
  json_object_foreach (d->claims, uid, list)
  {
    size_t k;
    json_t *entry;
    json_array_foreach (list, k, entry)
    {
      const char *name = json_string_value (json_object_get (entry, "name"));
      bool found = false;
      for (size_t j = 0; j < n && !found; j++)
        found = strcmp (fns[j].name, name) == 0;
      if (!found)
        {
          struct nrm_pci_function fn;
          from_state (&fn, entry);
          add_function (&fns, &n, &fn);
        }
    }
  }
  if (n)
    qsort (fns, n, sizeof (*fns), cmp_function);
  /* Say once which functions another driver serves, and when that changes. */
  const char *bus;
  json_t *who;
  json_object_foreach (d->left, bus, who)
  {
    if (d->log && !json_equal (who, json_object_get (was, bus)))
      d->log (d->log_ctx, NRM_LOG_INFO, "%s: leaves %s to %s", d->name, bus, json_string_value (who));
  }
  json_object_foreach (was, bus, who)
  {
    if (d->log && json_object_get (d->left, bus) == NULL)
      d->log (d->log_ctx, NRM_LOG_INFO, "%s: serves %s again (%s no longer does)", d->name, bus,
              json_string_value (who));
  }
  functions_free (d->fns, d->n_fns);
  d->fns = fns;
  d->n_fns = n;
  return 0;
}

static struct nrm_pci_function *
find_function (struct pci_driver *d, const char *name)
{
  for (size_t i = 0; name && i < d->n_fns; i++)
    if (strcmp (d->fns[i].name, name) == 0)
      return &d->fns[i];
  return NULL;
}

/* The standard NUMA attribute, after every other: left out when the node
 * is unknown, as the standard says. */
static void
set_numa (const struct pci_driver *d, const struct nrm_pci_facts *f, json_t *attrs)
{
  int idx = f->numa_node >= 0 ? nrm_topology_numa_index (d->t, (unsigned) f->numa_node) : -1;
  if (idx >= 0)
    nrm_device_numa_attribute (d->t, d->o, attrs, &(size_t){ (size_t) idx }, 1);
  else if (f->numa_node >= 0)
    jattr_int (attrs, NRM_STD_NUMA_ATTR, f->numa_node); /* a node the model lacks */
}

static json_t *
device_json (const struct pci_driver *d, const struct nrm_pci_function *fn)
{
  const struct nrm_pci_facts *f = &fn->facts;
  json_t *attrs = json_object ();
  char hex[8];
  jattr_str (attrs, "resource.kubernetes.io/pciBusID", f->bus_id);
  if (f->pcie_root[0])
    jattr_str (attrs, NRM_STD_PCIE_ROOT_ATTR, f->pcie_root);
  jattr_str (attrs, "class", fn->class);
  /* On every device, so that a class selector can test it. */
  jattr_bool (attrs, "passthrough", fn->passthrough);
  snprintf (hex, sizeof (hex), "%04x", f->vendor_id);
  jattr_str (attrs, "vendorID", hex);
  snprintf (hex, sizeof (hex), "%04x", f->device_id);
  jattr_str (attrs, "deviceID", hex);
  snprintf (hex, sizeof (hex), "%04x", f->class_code >> 8);
  jattr_str (attrs, "classID", hex);
  /* Strings from sysfs reach the API only when they fit its 64 bytes. */
  if (f->driver && strlen (f->driver) <= 64)
    jattr_str (attrs, "driver", f->driver);
  if (f->iommu_group >= 0)
    jattr_int (attrs, "iommuGroup", f->iommu_group);
  if (f->sriov_total >= 0)
    {
      jattr_int (attrs, "sriovTotalVFs", f->sriov_total);
      jattr_int (attrs, "sriovVFs", f->sriov_enabled);
    }
  if (f->physfn[0])
    jattr_str (attrs, "physfn", f->physfn);
  if (f->link_speed && strlen (f->link_speed) <= 64)
    jattr_str (attrs, "linkSpeed", f->link_speed);
  if (f->max_link_speed && strlen (f->max_link_speed) <= 64)
    jattr_str (attrs, "maxLinkSpeed", f->max_link_speed);
  if (f->link_width >= 0)
    jattr_int (attrs, "linkWidth", f->link_width);
  if (f->max_link_width >= 0)
    jattr_int (attrs, "maxLinkWidth", f->max_link_width);
  if (d->vendor && d->vendor->attributes)
    d->vendor->attributes (d->fsroot, fn, attrs);
  set_numa (d, f, attrs);
  json_t *dev = json_pack ("{s:s, s:o}", "name", fn->name, "attributes", attrs);
  if (fn->passthrough)
    {
      /* The pod binds once the function is on vfio-pci (bind()). */
      json_object_set_new (dev, "bindsToNode", json_true ());
      json_object_set_new (dev, "bindingConditions", json_pack ("[s+]", d->name, "/vfio-ready"));
      json_object_set_new (dev, "bindingFailureConditions", json_pack ("[s+]", d->name, "/vfio-failed"));
    }
  return dev;
}

/* The counter set a function and its twin share: one of them at a time. */
static void
counter_name (const struct nrm_pci_function *fn, char *buf, size_t size)
{
  nrm_pci_device_name ("fn", fn->facts.bus_id, buf, size);
}

static bool
has_twin (const struct pci_driver *d, size_t i)
{
  return i + 1 < d->n_fns && d->fns[i + 1].passthrough
         && strcmp (d->fns[i + 1].facts.bus_id, d->fns[i].facts.bus_id) == 0;
}

int
nrm_pci_driver_pool (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err)
{
  struct pci_driver *d = self;
  (void) held; /* the driver knows its claims: restore() told it */
  pthread_mutex_lock (&d->lock);
  if (rescan (d, err) < 0)
    {
      pthread_mutex_unlock (&d->lock);
      return -1;
    }
  struct nrm_pool p = { .driver = xstrdup (d->name), .devices = json_array (), .counter_sets = json_array () };
  for (size_t i = 0; i < d->n_fns; i++)
    {
      json_t *dev = device_json (d, &d->fns[i]);
      bool shared = d->fns[i].passthrough || has_twin (d, i);
      char set[48];
      counter_name (&d->fns[i], set, sizeof (set));
      if (shared)
        json_object_set_new (
            dev, "consumesCounters",
            json_pack ("[{s:s, s:{s:{s:s}}}]", "counterSet", set, "counters", "function", "value", "1"));
      if (has_twin (d, i))
        json_array_append_new (p.counter_sets,
                               json_pack ("{s:s, s:{s:{s:s}}}", "name", set, "counters", "function", "value", "1"));
      json_array_append_new (p.devices, dev);
    }
  pthread_mutex_unlock (&d->lock);
  *ret = p;
  return 0;
}

void
nrm_pci_driver_reset (void *self)
{
  struct pci_driver *d = self;
  pthread_mutex_lock (&d->lock);
  json_object_clear (d->holder);
  json_object_clear (d->claims);
  pthread_mutex_unlock (&d->lock);
}

/* Records entries (as prepare's state has them) as held by uid, all or
 * none. Call with d->lock held. */
static int
hold (struct pci_driver *d, const char *uid, json_t *entries, nrm_error_t *err)
{
  size_t i;
  json_t *e;
  json_array_foreach (entries, i, e)
  {
    const char *name = json_string_value (json_object_get (e, "name"));
    const char *busid = json_string_value (json_object_get (e, "busID"));
    if (name == NULL || !nrm_pci_bus_id_valid (busid))
      return nrm_error_set (err, EINVAL, "claim %s: state entry %zu has no device name and bus id", uid, i);
    const char *other = json_string_value (json_object_get (d->holder, busid));
    if (other && strcmp (other, uid) != 0)
      return nrm_error_set (err, EBUSY, "device %s (%s) is held by claim %s", name, busid, other);
    for (size_t k = 0; k < i; k++)
      if (strcmp (json_string_value (json_object_get (json_array_get (entries, k), "busID")), busid) == 0)
        return nrm_error_set (err, EINVAL, "device %s (%s) is allocated twice in claim %s", name, busid, uid);
  }
  json_array_foreach (entries, i, e)
  {
    json_object_set_new (d->holder, json_string_value (json_object_get (e, "busID")), json_string (uid));
  }
  json_object_set (d->claims, uid, entries);
  return 0;
}

static json_t *
state_entry (const struct nrm_pci_function *fn)
{
  json_t *e = json_pack ("{s:s, s:s, s:s}", "name", fn->name, "busID", fn->facts.bus_id, "class", fn->class);
  if (fn->facts.numa_node >= 0)
    json_object_set_new (e, "numaNode", json_integer (fn->facts.numa_node));
  if (fn->facts.pcie_root[0])
    json_object_set_new (e, "pcieRoot", json_string (fn->facts.pcie_root));
  if (fn->passthrough)
    json_object_set_new (e, "passthrough", json_true ());
  return e;
}

static void
append_string (char **list, const char *s)
{
  char *joined = xasprintf ("%s%s%s", *list ? *list : "", *list ? "," : "", s);
  free (*list);
  *list = joined;
}

int
nrm_pci_driver_prepare (void *self, const struct nrm_claim_view *c, struct nrm_prepared *out, nrm_error_t *err)
{
  struct pci_driver *d = self;
  cleanup_json json_t *entries = json_array (), *nodes = json_array (), *meta = json_object ();
  struct nrm_container_edits extra = { 0 };
  cleanup_free char *busids = NULL;
  int r = -1;

  pthread_mutex_lock (&d->lock);
  for (size_t i = 0; i < c->n_results; i++)
    {
      const struct nrm_alloc_result *res = &c->results[i];
      struct nrm_pci_function *fn = find_function (d, res->device);
      /* Not seen yet (plugged in since, or nothing published it). */
      if (fn == NULL && rescan (d, err) < 0)
        goto out;
      if (fn == NULL)
        fn = find_function (d, res->device);
      if (fn == NULL)
        {
          nrm_error_set (err, ENODEV, "unknown device `%s` in pool `%s`", res->device, res->pool);
          goto out;
        }
      if (!fn->present)
        {
          nrm_error_set (err, ENODEV, "device %s (%s) was removed from the machine", fn->name, fn->facts.bus_id);
          goto out;
        }
      json_t *entry = state_entry (fn);
      json_array_append_new (entries, entry);
      append_string (&busids, fn->facts.bus_id);
      const char *who = json_string_value (json_object_get (d->holder, fn->facts.bus_id));
      if (who && strcmp (who, c->uid) != 0)
        {
          nrm_error_set (err, EBUSY, "device %s (%s) is held by claim %s", fn->name, fn->facts.bus_id, who);
          goto out;
        }
      /* A twin is on vfio-pci before its pod binds (bind()); without
       * binding conditions, or after a restart, prepare binds it. */
      struct nrm_pci_facts now = { 0 };
      if (fn->passthrough
          && (nrm_vfio_bind (d->fsroot, d->journal, fn->facts.bus_id, c->uid, VFIO_TIMEOUT_MS, err) < 0
              || nrm_pci_facts_read (d->fsroot, fn->facts.bus_id, &now, err) < 0))
        goto out;
      char **dev_nodes = fn->passthrough ? now.nodes : fn->facts.nodes;
      size_t n_dev_nodes = fn->passthrough ? now.n_nodes : fn->facts.n_nodes;
      cleanup_free char *paths = NULL;
      json_t *given = json_array ();
      /* Kept in the state: the claim's status tells them after a restart. */
      json_object_set_new (entry, "deviceNodes", given);
      for (size_t k = 0; k < n_dev_nodes; k++)
        {
          /* Passed through, the function is reached through VFIO alone. */
          if (fn->passthrough && strncmp (dev_nodes[k], "/dev/vfio/", 10) != 0)
            continue;
          json_array_append_new (nodes, nrm_pci_device_node (d->fsroot, dev_nodes[k]));
          json_array_append_new (given, json_string (dev_nodes[k]));
          append_string (&paths, dev_nodes[k]);
        }
      nrm_pci_facts_done (&now);
      if (d->vendor && d->vendor->edits && !fn->passthrough && d->vendor->edits (d->fsroot, fn, &extra, err) < 0)
        goto out;
      if (c->metadata)
        {
          json_t *dev = device_json (d, fn);
          json_t *attrs = json_incref (json_object_get (dev, "attributes"));
          json_decref (dev);
          if (paths)
            jattr_str (attrs, "deviceNodes", paths);
          json_object_set_new (meta, fn->name, attrs);
        }
    }
  if (hold (d, c->uid, entries, err) < 0)
    goto out;
  out->state = json_pack ("{s:O}", "devices", entries);
  out->edits.env = extra.env ? TAKE_PTR (extra.env) : json_array ();
  if (busids)
    json_array_append_new (out->edits.env, json_sprintf ("NRM_PCI_DEVICES=%s", busids));
  out->edits.device_nodes = json_incref (nodes);
  if (extra.device_nodes)
    json_array_extend (out->edits.device_nodes, extra.device_nodes);
  out->edits.mounts = TAKE_PTR (extra.mounts);
  out->edits.hooks = TAKE_PTR (extra.hooks);
  out->edits.commit_hook = false; /* the CPU and memory drivers bind */
  out->metadata = c->metadata ? json_incref (meta) : NULL;
  r = 0;
out:
  pthread_mutex_unlock (&d->lock);
  nrm_container_edits_done (&extra);
  return r;
}

int
nrm_pci_driver_restore (void *self, const char *uid, json_t *state, nrm_error_t *err)
{
  struct pci_driver *d = self;
  json_t *entries = json_object_get (state, "devices");
  if (!json_is_array (entries))
    return nrm_error_set (err, EINVAL, "claim %s: its state has no `devices` list", uid);
  pthread_mutex_lock (&d->lock);
  int r = hold (d, uid, entries, err);
  pthread_mutex_unlock (&d->lock);
  return r;
}

void
nrm_pci_driver_unprepare (void *self, const char *uid, json_t *state)
{
  struct pci_driver *d = self;
  (void) state;
  pthread_mutex_lock (&d->lock);
  size_t i;
  json_t *e;
  json_array_foreach (json_object_get (d->claims, uid), i, e)
  {
    const char *busid = json_string_value (json_object_get (e, "busID"));
    const char *who = json_string_value (json_object_get (d->holder, busid));
    nrm_error_t err = NULL;
    if (who && strcmp (who, uid) == 0)
      json_object_del (d->holder, busid);
    /* A passed-through function goes back to its driver; when that
     * fails, its journal stays and the next pass tries again. */
    if (json_is_true (json_object_get (e, "passthrough"))
        && nrm_vfio_release (d->fsroot, d->journal, busid, VFIO_TIMEOUT_MS, &err) < 0)
      {
        if (d->log)
          d->log (d->log_ctx, NRM_LOG_WARNING, "%s: claim %s: %s", d->name, uid, nrm_error_msg (err));
        nrm_error_release (&err);
      }
  }
  json_object_del (d->claims, uid);
  pthread_mutex_unlock (&d->lock);
}

/* "16.0 GT/s PCIe" -> 16.0; 0 when unknown. */
static double
gts (const char *speed)
{
  return speed ? strtod (speed, NULL) : 0;
}

/* The worst of what the facts say, as one health entry. */
static void
judge (const struct nrm_pci_function *fn, bool present, const struct nrm_pci_facts *f, const char *wedged,
       struct nrm_device_health *h)
{
  cleanup_free char *msg = NULL;
  const char *taint = NULL;
  enum nrm_taint_effect effect = NRM_TAINT_NONE_SET;
  char line[160];

#define NOTE(eff, name, ...)                                                                                           \
  do                                                                                                                   \
    {                                                                                                                  \
      snprintf (line, sizeof (line), __VA_ARGS__);                                                                     \
      append_string (&msg, line);                                                                                      \
      if ((eff) > effect)                                                                                              \
        {                                                                                                              \
          effect = (eff);                                                                                              \
          taint = (name);                                                                                              \
        }                                                                                                              \
    }                                                                                                                  \
  while (0)

  h->device = xstrdup (fn->name);
  h->health = NRM_HEALTH_HEALTHY;
  if (!present)
    NOTE (NRM_TAINT_NO_EXECUTE, "removed", "%s is no longer on the machine", fn->facts.bus_id);
  else
    {
      if (wedged)
        NOTE (NRM_TAINT_NO_EXECUTE, "wedged", "the kernel reports the GPU hung and not recovered (recovery: %s)",
              wedged);
      if (f->aer_fatal > 0)
        NOTE (NRM_TAINT_NO_EXECUTE, "aer-fatal", "%" PRId64 " fatal AER errors since boot", f->aer_fatal);
      if (f->max_link_width > 0 && f->link_width == 0)
        NOTE (NRM_TAINT_NO_EXECUTE, "link-down", "the PCIe link is down");
      if (f->aer_nonfatal > 0)
        NOTE (NRM_TAINT_NO_SCHEDULE, "aer-nonfatal", "%" PRId64 " non-fatal AER errors since boot", f->aer_nonfatal);
      if (f->max_link_width > 0 && f->link_width > 0 && f->link_width < f->max_link_width)
        NOTE (NRM_TAINT_NO_SCHEDULE, "link-degraded", "the link runs x%d of x%d", f->link_width, f->max_link_width);
      if (f->n_netdevs && f->carrier == 0)
        NOTE (NRM_TAINT_NO_SCHEDULE, "no-carrier", "no network interface of it has carrier");
      /* Devices lower their link speed while idle to save power: only a
       * note, never a reason to move a workload. */
      if (gts (f->link_speed) > 0 && gts (f->link_speed) < gts (f->max_link_speed))
        NOTE (NRM_TAINT_NONE, "link-slow", "the link runs at %s of %s", f->link_speed, f->max_link_speed);
      if (f->aer_correctable > 0)
        NOTE (NRM_TAINT_NONE, "aer-correctable", "%" PRId64 " corrected AER errors since boot", f->aer_correctable);
    }
#undef NOTE
  if (effect == NRM_TAINT_NO_EXECUTE)
    h->health = NRM_HEALTH_UNHEALTHY;
  if (taint)
    {
      h->taint = xstrdup (taint);
      h->effect = effect;
    }
  h->message = TAKE_PTR (msg);
}

int
nrm_pci_driver_health (void *self, struct nrm_health_report *ret, nrm_error_t *err)
{
  struct pci_driver *d = self;
  (void) err;
  pthread_mutex_lock (&d->lock);
  size_t n = d->n_fns;
  struct nrm_pci_function *fns = xcalloc (n ? n : 1, sizeof (*fns));
  char **wedged = xcalloc (n ? n : 1, sizeof (*wedged));
  for (size_t i = 0; i < n; i++)
    {
      const char *w = json_string_value (json_object_get (d->wedged, d->fns[i].facts.bus_id));
      wedged[i] = w ? xstrdup (w) : NULL;
      snprintf (fns[i].name, sizeof (fns[i].name), "%s", d->fns[i].name);
      snprintf (fns[i].facts.bus_id, sizeof (fns[i].facts.bus_id), "%s", d->fns[i].facts.bus_id);
      fns[i].present = d->fns[i].present;
    }
  pthread_mutex_unlock (&d->lock);
  /* sysfs is read without the lock: prepare does not wait for it. */
  ret->devices = xcalloc (n ? n : 1, sizeof (*ret->devices));
  ret->n = n;
  for (size_t i = 0; i < n; i++)
    {
      struct nrm_pci_facts f;
      nrm_error_t e = NULL;
      bool present = fns[i].present;
      if (d->sysfs && present)
        {
          if (nrm_pci_facts_read (d->fsroot, fns[i].facts.bus_id, &f, &e) < 0)
            present = false;
          nrm_error_release (&e);
        }
      else
        nrm_pci_facts_init (&f); /* a recorded machine: nothing to read */
      judge (&fns[i], present, &f, wedged[i], &ret->devices[i]);
      nrm_pci_facts_done (&f);
      free (wedged[i]);
    }
  free (wedged);
  free (fns);
  return 0;
}

int
nrm_pci_driver_health_fd (void *self)
{
  return ((struct pci_driver *) self)->poll;
}

/* The PCI function of a uevent's DEVPATH
 * (/devices/pci0000:00/0000:00:01.0/0000:01:00.0/drm/card0: the last bus id
 * before /drm/). */
static bool
uevent_function (const char *devpath, char *bus)
{
  const char *drm = strstr (devpath, "/drm/");
  if (drm == NULL || drm - devpath < NRM_PCI_BUS_ID_LEN)
    return false;
  memcpy (bus, drm - (NRM_PCI_BUS_ID_LEN - 1), NRM_PCI_BUS_ID_LEN - 1);
  bus[NRM_PCI_BUS_ID_LEN - 1] = '\0';
  return nrm_pci_bus_id_valid (bus);
}

void
nrm_pci_driver_uevent (void *self, const char *msg, size_t len)
{
  struct pci_driver *d = self;
  const char *action = NULL, *devpath = NULL, *subsystem = NULL, *wedged = NULL;
  /* "ACTION@DEVPATH\0KEY=VALUE\0...": the kernel's own format (udev's
   * relayed messages start with "libudev" and are not read). */
  for (size_t i = 0; i < len; i += strnlen (msg + i, len - i) + 1)
    {
      const char *kv = msg + i;
      size_t n = strnlen (kv, len - i);
      if (n == len - i)
        break; /* not terminated */
      if (strncmp (kv, "ACTION=", 7) == 0)
        action = kv + 7;
      else if (strncmp (kv, "DEVPATH=", 8) == 0)
        devpath = kv + 8;
      else if (strncmp (kv, "SUBSYSTEM=", 10) == 0)
        subsystem = kv + 10;
      else if (strncmp (kv, "WEDGED=", 7) == 0)
        wedged = kv + 7;
    }
  char bus[NRM_PCI_BUS_ID_LEN];
  if (action == NULL || devpath == NULL || subsystem == NULL || strcmp (subsystem, "drm") != 0
      || !uevent_function (devpath, bus))
    return;
  pthread_mutex_lock (&d->lock);
  /* Wedged until its driver comes back (rebind, bus reset: the card is
   * added again). WEDGED=none asks for nothing but telemetry. */
  if (strcmp (action, "change") == 0 && wedged && strcmp (wedged, "none") != 0 && strlen (wedged) < 64)
    json_object_set_new (d->wedged, bus, json_string (wedged));
  else if (strcmp (action, "add") == 0 || strcmp (action, "remove") == 0)
    json_object_del (d->wedged, bus);
  pthread_mutex_unlock (&d->lock);
}

void
nrm_pci_driver_health_event (void *self)
{
  struct pci_driver *d = self;
  char buf[8192];
  ssize_t n;
  bool uevents = nrm_fsroot_live (d->fsroot);
  while (d->events >= 0 && (n = read (d->events, buf, sizeof (buf))) > 0)
    if (uevents)
      nrm_pci_driver_uevent (d, buf, (size_t) n);
  if (d->others)
    {
      nrm_error_t e = NULL;
      pthread_mutex_lock (&d->lock);
      /* A bad checkpoint keeps the last good picture: say so, go on. */
      if (nrm_pci_others_refresh (d->others, &e) < 0 && d->log)
        d->log (d->log_ctx, NRM_LOG_WARNING, "%s: %s", d->name, nrm_error_msg (e));
      pthread_mutex_unlock (&d->lock);
      nrm_error_release (&e);
    }
}

int
nrm_pci_driver_bind (void *self, const struct nrm_claim_view *c, json_t **ret, nrm_error_t *err)
{
  struct pci_driver *d = self;
  json_t *out = json_array ();
  pthread_mutex_lock (&d->lock);
  for (size_t i = 0; i < c->n_results; i++)
    {
      const struct nrm_alloc_result *r = &c->results[i];
      struct nrm_pci_function *fn = find_function (d, r->device);
      if (fn == NULL && rescan (d, err) < 0)
        {
          pthread_mutex_unlock (&d->lock);
          json_decref (out);
          return -1;
        }
      if (fn == NULL)
        fn = find_function (d, r->device);
      if (fn == NULL || !fn->passthrough)
        continue;
      nrm_error_t e = NULL;
      const char *who = json_string_value (json_object_get (d->holder, fn->facts.bus_id));
      if (who && strcmp (who, c->uid) != 0)
        nrm_error_set (&e, EBUSY, "%s is held by claim %s", fn->facts.bus_id, who);
      else
        nrm_vfio_bind (d->fsroot, d->journal, fn->facts.bus_id, c->uid, VFIO_TIMEOUT_MS, &e);
      cleanup_free char *type = xasprintf ("%s/%s", d->name, e ? "vfio-failed" : "vfio-ready");
      char msg[1024];
      snprintf (msg, sizeof (msg), "%s", e ? nrm_error_msg (e) : "bound to vfio-pci");
      json_t *cond = json_pack ("{s:s, s:s, s:s, s:s}", "type", type, "status", "True", "reason",
                                e ? "BindFailed" : "Bound", "message", msg);
      json_t *st = json_pack ("{s:s, s:s, s:s, s:[o]}", "driver", d->name, "pool", r->pool, "device", r->device,
                              "conditions", cond);
      if (r->share_id)
        json_object_set_new (st, "shareID", json_string (r->share_id));
      json_array_append_new (out, st);
      if (e && d->log)
        d->log (d->log_ctx, NRM_LOG_WARNING, "%s: claim %s: %s", d->name, c->uid, nrm_error_msg (e));
      nrm_error_release (&e);
    }
  pthread_mutex_unlock (&d->lock);
  *ret = out;
  return 0;
}

json_t *
nrm_pci_driver_describe (void *self, const char *uid, json_t *state)
{
  (void) self;
  (void) uid;
  json_t *devs = json_object (), *placement = json_object (), *e;
  size_t i;
  json_array_foreach (json_object_get (state, "devices"), i, e)
  {
    const char *name = json_string_value (json_object_get (e, "name"));
    if (name == NULL)
      continue;
    json_object_set_new (devs, name, json_object ());
    /* The function and the device nodes the container got (a claim
     * prepared before they were kept in the state has none to tell). */
    json_t *p = json_object ();
    if (json_is_string (json_object_get (e, "busID")))
      json_object_set (p, "busID", json_object_get (e, "busID"));
    if (json_is_array (json_object_get (e, "deviceNodes")))
      json_object_set (p, "deviceNodes", json_object_get (e, "deviceNodes"));
    json_object_set_new (placement, name, p);
  }
  return json_pack ("{s:o, s:o}", "devices", devs, "placement", placement);
}

void
nrm_pci_driver_node_devices (void *self, json_t *devices)
{
  struct pci_driver *d = self;
  json_t *found = json_object (), *devs, *attrs;
  const char *driver, *name;
  json_object_foreach (devices, driver, devs)
  {
    json_object_foreach (devs, name, attrs)
    {
      char id[NRM_PCI_BUS_ID_LEN];
      if (nrm_pci_bus_id_of_attributes (attrs, id))
        json_object_set_new (found, id, json_string (driver));
    }
  }
  pthread_mutex_lock (&d->lock);
  json_decref (d->foreign);
  d->foreign = found;
  pthread_mutex_unlock (&d->lock);
}

json_t *
nrm_pci_driver_left_out (void *self)
{
  struct pci_driver *d = self;
  pthread_mutex_lock (&d->lock);
  json_t *r = json_deep_copy (d->left);
  pthread_mutex_unlock (&d->lock);
  return r;
}

static int
pci_new (const struct nrm_driver_host *h, void **ret, nrm_error_t *err)
{
  return nrm_pci_driver_new (h, NULL, ret, err);
}

const struct nrm_driver_ops nrm_pci_driver = {
  .abi = NRM_DRIVER_ABI,
  .id = "pci",
  .default_name = "pci." NRM_DEFAULT_DOMAIN,
  .summary = "PCI functions (GPUs, accelerators, FPGAs, InfiniBand; NICs and NVMe when configured), whole (driver/pci)",
  .new = pci_new,
  NRM_PCI_DRIVER_OPERATIONS,
};
