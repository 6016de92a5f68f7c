/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "topology/topology.h"

char *
nrm_cpulist_format (hwloc_const_bitmap_t set)
{
  char *s = NULL;
  if (set == NULL || hwloc_bitmap_iszero (set))
    return xstrdup ("");
  if (hwloc_bitmap_list_asprintf (&s, set) < 0)
    nrm_oom ();
  return s;
}

/* hwloc's own list parser accepts garbage such as "1-" or "x", so the syntax
 * is checked here and the numbers are handed to hwloc one range at a time. */
int
nrm_cpulist_parse (const char *text, hwloc_bitmap_t *ret, nrm_error_t *err)
{
  cleanup_bitmap hwloc_bitmap_t set = xbitmap_alloc ();
  const char *p = text;

  while (*p && isspace ((unsigned char) *p))
    p++;
  while (*p && *p != '\n')
    {
      char *end = NULL;
      unsigned long a, b;
      if (!isdigit ((unsigned char) *p))
        return nrm_error_set (err, EINVAL, "invalid CPU list `%s`: expected a number at `%s`", text, p);
      errno = 0;
      a = strtoul (p, &end, 10);
      if (errno || a > 65535)
        return nrm_error_set (err, EINVAL, "invalid CPU list `%s`: CPU number out of range", text);
      b = a;
      p = end;
      if (*p == '-')
        {
          p++;
          if (!isdigit ((unsigned char) *p))
            return nrm_error_set (err, EINVAL, "invalid CPU list `%s`: incomplete range", text);
          errno = 0;
          b = strtoul (p, &end, 10);
          if (errno || b > 65535)
            return nrm_error_set (err, EINVAL, "invalid CPU list `%s`: CPU number out of range", text);
          if (b < a)
            return nrm_error_set (err, EINVAL, "invalid CPU list `%s`: range %lu-%lu is reversed", text, a, b);
          p = end;
        }
      hwloc_bitmap_set_range (set, (unsigned) a, (int) b);
      if (*p == ',')
        {
          p++;
          if (!isdigit ((unsigned char) *p))
            return nrm_error_set (err, EINVAL, "invalid CPU list `%s`: empty entry", text);
        }
      else if (*p && *p != '\n')
        return nrm_error_set (err, EINVAL, "invalid CPU list `%s`: unexpected `%c`", text, *p);
    }
  *ret = TAKE_PTR (set);
  return 0;
}

void
nrm_cpulist_union_members (hwloc_bitmap_t set, json_t *map, const char *key)
{
  const char *name;
  json_t *member;
  json_object_foreach (map, name, member)
  {
    hwloc_bitmap_t one = NULL;
    nrm_error_t err = NULL;
    const char *list = json_string_value (json_object_get (member, key));
    if (list && nrm_cpulist_parse (list, &one, &err) == 0)
      hwloc_bitmap_or (set, set, one);
    nrm_error_release (&err);
    hwloc_bitmap_free (one);
  }
}

/* Both lists parsed, or false. */
static bool
two_lists (const char *a, const char *b, hwloc_bitmap_t *x, hwloc_bitmap_t *y)
{
  nrm_error_t e = NULL;
  *x = *y = NULL;
  if (a && b && nrm_cpulist_parse (a, x, &e) == 0 && nrm_cpulist_parse (b, y, &e) == 0)
    return true;
  nrm_error_release (&e);
  hwloc_bitmap_free (*x);
  *x = NULL;
  return false;
}

char *
nrm_cpulist_combine (const char *a, const char *b, enum nrm_cpulist_op op)
{
  cleanup_bitmap hwloc_bitmap_t x = NULL, y = NULL;
  if (!two_lists (a, b, &x, &y))
    return NULL;
  if (op == NRM_CPULIST_UNION)
    hwloc_bitmap_or (x, x, y);
  else
    hwloc_bitmap_and (x, x, y);
  return nrm_cpulist_format (x);
}

bool
nrm_cpulist_subset (const char *a, const char *b)
{
  cleanup_bitmap hwloc_bitmap_t x = NULL, y = NULL;
  return two_lists (a, b, &x, &y) && hwloc_bitmap_isincluded (x, y);
}

bool
nrm_cpulist_equal (const char *a, const char *b)
{
  cleanup_bitmap hwloc_bitmap_t x = NULL, y = NULL;
  return two_lists (a, b, &x, &y) && hwloc_bitmap_isequal (x, y);
}

char *
nrm_pagesize_name (uint64_t size)
{
  static const char *const units[] = { "", "Ki", "Mi", "Gi", "Ti" };
  size_t u = 0;
  while (u + 1 < sizeof (units) / sizeof (units[0]) && size >= 1024 && size % 1024 == 0)
    {
      size /= 1024;
      u++;
    }
  return xasprintf ("%" PRIu64 "%s", size, units[u]);
}

