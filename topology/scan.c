/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/text.h"
#include "nrm/base/xalloc.h"
#include "topology/topology.h"

DEFINE_TRIVIAL_CLEANUP_FUNC (hwloc_topology_t, hwloc_topology_destroy)
#define cleanup_hwloc __attribute__ ((cleanup (hwloc_topology_destroyp)))

/* Fastest first: a rank per memory kind, used to number the tiers present. */
static int
memory_kind_rank (const char *kind)
{
  static const char *const order[] = { "HBM", "MCDRAM", "DRAM", "CXL-DRAM", "NVM", "SPM", "GPUMemory" };
  for (size_t i = 0; i < sizeof (order) / sizeof (order[0]); i++)
    if (strcmp (kind, order[i]) == 0)
      return (int) i;
  return (int) (sizeof (order) / sizeof (order[0]));
}

static int
cmp_numa (const void *a, const void *b)
{
  const struct nrm_numa_node *x = a, *y = b;
  return (x->os_index > y->os_index) - (x->os_index < y->os_index);
}

static int
cmp_pu (const void *a, const void *b)
{
  const struct nrm_pu *x = a, *y = b;
  return (x->os_index > y->os_index) - (x->os_index < y->os_index);
}

static int
index_of_set (hwloc_bitmap_t *sets, size_t n, size_t stride, unsigned cpu)
{
  for (size_t i = 0; i < n; i++)
    {
      hwloc_bitmap_t s = *(hwloc_bitmap_t *) ((char *) sets + i * stride);
      if (hwloc_bitmap_isset (s, cpu))
        return (int) i;
    }
  return -1;
}

#define FIND(arr, n, cpu) index_of_set (&(arr)[0].cpus, (n), sizeof ((arr)[0]), (cpu))

/* The home node of a PU, as Linux assigns one node per CPU: among the nodes
 * hwloc calls local to it (its nodeset; the whole machine's for a CPU whose
 * own node is offline), ordinary DRAM first, then the node attached deepest
 * (smallest locality), then the lowest os index. */
static int
home_node (struct nrm_topology *t, hwloc_const_nodeset_t local)
{
  int best = -1;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      struct nrm_numa_node *n = &t->numa[i];
      if (!hwloc_bitmap_isset (local, n->os_index))
        continue;
      if (best < 0)
        {
          best = (int) i;
          continue;
        }
      struct nrm_numa_node *b = &t->numa[best];
      int wn = hwloc_bitmap_weight (n->locality), wb = hwloc_bitmap_weight (b->locality);
      bool dn = strcmp (n->kind, "DRAM") == 0, db = strcmp (b->kind, "DRAM") == 0;
      if (dn != db ? dn : wn < wb)
        best = (int) i;
    }
  return best;
}

static void
scan_numa (hwloc_topology_t h, struct nrm_topology *t)
{
  int n = hwloc_get_nbobjs_by_type (h, HWLOC_OBJ_NUMANODE);
  hwloc_const_nodeset_t allowed = hwloc_topology_get_allowed_nodeset (h);

  t->n_numa = n > 0 ? (size_t) n : 0;
  t->numa = xcalloc (t->n_numa, sizeof (*t->numa));
  for (size_t i = 0; i < t->n_numa; i++)
    {
      hwloc_obj_t o = hwloc_get_obj_by_type (h, HWLOC_OBJ_NUMANODE, (unsigned) i);
      struct nrm_numa_node *node = &t->numa[i];
      node->os_index = o->os_index;
      node->memory = o->attr->numanode.local_memory;
      node->kind = xstrdup (o->subtype ? o->subtype : "DRAM");
      node->locality = xbitmap_dup (o->cpuset ? o->cpuset : hwloc_topology_get_complete_cpuset (h));
      node->cpus = xbitmap_alloc ();
      node->allowed = hwloc_bitmap_isset (allowed, o->os_index);
      node->package = -1;
      for (unsigned p = 0; p < o->attr->numanode.page_types_len; p++)
        {
          const struct hwloc_memory_page_type_s *pt = &o->attr->numanode.page_types[p];
          /* The smallest size is the base page; only huge pages are kept. */
          if (p == 0 && pt->size <= 65536)
            {
              node->base_page = pt->size;
              continue;
            }
          if (pt->size == 0)
            continue;
          struct nrm_hugepages *hp = xrealloc (node->hugepages, (node->n_hugepages + 1) * sizeof (*hp));
          node->hugepages = hp;
          hp[node->n_hugepages].size = pt->size;
          hp[node->n_hugepages].count = pt->count;
          node->n_hugepages++;
        }
      node->reserved_hugepages = xcalloc (node->n_hugepages, sizeof (uint64_t));
    }
  qsort (t->numa, t->n_numa, sizeof (*t->numa), cmp_numa);

  /* Tiers: dense ranks of the memory kinds present, fastest first. */
  for (size_t i = 0; i < t->n_numa; i++)
    {
      int rank = memory_kind_rank (t->numa[i].kind), tier = 0;
      bool seen[16] = { false };
      for (size_t j = 0; j < t->n_numa; j++)
        {
          int r = memory_kind_rank (t->numa[j].kind);
          if (r < rank && r < 16 && !seen[r])
            {
              seen[r] = true;
              tier++;
            }
        }
      t->numa[i].tier = tier;
    }
}

