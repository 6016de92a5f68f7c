/* SPDX-License-Identifier: Apache-2.0 */
/* Huge pages raised on demand for the claims of this node, journaled. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/memory/ondemand.h"
#include "driver/names.h"
#include "memory/hugepages.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"

struct slot
{
  size_t i, k;                    /* numa[i].hugepages[k] */
  unsigned node;                  /* its os index */
  uint64_t size;                  /* page size, bytes */
  uint64_t baseline;              /* pages the administrator configured */
  uint64_t target;                /* pages nrm set */
  uint64_t reserved;              /* pages reserved for the system (reservedMemory) */
  uint64_t room;                  /* pages that may be raised above the baseline */
  bool journaled;                 /* the journal has an entry: baseline and target hold */
  json_t *claims;                 /* uid -> {pages, since} */
  char device[NRM_NUMA_NAME_MAX]; /* numa<N>-hugepages-<size> */
  char size_name[16];             /* 2Mi */
};

struct nrm_ondemand
{
  const struct nrm_fsroot *fsroot;
  char *dir, *ready, *failed;
  const char *name;
  nrm_log_fn log;
  void *log_ctx;
  time_t started;
  int lock_fd; /* the journal's lock, held by the one process that acts, or -1 */
  struct slot *slots;
  size_t n;
};

#define LOG(od, lvl, ...)                                                                                              \
  do                                                                                                                   \
    {                                                                                                                  \
      if ((od)->log)                                                                                                   \
        (od)->log ((od)->log_ctx, lvl, __VA_ARGS__);                                                                   \
    }                                                                                                                  \
  while (0)

static char *
journal_path (const struct nrm_ondemand *od, const struct slot *s)
{
  return xasprintf ("%s/node%u-%" PRIu64 "kB.json", od->dir, s->node, s->size / 1024);
}

static uint64_t
claimed (const struct slot *s)
{
  const char *uid;
  json_t *v;
  uint64_t sum = 0;
  json_object_foreach (s->claims, uid, v) sum += (uint64_t) json_integer_value (json_object_get (v, "pages"));
  return sum;
}

/* What the pool must hold for its claims: the baseline at least. */
static uint64_t
wanted (const struct slot *s)
{
  uint64_t need = s->reserved + claimed (s);
  return need > s->baseline ? need : s->baseline;
}

static int
save (const struct nrm_ondemand *od, struct slot *s, nrm_error_t *err)
{
  cleanup_json json_t *j = json_pack ("{s:I, s:I, s:O}", "baseline", (json_int_t) s->baseline, "target",
                                      (json_int_t) s->target, "claims", s->claims);
  cleanup_free char *text = json_dumps (j, JSON_SORT_KEYS);
  cleanup_free char *path = journal_path (od, s);
  if (nrm_write_atomic (path, text, strlen (text), 0600, err) < 0)
    return nrm_error_wrap (err, "journal of the %s huge pages of NUMA node %u", s->size_name, s->node);
  s->journaled = true;
  return 0;
}

/* The entry goes once the pool is back at its baseline with no claims. */
static void
forget (const struct nrm_ondemand *od, struct slot *s)
{
  cleanup_free char *path = journal_path (od, s);
  if (unlink (path) < 0 && errno != ENOENT)
    {
      LOG (od, NRM_LOG_WARNING, "%s: cannot remove %s: %s", od->name, path, strerror (errno));
      return;
    }
  cleanup_close int dfd = open (od->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0)
    fsync (dfd);
  s->journaled = false;
}

