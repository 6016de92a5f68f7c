/* SPDX-License-Identifier: Apache-2.0 */
/* The driver registry: built-in drivers and shared objects, and the
 * enabled drivers of a node. */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/names.h"
#include "driver/registry.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

/* The built-in drivers: one line each. */
extern const struct nrm_driver_ops nrm_cpu_driver;
extern const struct nrm_driver_ops nrm_memory_driver;
extern const struct nrm_driver_ops nrm_pci_driver;
static const struct nrm_driver_ops *const builtin[] = {
  &nrm_cpu_driver,
  &nrm_memory_driver,
  &nrm_pci_driver,
};

struct nrm_registry
{
  size_t n;
  const struct nrm_driver_ops **ops;
  void **handles; /* dlopen handles, NULL for built-ins */
};

static int
add (struct nrm_registry *r, const struct nrm_driver_ops *ops, void *handle, const char *where, nrm_error_t *err)
{
  if (ops->id == NULL || !nrm_is_dns_label (ops->id) || ops->default_name == NULL
      || !nrm_is_dns_subdomain (ops->default_name, 63))
    return nrm_error_set (err, EINVAL, "driver %s: its id or default name is not a valid name", where);
  if (ops->new == NULL || ops->free == NULL || ops->pool == NULL || ops->reset == NULL || ops->prepare == NULL
      || ops->restore == NULL || ops->unprepare == NULL)
    return nrm_error_set (err, EINVAL, "driver %s (`%s`): a required operation is missing", where, ops->id);
  if (nrm_registry_find (r, ops->id))
    return nrm_error_set (err, EEXIST, "driver %s: a driver `%s` is registered already", where, ops->id);
  r->ops = xrealloc (r->ops, (r->n + 1) * sizeof (*r->ops));
  r->handles = xrealloc (r->handles, (r->n + 1) * sizeof (*r->handles));
  r->ops[r->n] = ops;
  r->handles[r->n] = handle;
  r->n++;
  return 0;
}

int
nrm_registry_new (struct nrm_registry **ret, nrm_error_t *err)
{
  struct nrm_registry *r = xcalloc (1, sizeof (*r));
  for (size_t i = 0; i < sizeof (builtin) / sizeof (builtin[0]); i++)
    if (add (r, builtin[i], NULL, "(built in)", err) < 0)
      {
        nrm_registry_free (r);
        return -1;
      }
  *ret = r;
  return 0;
}

void
nrm_registry_free (struct nrm_registry *r)
{
  if (r == NULL)
    return;
  for (size_t i = 0; i < r->n; i++)
    if (r->handles[i])
      dlclose (r->handles[i]);
  free (r->ops);
  free (r->handles);
  free (r);
}

/* Code that nrm runs as root must be root's (or this user's) and writable
 * by no one else: a file or folder others may write is refused, as sudo
 * refuses its plugins. */
static int
trusted (int fd, const char *what, const char *path, bool folder, nrm_error_t *err)
{
  struct stat st;
  if (fstat (fd, &st) < 0)
    return nrm_error_errno (err, errno, "%s `%s`", what, path);
  if (folder ? !S_ISDIR (st.st_mode) : !S_ISREG (st.st_mode))
    return nrm_error_set (err, EPERM, "%s `%s` is not a %s", what, path, folder ? "folder" : "regular file");
  if (st.st_uid != 0 && st.st_uid != geteuid ())
    return nrm_error_set (err, EPERM, "%s `%s` belongs to user %u, not to root: refusing to load drivers from it", what,
                          path, (unsigned) st.st_uid);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return nrm_error_set (err, EPERM, "%s `%s` is writable by others (mode %04o): refusing to load drivers from it",
                          what, path, (unsigned) (st.st_mode & 07777));
  return 0;
}