static void
scan_distances (hwloc_topology_t h, struct nrm_topology *t)
{
  unsigned nr = 0;
  struct hwloc_distances_s *d[8];

  if (t->n_numa == 0)
    return;
  nr = 8;
  if (hwloc_distances_get_by_type (h, HWLOC_OBJ_NUMANODE, &nr, d, 0, 0) < 0)
    return;
  if (nr > 8)
    nr = 8;
  /* Prefer a complete latency matrix from the OS (the ACPI SLIT). */
  int pick = -1, score = -1;
  for (unsigned i = 0; i < nr; i++)
    {
      int s = 0;
      if (d[i]->nbobjs != t->n_numa)
        continue;
      if (d[i]->kind & HWLOC_DISTANCES_KIND_FROM_OS)
        s += 2;
      if (d[i]->kind & HWLOC_DISTANCES_KIND_MEANS_LATENCY)
        s += 1;
      if (s > score)
        {
          score = s;
          pick = (int) i;
        }
    }
  if (pick >= 0)
    {
      struct hwloc_distances_s *m = d[pick];
      t->distances = xcalloc (t->n_numa * t->n_numa, sizeof (uint64_t));
      t->distances_from_os = (m->kind & HWLOC_DISTANCES_KIND_FROM_OS) != 0;
      for (unsigned a = 0; a < m->nbobjs; a++)
        for (unsigned b = 0; b < m->nbobjs; b++)
          {
            int ia = nrm_topology_numa_index (t, m->objs[a]->os_index);
            int ib = nrm_topology_numa_index (t, m->objs[b]->os_index);
            if (ia >= 0 && ib >= 0)
              t->distances[(size_t) ia * t->n_numa + (size_t) ib] = m->values[a * m->nbobjs + b];
          }
    }
  for (unsigned i = 0; i < nr; i++)
    hwloc_distances_release (h, d[i]);
}

