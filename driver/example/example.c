/* SPDX-License-Identifier: Apache-2.0 */
/* An example driver, built as a shared object against nrm's installed
 * headers only (driver/driver.h and what it includes; driver/kit.h has
 * helpers for opaque configuration and consumed capacity; with
 * nrm/base/xalloc.h an allocation aborts on failure, as everywhere in nrm,
 * whose jansson aborts too) and jansson.
 * Four devices dev0..dev3, spread over the NUMA nodes, each held whole by
 * one claim at a time and passed to the container as a device node, a
 * read-only mount and one environment variable. A device listed in
 * example-unhealthy at the root is unhealthy and tainted NoExecute. The last
 * device binds to its node with a binding condition (KEP-5007): the
 * scheduler waits until the driver has said it is ready.
 *
 *   cc -shared -fPIC -o nrm-driver-example.so example.c $(pkg-config --cflags --libs nrm-driver)
 *   nrm plugin --driver-dir DIR --drivers example ...
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/inotify.h>
#include <unistd.h>

#include <jansson.h>

#include "driver/driver.h"
#include "nrm/base/xalloc.h"

#define N_DEVICES 4
#define MODEL "nrm-example-1"
#define UNHEALTHY_FILE "example-unhealthy"
#define READY "example.nrm.io/ready"
#define FAILED "example.nrm.io/failed"
#define BINDING_DEVICE (N_DEVICES - 1)

struct example
{
  char *name;                  /* this driver's name, example.nrm.io */
  char *unhealthy;             /* example-unhealthy at the root */
  int numa[N_DEVICES];         /* os index of each device's NUMA node, or -1 */
  char holder[N_DEVICES][129]; /* UID of the claim that holds the device, or "" */
  int watch;                   /* inotify on the folder of the unhealthy file, or -1 */
  nrm_log_fn log;
  void *log_ctx;
};

/* The index of "dev<N>", or -1. */
static int
device_index (const char *name)
{
  if (name == NULL || strncmp (name, "dev", 3) != 0 || name[3] < '0' || name[3] >= '0' + N_DEVICES || name[4])
    return -1;
  return name[3] - '0';
}

static int
ex_new (const struct nrm_driver_host *h, void **ret, nrm_error_t *err)
{
  struct example *d = xcalloc (1, sizeof (*d));
  (void) err; /* it cannot fail */
  d->name = xstrdup (h->name);
  d->unhealthy = nrm_fsroot_path (h->fsroot, "/" UNHEALTHY_FILE);
  /* Round robin over the NUMA nodes of the machine. */
  for (int i = 0; i < N_DEVICES; i++)
    d->numa[i] = h->topo->n_numa ? (int) h->topo->numa[(size_t) i % h->topo->n_numa].os_index : -1;
  d->log = h->log;
  d->log_ctx = h->log_ctx;
  /* Health events: the file's folder changes (written, renamed, removed);
   * without a watch, the framework's periodic reports still follow it. */
  d->watch = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  if (d->watch >= 0
      && inotify_add_watch (d->watch, nrm_fsroot_dir (h->fsroot),
                            IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE)
             < 0)
    {
      close (d->watch);
      d->watch = -1;
    }
  *ret = d;
  return 0;
}

static int
ex_health_fd (void *self)
{
  return ((struct example *) self)->watch;
}

static void
ex_health_event (void *self)
{
  struct example *d = self;
  char buf[4096];
  while (read (d->watch, buf, sizeof (buf)) > 0)
    ;
}

static void
ex_free (void *self)
{
  struct example *d = self;
  if (d == NULL)
    return;
  if (d->watch >= 0)
    close (d->watch);
  free (d->name);
  free (d->unhealthy);
  free (d);
}

/* Devices are allocated whole: no capacity, the same list whoever holds them. */
static int
ex_pool (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err)
{
  struct example *d = self;
  (void) held;
  (void) err;
  struct nrm_pool p = { .driver = xstrdup (d->name), .devices = json_array (), .counter_sets = json_array () };
  for (int i = 0; i < N_DEVICES; i++)
    {
      char name[8];
      snprintf (name, sizeof (name), "dev%d", i);
      json_t *dev = json_pack ("{s:s, s:{s:{s:s}}}", "name", name, "attributes", "model", "string", MODEL);
      if (d->numa[i] >= 0)
        json_object_set_new (json_object_get (dev, "attributes"), NRM_STD_NUMA_ATTR,
                             json_pack ("{s:i}", "int", d->numa[i]));
      if (i == BINDING_DEVICE)
        {
          json_object_set_new (dev, "bindsToNode", json_true ());
          json_object_set_new (dev, "bindingConditions", json_pack ("[s]", READY));
          json_object_set_new (dev, "bindingFailureConditions", json_pack ("[s]", FAILED));
        }
      json_array_append_new (p.devices, dev);
    }
  *ret = p;
  return 0;
}