static int
load (struct nrm_ondemand *od, struct slot *s, nrm_error_t *err)
{
  cleanup_free char *path = journal_path (od, s), *text = NULL;
  json_error_t je;
  if (access (path, F_OK) < 0)
    {
      /* Gone (given back by the process that held the lock before). */
      if (s->journaled)
        {
          s->target = s->baseline;
          json_object_clear (s->claims);
          s->journaled = false;
        }
      return 0;
    }
  if (nrm_read_file (path, 1 << 20, &text, NULL, err) < 0)
    return -1;
  cleanup_json json_t *j = json_loads (text, 0, &je);
  json_t *b = json_object_get (j, "baseline"), *t = json_object_get (j, "target"), *c = json_object_get (j, "claims");
  if (!json_is_integer (b) || !json_is_integer (t) || !json_is_object (c) || json_integer_value (b) < 0
      || json_integer_value (t) < 0)
    return nrm_error_set (err, EINVAL, "%s: not a huge page journal (baseline, target, claims)", path);
  const char *uid;
  json_t *v;
  json_object_foreach (c, uid, v)
  {
    json_t *p = json_object_get (v, "pages"), *since = json_object_get (v, "since");
    if (!json_is_integer (p) || json_integer_value (p) < 0 || !json_is_integer (since))
      return nrm_error_set (err, EINVAL, "%s: claim %.64s: expected {pages, since}", path, uid);
  }
  s->baseline = (uint64_t) json_integer_value (b);
  s->target = (uint64_t) json_integer_value (t);
  json_decref (s->claims);
  s->claims = json_incref (c);
  s->journaled = true;
  return 0;
}

/* Sets the kernel's pool to count; 0 when it holds count after. */
static int
set_pool (const struct nrm_ondemand *od, const struct slot *s, uint64_t count, uint64_t *got, nrm_error_t *err)
{
  if (nrm_hugepages_write (od->fsroot, s->node, s->size, count, got, err) < 0)
    return nrm_error_wrap (err, "NUMA node %u: %s huge pages", s->node, s->size_name);
  return 0;
}

/* At start: each journaled pool to the target of its claims. */
static void
recover (struct nrm_ondemand *od, struct slot *s)
{
  nrm_error_t e = NULL;
  uint64_t want = wanted (s), now = 0;
  if (want != s->target)
    {
      s->target = want;
      if (save (od, s, &e) < 0)
        goto fail;
    }
  if (nrm_hugepages_read (od->fsroot, s->node, s->size, &now, &e) < 0)
    goto fail;
  if (now != want && set_pool (od, s, want, &now, &e) < 0)
    goto fail;
  if (now != want)
    LOG (od, NRM_LOG_WARNING, "%s: NUMA node %u: %s huge pages: journaled %" PRIu64 ", the kernel holds %" PRIu64,
         od->name, s->node, s->size_name, want, now);
  else if (json_object_size (s->claims) == 0 && now == s->baseline)
    forget (od, s);
  return;
fail:
  LOG (od, NRM_LOG_WARNING, "%s: %s", od->name, nrm_error_msg (e));
  nrm_error_release (&e);
}

/* Whether this process may change pools: it holds the journal's lock.
 * One that takes it over (nrm status held it a moment, or the last plugin
 * ended) reads the journal again and sets each pool to its target. */
static bool
owner (struct nrm_ondemand *od, bool create)
{
  nrm_error_t e = NULL;
  if (od->lock_fd >= 0)
    return true;
  cleanup_free char *path = xasprintf ("%s/.lock", od->dir);
  /* Only a change makes the folder (in the state folder, which the plugin
   * checked): nrm slices and nrm status leave no trace. */
  if (access (od->dir, F_OK) < 0 && (!create || (mkdir (od->dir, 0700) < 0 && errno != EEXIST)))
    return false;
  cleanup_close int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || flock (fd, LOCK_EX | LOCK_NB) < 0)
    return false;
  od->lock_fd = TAKE_FD (fd);
  for (size_t i = 0; i < od->n; i++)
    {
      if (load (od, &od->slots[i], &e) < 0)
        {
          LOG (od, NRM_LOG_WARNING, "%s: %s", od->name, nrm_error_msg (e));
          nrm_error_release (&e);
          continue;
        }
      if (od->slots[i].journaled)
        recover (od, &od->slots[i]);
    }
  return true;
}