static void
scan_cpu_objects (hwloc_topology_t h, struct nrm_topology *t)
{
  int np = hwloc_get_nbobjs_by_type (h, HWLOC_OBJ_PACKAGE);
  int nl3 = hwloc_get_nbobjs_by_type (h, HWLOC_OBJ_L3CACHE);
  int nc = hwloc_get_nbobjs_by_type (h, HWLOC_OBJ_CORE);

  t->n_packages = np > 0 ? (size_t) np : 0;
  t->packages = xcalloc (t->n_packages, sizeof (*t->packages));
  t->n_l3 = nl3 > 0 ? (size_t) nl3 : 0;
  t->l3 = xcalloc (t->n_l3, sizeof (*t->l3));
  t->n_cores = nc > 0 ? (size_t) nc : 0;
  t->cores = xcalloc (t->n_cores, sizeof (*t->cores));

  for (size_t i = 0; i < t->n_packages; i++)
    {
      hwloc_obj_t o = hwloc_get_obj_by_type (h, HWLOC_OBJ_PACKAGE, (unsigned) i);
      t->packages[i].os_index = o->os_index == HWLOC_UNKNOWN_INDEX ? (unsigned) i : o->os_index;
      t->packages[i].cpus = xbitmap_dup (o->cpuset);
    }
  for (size_t i = 0; i < t->n_l3; i++)
    {
      hwloc_obj_t o = hwloc_get_obj_by_type (h, HWLOC_OBJ_L3CACHE, (unsigned) i);
      /* hwloc gives caches no OS number: the logical index is stable for a machine. */
      t->l3[i].os_index = o->logical_index;
      t->l3[i].size = o->attr->cache.size;
      t->l3[i].cpus = xbitmap_dup (o->cpuset);
    }

  /* Dies and Group objects (clusters, sub-NUMA groups), outermost first. */
  int depth = hwloc_topology_get_depth (h);
  unsigned gdepth = 0;
  for (int d = 0; d < depth; d++)
    {
      hwloc_obj_type_t type = hwloc_get_depth_type (h, d);
      if (type != HWLOC_OBJ_DIE && type != HWLOC_OBJ_GROUP)
        continue;
      unsigned n = hwloc_get_nbobjs_by_depth (h, d);
      t->groups = xrealloc (t->groups, (t->n_groups + n) * sizeof (*t->groups));
      for (unsigned i = 0; i < n; i++)
        {
          hwloc_obj_t o = hwloc_get_obj_by_depth (h, d, i);
          struct nrm_group *grp = &t->groups[t->n_groups++];
          memset (grp, 0, sizeof (*grp));
          grp->kind = xstrdup (type == HWLOC_OBJ_DIE ? "Die" : (o->subtype ? o->subtype : "Group"));
          grp->os_index = o->os_index == HWLOC_UNKNOWN_INDEX ? o->logical_index : o->os_index;
          grp->depth = gdepth;
          grp->cpus = xbitmap_dup (o->cpuset);
        }
      gdepth++;
    }

  /* CPU kinds: on a hybrid machine the highest efficiency is "performance". */
  int nk = hwloc_cpukinds_get_nr (h, 0);
  t->n_kinds = nk > 0 ? (size_t) nk : 0;
  t->kinds = xcalloc (t->n_kinds, sizeof (*t->kinds));
  int best = -1;
  for (size_t i = 0; i < t->n_kinds; i++)
    {
      struct hwloc_info_s *infos = NULL;
      unsigned nr_infos = 0;
      int eff = -1;
      t->kinds[i].cpus = xbitmap_alloc ();
      hwloc_cpukinds_get_info (h, (unsigned) i, t->kinds[i].cpus, &eff, &nr_infos, &infos, 0);
      t->kinds[i].efficiency = eff;
      for (unsigned k = 0; k < nr_infos; k++)
        if (strcmp (infos[k].name, "CoreType") == 0)
          t->kinds[i].core_type = xstrdup (infos[k].value);
      if (eff > best)
        best = eff;
    }
  for (size_t i = 0; i < t->n_kinds; i++)
    t->kinds[i].name = xstrdup (t->n_kinds > 1 && t->kinds[i].efficiency < best ? "efficiency" : "performance");

  /* Online PUs, with their core, caches and home node. */
  hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset (h);
  int npu = hwloc_get_nbobjs_by_type (h, HWLOC_OBJ_PU);
  t->n_pus = npu > 0 ? (size_t) npu : 0;
  t->pus = xcalloc (t->n_pus, sizeof (*t->pus));
  for (size_t i = 0; i < t->n_pus; i++)
    {
      hwloc_obj_t o = hwloc_get_obj_by_type (h, HWLOC_OBJ_PU, (unsigned) i);
      struct nrm_pu *pu = &t->pus[i];
      pu->os_index = o->os_index;
      pu->allowed = hwloc_bitmap_isset (allowed, o->os_index);
      pu->core = -1;
      pu->numa = home_node (t, o->nodeset);
      /* Its own node is unknown to hwloc (offline): pick among all nodes by the same rules. */
      if (pu->numa < 0)
        pu->numa = home_node (t, hwloc_topology_get_topology_nodeset (h));
      hwloc_obj_t core = hwloc_get_ancestor_obj_by_type (h, HWLOC_OBJ_CORE, o);
      if (core != NULL)
        pu->core = (int) core->logical_index;
    }
  qsort (t->pus, t->n_pus, sizeof (*t->pus), cmp_pu);

  /* A machine without Core objects: every PU is its own core. */
  if (t->n_cores == 0 && t->n_pus > 0)
    {
      t->n_cores = t->n_pus;
      free (t->cores);
      t->cores = xcalloc (t->n_cores, sizeof (*t->cores));
      for (size_t i = 0; i < t->n_pus; i++)
        {
          t->cores[i].os_index = t->pus[i].os_index;
          t->cores[i].cpus = xbitmap_alloc ();
          hwloc_bitmap_set (t->cores[i].cpus, t->pus[i].os_index);
          t->pus[i].core = (int) i;
        }
    }
  else
    for (size_t i = 0; i < t->n_cores; i++)
      {
        hwloc_obj_t o = hwloc_get_obj_by_type (h, HWLOC_OBJ_CORE, (unsigned) i);
        t->cores[i].os_index = o->os_index == HWLOC_UNKNOWN_INDEX ? (unsigned) i : o->os_index;
        t->cores[i].cpus = xbitmap_dup (o->cpuset);
        hwloc_bitmap_and (t->cores[i].cpus, t->cores[i].cpus, hwloc_topology_get_topology_cpuset (h));
      }

  for (size_t i = 0; i < t->n_pus; i++)
    {
      struct nrm_pu *pu = &t->pus[i];
      pu->package = FIND (t->packages, t->n_packages, pu->os_index);
      pu->l3 = FIND (t->l3, t->n_l3, pu->os_index);
      pu->kind = FIND (t->kinds, t->n_kinds, pu->os_index);
      if (pu->numa >= 0)
        hwloc_bitmap_set (t->numa[pu->numa].cpus, pu->os_index);
    }
  for (size_t i = 0; i < t->n_cores; i++)
    {
      struct nrm_core *c = &t->cores[i];
      int first = hwloc_bitmap_first (c->cpus);
      int pi = first >= 0 ? nrm_topology_pu_index (t, (unsigned) first) : -1;
      c->package = pi >= 0 ? t->pus[pi].package : -1;
      c->numa = pi >= 0 ? t->pus[pi].numa : -1;
      c->l3 = pi >= 0 ? t->pus[pi].l3 : -1;
      c->kind = pi >= 0 ? t->pus[pi].kind : -1;
    }
  /* A node belongs to the package its locality lies in; failing that (a
   * node spanning packages), to the package of its first CPU. */
  for (size_t i = 0; i < t->n_numa; i++)
    {
      for (size_t p = 0; p < t->n_packages; p++)
        if (!hwloc_bitmap_iszero (t->numa[i].locality)
            && hwloc_bitmap_isincluded (t->numa[i].locality, t->packages[p].cpus))
          t->numa[i].package = (int) p;
      int first = hwloc_bitmap_first (t->numa[i].cpus);
      int pi = first >= 0 ? nrm_topology_pu_index (t, (unsigned) first) : -1;
      if (t->numa[i].package < 0 && pi >= 0)
        t->numa[i].package = t->pus[pi].package;
    }
  t->online = xbitmap_dup (hwloc_topology_get_topology_cpuset (h));
  t->offline = xbitmap_dup (hwloc_topology_get_complete_cpuset (h));
  t->disallowed = xbitmap_dup (t->online);
  t->reserved = xbitmap_alloc ();
  t->isolated = xbitmap_alloc ();
  hwloc_bitmap_andnot (t->offline, t->offline, t->online);
  hwloc_bitmap_andnot (t->disallowed, t->disallowed, allowed);
}

