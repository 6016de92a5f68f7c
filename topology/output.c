/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "topology/topology.h"

static json_t *
jcpus (hwloc_const_bitmap_t set)
{
  cleanup_free char *s = nrm_cpulist_format (set);
  return json_string (s);
}

static json_t *
jint_or_null (int v)
{
  return v >= 0 ? json_integer (v) : json_null ();
}

static json_t *
jstr_or_null (const char *s)
{
  return s ? json_string (s) : json_null ();
}

static json_t *
numa_json (const struct nrm_topology *t, size_t i)
{
  const struct nrm_numa_node *n = &t->numa[i];
  cleanup_bitmap hwloc_bitmap_t alloc = nrm_topology_node_allocatable (t, i);
  json_t *hp = json_array ();
  json_t *dist = json_array ();

  for (size_t h = 0; h < n->n_hugepages; h++)
    {
      cleanup_free char *name = nrm_pagesize_name (n->hugepages[h].size);
      json_array_append_new (hp,
                             json_pack ("{s:s?, s:I, s:I, s:I}", "pageSize", name, "pageSizeBytes",
                                        (json_int_t) n->hugepages[h].size, "count", (json_int_t) n->hugepages[h].count,
                                        "reservedBytes", (json_int_t) n->reserved_hugepages[h]));
    }
  for (size_t j = 0; j < t->n_numa; j++)
    json_array_append_new (dist, json_integer ((json_int_t) nrm_topology_distance (t, i, j)));
  return json_pack ("{s:I, s:o, s:b, s:s, s:i, s:I, s:I, s:I, s:o, s:o, s:o, s:b, s:o, s:o}", "id",
                    (json_int_t) n->os_index, "package",
                    jint_or_null (n->package >= 0 ? (int) t->packages[n->package].os_index : -1), "allowed", n->allowed,
                    "memoryKind", n->kind, "memoryTier", n->tier, "memoryBytes", (json_int_t) n->memory,
                    "reservedMemoryBytes", (json_int_t) n->reserved_memory, "allocatableMemoryBytes",
                    (json_int_t) nrm_topology_node_allocatable_memory (t, i), "hugepages", hp, "cpus", jcpus (n->cpus),
                    "allocatableCPUs", jcpus (alloc), "cpuless", hwloc_bitmap_iszero (n->cpus), "locality",
                    jcpus (n->locality), "distances", dist);
}