hwloc_bitmap_t
nrm_topology_node_allocatable (const struct nrm_topology *t, size_t numa)
{
  hwloc_bitmap_t set = xbitmap_dup (t->numa[numa].cpus);
  hwloc_bitmap_andnot (set, set, t->disallowed);
  hwloc_bitmap_andnot (set, set, t->reserved);
  return set;
}

uint64_t
nrm_topology_node_hugepage_bytes (const struct nrm_topology *t, size_t numa)
{
  uint64_t total = 0;
  for (size_t h = 0; h < t->numa[numa].n_hugepages; h++)
    total += t->numa[numa].hugepages[h].count * t->numa[numa].hugepages[h].size;
  return total;
}

/* The node's memory counts the huge page pool too (MemTotal); those pages
 * are published on their own, so they are taken out here. */
uint64_t
nrm_topology_node_allocatable_memory (const struct nrm_topology *t, size_t numa)
{
  const struct nrm_numa_node *n = &t->numa[numa];
  uint64_t huge = nrm_topology_node_hugepage_bytes (t, numa);
  if (!n->allowed || huge + n->reserved_memory >= n->memory)
    return 0;
  return n->memory - huge - n->reserved_memory;
}

uint64_t
nrm_topology_distance (const struct nrm_topology *t, size_t a, size_t b)
{
  if (t->distances != NULL)
    return t->distances[a * t->n_numa + b];
  return a == b ? 10 : 20;
}

/* The socket of a node as KEP-6072's helper reads it: the package of the
 * first CPU in the node's cpulist (home CPUs, online), or -1 for a CPU-less
 * node. The package hwloc attaches a CPU-less node to does not count. */
static int
node_socket (const struct nrm_topology *t, size_t i)
{
  int first = hwloc_bitmap_first (t->numa[i].cpus);
  int pi = first >= 0 ? nrm_topology_pu_index (t, (unsigned) first) : -1;
  return pi >= 0 ? t->pus[pi].package : -1;
}

/* k/k staging/src/k8s.io/dynamic-resource-allocation/deviceattribute
 * numa_linux.go (PR #139929): the smallest distance is taken over all other
 * nodes, a candidate is dropped only when both sockets are known and differ,
 * so a node whose own socket is unknown keeps every node at that distance.
 * Nodes are named by os index: the helper takes a position in the sysfs
 * distance row for the node number, which differs on sparse numbering. */
size_t
nrm_topology_near_nodes (const struct nrm_topology *t, size_t numa, int64_t *out, size_t max)
{
  size_t n = 0;
  uint64_t best = UINT64_MAX;
  int own;

  if (max == 0)
    return 0;
  out[n++] = t->numa[numa].os_index;
  /* Without a distance matrix (a CPUID dump) the helper gives [own]. */
  if (t->distances == NULL)
    return n;
  for (size_t i = 0; i < t->n_numa; i++)
    if (i != numa && t->distances[numa * t->n_numa + i] < best)
      best = t->distances[numa * t->n_numa + i];
  own = node_socket (t, numa);
  for (size_t i = 0; i < t->n_numa && n < max; i++)
    {
      int s;
      if (i == numa || t->distances[numa * t->n_numa + i] != best)
        continue;
      s = node_socket (t, i);
      if (own >= 0 && s >= 0 && s != own)
        continue;
      out[n++] = t->numa[i].os_index;
    }
  return n;
}

static int
read_isolated (const struct nrm_fsroot *root, hwloc_bitmap_t *ret, nrm_error_t *err)
{
  cleanup_free char *path = nrm_fsroot_path (root, "/sys/devices/system/cpu/isolated");
  cleanup_fclose FILE *f = NULL;
  char buf[4096];

  f = fopen (path, "re");
  if (f == NULL)
    {
      /* Kernels without the file isolate nothing. */
      if (errno == ENOENT)
        {
          *ret = xbitmap_alloc ();
          return 0;
        }
      return nrm_error_errno (err, errno, "cannot read `%s`", path);
    }
  if (fgets (buf, sizeof (buf), f) == NULL)
    buf[0] = '\0';
  if (nrm_cpulist_parse (buf, ret, err) < 0)
    return nrm_error_wrap (err, "`%s`", path);
  return 0;
}