static const char *
osdev_kind (hwloc_obj_osdev_type_t type)
{
  switch (type)
    {
    case HWLOC_OBJ_OSDEV_GPU:
      return "gpu";
    case HWLOC_OBJ_OSDEV_NETWORK:
      return "network";
    case HWLOC_OBJ_OSDEV_OPENFABRICS:
      return "openfabrics";
    case HWLOC_OBJ_OSDEV_COPROC:
      return "coprocessor";
    case HWLOC_OBJ_OSDEV_BLOCK:
      return "storage";
    case HWLOC_OBJ_OSDEV_DMA:
      return "dma";
    }
  return NULL;
}

static int
osdev_rank (const char *kind)
{
  static const char *const order[] = { "gpu", "coprocessor", "network", "openfabrics", "storage", "dma" };
  for (size_t i = 0; i < sizeof (order) / sizeof (order[0]); i++)
    if (strcmp (kind, order[i]) == 0)
      return (int) i;
  return 100;
}

/* A name hwloc read from pci.ids or from a recorded XML, which may hold
 * anything: control bytes and bytes that are not UTF-8 come out escaped. */
static char *
pci_name (hwloc_obj_t o, const char *info)
{
  const char *v = hwloc_obj_get_info_by_name (o, info);
  if (v == NULL || *v == '\0')
    return NULL;
  return nrm_quote (v, strlen (v), 256);
}