json_t *
nrm_topology_to_json (const struct nrm_topology *t)
{
  json_t *root = json_object ();
  json_t *pkgs = json_array (), *numa = json_array (), *l3 = json_array (), *groups = json_array ();
  json_t *cores = json_array (), *kinds = json_array (), *pci = json_array ();

  for (size_t i = 0; i < t->n_packages; i++)
    json_array_append_new (pkgs, json_pack ("{s:I, s:o}", "id", (json_int_t) t->packages[i].os_index, "cpus",
                                            jcpus (t->packages[i].cpus)));
  for (size_t i = 0; i < t->n_numa; i++)
    json_array_append_new (numa, numa_json (t, i));
  for (size_t i = 0; i < t->n_l3; i++)
    json_array_append_new (l3, json_pack ("{s:I, s:I, s:o}", "id", (json_int_t) t->l3[i].os_index, "sizeBytes",
                                          (json_int_t) t->l3[i].size, "cpus", jcpus (t->l3[i].cpus)));
  for (size_t i = 0; i < t->n_groups; i++)
    json_array_append_new (groups, json_pack ("{s:s, s:I, s:I, s:o}", "kind", t->groups[i].kind, "id",
                                              (json_int_t) t->groups[i].os_index, "depth",
                                              (json_int_t) t->groups[i].depth, "cpus", jcpus (t->groups[i].cpus)));
  for (size_t i = 0; i < t->n_cores; i++)
    {
      const struct nrm_core *c = &t->cores[i];
      json_array_append_new (cores,
                             json_pack ("{s:I, s:o, s:o, s:o, s:o, s:o}", "id", (json_int_t) c->os_index, "package",
                                        jint_or_null (c->package >= 0 ? (int) t->packages[c->package].os_index : -1),
                                        "numaNode", jint_or_null (c->numa >= 0 ? (int) t->numa[c->numa].os_index : -1),
                                        "l3Cache", jint_or_null (c->l3 >= 0 ? (int) t->l3[c->l3].os_index : -1),
                                        "cpuKind", c->kind >= 0 ? json_string (t->kinds[c->kind].name) : json_null (),
                                        "cpus", jcpus (c->cpus)));
    }
  for (size_t i = 0; i < t->n_kinds; i++)
    json_array_append_new (kinds, json_pack ("{s:s, s:i, s:s?, s:o}", "name", t->kinds[i].name, "efficiency",
                                             t->kinds[i].efficiency, "coreType", t->kinds[i].core_type, "cpus",
                                             jcpus (t->kinds[i].cpus)));
  for (size_t i = 0; i < t->n_pci; i++)
    {
      const struct nrm_pci_device *d = &t->pci[i];
      char cls[8], vendor[8], device[8];
      snprintf (cls, sizeof (cls), "%04x", d->class_id);
      snprintf (vendor, sizeof (vendor), "%04x", d->vendor_id);
      snprintf (device, sizeof (device), "%04x", d->device_id);
      json_array_append_new (
          pci, json_pack ("{s:s, s:o, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:s?, s:s?}", "busID", d->bus_id,
                          "pcieRoot", d->pcie_root[0] ? json_string (d->pcie_root) : json_null (), "class", cls,
                          "vendor", vendor, "device", device, "vendorName", jstr_or_null (d->vendor_name), "deviceName",
                          jstr_or_null (d->device_name), "numaNode",
                          jint_or_null (d->numa >= 0 ? (int) t->numa[d->numa].os_index : -1), "numaNodes",
                          jcpus (d->nodes), "cpus", jcpus (d->cpus), "osKind", d->os_kind, "osDevices", d->os_names));
    }
  json_object_set_new (root, "source", json_string (t->source));
  json_object_set_new (root, "architecture", json_string (t->arch));
  json_object_set_new (root, "cpus",
                       json_pack ("{s:o, s:o, s:o, s:o, s:o}", "online", jcpus (t->online), "offline",
                                  jcpus (t->offline), "disallowed", jcpus (t->disallowed), "reserved",
                                  jcpus (t->reserved), "isolated", jcpus (t->isolated)));
  json_object_set_new (root, "distancesFromOS", json_boolean (t->distances_from_os));
  json_object_set_new (root, "packages", pkgs);
  json_object_set_new (root, "numaNodes", numa);
  json_object_set_new (root, "l3Caches", l3);
  json_object_set_new (root, "groups", groups);
  json_object_set_new (root, "cores", cores);
  json_object_set_new (root, "cpuKinds", kinds);
  json_object_set_new (root, "pciDevices", pci);
  return root;
}

static void
print_bytes (FILE *out, uint64_t b)
{
  static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
  double v = (double) b;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof (units) / sizeof (units[0]))
    {
      v /= 1024;
      u++;
    }
  if (u == 0)
    fprintf (out, "%" PRIu64 " B", b);
  else
    fprintf (out, "%.1f %s", v, units[u]);
}

/* " (Vendor Device)" from pci.ids, or "" when neither name is known. */
static char *
pci_names (const struct nrm_pci_device *d)
{
  if (d->vendor_name == NULL && d->device_name == NULL)
    return xstrdup ("");
  return xasprintf (" (%s%s%s)", d->vendor_name ? d->vendor_name : "", d->vendor_name && d->device_name ? " " : "",
                    d->device_name ? d->device_name : "");
}

static const char *
or_dash (const char *s)
{
  return *s ? s : "-";
}

/* Lines longer than this are broken at a space, else after a comma, and go
 * on four columns further in than the line began. */
#define SUMMARY_WIDTH 120

