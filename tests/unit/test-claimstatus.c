/* SPDX-License-Identifier: Apache-2.0 */
/* The placement each driver tells of a prepared claim (describe's
 * "placement") on recorded machines, the same again from the state alone
 * after a restart; and the status entries, the apply body and the
 * comparison that spares a write when the server has them already. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>

#include "driver/driver.h"
#include "driver/k8s/claimstatus.h"
#include "driver/k8s/kube.h"
#include "driver/registry.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "topology/topology.h"

extern const struct nrm_driver_ops nrm_cpu_driver;
extern const struct nrm_driver_ops nrm_memory_driver;

static struct nrm_topology *
load (const char *name, bool hugepages)
{
  const char *dir = getenv ("NRM_TOPOLOGIES");
  cleanup_free char *path = xasprintf ("%s/%s", dir ? dir : "tests/topologies", name);
  cleanup_free char *xml = NULL, *tmp = xstrdup ("/tmp/nrm-claimstatus-XXXXXX");
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  if (nrm_read_file (path, 64 << 20, &xml, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  /* 8 pages of 2 MiB on each node, as a node has them from its boot
   * settings. */
  static const char none[] = "<page_type size=\"2097152\" count=\"0\"/>";
  for (char *at = hugepages ? strstr (xml, none) : NULL; at; at = strstr (at, none))
    memcpy (at + strlen ("<page_type size=\"2097152\" count=\""), "8", 1), at += sizeof (none) - 1;
  int fd = mkstemp (tmp);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, xml, strlen (xml)), (ssize_t) strlen (xml));
  close (fd);
  if (nrm_topology_load (tmp, &t, &err) < 0)
    fail_msg ("%s: %s", name, nrm_error_msg (err));
  unlink (tmp);
  return t;
}

static void *
new_driver (const struct nrm_driver_ops *ops, const struct nrm_topology *t, const char *name, json_t *settings,
            struct nrm_publish_options *o)
{
  nrm_publish_options_init (o);
  struct nrm_driver_host h = { .topo = t, .node = o, .name = name, .settings = settings };
  void *d = NULL;
  nrm_error_t err = NULL;
  if (ops->new (&h, &d, &err) < 0)
    fail_msg ("%s: %s", name, nrm_error_msg (err));
  struct nrm_pool p = { 0 };
  if (ops->pool (d, NULL, &p, &err) < 0)
    fail_msg ("%s: %s", name, nrm_error_msg (err));
  nrm_pool_done (&p);
  return d;
}

/* Prepares one claim of results (driver, request, device, key, amount)
 * and returns its state (a new reference). */