static void
scan_pci (hwloc_topology_t h, struct nrm_topology *t)
{
  size_t n = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev (h, NULL); o; o = hwloc_get_next_pcidev (h, o))
    n++;
  t->pci = xcalloc (n, sizeof (*t->pci));
  for (hwloc_obj_t o = hwloc_get_next_pcidev (h, NULL); o; o = hwloc_get_next_pcidev (h, o))
    {
      struct nrm_pci_device *d = &t->pci[t->n_pci++];
      struct hwloc_pcidev_attr_s *a = &o->attr->pcidev;
      snprintf (d->bus_id, sizeof (d->bus_id), "%04x:%02x:%02x.%01x", a->domain, a->bus, a->dev, a->func);
      d->class_id = a->class_id;
      d->vendor_id = a->vendor_id;
      d->device_id = a->device_id;
      d->vendor_name = pci_name (o, "PCIVendor");
      d->device_name = pci_name (o, "PCIDevice");
      for (hwloc_obj_t p = o->parent; p != NULL && p->type == HWLOC_OBJ_BRIDGE; p = p->parent)
        if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST
            && p->attr->bridge.downstream_type == HWLOC_OBJ_BRIDGE_PCI)
          snprintf (d->pcie_root, sizeof (d->pcie_root), "pci%04x:%02x", p->attr->bridge.downstream.pci.domain,
                    p->attr->bridge.downstream.pci.secondary_bus);
      hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj (h, o);
      d->nodes = xbitmap_dup (anc && anc->nodeset ? anc->nodeset : hwloc_topology_get_topology_nodeset (h));
      d->cpus = xbitmap_dup (anc && anc->cpuset ? anc->cpuset : hwloc_topology_get_topology_cpuset (h));
      d->numa = -1;
      if (hwloc_bitmap_weight (d->nodes) == 1)
        d->numa = nrm_topology_numa_index (t, (unsigned) hwloc_bitmap_first (d->nodes));
      for (hwloc_obj_t c = o->io_first_child; c != NULL; c = c->next_sibling)
        {
          if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL)
            continue;
          char *joined = xasprintf ("%s%s%s", d->os_names ? d->os_names : "", d->os_names ? "," : "", c->name);
          free (d->os_names);
          d->os_names = joined;
          /* A GPU also shows as CUDA/OpenCL co-processors: the lowest rank names it. */
          const char *k = osdev_kind (c->attr->osdev.type);
          if (k != NULL && (d->os_kind == NULL || osdev_rank (k) < osdev_rank (d->os_kind)))
            {
              free (d->os_kind);
              d->os_kind = xstrdup (k);
            }
        }
    }
}