static void
write_wrapped (FILE *out, const char *text, size_t len)
{
  const char *end = text + len;
  while (text < end)
    {
      const char *nl = memchr (text, '\n', (size_t) (end - text));
      size_t n = nl ? (size_t) (nl - text) : (size_t) (end - text);
      size_t indent = strspn (text, " ");
      size_t col = 0; /* columns already used on the output line */
      const char *p = text, *stop = text + n;
      while (p < stop)
        {
          size_t room = SUMMARY_WIDTH - col;
          size_t left = (size_t) (stop - p);
          if (left <= room)
            {
              fwrite (p, 1, left, out);
              break;
            }
          /* The last ", " or "; " in the second half of room, else the
           * last space, else the last comma. */
          size_t cut = 0;
          for (size_t k = room; k > room / 2 && cut == 0; k--)
            if (p[k] == ' ' && (p[k - 1] == ',' || p[k - 1] == ';'))
              cut = k;
          for (size_t k = room; k > 0 && cut == 0; k--)
            if (p[k] == ' ')
              cut = k;
          if (cut == 0)
            for (size_t k = room - 1; k > 0 && cut == 0; k--)
              if (p[k] == ',')
                cut = k + 1;
          if (cut == 0)
            cut = room; /* one word longer than a line */
          fwrite (p, 1, cut, out);
          p += cut;
          while (p < stop && *p == ' ')
            p++;
          if (p < stop)
            {
              fputc ('\n', out);
              col = indent + 4;
              fprintf (out, "%*s", (int) col, "");
            }
        }
      fputc ('\n', out);
      text += n + (nl != NULL);
    }
}

/* What two threads of a core have in common as text: "+192" when every
 * core of cores[] has its threads at the same distances from its first
 * CPU ("+1..+7" for consecutive ones), else NULL. */
static char *
uniform_siblings (const struct nrm_topology *t, const size_t *cores, size_t n)
{
  int base[64];
  int nb = -1;
  for (size_t i = 0; i < n; i++)
    {
      hwloc_const_bitmap_t c = t->cores[cores[i]].cpus;
      int first = hwloc_bitmap_first (c), k = 0, cpu;
      int offs[64];
      hwloc_bitmap_foreach_begin (cpu, c)
      {
        if (cpu != first)
          {
            if (k == 64)
              return NULL;
            offs[k++] = cpu - first;
          }
      }
      hwloc_bitmap_foreach_end ();
      if (nb < 0)
        {
          nb = k;
          memcpy (base, offs, sizeof (int) * (size_t) k);
        }
      else if (nb != k || memcmp (base, offs, sizeof (int) * (size_t) k) != 0)
        return NULL;
    }
  if (nb <= 0)
    return NULL;
  bool consecutive = true;
  for (int k = 0; k < nb; k++)
    consecutive &= base[k] == k + 1;
  if (consecutive && nb > 2)
    return xasprintf ("+1..+%d", nb);
  char *s = xstrdup ("");
  for (int k = 0; k < nb; k++)
    {
      char *n2 = xasprintf ("%s%s+%d", s, k ? "," : "", base[k]);
      free (s);
      s = n2;
    }
  return s;
}

/* "; 8 cores; SMT siblings: each of 0-7 with +192" for the cores, or the
 * sets of the cores with several threads one by one ("0,4 1,5") when they
 * differ in shape; "; no SMT" when every core has one thread. */
static void
print_cores (FILE *out, const struct nrm_topology *t, const size_t *cores, size_t n)
{
  size_t smt = 0;
  for (size_t i = 0; i < n; i++)
    smt += hwloc_bitmap_weight (t->cores[cores[i]].cpus) > 1;
  fprintf (out, "; %zu core%s", n, n == 1 ? "" : "s");
  if (smt == 0)
    {
      fputs ("; no SMT", out);
      return;
    }
  cleanup_free char *offs = smt == n && n > 1 ? uniform_siblings (t, cores, n) : NULL;
  if (offs)
    {
      cleanup_bitmap hwloc_bitmap_t firsts = xbitmap_alloc ();
      for (size_t i = 0; i < n; i++)
        hwloc_bitmap_set (firsts, (unsigned) hwloc_bitmap_first (t->cores[cores[i]].cpus));
      cleanup_free char *f = nrm_cpulist_format (firsts);
      fprintf (out, "; SMT siblings: each of %s with %s", f, offs);
      return;
    }
  fputs ("; SMT siblings:", out);
  for (size_t i = 0; i < n; i++)
    if (hwloc_bitmap_weight (t->cores[cores[i]].cpus) > 1)
      {
        cleanup_free char *c = nrm_cpulist_format (t->cores[cores[i]].cpus);
        fprintf (out, " %s", c);
      }
  if (smt < n)
    fprintf (out, " (%zu core%s of one thread)", n - smt, n - smt == 1 ? "" : "s");
}

