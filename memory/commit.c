/* SPDX-License-Identifier: Apache-2.0 */
/* The cgroup v2 files of a memory binding. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/commit.h"
#include "memory/hugepages.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "topology/topology.h"

size_t
nrm_memory_files (const struct nrm_memory_binding *m, struct nrm_cgroup_file *out,
                  char names[2 * NRM_HUGETLB_SIZES_MAX][32])
{
  size_t n = 0;
  if (m->mems)
    out[n++] = (struct nrm_cgroup_file){ "cpuset.mems", m->mems };
  /* The guarantee before the limit: a lower limit never meets a higher
   * guarantee half-way. */
  if (m->memory_min)
    out[n++] = (struct nrm_cgroup_file){ "memory.min", m->memory_min };
  if (m->memory_max)
    out[n++] = (struct nrm_cgroup_file){ "memory.max", m->memory_max };
  /* Reservations too (.rsvd): a mapping's pages are counted when reserved. */
  for (size_t i = 0; i < m->n_hugetlb && i < NRM_HUGETLB_SIZES_MAX; i++)
    {
      snprintf (names[2 * i], 32, "hugetlb.%s.max", m->hugetlb[i].size);
      snprintf (names[2 * i + 1], 32, "hugetlb.%s.rsvd.max", m->hugetlb[i].size);
      out[n++] = (struct nrm_cgroup_file){ names[2 * i], m->hugetlb[i].max };
      out[n++] = (struct nrm_cgroup_file){ names[2 * i + 1], m->hugetlb[i].max };
    }
  return n;
}

/* The number after key in a sysfs file; false when the file is missing or
 * says something else (then nothing is checked against it). */
static bool
read_u64 (const char *path, const char *key, uint64_t *ret)
{
  cleanup_free char *text = NULL;
  nrm_error_t e = NULL;
  if (nrm_read_file (path, 1 << 20, &text, NULL, &e) < 0)
    {
      nrm_error_release (&e);
      return false;
    }
  const char *p = strstr (text, key);
  unsigned long long v;
  if (p == NULL || sscanf (p + strlen (key), " %llu", &v) != 1)
    return false;
  *ret = (uint64_t) v;
  return true;
}

/* The kernel's size name (2MB, 1GB, 64KB) in bytes; 0 when it is none. */
static uint64_t
hugetlb_bytes (const char *name)
{
  char *end;
  unsigned long long v = strtoull (name, &end, 10);
  uint64_t unit = strcmp (end, "KB") == 0   ? 1ull << 10
                  : strcmp (end, "MB") == 0 ? 1ull << 20
                  : strcmp (end, "GB") == 0 ? 1ull << 30
                                            : 0;
  if (end == name || unit == 0 || v == 0 || v > (1ull << 20))
    return 0;
  return v * unit;
}

int
nrm_memory_binding_check (const struct nrm_fsroot *root, const struct nrm_memory_binding *m, nrm_error_t *err)
{
  cleanup_bitmap hwloc_bitmap_t nodes = NULL;
  cleanup_free char *dir = nrm_fsroot_path (root, "/sys/devices/system/node");
  if (m->mems && nrm_cpulist_parse (m->mems, &nodes, err) < 0)
    return nrm_error_wrap (err, "cpuset.mems");
  if (nodes == NULL)
    {
      /* Every node the kernel lists. */
      nodes = xbitmap_alloc ();
      DIR *d = opendir (dir);
      struct dirent *de;
      while (d && (de = readdir (d)) != NULL)
        {
          unsigned n;
          char end;
          if (sscanf (de->d_name, "node%u%c", &n, &end) == 1)
            hwloc_bitmap_set (nodes, n);
        }
      if (d)
        closedir (d);
    }
  /* What the nodes have: memory known only if every node says. */
  uint64_t total = 0;
  bool known = !hwloc_bitmap_iszero (nodes);
  int n;
  hwloc_bitmap_foreach_begin (n, nodes)
  {
    cleanup_free char *path = xasprintf ("%s/node%d/meminfo", dir, n);
    cleanup_free char *key = xasprintf ("Node %d MemTotal:", n);
    uint64_t kb;
    if (read_u64 (path, key, &kb))
      total += kb * 1024;
    else
      known = false;
  }
  hwloc_bitmap_foreach_end ();
  const char *files[2] = { "memory.max", "memory.min" }, *values[2] = { m->memory_max, m->memory_min };
  for (int i = 0; i < 2; i++)
    {
      uint64_t v;
      if (values[i] == NULL)
        continue;
      if (nrm_quantity_parse_bytes (values[i], &v, err) < 0)
        return nrm_error_wrap (err, "%s", files[i]);
      if (v < NRM_MEMORY_LIMIT_MIN)
        return nrm_error_set (err, EINVAL,
                              "%s of %" PRIu64 " bytes is below the least of %d (1Mi): the container would be "
                              "killed at its first pages",
                              files[i], v, NRM_MEMORY_LIMIT_MIN);
      if (known && v > total)
        return nrm_error_set (err, EINVAL,
                              "%s of %" PRIu64 " bytes is more than the %" PRIu64 " bytes of memory nodes %s", files[i],
                              v, total, m->mems ? m->mems : "(all)");
    }
  for (size_t h = 0; h < m->n_hugetlb && h < NRM_HUGETLB_SIZES_MAX; h++)
    {
      uint64_t v, size = hugetlb_bytes (m->hugetlb[h].size), pages = 0;
      bool have = !hwloc_bitmap_iszero (nodes);
      if (size == 0)
        return nrm_error_set (err, EINVAL, "hugetlb.%.8s.max: `%.8s` is not a huge page size", m->hugetlb[h].size,
                              m->hugetlb[h].size);
      if (nrm_quantity_parse_bytes (m->hugetlb[h].max, &v, err) < 0)
        return nrm_error_wrap (err, "hugetlb.%s.max", m->hugetlb[h].size);
      if (v % size != 0)
        return nrm_error_set (err, EINVAL, "hugetlb.%s.max of %" PRIu64 " bytes is not a whole number of %s pages",
                              m->hugetlb[h].size, v, m->hugetlb[h].size);
      hwloc_bitmap_foreach_begin (n, nodes)
      {
        uint64_t c;
        nrm_error_t unread = NULL;
        if (nrm_hugepages_read (root, (unsigned) n, size, &c, &unread) == 0)
          pages += c;
        else
          have = false;
        nrm_error_release (&unread);
      }
      hwloc_bitmap_foreach_end ();
      if (have && v / size > pages)
        return nrm_error_set (
            err, ENOSPC, "hugetlb.%s.max of %" PRIu64 " pages is more than the %" PRIu64 " reserved on memory nodes %s",
            m->hugetlb[h].size, v / size, pages, m->mems ? m->mems : "(all)");
    }
  return 0;
}