int
nrm_topology_load (const char *xml_path, struct nrm_topology **ret, nrm_error_t *err)
{
  cleanup_hwloc hwloc_topology_t h = NULL;
  struct nrm_topology *t = NULL;

  if (xml_path != NULL)
    {
      /* hwloc reads a missing file as an empty machine: check first. */
      cleanup_close int fd = open (xml_path, O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        return nrm_error_errno (err, errno, "cannot open topology `%s`", xml_path);
    }
  /* hwloc's own XML reader needs a third of the memory of its libxml2 one
   * (6 instead of 10 MiB peak for a 384-CPU machine); a caller's choice wins. */
  setenv ("HWLOC_LIBXML_IMPORT", "0", 0);
  if (hwloc_topology_init (&h) < 0)
    return nrm_error_errno (err, errno, "cannot initialize hwloc");
  hwloc_topology_set_flags (h, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  hwloc_topology_set_io_types_filter (h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (xml_path != NULL && hwloc_topology_set_xml (h, xml_path) < 0)
    return nrm_error_errno (err, errno ? errno : EINVAL, "cannot read topology `%s`", xml_path);
  if (hwloc_topology_load (h) < 0)
    return nrm_error_errno (err, errno ? errno : EINVAL, "cannot load topology `%s`",
                            xml_path ? xml_path : "of this machine");
  /* nrm models the node, not its own cgroup: in a pod, or once the shared
   * pool confines it, its cpuset is narrower than the machine's. A recorded
   * machine keeps the allowed sets it was recorded with. */
  if (xml_path == NULL && hwloc_topology_allow (h, NULL, NULL, HWLOC_ALLOW_FLAG_ALL) < 0)
    return nrm_error_errno (err, errno, "cannot widen the allowed CPUs to the whole machine");
  if (hwloc_get_nbobjs_by_type (h, HWLOC_OBJ_PU) <= 0)
    return nrm_error_set (err, EINVAL, "topology `%s` has no CPUs", xml_path ? xml_path : "of this machine");

  t = xcalloc (1, sizeof (*t));
  t->source = xstrdup (xml_path ? xml_path : "live");
  hwloc_obj_t root = hwloc_get_root_obj (h);
  const char *arch = hwloc_obj_get_info_by_name (root, "Architecture");
  t->arch = xstrdup (arch ? arch : "unknown");
  scan_numa (h, t);
  scan_cpu_objects (h, t);
  scan_distances (h, t);
  scan_pci (h, t);
  *ret = t;
  return 0;
}

struct nrm_topology *
nrm_topology_free (struct nrm_topology *t)
{
  if (t == NULL)
    return NULL;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      free (t->numa[i].hugepages);
      free (t->numa[i].reserved_hugepages);
      free (t->numa[i].kind);
      hwloc_bitmap_free (t->numa[i].locality);
      hwloc_bitmap_free (t->numa[i].cpus);
    }
  for (size_t i = 0; i < t->n_packages; i++)
    hwloc_bitmap_free (t->packages[i].cpus);
  for (size_t i = 0; i < t->n_l3; i++)
    hwloc_bitmap_free (t->l3[i].cpus);
  for (size_t i = 0; i < t->n_groups; i++)
    {
      free (t->groups[i].kind);
      hwloc_bitmap_free (t->groups[i].cpus);
    }
  for (size_t i = 0; i < t->n_cores; i++)
    hwloc_bitmap_free (t->cores[i].cpus);
  for (size_t i = 0; i < t->n_kinds; i++)
    {
      free (t->kinds[i].name);
      free (t->kinds[i].core_type);
      hwloc_bitmap_free (t->kinds[i].cpus);
    }
  for (size_t i = 0; i < t->n_pci; i++)
    {
      hwloc_bitmap_free (t->pci[i].nodes);
      hwloc_bitmap_free (t->pci[i].cpus);
      free (t->pci[i].os_names);
      free (t->pci[i].os_kind);
      free (t->pci[i].vendor_name);
      free (t->pci[i].device_name);
    }
  free (t->numa);
  free (t->packages);
  free (t->l3);
  free (t->groups);
  free (t->cores);
  free (t->pus);
  free (t->kinds);
  free (t->pci);
  free (t->distances);
  hwloc_bitmap_free (t->online);
  hwloc_bitmap_free (t->offline);
  hwloc_bitmap_free (t->disallowed);
  hwloc_bitmap_free (t->reserved);
  hwloc_bitmap_free (t->isolated);
  free (t->source);
  free (t->arch);
  free (t);
  return NULL;
}