/* One line per L3 group of node i (only its cores on this node), and one
 * for the node's cores outside any L3 group. */
static void
print_l3_groups (FILE *out, const struct nrm_topology *t, size_t i)
{
  const struct nrm_numa_node *n = &t->numa[i];
  cleanup_free size_t *cores = xcalloc (t->n_cores + 1, sizeof (*cores));
  for (int l = 0; l <= (int) t->n_l3; l++)
    {
      int want = l == (int) t->n_l3 ? -1 : l;
      size_t nc = 0;
      cleanup_bitmap hwloc_bitmap_t cpus = xbitmap_alloc ();
      for (size_t c = 0; c < t->n_cores; c++)
        if (t->cores[c].numa == (int) i && t->cores[c].l3 == want && !hwloc_bitmap_iszero (t->cores[c].cpus))
          {
            cores[nc++] = c;
            hwloc_bitmap_or (cpus, cpus, t->cores[c].cpus);
          }
      if (want >= 0 && nc == 0 && !hwloc_bitmap_intersects (t->l3[want].cpus, n->cpus))
        continue;
      if (want < 0 && nc == 0)
        continue;
      cleanup_free char *lc = nrm_cpulist_format (cpus);
      if (want >= 0)
        {
          fprintf (out, "  L3 group %u (", t->l3[want].os_index);
          print_bytes (out, t->l3[want].size);
          fprintf (out, "): CPUs %s", or_dash (lc));
        }
      else
        fprintf (out, "  no L3 group: CPUs %s", or_dash (lc));
      if (nc)
        print_cores (out, t, cores, nc);
      fputc ('\n', out);
    }
}

static void
print_pci (FILE *out, const struct nrm_pci_device *d, const char *nodes)
{
  cleanup_free char *names = pci_names (d);
  fprintf (out, "  PCI %s [%04x:%04x class %04x]%s", d->bus_id, d->vendor_id, d->device_id, d->class_id, names);
  if (nodes)
    fprintf (out, " nodes %s", or_dash (nodes));
  else if (d->os_kind)
    fprintf (out, " %s", d->os_kind);
  if (d->os_names)
    fprintf (out, " %s", d->os_names);
  fputc ('\n', out);
}