static void
ex_reset (void *self)
{
  struct example *d = self;
  memset (d->holder, 0, sizeof (d->holder));
}

/* Takes the devices of a state's list for uid, all or none. */
static int
hold (struct example *d, const char *uid, json_t *devices, nrm_error_t *err)
{
  bool mine[N_DEVICES] = { false };
  size_t i;
  json_t *v;
  if (strlen (uid) >= sizeof (d->holder[0]))
    return nrm_error_set (err, EINVAL, "claim UID `%s` is too long", uid);
  json_array_foreach (devices, i, v)
  {
    const char *name = json_string_value (v);
    int k = device_index (name);
    if (k < 0)
      return nrm_error_set (err, ENODEV, "unknown device `%s`", name ? name : "?");
    if (mine[k])
      return nrm_error_set (err, EINVAL, "device %s is allocated twice", name);
    if (d->holder[k][0] && strcmp (d->holder[k], uid) != 0)
      return nrm_error_set (err, EBUSY, "device %s is held by claim %s", name, d->holder[k]);
    mine[k] = true;
  }
  for (int k = 0; k < N_DEVICES; k++)
    if (mine[k])
      snprintf (d->holder[k], sizeof (d->holder[k]), "%s", uid);
  return 0;
}

static int
ex_prepare (void *self, const struct nrm_claim_view *c, struct nrm_prepared *out, nrm_error_t *err)
{
  struct example *d = self;
  json_t *devices = json_array (), *nodes = json_array (), *mounts = json_array ();
  char list[N_DEVICES * 8] = "";
  for (size_t i = 0; i < c->n_results; i++)
    {
      const char *dev = c->results[i].device;
      char path[64];
      if (device_index (dev) < 0)
        {
          nrm_error_set (err, ENODEV, "unknown device `%s` in pool `%s`", dev, c->results[i].pool);
          goto fail;
        }
      json_array_append_new (devices, json_string (dev));
      if (strlen (list) + strlen (dev) + 2 <= sizeof (list))
        snprintf (list + strlen (list), sizeof (list) - strlen (list), "%s%s", i ? "," : "", dev);
      /* A stand-in for the device's node and a file of its own. */
      snprintf (path, sizeof (path), "/dev/example/%s", dev);
      json_array_append_new (nodes, json_pack ("{s:s, s:s}", "path", path, "hostPath", "/dev/null"));
      snprintf (path, sizeof (path), "/run/example/%s", dev);
      json_array_append_new (mounts, json_pack ("{s:s, s:s, s:[s, s]}", "hostPath", "/dev/null", "containerPath", path,
                                                "options", "ro", "bind"));
    }
  if (hold (d, c->uid, devices, err) < 0)
    goto fail;
  out->state = json_pack ("{s:o}", "devices", devices);
  out->edits.env = json_pack ("[s+]", "EXAMPLE_DEVICES=", list);
  out->edits.device_nodes = nodes;
  out->edits.mounts = mounts;
  out->edits.commit_hook = false; /* nothing for nrm-hook to bind */
  if (d->log)
    d->log (d->log_ctx, NRM_LOG_DEBUG, "%s: claim %s holds %s", d->name, c->uid, list);
  return 0;
fail:
  json_decref (devices);
  json_decref (nodes);
  json_decref (mounts);
  return -1;
}

static int
ex_restore (void *self, const char *uid, json_t *state, nrm_error_t *err)
{
  json_t *devices = json_object_get (state, "devices");
  if (!json_is_array (devices))
    return nrm_error_set (err, EINVAL, "state has no `devices`");
  return hold (self, uid, devices, err);
}