int
nrm_topology_apply_settings (struct nrm_topology *t, const struct nrm_node_settings *s, const struct nrm_fsroot *root,
                             nrm_error_t *err)
{
  cleanup_bitmap hwloc_bitmap_t reserved = xbitmap_alloc ();
  cleanup_bitmap hwloc_bitmap_t isolated = NULL;
  cleanup_bitmap hwloc_bitmap_t bad = xbitmap_alloc ();
  cleanup_free uint64_t *mem = xcalloc (t->n_numa, sizeof (uint64_t));
  cleanup_free char *badlist = NULL;

  if (s->reserved_cpus != NULL)
    {
      hwloc_bitmap_copy (reserved, s->reserved_cpus);
      hwloc_bitmap_andnot (bad, reserved, t->online);
      if (!hwloc_bitmap_iszero (bad))
        {
          badlist = nrm_cpulist_format (bad);
          return nrm_error_set (err, EINVAL, "reserved CPUs `%s` do not exist or are offline on this machine", badlist);
        }
    }
  if (s->isolated_cpus != NULL)
    {
      isolated = xbitmap_dup (s->isolated_cpus);
      hwloc_bitmap_andnot (bad, isolated, t->online);
      if (!hwloc_bitmap_iszero (bad))
        {
          badlist = nrm_cpulist_format (bad);
          return nrm_error_set (err, EINVAL, "isolated CPUs `%s` do not exist or are offline on this machine", badlist);
        }
    }
  else if (strcmp (t->source, "live") == 0)
    {
      if (read_isolated (root, &isolated, err) < 0)
        return -1;
      hwloc_bitmap_and (isolated, isolated, t->online);
    }
  else
    isolated = xbitmap_alloc ();

  /* Reserved memory: validate everything before touching the model. */
  cleanup_free uint64_t *hp = NULL;
  size_t total_hp = 0;
  for (size_t i = 0; i < t->n_numa; i++)
    total_hp += t->numa[i].n_hugepages;
  hp = xcalloc (total_hp, sizeof (uint64_t));
  for (size_t r = 0; r < s->n_reserved_memory; r++)
    {
      const struct nrm_reserved_memory *rm = &s->reserved_memory[r];
      int ni = nrm_topology_numa_index (t, rm->numa_node);
      if (ni < 0)
        return nrm_error_set (err, EINVAL, "reserved memory names NUMA node %u, which does not exist on this machine",
                              rm->numa_node);
      struct nrm_numa_node *n = &t->numa[ni];
      if (strcmp (rm->resource, "memory") == 0)
        {
          uint64_t huge = nrm_topology_node_hugepage_bytes (t, (size_t) ni);
          uint64_t ordinary = n->memory > huge ? n->memory - huge : 0;
          mem[ni] += rm->bytes;
          if (mem[ni] > ordinary)
            return nrm_error_set (err, EINVAL,
                                  "reserved memory on NUMA node %u (%" PRIu64 " bytes) exceeds its memory (%" PRIu64
                                  " bytes outside huge pages)",
                                  n->os_index, mem[ni], ordinary);
          continue;
        }
      bool found = false;
      size_t base = 0;
      for (size_t k = 0; k < (size_t) ni; k++)
        base += t->numa[k].n_hugepages;
      for (size_t h = 0; h < n->n_hugepages; h++)
        {
          cleanup_free char *name = nrm_pagesize_name (n->hugepages[h].size);
          char want[64];
          snprintf (want, sizeof (want), "hugepages-%s", name);
          if (strcmp (want, rm->resource) != 0)
            continue;
          found = true;
          hp[base + h] += rm->bytes;
          if (rm->bytes % n->hugepages[h].size)
            return nrm_error_set (err, EINVAL, "reserved %s on NUMA node %u is not a multiple of the page size",
                                  rm->resource, n->os_index);
          if (hp[base + h] > n->hugepages[h].count * n->hugepages[h].size)
            return nrm_error_set (err, EINVAL, "reserved %s on NUMA node %u exceeds the %" PRIu64 " pages configured",
                                  rm->resource, n->os_index, n->hugepages[h].count);
        }
      if (!found)
        return nrm_error_set (err, EINVAL, "reserved memory names `%s` on NUMA node %u, which has no such huge pages",
                              rm->resource, n->os_index);
    }

  /* Commit. */
  hwloc_bitmap_copy (t->reserved, reserved);
  hwloc_bitmap_copy (t->isolated, isolated);
  size_t k = 0;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      t->numa[i].reserved_memory = mem[i];
      for (size_t h = 0; h < t->numa[i].n_hugepages; h++)
        t->numa[i].reserved_hugepages[h] = hp[k++];
    }
  for (size_t i = 0; i < t->n_pus; i++)
    {
      t->pus[i].reserved = hwloc_bitmap_isset (reserved, t->pus[i].os_index);
      t->pus[i].isolated = hwloc_bitmap_isset (isolated, t->pus[i].os_index);
    }
  return 0;
}

/* Pure lookups live here, not in scan.c: the static nrm-hook links this file
 * and must not pull in hwloc's discovery code. */
int
nrm_topology_pu_index (const struct nrm_topology *topo, unsigned cpu)
{
  size_t lo = 0, hi = topo->n_pus;
  while (lo < hi)
    {
      size_t mid = (lo + hi) / 2;
      if (topo->pus[mid].os_index == cpu)
        return (int) mid;
      if (topo->pus[mid].os_index < cpu)
        lo = mid + 1;
      else
        hi = mid;
    }
  return -1;
}

int
nrm_topology_numa_index (const struct nrm_topology *topo, unsigned os_index)
{
  for (size_t i = 0; i < topo->n_numa; i++)
    if (topo->numa[i].os_index == os_index)
      return (int) i;
  return -1;
}