static int
print_summary (const struct nrm_topology *t, FILE *out)
{
  uint64_t total = 0;
  for (size_t i = 0; i < t->n_numa; i++)
    total += t->numa[i].memory;

  fprintf (out, "Machine %s (%s): %zu package%s, %zu NUMA node%s, %zu L3 group%s, %zu cores, %zu CPUs, ", t->source,
           t->arch, t->n_packages, t->n_packages == 1 ? "" : "s", t->n_numa, t->n_numa == 1 ? "" : "s", t->n_l3,
           t->n_l3 == 1 ? "" : "s", t->n_cores, t->n_pus);
  if (total)
    print_bytes (out, total);
  else
    fputs ("memory size not recorded", out);
  fputc ('\n', out);
  {
    cleanup_free char *on = nrm_cpulist_format (t->online), *off = nrm_cpulist_format (t->offline);
    cleanup_free char *dis = nrm_cpulist_format (t->disallowed), *res = nrm_cpulist_format (t->reserved);
    cleanup_free char *iso = nrm_cpulist_format (t->isolated);
    fprintf (out, "CPUs: online %s; offline %s; disallowed %s; reserved %s; isolated %s\n", or_dash (on), or_dash (off),
             or_dash (dis), or_dash (res), or_dash (iso));
  }
  if (t->n_kinds > 1)
    for (size_t k = 0; k < t->n_kinds; k++)
      {
        cleanup_free char *c = nrm_cpulist_format (t->kinds[k].cpus);
        fprintf (out, "CPU kind %s%s%s%s: %s\n", t->kinds[k].name, t->kinds[k].core_type ? " (" : "",
                 t->kinds[k].core_type ? t->kinds[k].core_type : "", t->kinds[k].core_type ? ")" : "", or_dash (c));
      }

  for (size_t i = 0; i < t->n_numa; i++)
    {
      const struct nrm_numa_node *n = &t->numa[i];
      cleanup_bitmap hwloc_bitmap_t alloc = nrm_topology_node_allocatable (t, i);
      cleanup_bitmap hwloc_bitmap_t iso = xbitmap_dup (t->isolated);
      cleanup_bitmap hwloc_bitmap_t res = xbitmap_dup (t->reserved);
      hwloc_bitmap_and (iso, iso, n->cpus);
      hwloc_bitmap_and (res, res, n->cpus);
      cleanup_free char *cpus = nrm_cpulist_format (n->cpus), *a = nrm_cpulist_format (alloc);
      cleanup_free char *is = nrm_cpulist_format (iso), *rs = nrm_cpulist_format (res);
      size_t ncores = 0, nthreads = 0;
      for (size_t c = 0; c < t->n_cores; c++)
        if (t->cores[c].numa == (int) i)
          {
            ncores++;
            size_t w = (size_t) hwloc_bitmap_weight (t->cores[c].cpus);
            if (w > nthreads)
              nthreads = w;
          }

      fprintf (out, "\nNUMA node %u", n->os_index);
      if (n->package >= 0)
        fprintf (out, " (package %u)", t->packages[n->package].os_index);
      fprintf (out, ": %s memory, tier %d%s\n", n->kind, n->tier, n->allowed ? "" : ", disallowed");
      if (hwloc_bitmap_iszero (n->cpus))
        fputs ("  CPUs: none (CPU-less node)\n", out);
      else
        fprintf (out, "  CPUs: %s (%zu cores, %zu thread%s per core); allocatable %s; reserved %s; isolated %s\n", cpus,
                 ncores, nthreads, nthreads == 1 ? "" : "s", or_dash (a), or_dash (rs), or_dash (is));
      fputs ("  memory: ", out);
      if (n->memory)
        {
          print_bytes (out, n->memory);
          fputs (", allocatable ", out);
          print_bytes (out, nrm_topology_node_allocatable_memory (t, i));
        }
      else
        fputs ("size not recorded", out);
      fputc ('\n', out);
      for (size_t h = 0; h < n->n_hugepages; h++)
        {
          cleanup_free char *ps = nrm_pagesize_name (n->hugepages[h].size);
          fprintf (out, "  hugepages-%s: %" PRIu64 " pages", ps, n->hugepages[h].count);
          if (n->reserved_hugepages[h])
            fprintf (out, " (%" PRIu64 " reserved)", n->reserved_hugepages[h] / n->hugepages[h].size);
          fputc ('\n', out);
        }
      print_l3_groups (out, t, i);
      for (size_t p = 0; p < t->n_pci; p++)
        if (t->pci[p].numa == (int) i)
          print_pci (out, &t->pci[p], NULL);
    }
  size_t unattached = 0;
  for (size_t p = 0; p < t->n_pci; p++)
    if (t->pci[p].numa < 0)
      unattached++;
  if (unattached)
    {
      fputs ("\nPCI devices local to several NUMA nodes:\n", out);
      for (size_t p = 0; p < t->n_pci; p++)
        if (t->pci[p].numa < 0)
          {
            cleanup_free char *nodes = nrm_cpulist_format (t->pci[p].nodes);
            print_pci (out, &t->pci[p], nodes);
          }
    }
  if (t->n_numa > 1)
    {
      fprintf (out, "\nNUMA distances%s:\n     ", t->distances ? "" : " (not recorded; assumed 10/20)");
      for (size_t j = 0; j < t->n_numa; j++)
        fprintf (out, " %4u", t->numa[j].os_index);
      fputc ('\n', out);
      for (size_t i = 0; i < t->n_numa; i++)
        {
          fprintf (out, "%4u:", t->numa[i].os_index);
          for (size_t j = 0; j < t->n_numa; j++)
            fprintf (out, " %4" PRIu64, nrm_topology_distance (t, i, j));
          fputc ('\n', out);
        }
    }
  return 0;
}

