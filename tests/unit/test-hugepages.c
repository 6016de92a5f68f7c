/* SPDX-License-Identifier: Apache-2.0 */
/* Huge pages raised on demand (memory.hugepagesOnDemand) over a fake sysfs
 * tree: the memory driver publishes the room with binding conditions,
 * bind() raises a node's pool and prepare/unprepare keep it, a claim gives
 * its pages back down to the baseline, and a claim the node cannot hold
 * gets the failure condition with nothing changed. The kernel that gives
 * fewer pages than asked is a FIFO served by a thread of the test; the
 * journal is read back after a crash at each step. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/driver.h"
#include "driver/memory/ondemand.h"
#include "memory/hugepages.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "tests/unit/fakefs.h"
#include "topology/topology.h"

extern const struct nrm_driver_ops nrm_memory_driver;

#define MI (1024ULL * 1024)
#define POOL1 "sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
#define POOL0 "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"

static char root[64];
static char *state_dir;
static struct nrm_topology *topo;
static struct nrm_publish_options opts;

static int
setup (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  const char *dir = getenv ("NRM_TOPOLOGIES");
  cleanup_free char *path = xasprintf ("%s/24em64t-2n6c2t-pci.xml", dir ? dir : "tests/topologies");
  snprintf (root, sizeof (root), "/tmp/nrm-hp-XXXXXX");
  assert_non_null (mkdtemp (root));
  state_dir = xasprintf ("%s/state", root);
  fake_put (root, POOL0, "0\n");
  fake_put (root, POOL1, "0\n");
  fake_put (root, "state/.keep", "");
  if (nrm_topology_load (path, &topo, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  nrm_publish_options_init (&opts);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", root);
  assert_int_equal (system (cmd), 0);
  free (state_dir);
  nrm_topology_free (topo);
  return 0;
}

/* Each test from no journal and empty pools. */
static int
fresh (void **state)
{
  (void) state;
  cleanup_free char *cmd
      = xasprintf ("rm -rf '%s/memory.nrm.io.hugepages' '%s/%s' '%s/%s'", state_dir, root, POOL0, root, POOL1);
  assert_int_equal (system (cmd), 0);
  fake_put (root, POOL0, "0\n");
  fake_put (root, POOL1, "0\n");
  return 0;
}

