/* SPDX-License-Identifier: Apache-2.0 */
/* Which PCI functions other DRA drivers and device plugins serve (see
 * others.h for the sources and the rule grammar, docs/coexistence.md for
 * the upstream facts). Every refresh builds a whole new state and swaps it
 * in only when every source was read, so a bad checkpoint leaves the last
 * good one in force. */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/pci/others.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/text.h"
#include "nrm/base/xalloc.h"

#define CHECKPOINT_NAME "kubelet_internal_checkpoint"
/* The checkpoint holds every container's allocation response too. */
#define CHECKPOINT_MAX (64u << 20)
/* Bounds on what one folder may add, so that a flood of files costs little. */
#define MAX_ENTRIES 4096
#define NAME_SHOWN 160

enum
{
  CLASS_GPU = 1 << 0,
  CLASS_NIC = 1 << 1,
  CLASS_IB = 1 << 2,
  CLASS_NVME = 1 << 3,
  CLASS_ACCEL = 1 << 4,
  CLASS_COPROC = 1 << 5,
  CLASS_FPGA = 1 << 6,
};

static const struct
{
  const char *name;
  unsigned bit;
} class_names[] = {
  { "gpu", CLASS_GPU },     { "nic", CLASS_NIC },       { "ib", CLASS_IB },     { "nvme", CLASS_NVME },
  { "accel", CLASS_ACCEL }, { "coproc", CLASS_COPROC }, { "fpga", CLASS_FPGA },
};

/* One rule: a function matches when every set field matches. A rule with
 * nothing_matched set only reports a registration that takes nothing. */
struct rule
{
  char *who;
  char *what;
  int vendor;       /* -1: any */
  unsigned classes; /* 0: any */
  bool vf_only;
  bool nothing;
  char bus_id[13]; /* "" : any */
};

struct state
{
  struct rule *rules;
  size_t n, cap;
};

struct nrm_pci_others
{
  char *kubelet_dir, *registry_dir, *dp_dir, *plugins_dir, *parent_dir;
  char **skip; /* the configuration's rules, as given */
  char **own;  /* own:DOMAIN, plus nrm.io */
  size_t nskip, nown;
  struct state st;
  int ifd;
  int wd_registry, wd_dp, wd_kubelet, wd_parent;
};

/* Rules of the known DRA drivers, in the grammar of others.h. */
static const struct
{
  const char *name;
  const char *rules[3];
} known_drivers[] = {
  { "gpu.nvidia.com", { "vendor:10de,class:gpu" } },
  /* IMEX channels: no PCI function of its own. */
  { "compute-domain.nvidia.com", { NULL } },
  { "gpu.intel.com", { "vendor:8086,class:gpu" } },
  { "gaudi.intel.com", { "vendor:1da3,class:accel" } },
  { "npu.intel.com", { "vendor:8086,class:accel" } },
  { "qat.intel.com", { "vendor:8086,class:coproc" } },
  /* Instinct parts are processing accelerators (0x1200), the rest GPUs. */
  { "gpu.amd.com", { "vendor:1002,class:gpu", "vendor:1002,class:accel" } },
  { "dra.net", { "class:nic", "class:ib" } },
  { "sriovnetwork.k8snetworkplumbingwg.io", { "class:nic,vf", "class:ib,vf" } },
};

/* Rules of the known device-plugin resources: an exact name, or a prefix
 * (ending in '/', '.' or '-'). */
static const struct
{
  const char *name;
  bool prefix;
  const char *rules[3];
} known_resources[] = {
  { "nvidia.com/gpu", false, { "vendor:10de,class:gpu" } },
  /* Renamed shared GPUs (time-slicing, MPS) and MIG profiles. */
  { "nvidia.com/gpu.", true, { "vendor:10de,class:gpu" } },
  { "nvidia.com/mig-", true, { "vendor:10de,class:gpu" } },
  { "amd.com/", true, { "vendor:1002,class:gpu", "vendor:1002,class:accel" } },
  { "gpu.intel.com/", true, { "vendor:8086,class:gpu" } },
  { "qat.intel.com/", true, { "vendor:8086,class:coproc" } },
  { "npu.intel.com/", true, { "vendor:8086,class:accel" } },
  { "habana.ai/", true, { "vendor:1da3,class:accel" } },
};

/* Device-plugin resource namespaces that are not the SR-IOV plugin's even
 * when their socket looks like <prefix>_<name>.sock. */
static bool
known_resource (const char *res, size_t *idx)
{
  for (size_t i = 0; i < sizeof (known_resources) / sizeof (known_resources[0]); i++)
    {
      const char *k = known_resources[i].name;
      if (known_resources[i].prefix ? strncmp (res, k, strlen (k)) == 0 && res[strlen (k)] != '\0'
                                    : strcmp (res, k) == 0)
        {
          if (idx)
            *idx = i;
          return true;
        }
    }
  return false;
}