int
nrm_topology_print_summary (const struct nrm_topology *t, FILE *out, nrm_error_t *err)
{
  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  if (f == NULL)
    return nrm_error_errno (err, errno, "open_memstream");
  print_summary (t, f);
  bool bad = ferror (f);
  if (fclose (f) != 0 || bad)
    return nrm_error_errno (err, EIO, "cannot write the summary");
  write_wrapped (out, buf, len);
  if (ferror (out))
    return nrm_error_errno (err, EIO, "cannot write the summary");
  return 0;
}

/* MemFree of a node's meminfo in bytes; 0 with *known false when the file
 * is missing. */
static int
node_free (const struct nrm_fsroot *root, unsigned node, uint64_t *ret, bool *known, nrm_error_t *err)
{
  cleanup_free char *path = nrm_fsroot_path (root, "/sys/devices/system/node/node%u/meminfo", node);
  cleanup_free char *text = NULL;
  nrm_error_t rerr = NULL;
  *known = false;
  if (nrm_read_file (path, 1 << 20, &text, NULL, &rerr) < 0)
    {
      if (rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          return 0;
        }
      *err = rerr;
      return -1;
    }
  const char *p = strstr (text, " MemFree:");
  unsigned long long kb;
  if (p == NULL || sscanf (p, " MemFree: %llu kB", &kb) != 1)
    return nrm_error_set (err, EINVAL, "`%s` has no `MemFree: N kB` line", path);
  *ret = (uint64_t) kb * 1024;
  *known = true;
  return 0;
}

int
nrm_topology_print_hardware (const struct nrm_topology *t, const struct nrm_fsroot *root, FILE *out, nrm_error_t *err)
{
  bool live = strcmp (t->source, "live") == 0;
  cleanup_bitmap hwloc_bitmap_t ids = xbitmap_alloc ();
  for (size_t i = 0; i < t->n_numa; i++)
    hwloc_bitmap_set (ids, t->numa[i].os_index);
  cleanup_free char *range = nrm_cpulist_format (ids);
  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  if (f == NULL)
    return nrm_error_errno (err, errno, "open_memstream");
  /* numactl -H's layout, byte for byte where it has the numbers. */
  fprintf (f, "available: %zu nodes (%s)\n", t->n_numa, range);
  for (size_t i = 0; i < t->n_numa; i++)
    {
      const struct nrm_numa_node *n = &t->numa[i];
      int cpu;
      fprintf (f, "node %u cpus:", n->os_index);
      hwloc_bitmap_foreach_begin (cpu, n->cpus) { fprintf (f, " %d", cpu); }
      hwloc_bitmap_foreach_end ();
      fputc ('\n', f);
      if (n->memory)
        fprintf (f, "node %u size: %" PRIu64 " MB\n", n->os_index, n->memory >> 20);
      else
        fprintf (f, "node %u size: unknown\n", n->os_index);
      uint64_t free_b = 0;
      bool known = false;
      if (live && node_free (root, n->os_index, &free_b, &known, err) < 0)
        {
          fclose (f);
          return -1;
        }
      if (known)
        fprintf (f, "node %u free: %" PRIu64 " MB\n", n->os_index, free_b >> 20);
      else
        fprintf (f, "node %u free: unknown\n", n->os_index);
    }
  fputs ("node distances:\nnode ", f);
  for (size_t j = 0; j < t->n_numa; j++)
    fprintf (f, "% 3d ", (int) t->numa[j].os_index);
  fputc ('\n', f);
  for (size_t i = 0; i < t->n_numa; i++)
    {
      fprintf (f, "% 3d: ", (int) t->numa[i].os_index);
      for (size_t j = 0; j < t->n_numa; j++)
        fprintf (f, "% 3d ", (int) nrm_topology_distance (t, i, j));
      fputc ('\n', f);
    }
  bool bad = ferror (f);
  if (fclose (f) != 0 || bad)
    return nrm_error_errno (err, EIO, "cannot write the hardware view");
  if (fwrite (buf, 1, len, out) != len)
    return nrm_error_errno (err, EIO, "cannot write the hardware view");
  return 0;
}