static void
ex_unprepare (void *self, const char *uid, json_t *state)
{
  struct example *d = self;
  (void) state;
  for (int k = 0; k < N_DEVICES; k++)
    if (strcmp (d->holder[k], uid) == 0)
      d->holder[k][0] = '\0';
}

/* Whether the device is a line of the unhealthy file. */
static bool
listed_unhealthy (FILE *f, const char *dev)
{
  char line[256];
  rewind (f);
  while (fgets (line, sizeof (line), f))
    {
      line[strcspn (line, "\r\n")] = '\0';
      if (strcmp (line, dev) == 0)
        return true;
    }
  return false;
}

/* Runs in the framework's health thread, beside prepare: reads nothing
 * but the file. */
static int
ex_health (void *self, struct nrm_health_report *ret, nrm_error_t *err)
{
  struct example *d = self;
  FILE *f = fopen (d->unhealthy, "r");
  if (f == NULL && errno != ENOENT)
    return nrm_error_errno (err, errno, "cannot read %s", d->unhealthy);
  ret->devices = xcalloc (N_DEVICES, sizeof (*ret->devices));
  ret->n = 0;
  for (int i = 0; i < N_DEVICES; i++)
    {
      struct nrm_device_health *h = &ret->devices[ret->n++];
      char name[8];
      snprintf (name, sizeof (name), "dev%d", i);
      h->device = xstrdup (name);
      h->health = NRM_HEALTH_HEALTHY;
      if (f == NULL || !listed_unhealthy (f, name))
        continue;
      h->health = NRM_HEALTH_UNHEALTHY;
      h->message = xasprintf ("listed in %s", d->unhealthy);
      /* Published as the taint example.nrm.io/unhealthy: evicts its pods. */
      h->taint = xstrdup ("unhealthy");
      h->effect = NRM_TAINT_NO_EXECUTE;
    }
  if (f)
    fclose (f);
  return 0;
}

/* Before its pod binds, a claim of the binding device learns whether the
 * device is ready: the failure condition when it is listed unhealthy, else
 * the ready one (a real driver would set the device up here). */
static int
ex_bind (void *self, const struct nrm_claim_view *c, json_t **ret, nrm_error_t *err)
{
  struct example *d = self;
  FILE *f = fopen (d->unhealthy, "r");
  if (f == NULL && errno != ENOENT)
    return nrm_error_errno (err, errno, "cannot read %s", d->unhealthy);
  json_t *out = json_array ();
  for (size_t i = 0; i < c->n_results; i++)
    {
      const struct nrm_alloc_result *r = &c->results[i];
      if (device_index (r->device) != BINDING_DEVICE)
        continue;
      bool bad = f && listed_unhealthy (f, r->device);
      json_t *cond = json_pack ("{s:s, s:s, s:s, s:s}", "type", bad ? FAILED : READY, "status", "True", "reason",
                                bad ? "Unhealthy" : "Ready", "message",
                                bad ? "the device is listed unhealthy" : "the device is set up");
      json_t *st = json_pack ("{s:s, s:s, s:s, s:[o]}", "driver", d->name, "pool", r->pool, "device", r->device,
                              "conditions", cond);
      if (r->share_id)
        json_object_set_new (st, "shareID", json_string (r->share_id));
      json_array_append_new (out, st);
    }
  if (f)
    fclose (f);
  *ret = out;
  return 0;
}

static json_t *
ex_describe (void *self, const char *uid, json_t *state)
{
  (void) self;
  (void) uid;
  json_t *devs = json_object (), *v;
  size_t i;
  json_array_foreach (json_object_get (state, "devices"), i, v)
  {
    if (json_is_string (v))
      json_object_set_new (devs, json_string_value (v), json_object ());
  }
  return json_pack ("{s:o}", "devices", devs);
}

const struct nrm_driver_ops nrm_driver_component = {
  .abi = NRM_DRIVER_ABI,
  .id = "example",
  .default_name = "example." NRM_DEFAULT_DOMAIN,
  .summary = "an example: four whole devices, one claim each (driver/example)",
  .new = ex_new,
  .free = ex_free,
  .pool = ex_pool,
  .reset = ex_reset,
  .prepare = ex_prepare,
  .restore = ex_restore,
  .unprepare = ex_unprepare,
  .health = ex_health,
  .health_fd = ex_health_fd,
  .health_event = ex_health_event,
  .describe = ex_describe,
  .bind = ex_bind,
};