static json_t *
prepare (const struct nrm_driver_ops *ops, void *d, const char *uid, const char *driver, const char *const *res,
         size_t n)
{
  struct nrm_alloc_result r[4];
  json_t *consumed[4];
  cleanup_json json_t *config = json_array (), *claim = json_pack ("{s:{s:s}}", "metadata", "uid", uid);
  for (size_t i = 0; i < n; i++)
    {
      consumed[i] = json_pack ("{s:s}", res[4 * i + 2], res[4 * i + 3]);
      r[i] = (struct nrm_alloc_result){
        .driver = driver, .request = res[4 * i], .pool = "node", .device = res[4 * i + 1], .consumed = consumed[i]
      };
    }
  struct nrm_claim_view c = { .uid = uid,
                              .ns = "ns",
                              .name = "c",
                              .results = r,
                              .n_results = n,
                              .all = r,
                              .n_all = n,
                              .config = config,
                              .claim = claim };
  struct nrm_prepared p = { 0 };
  nrm_error_t err = NULL;
  if (ops->prepare (d, &c, &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  for (size_t i = 0; i < n; i++)
    json_decref (consumed[i]);
  json_t *state = json_incref (p.state);
  nrm_prepared_done (&p);
  return state;
}

/* describe's placement, and the same from a new driver that restored the
 * claim from its state alone (a restart). */
static json_t *
placement (const struct nrm_driver_ops *ops, void *d, const struct nrm_topology *t, const char *name, json_t *settings,
           const char *uid, json_t *state)
{
  cleanup_json json_t *desc = ops->describe (d, uid, state);
  struct nrm_publish_options o;
  void *again = new_driver (ops, t, name, settings, &o);
  nrm_error_t err = NULL;
  if (ops->restore (again, uid, state, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  cleanup_json json_t *after = ops->describe (again, uid, state);
  ops->free (again);
  if (!json_equal (json_object_get (desc, "placement"), json_object_get (after, "placement")))
    fail_msg ("placement after a restart differs");
  return json_incref (json_object_get (desc, "placement"));
}

static const char *
str (json_t *o, const char *key)
{
  return json_string_value (json_object_get (o, key));
}

static void
assert_ints (json_t *a, const json_int_t *want, size_t n)
{
  assert_true (json_is_array (a));
  assert_int_equal (json_array_size (a), n);
  for (size_t i = 0; i < n; i++)
    assert_int_equal (json_integer_value (json_array_get (a, i)), want[i]);
}

/* --- CPU ------------------------------------------------------------------- */

static void
test_cpu_numa (void **state)
{
  (void) state;
  struct nrm_topology *t = load ("24em64t-2n6c2t-pci.xml", false);
  struct nrm_publish_options o;
  void *d = new_driver (&nrm_cpu_driver, t, "cpu.nrm.io", NULL, &o);
  /* Three CPUs of node 1 (CPUs 1,3,...,23; core k's siblings k and k+12):
   * one whole core and one CPU of another, the rest of which the shared
   * pool keeps. */
  const char *res[] = { "cpus", "numa1", "cpus", "3" };
  cleanup_json json_t *st = prepare (&nrm_cpu_driver, d, "uid-1", "cpu.nrm.io", res, 1);
  cleanup_json json_t *pl = placement (&nrm_cpu_driver, d, t, "cpu.nrm.io", NULL, "uid-1", st);
  assert_int_equal (json_object_size (pl), 1);
  json_t *p = json_object_get (pl, "numa1");
  assert_non_null (p);
  assert_string_equal (str (p, "cpus"), str (st, "cpus"));
  assert_string_equal (str (p, "cpus"), "1,3,13");
  assert_string_equal (str (p, "wholeCores"), "1");
  assert_string_equal (str (p, "partialCores"), "3");
  assert_string_equal (str (p, "l3Groups"), "1");
  const json_int_t one[] = { 1 };
  assert_ints (json_object_get (p, "numaNodes"), one, 1);
  assert_null (json_object_get (p, "partition")); /* partitions are off */
  assert_null (json_object_get (p, "request"));   /* the writer's, from the allocation */

  /* A cpuset partition the claim's containers get: told as the state
   * records it. */
  cleanup_json json_t *part = json_deep_copy (st);
  json_object_set_new (part, "partition", json_string ("isolated"));
  cleanup_json json_t *desc = nrm_cpu_driver.describe (d, "uid-1", part);
  assert_string_equal (str (json_object_get (json_object_get (desc, "placement"), "numa1"), "partition"), "isolated");

  /* Two devices: each tells its own CPUs. */
  const char *two[] = { "a", "numa0", "cpus", "2", "b", "numa1", "cpus", "2" };
  cleanup_json json_t *st2 = prepare (&nrm_cpu_driver, d, "uid-2", "cpu.nrm.io", two, 2);
  cleanup_json json_t *pl2 = placement (&nrm_cpu_driver, d, t, "cpu.nrm.io", NULL, "uid-2", st2);
  assert_int_equal (json_object_size (pl2), 2);
  const json_int_t zero[] = { 0 };
  assert_string_equal (str (json_object_get (pl2, "numa0"), "cpus"), "0,12");
  assert_string_equal (str (json_object_get (pl2, "numa0"), "wholeCores"), "0");
  assert_string_equal (str (json_object_get (pl2, "numa0"), "partialCores"), "");
  assert_ints (json_object_get (json_object_get (pl2, "numa0"), "numaNodes"), zero, 1);
  assert_string_equal (str (json_object_get (pl2, "numa1"), "l3Groups"), "1");
  nrm_cpu_driver.free (d);
  nrm_topology_free (t);
}

static void
test_cpu_partitioned (void **state)
{
  (void) state;
  struct nrm_topology *t = load ("24em64t-2n6c2t-pci.xml", false);
  struct nrm_publish_options o;
  cleanup_json json_t *s = json_pack ("{s:s}", "mode", "partitioned");
  void *d = new_driver (&nrm_cpu_driver, t, "cpu.nrm.io", s, &o);
  /* A whole L3 group: six whole cores of node 0. */
  struct nrm_alloc_result r = { .driver = "cpu.nrm.io", .request = "cpus", .pool = "node", .device = "l3-0" };
  cleanup_json json_t *config = json_array (), *claim = json_pack ("{s:{s:s}}", "metadata", "uid", "uid-p");
  struct nrm_claim_view c = { .uid = "uid-p",
                              .ns = "ns",
                              .name = "c",
                              .results = &r,
                              .n_results = 1,
                              .all = &r,
                              .n_all = 1,
                              .config = config,
                              .claim = claim };
  struct nrm_prepared p = { 0 };
  nrm_error_t err = NULL;
  if (nrm_cpu_driver.prepare (d, &c, &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  cleanup_json json_t *pl = placement (&nrm_cpu_driver, d, t, "cpu.nrm.io", s, "uid-p", p.state);
  json_t *l3 = json_object_get (pl, "l3-0");
  assert_non_null (l3);
  assert_string_equal (str (l3, "cpus"), "0,2,4,6,8,10,12,14,16,18,20,22");
  assert_string_equal (str (l3, "wholeCores"), "0,2,4,6,8,10");
  assert_string_equal (str (l3, "partialCores"), "");
  assert_string_equal (str (l3, "l3Groups"), "0");
  nrm_prepared_done (&p);
  nrm_cpu_driver.free (d);
  nrm_topology_free (t);
}

/* --- memory ---------------------------------------------------------------- */

static void
test_memory (void **state)
{
  (void) state;
  struct nrm_topology *t = load ("24em64t-2n6c2t-pci.xml", true);
  struct nrm_publish_options o;
  void *d = new_driver (&nrm_memory_driver, t, "memory.nrm.io", NULL, &o);
  const char *res[] = { "mem", "numa1", "memory", "1Gi", "hp", "numa0-hugepages-2mi", "hugepages", "16Mi" };
  cleanup_json json_t *st = prepare (&nrm_memory_driver, d, "uid-m", "memory.nrm.io", res, 2);
  cleanup_json json_t *pl = placement (&nrm_memory_driver, d, t, "memory.nrm.io", NULL, "uid-m", st);
  assert_int_equal (json_object_size (pl), 2);
  json_t *m = json_object_get (pl, "numa1"), *h = json_object_get (pl, "numa0-hugepages-2mi");
  assert_int_equal (json_integer_value (json_object_get (m, "bytes")), 1 << 30);
  assert_string_equal (str (m, "pageSize"), "4Ki");
  const json_int_t one[] = { 1 }, zero[] = { 0 };
  assert_ints (json_object_get (m, "numaNodes"), one, 1);
  assert_int_equal (json_integer_value (json_object_get (h, "bytes")), 16 << 20);
  assert_string_equal (str (h, "pageSize"), "2Mi");
  assert_ints (json_object_get (h, "numaNodes"), zero, 1);
  nrm_memory_driver.free (d);
  nrm_topology_free (t);
}

/* --- the status entries ---------------------------------------------------- */

static const char *CHECKPOINT_ENTRY
    = "{\"namespace\": \"ns\", \"name\": \"c\", \"phase\": \"PrepareCompleted\", \"state\": {},"
      " \"devices\": [{\"requestNames\": [\"cpus\"], \"pool\": \"node-a\", \"device\": \"numa0\","
      "                \"shareID\": \"6b0f4a8e-0000-4000-8000-000000000001\", \"cdiDeviceIDs\": []},"
      "               {\"requestNames\": [\"more/sub\"], \"pool\": \"node-a\", \"device\": \"numa1\","
      "                \"cdiDeviceIDs\": []}]}";

static const char *DESCRIBED = "{\"placement\": {\"numa0\": {\"cpus\": \"0,12\", \"wholeCores\": \"0\","
                               " \"partialCores\": \"\", \"l3Groups\": \"0\", \"numaNodes\": [0]},"
                               " \"numa1\": {\"cpus\": \"1\", \"numaNodes\": [1]}}}";

/* The claim as the server would hold it after the apply of entries by
 * manager, beside the binder's entry and its own condition. */
static json_t *
server_claim (json_t *entries, const char *manager)
{
  json_t *binder
      = json_pack ("{s:s, s:s, s:s, s:s, s:[{s:s, s:s, s:s, s:s, s:s}]}", "driver", "cpu.nrm.io", "pool", "node-a",
                   "device", "numa1", "shareID", "x", "conditions", "type", "cpu.nrm.io/ready", "status", "True",
                   "reason", "Bound", "message", "m", "lastTransitionTime", "2026-01-01T00:00:00Z");
  json_t *devs = json_deep_copy (entries);
  json_array_append_new (devs, binder);
  json_t *fields = json_object ();
  size_t i;
  json_t *e;
  json_array_foreach (entries, i, e)
  {
    json_t *key = json_pack ("{s:O, s:O, s:O}", "device", json_object_get (e, "device"), "driver",
                             json_object_get (e, "driver"), "pool", json_object_get (e, "pool"));
    if (json_object_get (e, "shareID"))
      json_object_set (key, "shareID", json_object_get (e, "shareID"));
    cleanup_free char *text = json_dumps (key, JSON_COMPACT | JSON_SORT_KEYS);
    cleanup_free char *k = xasprintf ("k:%s", text);
    json_object_set_new (fields, k, json_pack ("{s:{}, s:{}}", ".", "f:data"));
    json_decref (key);
  }
  return json_pack ("{s:{s:s, s:[{s:s, s:s, s:s, s:{s:{s:o}}}, {s:s, s:s, s:s, s:{}}]}, s:{s:o}}", "metadata", "uid",
                    "u1", "managedFields", "manager", manager, "operation", "Apply", "subresource", "status",
                    "fieldsV1", "f:status", "f:devices", fields, "manager", "cpu.nrm.io", "operation", "Apply",
                    "subresource", "status", "fieldsV1", "status", "devices", devs);
}

static void
test_entries (void **state)
{
  (void) state;
  cleanup_json json_t *entry = json_loads (CHECKPOINT_ENTRY, 0, NULL), *desc = json_loads (DESCRIBED, 0, NULL);
  cleanup_json json_t *none = json_object ();
  assert_non_null (entry);
  assert_non_null (desc);
  cleanup_free char *manager = nrm_placement_manager ("cpu.nrm.io");
  assert_string_equal (manager, "cpu.nrm.io/placement");
  cleanup_json json_t *e = nrm_placement_entries ("cpu.nrm.io", "node-a", entry, desc, none, "2026-02-02T10:00:00Z");
  assert_int_equal (json_array_size (e), 2);
  json_t *a = json_array_get (e, 0), *b = json_array_get (e, 1);
  assert_string_equal (str (a, "driver"), "cpu.nrm.io");
  assert_string_equal (str (a, "pool"), "node-a");
  assert_string_equal (str (a, "device"), "numa0");
  assert_string_equal (str (a, "shareID"), "6b0f4a8e-0000-4000-8000-000000000001");
  assert_null (json_object_get (b, "shareID"));
  json_t *data = json_object_get (a, "data");
  assert_string_equal (str (data, "request"), "cpus");
  assert_string_equal (str (data, "cpus"), "0,12");
  assert_string_equal (str (data, "wholeCores"), "0");
  assert_string_equal (str (json_object_get (b, "data"), "request"), "more/sub");
  assert_int_equal (json_array_size (json_object_get (a, "conditions")), 1);
  json_t *c = json_array_get (json_object_get (a, "conditions"), 0);
  assert_string_equal (str (c, "type"), "Ready");
  assert_string_equal (str (c, "status"), "True");
  assert_string_equal (str (c, "reason"), "Prepared");
  assert_string_equal (str (c, "message"), "prepared on node node-a");
  assert_string_equal (str (c, "lastTransitionTime"), "2026-02-02T10:00:00Z");
  /* A driver without describe: the request alone. */
  cleanup_json json_t *bare = nrm_placement_entries ("cpu.nrm.io", "node-a", entry, NULL, none, "t");
  assert_int_equal (json_object_size (json_object_get (json_array_get (bare, 0), "data")), 1);
  /* Unprepared: none. */
  cleanup_json json_t *gone = nrm_placement_entries ("cpu.nrm.io", "node-a", NULL, desc, none, "t");
  assert_int_equal (json_array_size (gone), 0);

  /* The body: the claim's status subresource as an apply configuration. */
  cleanup_json json_t *body = nrm_placement_body ("ns", "c", "u1", e);
  cleanup_json json_t *want
      = json_pack ("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:O}}", "apiVersion", "resource.k8s.io/v1", "kind",
                   "ResourceClaim", "metadata", "name", "c", "namespace", "ns", "uid", "u1", "status", "devices", e);
  assert_true (json_equal (body, want));
  /* Nothing to hold: no status at all, which gives every entry up. */
  cleanup_json json_t *empty = nrm_placement_body ("ns", "c", "u1", gone);
  assert_null (json_object_get (empty, "status"));
  assert_string_equal (str (json_object_get (empty, "metadata"), "uid"), "u1");
}

static void
test_no_write_when_current (void **state)
{
  (void) state;
  cleanup_json json_t *entry = json_loads (CHECKPOINT_ENTRY, 0, NULL), *desc = json_loads (DESCRIBED, 0, NULL);
  cleanup_json json_t *none = json_object ();
  cleanup_json json_t *first
      = nrm_placement_entries ("cpu.nrm.io", "node-a", entry, desc, none, "2026-02-02T10:00:00Z");
  /* Nothing on the server yet: a write. */
  assert_false (nrm_placement_current (none, "cpu.nrm.io/placement", first));
  cleanup_json json_t *claim = server_claim (first, "cpu.nrm.io/placement");
  /* Built again later (a restart): the condition keeps its time, and
   * there is nothing to write. */
  cleanup_json json_t *again
      = nrm_placement_entries ("cpu.nrm.io", "node-a", entry, desc, claim, "2026-03-03T00:00:00Z");
  assert_true (json_equal (again, first));
  assert_true (nrm_placement_current (claim, "cpu.nrm.io/placement", again));
  /* The binder's entries and another manager's are none of its business,
   * but the same entries owned by another manager are not its own. */
  assert_false (nrm_placement_current (claim, "memory.nrm.io/placement", again));
  /* The same number of entries owned, but other ones (written by the
   * manager for other devices, which someone else holds now): a write. */
  cleanup_json json_t *others = json_deep_copy (first);
  json_object_set_new (json_array_get (others, 0), "device", json_string ("numa2"));
  json_object_set_new (json_array_get (others, 1), "device", json_string ("numa3"));
  cleanup_json json_t *moved = server_claim (others, "cpu.nrm.io/placement");
  json_object_set (moved, "status", json_object_get (claim, "status"));
  assert_false (nrm_placement_current (moved, "cpu.nrm.io/placement", again));
  /* Other data (a changed description): a write. */
  json_object_set_new (json_object_get (json_array_get (again, 1), "data"), "cpus", json_string ("3"));
  assert_false (nrm_placement_current (claim, "cpu.nrm.io/placement", again));
  /* One device fewer: a write, which gives the other up. */
  cleanup_json json_t *fewer = json_deep_copy (first);
  json_array_remove (fewer, 1);
  assert_false (nrm_placement_current (claim, "cpu.nrm.io/placement", fewer));
  /* Unprepared: its entries are still owned, a write; once given up
   * (no managedFields entry), nothing to write. */
  cleanup_json json_t *empty = json_array ();
  assert_false (nrm_placement_current (claim, "cpu.nrm.io/placement", empty));
  cleanup_json json_t *released = json_deep_copy (claim);
  json_array_remove (json_object_get (json_object_get (released, "metadata"), "managedFields"), 0);
  assert_true (nrm_placement_current (released, "cpu.nrm.io/placement", empty));
  /* The condition turned by someone else: written again, with a new time. */
  json_t *cond = json_array_get (
      json_object_get (json_array_get (json_object_get (json_object_get (claim, "status"), "devices"), 0),
                       "conditions"),
      0);
  json_object_set_new (cond, "status", json_string ("False"));
  assert_false (nrm_placement_current (claim, "cpu.nrm.io/placement", first));
  cleanup_json json_t *turned
      = nrm_placement_entries ("cpu.nrm.io", "node-a", entry, desc, claim, "2026-03-03T00:00:00Z");
  assert_string_equal (
      str (json_array_get (json_object_get (json_array_get (turned, 0), "conditions"), 0), "lastTransitionTime"),
      "2026-03-03T00:00:00Z");
}

/* --- the writer ----------------------------------------------------------------- */

static json_t *
unreadable (void *ctx, const char *driver)
{
  (void) ctx;
  (void) driver;
  return NULL;
}

struct seen_log
{
  pthread_mutex_t lock;
  char *first; /* the first warning */
};

static void
keep_warning (void *ctx, enum nrm_log_level level, const char *fmt, ...)
{
  struct seen_log *l = ctx;
  va_list ap;
  if (level != NRM_LOG_WARNING)
    return;
  va_start (ap, fmt);
  char *msg = xvasprintf (fmt, ap);
  va_end (ap);
  pthread_mutex_lock (&l->lock);
  if (l->first == NULL)
    l->first = msg;
  else
    free (msg);
  pthread_mutex_unlock (&l->lock);
}

/* A checkpoint that cannot be read is no checkpoint without the claim:
 * nothing is asked of or written to the API server (an apply of no
 * entries would take the placement off a prepared claim), and the claim
 * is tried again. */
static void
test_unreadable_checkpoint (void **state)
{
  char kc[] = "/tmp/nrm-claimstatus-XXXXXX";
  int fd = mkstemp (kc);
  assert_true (fd >= 0);
  static const char text[] = "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                             "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:1'}\n"
                             "users:\n- name: u\n  user: {token: t}\n";
  assert_int_equal (write (fd, text, strlen (text)), (ssize_t) strlen (text));
  close (fd);
  struct nrm_kube_options o;
  struct nrm_kube *k = NULL;
  nrm_error_t err = NULL;
  nrm_kube_options_init (&o);
  o.kubeconfig = kc;
  o.max_tries = 1;
  if (nrm_kube_new (&o, &k, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  unlink (kc);
  static const struct nrm_driver_ops ops = { 0 };
  struct nrm_driver_slot slot = { .ops = &ops, .name = (char *) "cpu.nrm.io" };
  struct nrm_drivers drivers = { .n = 1, .slots = &slot };
  struct seen_log l = { .lock = PTHREAD_MUTEX_INITIALIZER };
  struct nrm_claimstatus_config cfg = {
    .kube = k, .drivers = &drivers, .node_name = "node-a", .claims = unreadable, .log = keep_warning, .log_ctx = &l
  };
  struct nrm_claimstatus *w = NULL;
  if (nrm_claimstatus_start (&cfg, &w, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  nrm_claimstatus_changed (w, "cpu.nrm.io", "uid-1", "default", "claim-1");
  bool done = false;
  for (int i = 0; i < 100 && !done; i++)
    {
      usleep (50000);
      pthread_mutex_lock (&l.lock);
      done = l.first != NULL;
      pthread_mutex_unlock (&l.lock);
    }
  nrm_claimstatus_stop (w);
  nrm_kube_free (k);
  assert_non_null (l.first);
  if (strstr (l.first, "checkpoint cannot be read") == NULL || strstr (l.first, "again in") == NULL)
    fail_msg ("%s", l.first);
  free (l.first);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_cpu_numa),
    cmocka_unit_test (test_cpu_partitioned),
    cmocka_unit_test (test_memory),
    cmocka_unit_test (test_entries),
    cmocka_unit_test (test_no_write_when_current),
    cmocka_unit_test (test_unreadable_checkpoint),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