static int
parse_setting (const struct nrm_topology *t, json_t *setting, struct nrm_ondemand *od, nrm_error_t *err)
{
  const char *key;
  json_t *v;
  if (setting == NULL)
    return 0;
  if (!json_is_object (setting))
    return nrm_error_set (err, EINVAL, "key `memory.hugepagesOnDemand` must be an object {page size: amount}");
  json_object_foreach (setting, key, v)
  {
    uint64_t size, room;
    if (nrm_quantity_parse_bytes (key, &size, err) < 0 || size == 0)
      {
        nrm_error_release (err);
        return nrm_error_set (err, EINVAL, "key `memory.hugepagesOnDemand`: `%.32s` is not a page size (2Mi, 1Gi)",
                              key);
      }
    if (!json_is_string (v) || nrm_quantity_parse_bytes (json_string_value (v), &room, err) < 0)
      {
        nrm_error_release (err);
        return nrm_error_set (err, EINVAL, "key `memory.hugepagesOnDemand.%s` must be a quantity string (\"4Gi\")",
                              key);
      }
    if (room % size != 0)
      return nrm_error_set (err, EINVAL, "key `memory.hugepagesOnDemand.%s`: %s is not a whole number of pages", key,
                            json_string_value (v));
    /* A size that a node lacks is left out there: nodes differ. */
    for (size_t s = 0; s < od->n; s++)
      if (od->slots[s].size == size)
        od->slots[s].room = room / size;
  }
  (void) t;
  return 0;
}

int
nrm_ondemand_new (const struct nrm_driver_host *h, json_t *setting, struct nrm_ondemand **ret, nrm_error_t *err)
{
  const struct nrm_topology *t = h->topo;
  bool sysfs = nrm_driver_host_sysfs (h);
  *ret = NULL;
  struct nrm_ondemand *od = xcalloc (1, sizeof (*od));
  od->fsroot = h->fsroot;
  od->name = h->name;
  od->log = h->log;
  od->log_ctx = h->log_ctx;
  od->started = time (NULL);
  od->lock_fd = -1;
  od->ready = xasprintf ("%s/hugepages-ready", h->name);
  od->failed = xasprintf ("%s/hugepages-failed", h->name);
  od->dir = h->state_dir ? xasprintf ("%s/%s.hugepages", h->state_dir, h->name) : NULL;
  for (size_t i = 0; i < t->n_numa; i++)
    for (size_t k = 0; t->numa[i].allowed && k < t->numa[i].n_hugepages; k++)
      {
        od->slots = xrealloc (od->slots, (od->n + 1) * sizeof (*od->slots));
        struct slot *s = &od->slots[od->n++];
        memset (s, 0, sizeof (*s));
        s->i = i;
        s->k = k;
        s->node = t->numa[i].os_index;
        s->size = t->numa[i].hugepages[k].size;
        s->baseline = s->target = t->numa[i].hugepages[k].count;
        s->reserved = t->numa[i].reserved_hugepages ? t->numa[i].reserved_hugepages[k] / s->size : 0;
        s->claims = json_object ();
        cleanup_free char *ps = nrm_pagesize_name (s->size);
        snprintf (s->size_name, sizeof (s->size_name), "%s", ps);
        nrm_numa_name (s->device, sizeof (s->device), s->node, NRM_NUMA_NAME_HUGEPAGES, ps);
      }
  if (parse_setting (t, setting, od, err) < 0)
    {
      nrm_ondemand_free (od);
      return -1;
    }
  bool on = false, journaled = false;
  for (size_t s = 0; s < od->n; s++)
    on |= od->slots[s].room > 0;
  /* A recorded machine has no pools to raise; without nrm's state (nrm
   * run) there is no journal. */
  if (on && (!sysfs || od->dir == NULL))
    {
      for (size_t s = 0; s < od->n; s++)
        od->slots[s].room = 0;
      on = false;
    }
  /* A journal outlives the setting: pages raised before it was turned
   * off still go back. */
  for (size_t s = 0; sysfs && od->dir && s < od->n; s++)
    {
      if (load (od, &od->slots[s], err) < 0)
        {
          nrm_ondemand_free (od);
          return -1;
        }
      journaled |= od->slots[s].journaled;
    }
  if (!journaled && !on)
    {
      nrm_ondemand_free (od);
      return 0;
    }
  owner (od, false);
  *ret = od;
  return 0;
}