static uint64_t
pool_pages (const char *rel)
{
  cleanup_free char *path = xasprintf ("%s/%s", root, rel), *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file (path, 64, &text, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return strtoull (text, NULL, 10);
}

static bool
journal_exists (unsigned node)
{
  cleanup_free char *p = xasprintf ("%s/memory.nrm.io.hugepages/node%u-2048kB.json", state_dir, node);
  return access (p, F_OK) == 0;
}

static void
put_journal (unsigned node, const char *text)
{
  cleanup_free char *rel = xasprintf ("state/memory.nrm.io.hugepages/node%u-2048kB.json", node);
  fake_put (root, rel, text);
}

static struct nrm_driver_host
host (json_t *settings)
{
  return (struct nrm_driver_host){ .topo = topo,
                                   .node = &opts,
                                   .name = "memory.nrm.io",
                                   .fsroot = fake_root (root),
                                   .settings = settings,
                                   .state_dir = state_dir };
}

static void *
new_driver (const char *room)
{
  cleanup_json json_t *s = json_pack ("{s:{s:s}}", "hugepagesOnDemand", "2Mi", room);
  struct nrm_driver_host h = host (s);
  nrm_error_t err = NULL;
  void *d = NULL;
  if (nrm_memory_driver.new(&h, &d, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return d;
}

/* The published device of that name, or NULL; a new reference. */
static json_t *
device (void *d, const char *name)
{
  struct nrm_pool p = { 0 };
  nrm_error_t err = NULL;
  if (nrm_memory_driver.pool (d, NULL, &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  size_t i;
  json_t *dev, *found = NULL;
  json_array_foreach (p.devices, i, dev)
  {
    if (strcmp (json_string_value (json_object_get (dev, "name")), name) == 0)
      found = json_incref (dev);
  }
  nrm_pool_done (&p);
  return found;
}

static const char *
capacity (json_t *dev, const char *key)
{
  return json_string_value (json_object_get (json_object_get (json_object_get (dev, "capacity"), key), "value"));
}

/* bind() of a claim of `amount` of numa1's 2Mi pool; the condition's type,
 * and its message in msg. */
static const char *
bind_claim (void *d, const char *uid, const char *amount, char *msg, size_t len)
{
  cleanup_json json_t *consumed = json_pack ("{s:s}", "hugepages", amount);
  struct nrm_alloc_result r = {
    .driver = "memory.nrm.io", .request = "hp", .pool = "node", .device = "numa1-hugepages-2mi", .consumed = consumed
  };
  struct nrm_claim_view c
      = { .uid = uid, .ns = "ns", .name = "c", .results = &r, .n_results = 1, .all = &r, .n_all = 1 };
  json_t *out = NULL;
  nrm_error_t err = NULL;
  if (nrm_memory_driver.bind (d, &c, &out, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_int_equal (json_array_size (out), 1);
  json_t *cond = json_array_get (json_object_get (json_array_get (out, 0), "conditions"), 0);
  assert_string_equal (json_string_value (json_object_get (cond, "status")), "True");
  snprintf (msg, len, "%s", json_string_value (json_object_get (cond, "message")));
  static char type[64];
  snprintf (type, sizeof (type), "%s", json_string_value (json_object_get (cond, "type")));
  json_decref (out);
  return type;
}

static int
prepare_claim (void *d, const char *uid, const char *amount, struct nrm_prepared *out, nrm_error_t *err)
{
  cleanup_json json_t *consumed = json_pack ("{s:s}", "hugepages", amount);
  cleanup_json json_t *claim = json_pack ("{s:{s:s}}", "metadata", "uid", uid);
  cleanup_json json_t *config = json_array ();
  struct nrm_alloc_result r = {
    .driver = "memory.nrm.io", .request = "hp", .pool = "node", .device = "numa1-hugepages-2mi", .consumed = consumed
  };
  struct nrm_claim_view c = { .uid = uid,
                              .ns = "ns",
                              .name = "c",
                              .results = &r,
                              .n_results = 1,
                              .all = &r,
                              .n_all = 1,
                              .config = config,
                              .claim = claim };
  memset (out, 0, sizeof (*out));
  return nrm_memory_driver.prepare (d, &c, out, err);
}

/* --- publication ------------------------------------------------------ */

static void
test_published (void **state)
{
  (void) state;
  void *off = new_driver ("0");
  json_t *dev = device (off, "numa1-hugepages-2mi");
  assert_null (dev); /* no pages and no room: no device, as without the setting */
  nrm_memory_driver.free (off);

  void *d = new_driver ("64Mi");
  dev = device (d, "numa1-hugepages-2mi");
  assert_non_null (dev);
  assert_string_equal (capacity (dev, "hugepages"), "64Mi");
  assert_true (json_is_true (json_object_get (dev, "bindsToNode")));
  assert_string_equal (json_string_value (json_array_get (json_object_get (dev, "bindingConditions"), 0)),
                       "memory.nrm.io/hugepages-ready");
  assert_string_equal (json_string_value (json_array_get (json_object_get (dev, "bindingFailureConditions"), 0)),
                       "memory.nrm.io/hugepages-failed");
  json_decref (dev);
  /* Room past the node's memory: the capacity stops at what it can hold,
   * so the scheduler never places a claim bind() can only refuse. */
  void *big = new_driver ("64Ti");
  json_t *huge = device (big, "numa1-hugepages-2mi"), *mem1 = device (big, "numa1");
  uint64_t hp = 0, mb = 0;
  nrm_error_t qerr = NULL;
  assert_int_equal (nrm_quantity_parse_bytes (capacity (huge, "hugepages"), &hp, &qerr), 0);
  assert_int_equal (nrm_quantity_parse_bytes (capacity (mem1, "memory"), &mb, &qerr), 0);
  if (hp > mb + 2 * MI || hp < mb / 2)
    fail_msg ("2Mi pages of %" PRIu64 " bytes beside %" PRIu64 " bytes of memory", hp, mb);
  json_decref (huge);
  json_decref (mem1);
  nrm_memory_driver.free (big);
  /* Publishing leaves no trace in the state folder (nrm slices, nrm status). */
  cleanup_free char *dir = xasprintf ("%s/memory.nrm.io.hugepages", state_dir);
  assert_int_equal (access (dir, F_OK), -1);
  nrm_memory_driver.free (d);
}

/* --- raised for a claim, given back ----------------------------------- */

static void
test_raise_and_give_back (void **state)
{
  (void) state;
  char msg[1024];
  void *d = new_driver ("64Mi");
  json_t *mem = device (d, "numa1");
  cleanup_free char *before = xstrdup (capacity (mem, "memory"));
  json_decref (mem);

  assert_string_equal (bind_claim (d, "uid-a", "16Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-ready");
  assert_int_equal (pool_pages (POOL1), 8);
  assert_int_equal (pool_pages (POOL0), 0);
  assert_true (journal_exists (1));
  /* bind again (the status write failed): nothing more is raised. */
  bind_claim (d, "uid-a", "16Mi", msg, sizeof (msg));
  assert_int_equal (pool_pages (POOL1), 8);
  /* The raised pages leave the node's ordinary memory. */
  mem = device (d, "numa1");
  uint64_t b = 0, a = 0;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_quantity_parse_bytes (before, &b, &err), 0);
  assert_int_equal (nrm_quantity_parse_bytes (capacity (mem, "memory"), &a, &err), 0);
  assert_int_equal (b - a, 16 * MI);
  json_decref (mem);

  assert_string_equal (bind_claim (d, "uid-b", "8Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-ready");
  assert_int_equal (pool_pages (POOL1), 12);

  struct nrm_prepared p = { 0 };
  if (prepare_claim (d, "uid-a", "16Mi", &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_int_equal (pool_pages (POOL1), 12);
  nrm_memory_driver.unprepare (d, "uid-a", p.state);
  nrm_prepared_done (&p);
  assert_int_equal (pool_pages (POOL1), 4);
  assert_true (journal_exists (1));

  /* A claim prepared without bind (no binding conditions) raises at prepare. */
  if (prepare_claim (d, "uid-c", "4Mi", &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_int_equal (pool_pages (POOL1), 6);
  nrm_memory_driver.unprepare (d, "uid-c", p.state);
  nrm_prepared_done (&p);

  /* uid-b bound and was never prepared (test_stale_given_back). */
  nrm_memory_driver.free (d);
  assert_int_equal (pool_pages (POOL1), 4); /* a stop gives nothing back: the claim may still come */

  d = new_driver ("64Mi");
  assert_int_equal (pool_pages (POOL1), 4);
  nrm_memory_driver.free (d);
}

/* The administrator changed the pool after nrm started: that is the
 * baseline, not what the topology read at start. */
static void
test_baseline_at_first_raise (void **state)
{
  (void) state;
  char msg[1024];
  void *d = new_driver ("64Mi");
  fake_put (root, POOL1, "20\n");
  assert_string_equal (bind_claim (d, "uid-a", "16Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-ready");
  assert_int_equal (pool_pages (POOL1), 20); /* 8 of the 20 */
  assert_string_equal (bind_claim (d, "uid-b", "32Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-ready");
  assert_int_equal (pool_pages (POOL1), 24);
  json_t *dev = device (d, "numa1-hugepages-2mi");
  assert_string_equal (capacity (dev, "hugepages"), "104Mi"); /* 20 pages and 64Mi */
  json_decref (dev);
  nrm_memory_driver.free (d);
}

/* The module itself for the timeout: uid-b of a journal, never prepared. */
static bool
held_none (void *ctx, const char *uid)
{
  (void) ctx;
  (void) uid;
  return false;
}

static bool
held_all (void *ctx, const char *uid)
{
  (void) ctx;
  (void) uid;
  return true;
}

static struct nrm_ondemand *
new_od (const char *room)
{
  cleanup_json json_t *s = json_pack ("{s:s}", "2Mi", room);
  struct nrm_driver_host h = host (NULL);
  struct nrm_ondemand *od = NULL;
  nrm_error_t err = NULL;
  if (nrm_ondemand_new (&h, s, &od, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return od;
}

static void
test_stale_given_back (void **state)
{
  (void) state;
  fake_put (root, POOL1, "4\n");
  put_journal (1, "{\"baseline\": 0, \"target\": 4, \"claims\": {\"uid-b\": {\"pages\": 4, \"since\": 1}}}");
  struct nrm_ondemand *od = new_od ("64Mi");
  assert_true (nrm_ondemand_has (od, "uid-b"));
  /* Just started: a restart restores its claims first. */
  nrm_ondemand_give_stale (od, time (NULL), held_none, NULL);
  assert_int_equal (pool_pages (POOL1), 4);
  nrm_ondemand_give_stale (od, time (NULL) + NRM_ONDEMAND_STALE_S, held_all, NULL);
  assert_int_equal (pool_pages (POOL1), 4);
  nrm_ondemand_give_stale (od, time (NULL) + NRM_ONDEMAND_STALE_S, held_none, NULL);
  assert_int_equal (pool_pages (POOL1), 0);
  assert_false (journal_exists (1));
  assert_false (nrm_ondemand_has (od, "uid-b"));
  nrm_ondemand_free (od);
}

/* --- refused ---------------------------------------------------------- */

static void
test_refused_without_free_memory (void **state)
{
  (void) state;
  char msg[1024];
  fake_put (root, POOL1, "0\n");
  fake_put (root, "sys/devices/system/node/node1/meminfo",
            "Node 1 MemTotal:       18874368 kB\nNode 1 MemFree:            8192 kB\n");
  void *d = new_driver ("64Mi");
  assert_string_equal (bind_claim (d, "uid-big", "32Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-failed");
  assert_non_null (strstr (msg, "NUMA node 1: 2Mi huge pages: 16 more pages (32Mi) needed, the node has 8Mi free"));
  assert_int_equal (pool_pages (POOL1), 0);
  assert_false (journal_exists (1));
  /* One that fits in the free memory is raised. */
  assert_string_equal (bind_claim (d, "uid-small", "4Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-ready");
  assert_int_equal (pool_pages (POOL1), 2);
  /* Prepare of the refused one fails the same way, naming why. */
  struct nrm_prepared p = { 0 };
  nrm_error_t err = NULL;
  assert_int_equal (prepare_claim (d, "uid-big", "32Mi", &p, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "the node has 8Mi free"));
  nrm_error_release (&err);
  nrm_memory_driver.free (d);
  cleanup_free char *meminfo = xasprintf ("%s/sys/devices/system/node/node1/meminfo", root);
  unlink (meminfo);
}

/* The kernel: a FIFO in place of nr_hugepages; each write is answered by
 * the next read with at most `cap` pages, as a kernel short of contiguous
 * memory does. */
struct kernel
{
  char *path;
  uint64_t cap;
  int rounds;
  uint64_t last; /* the last count written */
};

static void *
kernel_thread (void *arg)
{
  struct kernel *k = arg;
  for (int i = 0; i < k->rounds; i++)
    {
      char buf[64] = { 0 };
      int fd = open (k->path, O_RDONLY);
      if (fd < 0)
        return NULL;
      ssize_t n = read (fd, buf, sizeof (buf) - 1);
      close (fd);
      uint64_t v = n > 0 ? strtoull (buf, NULL, 10) : 0;
      k->last = v;
      fd = open (k->path, O_WRONLY);
      if (fd < 0)
        return NULL;
      dprintf (fd, "%" PRIu64 "\n", v < k->cap ? v : k->cap);
      close (fd);
    }
  return NULL;
}

/* The same, answering a read first (with `cap`). */
static void *
kernel_reads_then (void *arg)
{
  struct kernel *k = arg;
  int fd = open (k->path, O_WRONLY);
  if (fd < 0)
    return NULL;
  dprintf (fd, "%" PRIu64 "\n", k->cap);
  close (fd);
  return kernel_thread (arg);
}

static void
test_kernel_gives_fewer (void **state)
{
  (void) state;
  char msg[1024];
  fake_put (root, POOL1, "0\n");
  void *d = new_driver ("64Mi");
  /* A first claim journals the pool (its baseline read from the file)... */
  assert_string_equal (bind_claim (d, "uid-first", "4Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-ready");
  assert_int_equal (pool_pages (POOL1), 2);
  /* ...then the kernel of the FIFO answers the next raise. */
  struct kernel k = { .path = xasprintf ("%s/%s", root, POOL1), .cap = 5, .rounds = 2 };
  unlink (k.path);
  assert_int_equal (mkfifo (k.path, 0600), 0);
  pthread_t th;
  pthread_create (&th, NULL, kernel_thread, &k);
  /* Asked for 10, got 5: put back to 2, the failure condition says so. */
  assert_string_equal (bind_claim (d, "uid-frag", "16Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-failed");
  pthread_join (th, NULL);
  if (strstr (msg, "NUMA node 1: 2Mi huge pages: asked the kernel for 10 (8 for this claim), it gave 5") == NULL)
    fail_msg ("%s", msg);
  unlink (k.path);
  assert_int_equal (k.last, 2); /* the kernel was set back */
  fake_put (root, POOL1, "2\n");
  /* Nothing stays of the claim: it binds anew once the memory is there. */
  assert_string_equal (bind_claim (d, "uid-frag", "16Mi", msg, sizeof (msg)), "memory.nrm.io/hugepages-ready");
  assert_int_equal (pool_pages (POOL1), 10);
  nrm_memory_driver.free (d);
  free (k.path);
}

static void
test_kernel_layer (void **state)
{
  (void) state;
  uint64_t got = 0, free_mem = 0;
  bool known = true;
  nrm_error_t err = NULL;
  fake_put (root, POOL0, "3\n");
  assert_int_equal (nrm_hugepages_read (fake_root (root), 0, 2 * MI, &got, &err), 0);
  assert_int_equal (got, 3);
  assert_int_equal (nrm_hugepages_write (fake_root (root), 0, 2 * MI, 10, &got, &err), 0);
  assert_int_equal (got, 10);
  assert_int_equal (pool_pages (POOL0), 10);
  assert_int_equal (nrm_node_mem_free (fake_root (root), 0, &free_mem, &known, &err), 0);
  assert_false (known);
  fake_put (root, POOL0, "many\n");
  assert_int_equal (nrm_hugepages_read (fake_root (root), 0, 2 * MI, &got, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "is not a page count"));
  assert_non_null (strstr (nrm_error_msg (err), "node0/hugepages/hugepages-2048kB/nr_hugepages"));
  nrm_error_release (&err);
  assert_int_equal (nrm_hugepages_write (fake_root (root), 7, 2 * MI, 1, &got, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "node7"));
  nrm_error_release (&err);
  fake_put (root, POOL0, "0\n");
}

/* --- crash at each step ------------------------------------------------ */

static void
test_crash_recovery (void **state)
{
  (void) state;
  /* Journaled, the kernel not yet written: the start raises. */
  fake_put (root, POOL1, "0\n");
  put_journal (1, "{\"baseline\": 0, \"target\": 8, \"claims\": {\"uid-a\": {\"pages\": 8, \"since\": 1}}}");
  struct nrm_ondemand *od = new_od ("64Mi");
  assert_int_equal (pool_pages (POOL1), 8);
  assert_true (nrm_ondemand_has (od, "uid-a"));
  nrm_ondemand_free (od);

  /* A claim's entry added, the target not yet: the target follows the claims. */
  put_journal (1, "{\"baseline\": 0, \"target\": 8, \"claims\": {\"uid-a\": {\"pages\": 8, \"since\": 1}, "
                  "\"uid-b\": {\"pages\": 2, \"since\": 1}}}");
  od = new_od ("64Mi");
  assert_int_equal (pool_pages (POOL1), 10);
  nrm_ondemand_free (od);

  /* Given back in the journal, the kernel not yet lowered: the start lowers
   * and the entry goes. */
  fake_put (root, POOL1, "10\n");
  put_journal (1, "{\"baseline\": 0, \"target\": 0, \"claims\": {}}");
  od = new_od ("64Mi");
  assert_int_equal (pool_pages (POOL1), 0);
  assert_false (journal_exists (1));
  nrm_ondemand_free (od);

  /* Lowered, the entry not yet removed. */
  put_journal (1, "{\"baseline\": 0, \"target\": 0, \"claims\": {}}");
  od = new_od ("64Mi");
  assert_false (journal_exists (1));
  nrm_ondemand_free (od);

  /* Crashed while putting a short raise back: the journal has the claim,
   * the kernel fewer pages, and the start cannot raise it (the FIFO's
   * kernel gives 3): the claim's next bind fails and lets go. */
  put_journal (1, "{\"baseline\": 0, \"target\": 8, \"claims\": {\"uid-s\": {\"pages\": 8, \"since\": 1}}}");
  struct kernel k = { .path = xasprintf ("%s/%s", root, POOL1), .cap = 3, .rounds = 0 };
  fake_put (root, POOL1, "3\n");
  od = new_od ("64Mi"); /* a plain file takes the 8: then the kernel holds 3 */
  unlink (k.path);
  assert_int_equal (mkfifo (k.path, 0600), 0);
  pthread_t th;
  k.rounds = 2; /* the raise of verify, the lowering of the give-back */
  pthread_create (&th, NULL, kernel_reads_then, &k);
  cleanup_json json_t *want = json_pack ("{s:I}", "numa1-hugepages-2mi", (json_int_t) (16 * MI));
  uint64_t unclaimed[2] = { 1ULL << 34, 1ULL << 34 };
  nrm_error_t e = NULL;
  assert_int_equal (nrm_ondemand_take (od, "uid-s", want, unclaimed, &e), -1);
  pthread_join (th, NULL);
  if (strstr (nrm_error_msg (e), "the pool holds 3 of the 8 journaled") == NULL)
    fail_msg ("%s", nrm_error_msg (e));
  nrm_error_release (&e);
  assert_false (nrm_ondemand_has (od, "uid-s"));
  assert_int_equal (k.last, 0);
  nrm_ondemand_free (od);
  unlink (k.path);
  free (k.path);
  assert_false (journal_exists (1));

  /* The setting turned off with pages raised: they still go back. */
  fake_put (root, POOL1, "6\n");
  put_journal (1, "{\"baseline\": 2, \"target\": 6, \"claims\": {\"uid-x\": {\"pages\": 4, \"since\": 1}}}");
  cleanup_json json_t *none = json_object ();
  struct nrm_driver_host h = host (NULL);
  nrm_error_t err = NULL;
  od = NULL;
  assert_int_equal (nrm_ondemand_new (&h, NULL, &od, &err), 0);
  assert_non_null (od);
  nrm_ondemand_give_stale (od, time (NULL) + NRM_ONDEMAND_STALE_S, held_none, NULL);
  assert_int_equal (pool_pages (POOL1), 2);
  assert_false (journal_exists (1));
  nrm_ondemand_free (od);
  /* ...and without a journal nothing is made. */
  od = NULL;
  assert_int_equal (nrm_ondemand_new (&h, none, &od, &err), 0);
  assert_null (od);
  fake_put (root, POOL1, "0\n");
}

/* One process acts on the pools at a time (the plugin, not nrm status
 * beside it); the next takes over once the first ends. */
static void
test_one_owner (void **state)
{
  (void) state;
  put_journal (1, "{\"baseline\": 0, \"target\": 8, \"claims\": {\"uid-a\": {\"pages\": 8, \"since\": 1}}}");
  struct nrm_ondemand *first = new_od ("64Mi");
  assert_int_equal (pool_pages (POOL1), 8);
  fake_put (root, POOL1, "0\n");
  struct nrm_ondemand *second = new_od ("64Mi");
  assert_int_equal (pool_pages (POOL1), 0); /* no start of its own */
  cleanup_json json_t *want = json_pack ("{s:I}", "numa1-hugepages-2mi", (json_int_t) (2 * MI));
  uint64_t unclaimed[2] = { 1ULL << 34, 1ULL << 34 };
  nrm_error_t err = NULL;
  assert_int_equal (nrm_ondemand_take (second, "uid-z", want, unclaimed, &err), -1);
  assert_int_equal (err->status, EBUSY);
  assert_non_null (strstr (nrm_error_msg (err), "another nrm process holds the huge page journal"));
  nrm_error_release (&err);
  nrm_ondemand_free (first);
  nrm_ondemand_give_stale (second, time (NULL), held_all, NULL);
  assert_int_equal (pool_pages (POOL1), 8);
  assert_int_equal (nrm_ondemand_take (second, "uid-z", want, unclaimed, &err), 0);
  assert_int_equal (pool_pages (POOL1), 9);
  nrm_ondemand_free (second);
}

/* --- bad input ---------------------------------------------------------- */

static void
expect_bad_setting (json_t *setting, const char *text)
{
  struct nrm_driver_host h = host (NULL);
  struct nrm_ondemand *od = NULL;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_ondemand_new (&h, setting, &od, &err), -1);
  assert_null (od);
  if (strstr (nrm_error_msg (err), text) == NULL)
    fail_msg ("`%s` lacks `%s`", nrm_error_msg (err), text);
  nrm_error_release (&err);
  json_decref (setting);
}

static void
test_bad_input (void **state)
{
  (void) state;
  expect_bad_setting (json_string ("4Gi"), "key `memory.hugepagesOnDemand` must be an object");
  expect_bad_setting (json_pack ("{s:s}", "big", "4Gi"), "`big` is not a page size");
  expect_bad_setting (json_pack ("{s:i}", "2Mi", 4), "key `memory.hugepagesOnDemand.2Mi` must be a quantity");
  expect_bad_setting (json_pack ("{s:s}", "2Mi", "3Mi"), "3Mi is not a whole number of pages");
  put_journal (1, "{\"baseline\": -1}");
  expect_bad_setting (json_pack ("{s:s}", "2Mi", "4Mi"), "node1-2048kB.json: not a huge page journal");
  put_journal (1, "{\"baseline\": 0, \"target\": 0, \"claims\": {\"u\": 3}}");
  expect_bad_setting (json_pack ("{s:s}", "2Mi", "4Mi"), "claim u: expected {pages, since}");
  cleanup_free char *p = xasprintf ("%s/memory.nrm.io.hugepages/node1-2048kB.json", state_dir);
  unlink (p);
  /* Without a state folder (nrm run) there is no journal: off. */
  struct nrm_driver_host h = host (NULL);
  h.state_dir = NULL;
  cleanup_json json_t *s = json_pack ("{s:s}", "2Mi", "4Mi");
  struct nrm_ondemand *od = NULL;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_ondemand_new (&h, s, &od, &err), 0);
  assert_null (od);
  /* The memory driver names an unknown key of its section. */
  cleanup_json json_t *bad = json_pack ("{s:b}", "hugepagesOnDmand", 1);
  h = host (bad);
  void *d = NULL;
  assert_int_equal (nrm_memory_driver.new(&h, &d, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "unknown key `memory.hugepagesOnDmand`"));
  nrm_error_release (&err);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup (test_kernel_layer, fresh),
    cmocka_unit_test_setup (test_published, fresh),
    cmocka_unit_test_setup (test_raise_and_give_back, fresh),
    cmocka_unit_test_setup (test_baseline_at_first_raise, fresh),
    cmocka_unit_test_setup (test_stale_given_back, fresh),
    cmocka_unit_test_setup (test_refused_without_free_memory, fresh),
    cmocka_unit_test_setup (test_kernel_gives_fewer, fresh),
    cmocka_unit_test_setup (test_crash_recovery, fresh),
    cmocka_unit_test_setup (test_one_owner, fresh),
    cmocka_unit_test_setup (test_bad_input, fresh),
  };
  return cmocka_run_group_tests (tests, setup, teardown);
}