/* --- rules ------------------------------------------------------------ */

static void
state_clear (struct state *st)
{
  for (size_t i = 0; i < st->n; i++)
    {
      free (st->rules[i].who);
      free (st->rules[i].what);
    }
  free (st->rules);
  memset (st, 0, sizeof (*st));
}

static struct rule *
state_add (struct state *st, const char *who)
{
  if (st->n == st->cap)
    {
      st->cap = st->cap ? 2 * st->cap : 16;
      st->rules = xrealloc (st->rules, st->cap * sizeof (st->rules[0]));
    }
  struct rule *r = &st->rules[st->n++];
  memset (r, 0, sizeof (*r));
  r->vendor = -1;
  r->who = xstrdup (who);
  return r;
}

static void
add_nothing (struct state *st, const char *who, const char *what)
{
  struct rule *r = state_add (st, who);
  r->nothing = true;
  r->what = xstrdup (what);
}

static int
hexval (int c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  c = tolower (c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* DDDD:BB:DD.F, hex, a 4-digit domain (the pciBusID attribute's form);
 * written lowercase into out[13]. */
static bool
parse_bus_id (const char *s, size_t len, char out[13])
{
  static const char shape[] = "xxxx:xx:xx.x";
  if (len != sizeof (shape) - 1)
    return false;
  for (size_t i = 0; i < len; i++)
    {
      if (shape[i] == 'x' ? hexval ((unsigned char) s[i]) < 0 : s[i] != shape[i])
        return false;
      out[i] = (char) tolower ((unsigned char) s[i]);
    }
  /* Device 0-1f, function 0-7. */
  if (hexval ((unsigned char) s[8]) > 1 || hexval ((unsigned char) s[11]) > 7)
    return false;
  out[len] = '\0';
  return true;
}

static bool
parse_class (const char *s, size_t len, unsigned *bit)
{
  for (size_t i = 0; i < sizeof (class_names) / sizeof (class_names[0]); i++)
    if (strlen (class_names[i].name) == len && memcmp (class_names[i].name, s, len) == 0)
      {
        *bit = class_names[i].bit;
        return true;
      }
  return false;
}

static const char *
class_name_of (unsigned bit)
{
  for (size_t i = 0; i < sizeof (class_names) / sizeof (class_names[0]); i++)
    if (class_names[i].bit == bit)
      return class_names[i].name;
  return "?";
}

/* A matching rule (a bus id, or terms joined by ','), parsed into r's match
 * fields and its description. */
static int
parse_match (const char *text, struct rule *r, nrm_error_t *err)
{
  if (parse_bus_id (text, strlen (text), r->bus_id))
    {
      r->what = xasprintf ("the function %s", r->bus_id);
      return 0;
    }
  r->bus_id[0] = '\0';
  const char *p = text;
  bool any = false;
  while (true)
    {
      const char *end = strchr (p, ',');
      size_t len = end ? (size_t) (end - p) : strlen (p);
      if (len > 7 && memcmp (p, "vendor:", 7) == 0)
        {
          if (len != 11 || r->vendor >= 0)
            goto bad;
          int v = 0;
          for (size_t i = 7; i < 11; i++)
            {
              int h = hexval ((unsigned char) p[i]);
              if (h < 0)
                goto bad;
              v = v * 16 + h;
            }
          r->vendor = v;
        }
      else if (len > 6 && memcmp (p, "class:", 6) == 0)
        {
          unsigned bit;
          if (r->classes || !parse_class (p + 6, len - 6, &bit))
            goto bad;
          r->classes = bit;
        }
      else if (len == 2 && memcmp (p, "vf", 2) == 0)
        {
          if (r->vf_only)
            goto bad;
          r->vf_only = true;
        }
      else
        goto bad;
      any = true;
      if (end == NULL)
        break;
      p = end + 1;
    }
  if (!any)
    goto bad;
  char vendor[16] = "any vendor";
  if (r->vendor >= 0)
    snprintf (vendor, sizeof (vendor), "vendor %04x", (unsigned) r->vendor);
  r->what = xasprintf ("%s%s, %s", r->vf_only ? "SR-IOV VFs, " : "", vendor,
                       r->classes ? class_name_of (r->classes) : "any class");
  return 0;
bad:;
  cleanup_free char *q = nrm_quote (text, strlen (text), NAME_SHOWN);
  return nrm_error_set (err, EINVAL,
                        "bad coexistence rule \"%s\": expected DDDD:BB:DD.F, vendor:HHHH, class:NAME (gpu, nic, ib, "
                        "nvme, accel, coproc, fpga) and vf joined by ',', driver:NAME, resource:NAME or own:DOMAIN",
                        q);
}

static size_t
driver_index (const char *name)
{
  for (size_t i = 0; i < sizeof (known_drivers) / sizeof (known_drivers[0]); i++)
    if (strcmp (known_drivers[i].name, name) == 0)
      return i;
  return (size_t) -1;
}

/* Adds the rules of a known table entry (which cannot fail to parse). */
static void
add_rules (struct state *st, const char *who, const char *const *rules, size_t max)
{
  if (rules[0] == NULL)
    {
      add_nothing (st, who, "no PCI function");
      return;
    }
  for (size_t i = 0; i < max && rules[i]; i++)
    {
      struct rule *r = state_add (st, who);
      nrm_error_t err = NULL;
      if (parse_match (rules[i], r, &err) < 0)
        abort (); /* the tables above are wrong */
    }
}

static void
add_driver (struct state *st, size_t idx, const char *who)
{
  add_rules (st, who, known_drivers[idx].rules, 3);
}

/* A rule of the configuration: into st when st is not NULL, else only
 * checked. own: rules go to *own when own is not NULL. */
static int
apply_rule (const char *text, struct state *st, char **own, nrm_error_t *err)
{
  cleanup_free char *who = xasprintf ("configuration: %s", text);
  if (strncmp (text, "driver:", 7) == 0)
    {
      size_t idx = driver_index (text + 7);
      if (idx == (size_t) -1)
        {
          cleanup_free char *q = nrm_quote (text, strlen (text), NAME_SHOWN);
          return nrm_error_set (err, EINVAL, "bad coexistence rule \"%s\": not a known DRA driver", q);
        }
      if (st)
        add_driver (st, idx, who);
      return 0;
    }
  if (strncmp (text, "resource:", 9) == 0)
    {
      size_t idx;
      if (!known_resource (text + 9, &idx))
        {
          cleanup_free char *q = nrm_quote (text, strlen (text), NAME_SHOWN);
          return nrm_error_set (err, EINVAL, "bad coexistence rule \"%s\": not a known device-plugin resource", q);
        }
      if (st)
        add_rules (st, who, known_resources[idx].rules, 3);
      return 0;
    }
  if (strncmp (text, "own:", 4) == 0)
    {
      const char *d = text + 4;
      bool ok = *d != '\0' && strlen (d) <= 253;
      for (const char *c = d; *c && ok; c++)
        ok = islower ((unsigned char) *c) || isdigit ((unsigned char) *c) || *c == '-' || *c == '.';
      if (!ok || *d == '.' || *d == '-')
        {
          cleanup_free char *q = nrm_quote (text, strlen (text), NAME_SHOWN);
          return nrm_error_set (err, EINVAL, "bad coexistence rule \"%s\": own: takes a DNS domain", q);
        }
      if (own)
        *own = xstrdup (d);
      return 0;
    }
  struct rule tmp = { .vendor = -1 };
  if (parse_match (text, &tmp, err) < 0)
    return -1;
  if (st)
    {
      struct rule *r = state_add (st, who);
      free (r->who);
      *r = tmp;
      r->who = TAKE_PTR (who);
    }
  else
    free (tmp.what);
  return 0;
}

int
nrm_pci_others_check_rule (const char *rule, nrm_error_t *err)
{
  return apply_rule (rule, NULL, NULL, err);
}

/* --- the plugin registry ---------------------------------------------- */

/* Whether name is `d`, `d-<more>` (a rolling update's form). */
static bool
is_name (const char *name, const char *d)
{
  size_t n = strlen (d);
  return strncmp (name, d, n) == 0 && (name[n] == '\0' || (name[n] == '-' && name[n + 1] != '\0'));
}

static bool
is_own (const struct nrm_pci_others *o, const char *base)
{
  /* The domain as the whole name, its end, or before a rolling-update
   * suffix: "pci.nrm.io", "pci.nrm.io-<uid>". */
  for (size_t i = 0; i < o->nown; i++)
    {
      const char *d = o->own[i];
      size_t n = strlen (d);
      for (const char *p = base; (p = strstr (p, d)) != NULL; p++)
        if ((p == base || p[-1] == '.') && (p[n] == '\0' || p[n] == '-'))
          return true;
    }
  return false;
}

/* The hashed form of a rolling update's socket: "dra-" and 22 characters of
 * unpadded URL-safe base64 (16 bytes). */
static bool
is_hashed (const char *base)
{
  if (strncmp (base, "dra-", 4) != 0 || strlen (base) != 4 + 22)
    return false;
  for (const char *c = base + 4; *c; c++)
    if (!isalnum ((unsigned char) *c) && *c != '-' && *c != '_')
      return false;
  return true;
}

static bool
is_socket_at (int dfd, const char *name)
{
  struct stat sb;
  return fstatat (dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK (sb.st_mode);
}

/* Opens a folder; a missing one is *dfd = -1 and no error. */
static int
open_dir (const char *path, int *dfd, nrm_error_t *err)
{
  *dfd = open (path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*dfd < 0 && errno != ENOENT && errno != ENOTDIR)
    return nrm_error_errno (err, errno, "cannot open `%s`", path);
  return 0;
}

/* The socket names of a folder, sorted, at most MAX_ENTRIES. */
static int
list_sockets (const char *path, char ***ret, size_t *n, nrm_error_t *err)
{
  *ret = NULL;
  *n = 0;
  cleanup_close int dfd = -1;
  if (open_dir (path, &dfd, err) < 0)
    return -1;
  if (dfd < 0)
    return 0;
  DIR *d = nrm_opendir_at (dfd);
  if (d == NULL)
    return nrm_error_errno (err, errno, "cannot read `%s`", path);
  char **names = NULL;
  size_t cnt = 0;
  struct dirent *e;
  while ((e = readdir (d)) != NULL && cnt < MAX_ENTRIES)
    {
      /* The kubelet ignores names that start with '.'. */
      if (e->d_name[0] == '.' || !is_socket_at (dfd, e->d_name))
        continue;
      names = xrealloc (names, (cnt + 1) * sizeof (names[0]));
      names[cnt++] = xstrdup (e->d_name);
    }
  closedir (d);
  for (size_t i = 1; i < cnt; i++)
    for (size_t j = i; j > 0 && strcmp (names[j - 1], names[j]) > 0; j--)
      {
        char *t = names[j];
        names[j] = names[j - 1];
        names[j - 1] = t;
      }
  *ret = names;
  *n = cnt;
  return 0;
}

static void
free_names (char **names, size_t n)
{
  for (size_t i = 0; i < n; i++)
    free (names[i]);
  free (names);
}

/* Whether driver name already registered under its own name. */
static bool
registered (const struct state *st, const char *name)
{
  size_t n = strlen (name);
  for (size_t i = 0; i < st->n; i++)
    if (strncmp (st->rules[i].who, name, n) == 0 && st->rules[i].who[n] == ' ')
      return true;
  return false;
}

/* Drivers with a DRA socket in <plugins>/<driver>/ (dra.sock, dra-<uid>.sock),
 * for registration sockets whose name is hashed. */
static int
hashed_drivers (const struct nrm_pci_others *o, struct state *st, size_t nhashed, nrm_error_t *err)
{
  cleanup_close int dfd = -1;
  if (open_dir (o->plugins_dir, &dfd, err) < 0)
    return -1;
  size_t found = 0;
  if (dfd >= 0)
    {
      DIR *d = nrm_opendir_at (dfd);
      if (d == NULL)
        return nrm_error_errno (err, errno, "cannot read `%s`", o->plugins_dir);
      struct dirent *e;
      size_t seen = 0;
      while ((e = readdir (d)) != NULL && seen++ < MAX_ENTRIES)
        {
          size_t idx = driver_index (e->d_name);
          if (idx == (size_t) -1 || registered (st, e->d_name))
            continue;
          cleanup_close int sub = openat (dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (sub < 0)
            continue;
          DIR *sd = nrm_opendir_at (sub);
          if (sd == NULL)
            continue;
          bool has = false;
          struct dirent *f;
          while (!has && (f = readdir (sd)) != NULL)
            has = (strcmp (f->d_name, "dra.sock") == 0
                   || (strncmp (f->d_name, "dra-", 4) == 0 && strlen (f->d_name) > 9
                       && strcmp (f->d_name + strlen (f->d_name) - 5, ".sock") == 0))
                  && is_socket_at (sub, f->d_name);
          closedir (sd);
          if (!has)
            continue;
          cleanup_free char *who
              = xasprintf ("%s (DRA driver registered with the kubelet under a hashed socket name)", e->d_name);
          add_driver (st, idx, who);
          found++;
        }
      closedir (d);
    }
  if (found == 0)
    add_nothing (st,
                 nhashed > 1 ? "DRA registrations under hashed socket names"
                             : "a DRA registration under a hashed socket name",
                 "not matched (no known driver with a socket in the plugins folder)");
  return 0;
}

/* A device-plugin socket's resource name, or NULL; *sriov when the name has
 * the SR-IOV network device plugin's form and no known namespace. */
static char *
socket_resource (const char *name, bool *sriov)
{
  *sriov = false;
  size_t len = strlen (name);
  bool dot_sock = len > 5 && strcmp (name + len - 5, ".sock") == 0;
  size_t stem = dot_sock ? len - 5 : len;
  /* NVIDIA: nvidia-<name>.sock for nvidia.com/<name>. */
  if (dot_sock && strncmp (name, "nvidia-", 7) == 0 && stem > 7)
    return xasprintf ("nvidia.com/%.*s", (int) (stem - 7), name + 7);
  /* Intel: <namespace>-<type>.sock for <namespace>/<type>. */
  const char *intel = strstr (name, ".intel.com-");
  if (dot_sock && intel && (size_t) (intel - name) + 11 < stem)
    return xasprintf ("%.*s/%.*s", (int) (intel - name + 10), name, (int) (stem - (intel - name) - 11), intel + 11);
  /* <namespace>_<name>: the device-plugin manager's form (amd.com_gpu, no
   * suffix) and the SR-IOV plugin's (<prefix>_<name>.sock). */
  const char *us = memchr (name, '_', stem);
  if (us && us > name && (size_t) (us - name) + 1 < stem && memchr (name, '.', (size_t) (us - name)))
    {
      char *res = xasprintf ("%.*s/%.*s", (int) (us - name), name, (int) (stem - (us - name) - 1), us + 1);
      *sriov = dot_sock && !known_resource (res, NULL);
      return res;
    }
  return NULL;
}

/* --- the device-plugin checkpoint ------------------------------------- */

struct resource
{
  char *name;
  char **ids; /* PCI addresses, lowercase, when every id is one */
  size_t nids, total;
  bool all_bus_ids;
  bool in_checkpoint, socket, sriov;
};

struct resources
{
  struct resource *v;
  size_t n;
};

static void
resources_clear (struct resources *rs)
{
  for (size_t i = 0; i < rs->n; i++)
    {
      free (rs->v[i].name);
      free_names (rs->v[i].ids, rs->v[i].nids);
    }
  free (rs->v);
  rs->v = NULL;
  rs->n = 0;
}

static struct resource *
resource_get (struct resources *rs, const char *name)
{
  for (size_t i = 0; i < rs->n; i++)
    if (strcmp (rs->v[i].name, name) == 0)
      return &rs->v[i];
  rs->v = xrealloc (rs->v, (rs->n + 1) * sizeof (rs->v[0]));
  struct resource *r = &rs->v[rs->n++];
  memset (r, 0, sizeof (*r));
  r->name = xstrdup (name);
  r->all_bus_ids = true;
  return r;
}

/* An extended resource name as the kubelet accepts it: printable, no
 * spaces; checked so that it can go into messages and JSON as it is. */
static bool
resource_name_ok (const char *s)
{
  size_t n = strlen (s);
  if (n == 0 || n > 316 || strchr (s, '/') == NULL)
    return false;
  for (const char *c = s; *c; c++)
    if (!isalnum ((unsigned char) *c) && *c != '.' && *c != '-' && *c != '_' && *c != '/')
      return false;
  return true;
}

/* The checkpoint as pkg/kubelet/cm/devicemanager/checkpoint writes it:
 * {"Data": {"PodDeviceEntries": [...], "RegisteredDevices": {resource:
 * [device id, ...]}}, "Checksum": N}. The checksum (FNV-32a over Go's
 * printing of the data) cannot be recomputed here: the kubelet replaces the
 * file atomically, so a torn file fails to parse instead. */
static int
parse_checkpoint (const char *text, size_t len, const char *path, struct resources *rs, nrm_error_t *err)
{
  json_error_t jerr;
  cleanup_json json_t *root = json_loadb (text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL)
    return nrm_error_set (err, EINVAL, "%s: not JSON: %s (line %d)", path, jerr.text, jerr.line);
  json_t *data = json_object_get (root, "Data");
  json_t *sum = json_object_get (root, "Checksum");
  if (!json_is_object (data) || !json_is_integer (sum) || json_integer_value (sum) < 0)
    return nrm_error_set (err, EINVAL, "%s: not the kubelet's device-plugin checkpoint (no Data object and Checksum)",
                          path);
  json_t *entries = json_object_get (data, "PodDeviceEntries");
  if (entries && !json_is_array (entries) && !json_is_null (entries))
    return nrm_error_set (err, EINVAL, "%s: Data.PodDeviceEntries is not a list", path);
  json_t *reg = json_object_get (data, "RegisteredDevices");
  if (reg == NULL || json_is_null (reg))
    return 0;
  if (!json_is_object (reg))
    return nrm_error_set (err, EINVAL, "%s: Data.RegisteredDevices is not an object", path);
  const char *key;
  json_t *ids;
  size_t count = 0;
  json_object_foreach (reg, key, ids)
  {
    if (!resource_name_ok (key))
      {
        cleanup_free char *q = nrm_quote (key, strlen (key), NAME_SHOWN);
        return nrm_error_set (err, EINVAL, "%s: Data.RegisteredDevices: \"%s\" is not a resource name", path, q);
      }
    if (!json_is_array (ids) && !json_is_null (ids))
      return nrm_error_set (err, EINVAL, "%s: Data.RegisteredDevices[\"%s\"] is not a list", path, key);
    if (++count > MAX_ENTRIES)
      return nrm_error_set (err, E2BIG, "%s: more than %d resources", path, MAX_ENTRIES);
    struct resource *r = resource_get (rs, key);
    r->in_checkpoint = true;
    size_t i;
    json_t *id;
    json_array_foreach (ids, i, id)
    {
      if (!json_is_string (id))
        return nrm_error_set (err, EINVAL, "%s: Data.RegisteredDevices[\"%s\"][%zu] is not a string", path, key, i);
      char bus[13];
      r->total++;
      if (!parse_bus_id (json_string_value (id), json_string_length (id), bus))
        r->all_bus_ids = false;
      else if (r->nids < MAX_ENTRIES)
        {
          r->ids = xrealloc (r->ids, (r->nids + 1) * sizeof (r->ids[0]));
          r->ids[r->nids++] = xstrdup (bus);
        }
    }
  }
  return 0;
}

int
nrm_pci_others_check_checkpoint (const char *text, size_t len, nrm_error_t *err)
{
  struct resources rs = { 0 };
  int rc = parse_checkpoint (text, len, "checkpoint", &rs, err);
  resources_clear (&rs);
  return rc;
}

static int
read_checkpoint (const struct nrm_pci_others *o, struct resources *rs, nrm_error_t *err)
{
  cleanup_close int dfd = -1;
  if (open_dir (o->dp_dir, &dfd, err) < 0)
    return -1;
  if (dfd < 0)
    return 0;
  cleanup_free char *text = NULL;
  size_t len = 0;
  cleanup_free char *path = xasprintf ("%s/%s", o->dp_dir, CHECKPOINT_NAME);
  nrm_error_t rerr = NULL;
  if (nrm_read_regular_at (dfd, CHECKPOINT_NAME, CHECKPOINT_MAX, &text, &len, &rerr) < 0)
    {
      if (rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          return 0;
        }
      *err = rerr;
      return nrm_error_wrap (err, "%s", path);
    }
  return parse_checkpoint (text, len, path, rs, err);
}

/* The rules of a device-plugin resource. */
static void
add_resource (struct state *st, const struct resource *r)
{
  size_t idx;
  if (r->sriov)
    {
      cleanup_free char *who = xasprintf ("%s (SR-IOV network device plugin)", r->name);
      /* Its selectors are in its own configuration, out of reach: every
       * network VF, and the functions the kubelet lists for it. */
      static const char *const vf_rules[] = { "class:nic,vf", "class:ib,vf", NULL };
      add_rules (st, who, vf_rules, 2);
      for (size_t i = 0; i < r->nids; i++)
        {
          struct rule *x = state_add (st, who);
          memcpy (x->bus_id, r->ids[i], sizeof (x->bus_id));
          x->what = xasprintf ("the function %s", x->bus_id);
        }
      return;
    }
  cleanup_free char *who = xasprintf ("%s (device plugin)", r->name);
  if (known_resource (r->name, &idx))
    add_rules (st, who, known_resources[idx].rules, 3);
  else if (r->in_checkpoint && r->total > 0 && r->all_bus_ids)
    for (size_t i = 0; i < r->nids; i++)
      {
        struct rule *x = state_add (st, who);
        memcpy (x->bus_id, r->ids[i], sizeof (x->bus_id));
        x->what = xasprintf ("the function %s", x->bus_id);
      }
  else
    add_nothing (st, who, "not matched");
}

/* --- building a state -------------------------------------------------- */

static int
build (const struct nrm_pci_others *o, struct state *st, nrm_error_t *err)
{
  for (size_t i = 0; i < o->nskip; i++)
    if (strncmp (o->skip[i], "own:", 4) != 0 && apply_rule (o->skip[i], st, NULL, err) < 0)
      return -1;

  struct resources rs = { 0 };
  char **reg = NULL, **dps = NULL;
  size_t nreg = 0, ndps = 0;
  int rc = -1;
  if (o->kubelet_dir == NULL)
    return 0; /* the configuration's rules alone */
  if (list_sockets (o->registry_dir, &reg, &nreg, err) < 0 || list_sockets (o->dp_dir, &dps, &ndps, err) < 0
      || read_checkpoint (o, &rs, err) < 0)
    goto out;

  size_t nhashed = 0;
  for (size_t i = 0; i < nreg; i++)
    {
      const char *name = reg[i];
      size_t len = strlen (name);
      bool sriov;
      if (len > 9 && strcmp (name + len - 9, "-reg.sock") == 0)
        {
          cleanup_free char *base = xstrndup (name, len - 9);
          cleanup_free char *q = nrm_quote (base, strlen (base), NAME_SHOWN);
          if (is_own (o, base))
            {
              cleanup_free char *who = xasprintf ("%s (DRA driver registered with the kubelet)", q);
              add_nothing (st, who, "nrm's own");
              continue;
            }
          size_t idx = (size_t) -1;
          for (size_t k = 0; k < sizeof (known_drivers) / sizeof (known_drivers[0]) && idx == (size_t) -1; k++)
            if (is_name (base, known_drivers[k].name))
              idx = k;
          if (idx != (size_t) -1)
            {
              cleanup_free char *who
                  = xasprintf ("%s (DRA driver registered with the kubelet)", known_drivers[idx].name);
              add_driver (st, idx, who);
            }
          else if (is_hashed (base))
            nhashed++;
          else
            {
              cleanup_free char *who = xasprintf ("%s (plugin registered with the kubelet)", q);
              add_nothing (st, who, "not matched");
            }
          continue;
        }
      /* A device plugin in plugin-watcher mode (the SR-IOV plugin's
       * default when this folder exists). */
      cleanup_free char *res = socket_resource (name, &sriov);
      if (res && resource_name_ok (res))
        {
          struct resource *r = resource_get (&rs, res);
          r->socket = true;
          r->sriov |= sriov;
        }
      else
        {
          cleanup_free char *q = nrm_quote (name, len, NAME_SHOWN);
          cleanup_free char *who = xasprintf ("%s (socket in the plugin registry)", q);
          add_nothing (st, who, "not matched");
        }
    }
  if (nhashed && hashed_drivers (o, st, nhashed, err) < 0)
    goto out;

  for (size_t i = 0; i < ndps; i++)
    {
      bool sriov;
      if (strcmp (dps[i], "kubelet.sock") == 0)
        continue;
      cleanup_free char *res = socket_resource (dps[i], &sriov);
      if (res && resource_name_ok (res))
        {
          struct resource *r = resource_get (&rs, res);
          r->socket = true;
          r->sriov |= sriov;
        }
      else
        {
          cleanup_free char *q = nrm_quote (dps[i], strlen (dps[i]), NAME_SHOWN);
          cleanup_free char *who = xasprintf ("%s (device-plugin socket)", q);
          add_nothing (st, who, "not matched");
        }
    }
  for (size_t i = 0; i < rs.n; i++)
    add_resource (st, &rs.v[i]);
  rc = 0;
out:
  resources_clear (&rs);
  free_names (reg, nreg);
  free_names (dps, ndps);
  return rc;
}

/* --- inotify ----------------------------------------------------------- */

static bool
exists_dir (const char *path)
{
  struct stat sb;
  return stat (path, &sb) == 0 && S_ISDIR (sb.st_mode);
}

static void
watch (int ifd, int *wd, const char *path, uint32_t mask, bool want)
{
  if (want)
    {
      int w = inotify_add_watch (ifd, path, mask | IN_ONLYDIR);
      if (w >= 0 && *wd >= 0 && w != *wd)
        inotify_rm_watch (ifd, *wd);
      *wd = w;
    }
  else if (*wd >= 0)
    {
      inotify_rm_watch (ifd, *wd);
      *wd = -1;
    }
}

/* The two folders when they exist; the kubelet folder while one of them is
 * missing, and its parent while it is missing itself (a kubelet that
 * starts after nrm). Deeper missing levels are not watched. */
static void
rewatch (struct nrm_pci_others *o)
{
  if (o->ifd < 0)
    return;
  const uint32_t entries = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_DELETE_SELF;
  const uint32_t dirs = IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF;
  bool reg = exists_dir (o->registry_dir), dp = exists_dir (o->dp_dir), kd = exists_dir (o->kubelet_dir);
  /* A watch on a folder that was replaced points to the old one: drop
   * them and add again (inotify gives the same descriptor for the same
   * folder). */
  watch (o->ifd, &o->wd_registry, o->registry_dir, entries, reg);
  watch (o->ifd, &o->wd_dp, o->dp_dir, entries, dp);
  watch (o->ifd, &o->wd_kubelet, o->kubelet_dir, dirs, kd && !(reg && dp));
  watch (o->ifd, &o->wd_parent, o->parent_dir, dirs, !kd);
}

static void
drain (int ifd)
{
  if (ifd < 0)
    return;
  char buf[4096] __attribute__ ((aligned (__alignof__(struct inotify_event))));
  while (read (ifd, buf, sizeof (buf)) > 0)
    ;
}

/* --- the interface ----------------------------------------------------- */

int
nrm_pci_others_new (const char *kubelet_dir, const char *const *skip, struct nrm_pci_others **ret, nrm_error_t *err)
{
  *ret = NULL;
  struct nrm_pci_others *o = xcalloc (1, sizeof (*o));
  o->ifd = -1;
  o->wd_registry = o->wd_dp = o->wd_kubelet = o->wd_parent = -1;
  if (kubelet_dir == NULL)
    goto rules;
  o->kubelet_dir = xstrdup (kubelet_dir);
  for (size_t n = strlen (o->kubelet_dir); n > 1 && o->kubelet_dir[n - 1] == '/'; n--)
    o->kubelet_dir[n - 1] = '\0';
  o->registry_dir = xasprintf ("%s/plugins_registry", o->kubelet_dir);
  o->dp_dir = xasprintf ("%s/device-plugins", o->kubelet_dir);
  o->plugins_dir = xasprintf ("%s/plugins", o->kubelet_dir);
  o->parent_dir = xstrdup (o->kubelet_dir);
  char *slash = strrchr (o->parent_dir, '/');
  if (slash == o->parent_dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    strcpy (o->parent_dir, ".");
rules:
  o->own = xmalloc (sizeof (o->own[0]));
  o->own[o->nown++] = xstrdup ("nrm.io");
  for (size_t i = 0; skip && skip[i]; i++)
    {
      char *own = NULL;
      if (apply_rule (skip[i], NULL, &own, err) < 0)
        {
          nrm_pci_others_free (o);
          return -1;
        }
      if (own)
        {
          o->own = xrealloc (o->own, (o->nown + 1) * sizeof (o->own[0]));
          o->own[o->nown++] = own;
        }
      o->skip = xrealloc (o->skip, (o->nskip + 1) * sizeof (o->skip[0]));
      o->skip[o->nskip++] = xstrdup (skip[i]);
    }
  /* Without inotify (its limits reached) the caller refreshes on its own
   * schedule. */
  if (o->kubelet_dir)
    o->ifd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  rewatch (o);
  if (build (o, &o->st, err) < 0)
    {
      nrm_pci_others_free (o);
      return -1;
    }
  *ret = o;
  return 0;
}

void
nrm_pci_others_free (struct nrm_pci_others *o)
{
  if (o == NULL)
    return;
  state_clear (&o->st);
  free_names (o->skip, o->nskip);
  free_names (o->own, o->nown);
  if (o->ifd >= 0)
    close (o->ifd);
  free (o->kubelet_dir);
  free (o->registry_dir);
  free (o->dp_dir);
  free (o->plugins_dir);
  free (o->parent_dir);
  free (o);
}

int
nrm_pci_others_fd (struct nrm_pci_others *o)
{
  return o->ifd;
}

int
nrm_pci_others_refresh (struct nrm_pci_others *o, nrm_error_t *err)
{
  /* Watches first (removing one queues an event), then drain, then read:
   * a change while the folders are read wakes the caller again instead of
   * being lost. */
  rewatch (o);
  drain (o->ifd);
  struct state st = { 0 };
  if (build (o, &st, err) < 0)
    {
      state_clear (&st);
      return -1;
    }
  state_clear (&o->st);
  o->st = st;
  return 0;
}

static bool
rule_matches (const struct rule *r, uint16_t vendor, unsigned cls, const char *bus_id, bool is_vf)
{
  if (r->nothing)
    return false;
  if (r->bus_id[0])
    {
      char want[13];
      return bus_id && parse_bus_id (bus_id, strlen (bus_id), want) && strcmp (want, r->bus_id) == 0;
    }
  return (r->vendor < 0 || r->vendor == vendor) && (r->classes == 0 || (r->classes & cls)) && (!r->vf_only || is_vf);
}

const char *
nrm_pci_others_owner (const struct nrm_pci_others *o, uint16_t vendor, const char *class_name, const char *bus_id,
                      bool is_vf)
{
  unsigned cls = 0;
  if (class_name)
    parse_class (class_name, strlen (class_name), &cls);
  for (size_t i = 0; i < o->st.n; i++)
    if (rule_matches (&o->st.rules[i], vendor, cls, bus_id, is_vf))
      return o->st.rules[i].who;
  return NULL;
}

json_t *
nrm_pci_others_describe (const struct nrm_pci_others *o)
{
  json_t *a = json_array ();
  for (size_t i = 0; i < o->st.n; i++)
    {
      /* Every text here is ASCII or quoted, so json_pack cannot fail. */
      json_t *e = json_pack ("{s:s, s:s}", "who", o->st.rules[i].who, "what", o->st.rules[i].what);
      if (e == NULL)
        abort ();
      json_array_append_new (a, e);
    }
  return a;
}