void
nrm_ondemand_free (struct nrm_ondemand *od)
{
  if (od == NULL)
    return;
  for (size_t s = 0; s < od->n; s++)
    json_decref (od->slots[s].claims);
  free (od->slots);
  if (od->lock_fd >= 0)
    close (od->lock_fd);
  free (od->dir);
  free (od->ready);
  free (od->failed);
  free (od);
}

static struct slot *
find_slot (const struct nrm_ondemand *od, const char *device)
{
  for (size_t s = 0; od && device && s < od->n; s++)
    if (strcmp (od->slots[s].device, device) == 0)
      return &od->slots[s];
  return NULL;
}

bool
nrm_ondemand_slot (const struct nrm_ondemand *od, size_t i, size_t k, uint64_t *baseline, uint64_t *target,
                   uint64_t *room)
{
  for (size_t s = 0; od && s < od->n; s++)
    {
      const struct slot *x = &od->slots[s];
      if (x->i == i && x->k == k && (x->room > 0 || x->journaled))
        {
          *baseline = x->baseline;
          *target = x->target;
          *room = x->room;
          return true;
        }
    }
  return false;
}

const char *
nrm_ondemand_condition (const struct nrm_ondemand *od, bool failed)
{
  return failed ? od->failed : od->ready;
}

bool
nrm_ondemand_device (const struct nrm_ondemand *od, const char *device)
{
  const struct slot *s = find_slot (od, device);
  return s && s->room > 0;
}

bool
nrm_ondemand_has (const struct nrm_ondemand *od, const char *uid)
{
  for (size_t s = 0; od && s < od->n; s++)
    if (json_object_get (od->slots[s].claims, uid))
      return true;
  return false;
}

static const char *
qfmt (uint64_t bytes, char *buf, unsigned len)
{
  return nrm_quantity_format (bytes, 1, buf, len);
}

/* Lowers (or raises) a pool to what its claims need now; journal first. */
static int
settle (struct nrm_ondemand *od, struct slot *s, nrm_error_t *err)
{
  uint64_t want = wanted (s), got;
  if (want != s->target)
    {
      s->target = want;
      if (save (od, s, err) < 0)
        return -1;
      if (set_pool (od, s, want, &got, err) < 0)
        return -1;
      if (got != want)
        return nrm_error_set (err, EAGAIN, "NUMA node %u: %s huge pages: set to %" PRIu64 ", the kernel holds %" PRIu64,
                              s->node, s->size_name, want, got);
    }
  if (json_object_size (s->claims) == 0 && s->target == s->baseline)
    forget (od, s);
  return 0;
}

void
nrm_ondemand_give (struct nrm_ondemand *od, const char *uid)
{
  if (od && !nrm_ondemand_has (od, uid))
    return;
  if (od && !owner (od, false))
    {
      /* Its entry stays: the owner gives it back once it is stale. */
      LOG (od, NRM_LOG_WARNING, "%s: claim %s: another nrm process holds %s: its huge pages stay for now", od->name,
           uid, od->dir);
      return;
    }
  for (size_t i = 0; od && i < od->n; i++)
    {
      struct slot *s = &od->slots[i];
      nrm_error_t e = NULL;
      if (json_object_get (s->claims, uid) == NULL)
        continue;
      json_object_del (s->claims, uid);
      if (settle (od, s, &e) < 0)
        {
          LOG (od, NRM_LOG_WARNING, "%s: claim %s: giving huge pages back: %s", od->name, uid, nrm_error_msg (e));
          nrm_error_release (&e);
        }
      else
        LOG (od, NRM_LOG_INFO, "%s: claim %s: NUMA node %u: %s huge pages at %" PRIu64 " (baseline %" PRIu64 ")",
             od->name, uid, s->node, s->size_name, s->target, s->baseline);
    }
}