int
nrm_registry_load (struct nrm_registry *r, const char *path, nrm_error_t *err)
{
  /* Checked and loaded through one descriptor: the file cannot be swapped
   * in between. */
  cleanup_close int fd = open (path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return nrm_error_errno (err, errno, "driver `%s` cannot be opened", path);
  if (trusted (fd, "driver", path, false, err) < 0)
    return -1;
  char self[64];
  snprintf (self, sizeof (self), "/proc/self/fd/%d", fd);
  void *h = dlopen (self, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return nrm_error_set (err, ENOEXEC, "driver `%s` cannot be loaded: %s", path, dlerror ());
  const struct nrm_driver_ops *ops = dlsym (h, NRM_DRIVER_SYMBOL);
  if (ops == NULL)
    {
      dlclose (h);
      return nrm_error_set (err, ENOEXEC, "driver `%s` has no `%s` table", path, NRM_DRIVER_SYMBOL);
    }
  /* As hwloc checks its components: a table of another ABI is never
   * called, not even for its name. */
  if (ops->abi != NRM_DRIVER_ABI)
    {
      unsigned abi = ops->abi;
      dlclose (h);
      return nrm_error_set (err, ENOEXEC, "driver `%s` was built for driver ABI %u; this nrm has ABI %u: rebuild it",
                            path, abi, NRM_DRIVER_ABI);
    }
  cleanup_free char *where = xasprintf ("`%s`", path);
  if (add (r, ops, h, where, err) < 0)
    {
      dlclose (h);
      return -1;
    }
  return 0;
}

static int
cmp_names (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

int
nrm_registry_load_dir (struct nrm_registry *r, const char *dir, nrm_error_t *err)
{
  DIR *d = opendir (dir);
  struct dirent *de;
  char **names = NULL;
  size_t n = 0;
  int rc = 0;
  if (d == NULL)
    return nrm_error_errno (err, errno, "driver directory `%s`", dir);
  if (trusted (dirfd (d), "driver directory", dir, true, err) < 0)
    {
      closedir (d);
      return -1;
    }
  while ((de = readdir (d)) != NULL)
    {
      size_t len = strlen (de->d_name);
      if (len < 4 || strcmp (de->d_name + len - 3, ".so") != 0 || de->d_name[0] == '.')
        continue;
      names = xrealloc (names, (n + 1) * sizeof (*names));
      names[n++] = xstrdup (de->d_name);
    }
  closedir (d);
  if (n > 0)
    qsort (names, n, sizeof (*names), cmp_names);
  for (size_t i = 0; rc == 0 && i < n; i++)
    {
      cleanup_free char *path = xasprintf ("%s/%s", dir, names[i]);
      rc = nrm_registry_load (r, path, err);
    }
  for (size_t i = 0; i < n; i++)
    free (names[i]);
  free (names);
  return rc;
}

size_t
nrm_registry_size (const struct nrm_registry *r)
{
  return r->n;
}

const struct nrm_driver_ops *
nrm_registry_at (const struct nrm_registry *r, size_t i)
{
  return i < r->n ? r->ops[i] : NULL;
}

const struct nrm_driver_ops *
nrm_registry_find (const struct nrm_registry *r, const char *id)
{
  for (size_t i = 0; i < r->n; i++)
    if (strcmp (r->ops[i]->id, id) == 0)
      return r->ops[i];
  return NULL;
}

json_t *
nrm_driver_ids_parse (const char *list, nrm_error_t *err)
{
  size_t len = strlen (list);
  if (len > 0 && (list[0] == ',' || list[len - 1] == ',' || strstr (list, ",,")))
    return nrm_error_set (err, EINVAL, "driver list `%s` has an empty entry", list), NULL;
  json_t *ids = json_array ();
  for (const char *p = list; *p;)
    {
      size_t n = strcspn (p, ",");
      char label[64];
      snprintf (label, sizeof (label), "%.*s", (int) (n < 63 ? n : 63), p);
      if (n == 0 || n > 63 || !nrm_is_dns_label (label))
        {
          json_decref (ids);
          return nrm_error_set (err, EINVAL, "driver list `%s`: `%s` is not a driver id", list, label), NULL;
        }
      json_array_append_new (ids, json_string (label));
      p += n + (p[n] == ',');
    }
  return ids;
}

bool
nrm_driver_ids_enable (const char *list, const char *id)
{
  nrm_error_t err = NULL;
  size_t i;
  json_t *v;
  bool found = false;
  if (list == NULL)
    return true;
  cleanup_json json_t *ids = nrm_driver_ids_parse (list, &err);
  nrm_error_release (&err);
  json_array_foreach (ids, i, v) { found |= strcmp (json_string_value (v), id) == 0; }
  return found;
}

static int
known_ids (const struct nrm_registry *reg, const char *list, nrm_error_t *err)
{
  cleanup_json json_t *ids = nrm_driver_ids_parse (list, err);
  size_t k;
  json_t *v;
  if (ids == NULL)
    return -1;
  json_array_foreach (ids, k, v)
  {
    if (nrm_registry_find (reg, json_string_value (v)) == NULL)
      {
        char known[256] = "";
        for (size_t i = 0; i < reg->n; i++)
          snprintf (known + strlen (known), sizeof (known) - strlen (known), "%s%s", i ? ", " : "", reg->ops[i]->id);
        return nrm_error_set (err, EINVAL, "unknown driver `%s` (known: %s)", json_string_value (v), known);
      }
  }
  return 0;
}

json_t *
nrm_registry_names (const struct nrm_registry *reg, const struct nrm_driver_selection *sel, nrm_error_t *err)
{
  if (sel->ids && known_ids (reg, sel->ids, err) < 0)
    return NULL;
  json_t *names = json_array ();
  for (size_t i = 0; i < reg->n; i++)
    {
      const struct nrm_driver_ops *ops = reg->ops[i];
      const char *name = json_string_value (json_object_get (sel->names, ops->id));
      if (nrm_driver_ids_enable (sel->ids, ops->id))
        json_array_append_new (names, json_string (name ? name : ops->default_name));
    }
  return names;
}

int
nrm_drivers_open (const struct nrm_registry *reg, const struct nrm_driver_selection *sel,
                  const struct nrm_driver_host *base, struct nrm_drivers *ret, nrm_error_t *err)
{
  struct nrm_drivers d = { 0 };
  if (sel->ids && known_ids (reg, sel->ids, err) < 0)
    return -1;
  d.slots = xcalloc (reg->n + 1, sizeof (*d.slots));
  for (size_t i = 0; i < reg->n; i++)
    {
      const struct nrm_driver_ops *ops = reg->ops[i];
      if (!nrm_driver_ids_enable (sel->ids, ops->id))
        continue;
      const char *name = json_string_value (json_object_get (sel->names, ops->id));
      if (name == NULL)
        name = ops->default_name;
      if (!nrm_is_dns_subdomain (name, 63))
        {
          nrm_drivers_close (&d);
          return nrm_error_set (err, EINVAL, "%s driver name `%s` is not a DNS subdomain of at most 63 characters",
                                ops->id, name);
        }
      for (size_t k = 0; k < d.n; k++)
        if (strcmp (d.slots[k].name, name) == 0)
          {
            nrm_error_set (err, EINVAL, "the %s and %s drivers need different names (both are `%s`)",
                           d.slots[k].ops->id, ops->id, name);
            nrm_drivers_close (&d);
            return -1;
          }
      struct nrm_driver_host h = *base;
      h.name = name;
      h.settings = sel->settings ? json_object_get (sel->settings, ops->id) : NULL;
      struct nrm_driver_slot *s = &d.slots[d.n];
      s->ops = ops;
      s->name = xstrdup (name);
      if (ops->new (&h, &s->self, err) < 0)
        {
          free (s->name);
          nrm_drivers_close (&d);
          return nrm_error_wrap (err, "driver %s", name);
        }
      d.n++;
    }
  *ret = d;
  return 0;
}

void
nrm_drivers_close (struct nrm_drivers *d)
{
  for (size_t i = d->n; i-- > 0;)
    {
      d->slots[i].ops->free (d->slots[i].self);
      free (d->slots[i].name);
    }
  free (d->slots);
  memset (d, 0, sizeof (*d));
}

struct nrm_driver_slot *
nrm_drivers_find (const struct nrm_drivers *d, const char *id)
{
  for (size_t i = 0; i < d->n; i++)
    if (strcmp (d->slots[i].ops->id, id) == 0)
      return &d->slots[i];
  return NULL;
}

json_t *
nrm_health_taints (const char *driver, const struct nrm_health_report *r)
{
  json_t *out = json_object ();
  for (size_t i = 0; i < r->n; i++)
    {
      const struct nrm_device_health *h = &r->devices[i];
      const char *effect = nrm_taint_effect_name (h->effect);
      if (h->device == NULL || h->taint == NULL || effect == NULL)
        continue;
      cleanup_free char *key = xasprintf ("%s/%s", driver, h->taint);
      json_t *list = json_object_get (out, h->device);
      if (list == NULL)
        json_object_set_new (out, h->device, list = json_array ());
      json_array_append_new (list, json_pack ("{s:s, s:s}", "key", key, "effect", effect));
    }
  return out;
}

int
nrm_drivers_slices (const struct nrm_drivers *d, const struct nrm_publish_options *o, json_t *held, json_t *taints,
                    json_t **ret, nrm_error_t *err)
{
  struct nrm_pool *pools = xcalloc (d->n + 1, sizeof (*pools));
  int r = -1;
  size_t made = 0;
  for (; made < d->n; made++)
    {
      const struct nrm_driver_slot *s = &d->slots[made];
      if (s->ops->pool (s->self, json_object_get (held, s->name), &pools[made], err) < 0)
        {
          nrm_error_wrap (err, "driver %s", s->name);
          goto out;
        }
      nrm_pool_taint (&pools[made], json_object_get (taints, s->name));
    }
  if (nrm_slices_build (pools, d->n, o, ret, err) < 0)
    goto out;
  /* Never hand out a slice the API server would refuse. */
  if (nrm_slices_validate (*ret, err) < 0)
    {
      json_decref (*ret);
      *ret = NULL;
      nrm_error_wrap (err, "internal error: generated ResourceSlices are invalid");
      goto out;
    }
  r = 0;
out:
  for (size_t i = 0; i < made; i++)
    nrm_pool_done (&pools[i]);
  free (pools);
  return r;
}

int
nrm_node_slices (const struct nrm_topology *t, const struct nrm_publish_options *o, json_t *settings, json_t **ret,
                 nrm_error_t *err)
{
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  struct nrm_driver_selection sel = { NULL, NULL, settings };
  struct nrm_driver_host h = { .topo = t, .node = o };
  int r = -1;
  if (nrm_registry_new (&reg, err) == 0 && nrm_drivers_open (reg, &sel, &h, &d, err) == 0)
    r = nrm_drivers_slices (&d, o, NULL, NULL, ret, err);
  nrm_drivers_close (&d);
  nrm_registry_free (reg);
  return r;
}