/* A claim of the journal: its pools hold their targets (a crash in the
 * middle of putting a short raise back leaves the entry, and the start
 * could not raise the pool again), else the claim lets go of them. */
static int
verify (struct nrm_ondemand *od, const char *uid, nrm_error_t *err)
{
  for (size_t i = 0; i < od->n; i++)
    {
      struct slot *s = &od->slots[i];
      uint64_t now = 0;
      if (json_object_get (s->claims, uid) == NULL)
        continue;
      if (nrm_hugepages_read (od->fsroot, s->node, s->size, &now, err) < 0)
        return nrm_error_wrap (err, "NUMA node %u: %s huge pages", s->node, s->size_name);
      if (now < s->target && set_pool (od, s, s->target, &now, err) < 0)
        return -1;
      if (now < s->target)
        {
          nrm_error_set (err, ENOMEM,
                         "NUMA node %u: %s huge pages: the pool holds %" PRIu64 " of the %" PRIu64
                         " journaled (memory too fragmented)",
                         s->node, s->size_name, now, s->target);
          nrm_ondemand_give (od, uid);
          return -1;
        }
    }
  return 0;
}

int
nrm_ondemand_take (struct nrm_ondemand *od, const char *uid, json_t *want, const uint64_t *unclaimed, nrm_error_t *err)
{
  const char *dev;
  json_t *v;
  char q1[32], q2[32];
  if (!owner (od, true))
    return nrm_error_set (err, EBUSY, "another nrm process holds the huge page journal %s", od->dir);
  if (nrm_ondemand_has (od, uid))
    return verify (od, uid, err);
  /* A pool nrm has not raised yet: its baseline is what the administrator
   * set, also after nrm started. */
  json_object_foreach (want, dev, v)
  {
    struct slot *s = find_slot (od, dev);
    uint64_t now;
    if (s == NULL || s->room == 0 || s->journaled)
      continue;
    if (nrm_hugepages_read (od->fsroot, s->node, s->size, &now, err) < 0)
      return nrm_error_wrap (err, "NUMA node %u: %s huge pages", s->node, s->size_name);
    s->baseline = s->target = now;
  }
  /* First what every pool needs, against the node's memory: nothing is
   * touched when a raise cannot fit. */
  cleanup_free uint64_t *more = xcalloc (od->n + 1, sizeof (uint64_t));
  json_object_foreach (want, dev, v)
  {
    struct slot *s = find_slot (od, dev);
    if (s == NULL || s->room == 0)
      continue;
    uint64_t bytes = (uint64_t) json_integer_value (v);
    if (bytes % s->size != 0)
      return nrm_error_set (err, EINVAL, "device %s: %" PRIu64 " bytes are not whole %s pages", dev, bytes,
                            s->size_name);
    uint64_t pages = bytes / s->size, need = s->reserved + claimed (s) + pages;
    if (need > s->baseline + s->room)
      return nrm_error_set (err, ENOSPC,
                            "NUMA node %u: %s huge pages: %" PRIu64 " pages needed, more than the baseline %" PRIu64
                            " and the %" PRIu64 " that may be raised",
                            s->node, s->size_name, need, s->baseline, s->room);
    more[s - od->slots] = need > s->target ? need - s->target : 0;
  }
  for (size_t i = 0; i < od->n; i++)
    {
      struct slot *s = &od->slots[i];
      uint64_t bytes = 0, free_mem;
      bool known;
      nrm_error_t e = NULL;
      /* Every raise of the node's pools together. */
      for (size_t j = 0; j < od->n; j++)
        if (od->slots[j].i == s->i)
          bytes += more[j] * od->slots[j].size;
      if (more[i] == 0)
        continue;
      if (bytes > unclaimed[s->i])
        return nrm_error_set (err, ENOSPC,
                              "NUMA node %u: %s huge pages: %" PRIu64 " more pages (%s) do not fit in the %s of its "
                              "memory that no claim holds",
                              s->node, s->size_name, more[i], qfmt (bytes, q1, sizeof (q1)),
                              qfmt (unclaimed[s->i], q2, sizeof (q2)));
      if (nrm_node_mem_free (od->fsroot, s->node, &free_mem, &known, &e) < 0)
        {
          LOG (od, NRM_LOG_DEBUG, "%s: %s", od->name, nrm_error_msg (e));
          nrm_error_release (&e);
        }
      /* The kernel would have to reclaim page cache or swap for them:
       * the pod goes to a node that has them instead. */
      else if (known && bytes > free_mem)
        return nrm_error_set (
            err, ENOMEM, "NUMA node %u: %s huge pages: %" PRIu64 " more pages (%s) needed, the node has %s free",
            s->node, s->size_name, more[i], qfmt (bytes, q1, sizeof (q1)), qfmt (free_mem, q2, sizeof (q2)));
    }
  /* Then each pool: journal, kernel, read back. */
  json_object_foreach (want, dev, v)
  {
    struct slot *s = find_slot (od, dev);
    if (s == NULL || s->room == 0 || json_object_get (s->claims, uid))
      continue;
    uint64_t pages = (uint64_t) json_integer_value (v) / s->size, was = s->target, got = 0;
    json_object_set_new (s->claims, uid,
                         json_pack ("{s:I, s:I}", "pages", (json_int_t) pages, "since", (json_int_t) time (NULL)));
    uint64_t target = wanted (s);
    s->target = target > was ? target : was;
    if (save (od, s, err) < 0)
      goto undo;
    if (s->target == was)
      continue;
    if (set_pool (od, s, s->target, &got, err) < 0)
      goto undo;
    if (got < s->target)
      {
        nrm_error_set (err, ENOMEM,
                       "NUMA node %u: %s huge pages: asked the kernel for %" PRIu64 " (%" PRIu64
                       " for this claim), it gave %" PRIu64 " (memory too fragmented); put back to %" PRIu64,
                       s->node, s->size_name, s->target, pages, got, was);
        goto undo;
      }
    LOG (od, NRM_LOG_INFO, "%s: claim %s: NUMA node %u: %s huge pages raised to %" PRIu64 " (baseline %" PRIu64 ")",
         od->name, uid, s->node, s->size_name, s->target, s->baseline);
  }
  return 0;
undo:
  /* Every pool of the claim back to what the others need. */
  nrm_ondemand_give (od, uid);
  return -1;
}

void
nrm_ondemand_give_stale (struct nrm_ondemand *od, time_t now, bool (*held) (void *ctx, const char *uid), void *ctx)
{
  if (od == NULL || !owner (od, false))
    return;
  for (size_t i = 0; od && i < od->n; i++)
    {
      const char *uid;
      json_t *v, *tmp;
      cleanup_json json_t *stale = json_array ();
      json_object_foreach_safe (od->slots[i].claims, tmp, uid, v)
      {
        time_t since = (time_t) json_integer_value (json_object_get (v, "since"));
        if (since < od->started)
          since = od->started;
        if (!held (ctx, uid) && now - since >= NRM_ONDEMAND_STALE_S)
          json_array_append_new (stale, json_string (uid));
      }
      size_t k;
      json_array_foreach (stale, k, v)
      {
        LOG (od, NRM_LOG_INFO, "%s: claim %s bound huge pages and was not prepared: giving them back", od->name,
             json_string_value (v));
        nrm_ondemand_give (od, json_string_value (v));
      }
    }
}
