/* SPDX-License-Identifier: Apache-2.0 */
/* PCI facts from sysfs, below the root. */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "topology/pci.h"

/* Sysfs attribute files are one page at most. */
#define ATTR_MAX 4096

bool
nrm_pci_bus_id_valid (const char *s)
{
  static const char shape[] = "xxxx:xx:xx.x";
  if (s == NULL || strlen (s) != sizeof (shape) - 1)
    return false;
  for (size_t i = 0; shape[i]; i++)
    if (shape[i] == 'x' ? !(isdigit ((unsigned char) s[i]) || (s[i] >= 'a' && s[i] <= 'f')) : s[i] != shape[i])
      return false;
  return strtoul (s + 8, NULL, 16) < 0x20 && s[11] <= '7';
}

/* VGA functions of these vendors are server management controllers and
 * emulated adapters, not accelerators: ASPEED, Matrox (G200), Cirrus and
 * qemu's standard VGA. */
static bool
console_vga (uint16_t vendor)
{
  return vendor == 0x1a03 || vendor == 0x102b || vendor == 0x1013 || vendor == 0x1234;
}

const char *
nrm_pci_class_name (uint32_t class_code, uint16_t vendor)
{
  unsigned base = class_code >> 16, sub = (class_code >> 8) & 0xff;
  /* Xilinx and Altera functions are FPGAs whatever class they claim. */
  if ((vendor == 0x10ee || vendor == 0x1172) && (base == 0x12 || base == 0x11 || base == 0x05 || base == 0xff))
    return "fpga";
  switch (base)
    {
    case 0x03:
      if (sub == 0x02 || ((sub == 0x00 || sub == 0x80) && !console_vga (vendor)))
        return "gpu";
      return NULL;
    case 0x02:
      return sub == 0x07 ? "ib" : "nic";
    case 0x01:
      return sub == 0x08 ? "nvme" : NULL;
    case 0x12:
      return "accel";
    case 0x0b:
      return sub == 0x40 ? "coproc" : NULL;
    default:
      return NULL;
    }
}

/* The first line of an attribute file, without its newline; NULL when it
 * cannot be read. */
static char *
read_line_at (int dfd, const char *name)
{
  cleanup_close int fd = openat (dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  char buf[ATTR_MAX];
  if (fd < 0)
    return NULL;
  ssize_t n = read (fd, buf, sizeof (buf) - 1);
  if (n < 0)
    return NULL;
  buf[n] = '\0';
  buf[strcspn (buf, "\n")] = '\0';
  return xstrdup (buf);
}

static bool
read_long_at (int dfd, const char *name, int base, long *ret)
{
  cleanup_free char *s = read_line_at (dfd, name);
  char *end;
  if (s == NULL || s[0] == '\0')
    return false;
  errno = 0;
  long v = strtol (s, &end, base);
  if (errno || *end)
    return false;
  *ret = v;
  return true;
}

/* The TOTAL_ERR_* line of an AER counter file; -1 without one. */
static int64_t
read_aer_at (int dfd, const char *name)
{
  cleanup_close int fd = openat (dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  char buf[ATTR_MAX];
  if (fd < 0)
    return -1;
  ssize_t n = read (fd, buf, sizeof (buf) - 1);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  for (char *line = buf; line && *line; line = strchr (line, '\n') ? strchr (line, '\n') + 1 : NULL)
    if (strncmp (line, "TOTAL_ERR_", 10) == 0)
      {
        char *sp = strchr (line, ' ');
        if (sp == NULL)
          return -1;
        errno = 0;
        long long v = strtoll (sp + 1, NULL, 10);
        return errno || v < 0 ? -1 : (int64_t) v;
      }
  return -1;
}

/* The last component of the link target of dfd/name; NULL when it is no link. */
static char *
link_base_at (int dfd, const char *name)
{
  char target[PATH_MAX];
  ssize_t n = readlinkat (dfd, name, target, sizeof (target) - 1);
  if (n <= 0)
    return NULL;
  target[n] = '\0';
  const char *slash = strrchr (target, '/');
  return xstrdup (slash ? slash + 1 : target);
}

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static void
push (char ***list, size_t *n, char *s)
{
  for (size_t i = 0; i < *n; i++)
    if (strcmp ((*list)[i], s) == 0)
      {
        free (s);
        return;
      }
  *list = xrealloc (*list, (*n + 1) * sizeof (**list));
  (*list)[(*n)++] = s;
}

/* A device node of the function, kept when it exists under the prefix. */
static void
add_node (struct nrm_pci_facts *f, const struct nrm_fsroot *root, const char *path)
{
  cleanup_free char *full = nrm_fsroot_path (root, "%s", path);
  struct stat st;
  if (stat (full, &st) == 0)
    push (&f->nodes, &f->n_nodes, xstrdup (path));
}

static bool
name_is (const char *name, const char *stem)
{
  size_t n = strlen (stem);
  if (strncmp (name, stem, n) != 0 || name[n] == '\0')
    return false;
  for (const char *p = name + n; *p; p++)
    if (!isdigit ((unsigned char) *p))
      return false;
  return true;
}

/* "nvme0n1": a namespace block device of controller nvme0. */
static bool
nvme_namespace (const char *ctrl, const char *name)
{
  size_t n = strlen (ctrl);
  return strncmp (name, ctrl, n) == 0 && name[n] == 'n' && name_is (name + n, "n");
}

/* The entries of the class folder `sub` of a device folder (drm, net, nvme,
 * infiniband_verbs, accel), each handed to fn. */
static void
each_entry (int dfd, const char *sub, void (*fn) (struct nrm_pci_facts *, const struct nrm_fsroot *, int, const char *),
            struct nrm_pci_facts *f, const struct nrm_fsroot *root)
{
  cleanup_close int sfd = openat (dfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (sfd < 0)
    return;
  DIR *d = nrm_opendir_at (sfd);
  if (d == NULL)
    return;
  for (struct dirent *e; (e = readdir (d));)
    if (e->d_name[0] != '.')
      fn (f, root, sfd, e->d_name);
  closedir (d);
}

static void
on_drm (struct nrm_pci_facts *f, const struct nrm_fsroot *root, int sfd, const char *name)
{
  (void) sfd;
  if (name_is (name, "card") || name_is (name, "renderD"))
    {
      cleanup_free char *p = xasprintf ("/dev/dri/%s", name);
      add_node (f, root, p);
    }
}

static void
on_accel (struct nrm_pci_facts *f, const struct nrm_fsroot *root, int sfd, const char *name)
{
  (void) sfd;
  if (name_is (name, "accel"))
    {
      cleanup_free char *p = xasprintf ("/dev/accel/%s", name);
      add_node (f, root, p);
    }
}

static void
on_verbs (struct nrm_pci_facts *f, const struct nrm_fsroot *root, int sfd, const char *name)
{
  (void) sfd;
  if (name_is (name, "uverbs"))
    {
      cleanup_free char *p = xasprintf ("/dev/infiniband/%s", name);
      add_node (f, root, p);
      /* The connection manager is one node for every RDMA device. */
      add_node (f, root, "/dev/infiniband/rdma_cm");
    }
}

/* Whether a block device (or one of its partitions) is in use by the
 * host: something stacked on it (holders), or mounted or swap (by its
 * major:minor in mountinfo, by name in swaps). */
static char *
block_in_use (const struct nrm_fsroot *root, const char *name, int depth)
{
  cleanup_free char *base = nrm_fsroot_path (root, "/sys/block/%s", name);
  cleanup_free char *holders = xasprintf ("%s/holders", base);
  DIR *d = opendir (holders);
  bool stacked = false;
  for (struct dirent *e; d && (e = readdir (d));)
    stacked |= e->d_name[0] != '.';
  if (d)
    closedir (d);
  if (stacked)
    return xasprintf ("%s holds a device mapper or md device", name);
  cleanup_free char *devfile = xasprintf ("%s/dev", base);
  cleanup_free char *dev = NULL;
  nrm_error_t e = NULL;
  if (nrm_read_file (devfile, 64, &dev, NULL, &e) == 0)
    {
      dev[strcspn (dev, "\n")] = '\0';
      cleanup_free char *mi = NULL;
      cleanup_free char *mpath = nrm_fsroot_path (root, "/proc/self/mountinfo");
      if (nrm_read_file (mpath, 1 << 22, &mi, NULL, &e) == 0)
        for (char *line = mi; line && *line; line = strchr (line, '\n') ? strchr (line, '\n') + 1 : NULL)
          {
            /* "36 35 259:2 / /boot ...": the third field. */
            char id[64] = "", mnt[256] = "";
            if (sscanf (line, "%*s %*s %63s %*s %255s", id, mnt) == 2 && strcmp (id, dev) == 0)
              return xasprintf ("%s is mounted on %s", name, mnt);
          }
      nrm_error_release (&e);
    }
  nrm_error_release (&e);
  cleanup_free char *swaps = NULL;
  cleanup_free char *spath = nrm_fsroot_path (root, "/proc/swaps");
  cleanup_free char *needle = xasprintf ("/dev/%s ", name);
  if (nrm_read_file (spath, 1 << 20, &swaps, NULL, &e) == 0 && strstr (swaps, needle))
    return xasprintf ("%s is swap", name);
  nrm_error_release (&e);
  /* Its partitions: nvme0n1p1 ... */
  DIR *pd = depth == 0 ? opendir (base) : NULL;
  char *why = NULL;
  for (struct dirent *ent; pd && why == NULL && (ent = readdir (pd));)
    if (strncmp (ent->d_name, name, strlen (name)) == 0 && ent->d_name[strlen (name)] == 'p')
      why = block_in_use (root, ent->d_name, 1);
  if (pd)
    closedir (pd);
  return why;
}

static void
note_in_use (struct nrm_pci_facts *f, char *why)
{
  if (why && f->in_use == NULL)
    f->in_use = why;
  else
    free (why);
}

static void
on_nvme (struct nrm_pci_facts *f, const struct nrm_fsroot *root, int sfd, const char *name)
{
  if (!name_is (name, "nvme"))
    return;
  cleanup_free char *p = xasprintf ("/dev/%s", name);
  add_node (f, root, p);
  /* Its namespaces (without native multipath they sit below the controller). */
  cleanup_close int cfd = openat (sfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = cfd >= 0 ? nrm_opendir_at (cfd) : NULL;
  if (d == NULL)
    return;
  for (struct dirent *e; (e = readdir (d));)
    if (nvme_namespace (name, e->d_name))
      {
        cleanup_free char *np = xasprintf ("/dev/%s", e->d_name);
        add_node (f, root, np);
        note_in_use (f, block_in_use (root, e->d_name, 0));
      }
  closedir (d);
}

static void
on_net (struct nrm_pci_facts *f, const struct nrm_fsroot *root, int sfd, const char *name)
{
  (void) root;
  push (&f->netdevs, &f->n_netdevs, xstrdup (name));
  cleanup_close int nfd = openat (sfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  long carrier;
  cleanup_free char *oper = nfd >= 0 ? read_line_at (nfd, "operstate") : NULL;
  if (oper && strcmp (oper, "up") == 0)
    note_in_use (f, xasprintf ("its interface %s is up", name));
  /* The kernel has carrier only for an interface that is up (EINVAL
   * otherwise): one that is down tells nothing about its link, and a NIC
   * nrm publishes is one whose interfaces are down. */
  if (nfd >= 0 && read_long_at (nfd, "carrier", 10, &carrier))
    f->carrier = carrier || f->carrier == 1 ? 1 : 0;
}

/* The class folders of a function, and of its virtio child (virtio
 * devices put their drm, net and block folders one level down). */
static void
scan_classes (struct nrm_pci_facts *f, const struct nrm_fsroot *root, int dfd, int depth)
{
  each_entry (dfd, "drm", on_drm, f, root);
  each_entry (dfd, "accel", on_accel, f, root);
  each_entry (dfd, "infiniband_verbs", on_verbs, f, root);
  each_entry (dfd, "nvme", on_nvme, f, root);
  each_entry (dfd, "net", on_net, f, root);
  if (depth > 0)
    return;
  DIR *d = nrm_opendir_at (dfd);
  if (d == NULL)
    return;
  for (struct dirent *e; (e = readdir (d));)
    if (name_is (e->d_name, "virtio"))
      {
        cleanup_close int vfd = openat (dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (vfd >= 0)
          scan_classes (f, root, vfd, depth + 1);
      }
  closedir (d);
}

/* pciDDDD:BB from the resolved path of the function: the first component
 * under /sys/devices, when it names a host bridge. */
static void
read_root (struct nrm_pci_facts *f, const struct nrm_fsroot *root, const char *path)
{
  char real[PATH_MAX], base[PATH_MAX];
  cleanup_free char *sysdev = nrm_fsroot_path (root, "/sys/devices");
  if (realpath (path, real) == NULL || realpath (sysdev, base) == NULL)
    return;
  size_t n = strlen (base);
  if (strncmp (real, base, n) != 0 || real[n] != '/')
    return;
  const char *c = real + n + 1;
  size_t len = strcspn (c, "/");
  if (len != 10 || strncmp (c, "pci", 3) != 0 || c[7] != ':')
    return;
  for (size_t i = 3; i < len; i++)
    if (i != 7 && !isxdigit ((unsigned char) c[i]))
      return;
  for (size_t i = 0; i < len; i++)
    f->pcie_root[i] = (char) tolower ((unsigned char) c[i]);
  f->pcie_root[len] = '\0';
}

void
nrm_pci_facts_init (struct nrm_pci_facts *f)
{
  memset (f, 0, sizeof (*f));
  f->numa_node = f->iommu_group = f->sriov_total = f->sriov_enabled = -1;
  f->link_width = f->max_link_width = f->carrier = -1;
  f->aer_fatal = f->aer_nonfatal = f->aer_correctable = -1;
}

/* The open folder of a function, or -1 with the error set. */
static int
open_function (const struct nrm_fsroot *root, const char *bus_id, nrm_error_t *err)
{
  if (!nrm_pci_bus_id_valid (bus_id))
    return nrm_error_set (err, EINVAL, "`%s` is not a PCI bus id (dddd:bb:dd.f, lowercase)", bus_id);
  cleanup_free char *path = nrm_fsroot_path (root, "/sys/bus/pci/devices/%s", bus_id);
  int dfd = open (path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return nrm_error_errno (err, errno, "PCI function %s (%s)", bus_id, path);
  return dfd;
}

int
nrm_pci_read_ids (const struct nrm_fsroot *root, const char *bus_id, uint16_t *vendor_id, uint32_t *class_code,
                  nrm_error_t *err)
{
  long v;
  cleanup_close int dfd = open_function (root, bus_id, err);
  if (dfd < 0)
    return -1;
  *vendor_id = read_long_at (dfd, "vendor", 16, &v) ? (uint16_t) v : 0;
  *class_code = read_long_at (dfd, "class", 16, &v) ? (uint32_t) v & 0xffffff : 0;
  return 0;
}

int
nrm_pci_read_local_cpus (const struct nrm_fsroot *root, const char *bus_id, char **ret, nrm_error_t *err)
{
  cleanup_close int dfd = open_function (root, bus_id, err);
  if (dfd < 0)
    return -1;
  *ret = read_line_at (dfd, "local_cpulist");
  return 0;
}

int
nrm_pci_facts_read (const struct nrm_fsroot *root, const char *bus_id, struct nrm_pci_facts *f, nrm_error_t *err)
{
  long v;

  nrm_pci_facts_init (f);
  cleanup_close int dfd = open_function (root, bus_id, err);
  if (dfd < 0)
    return -1;
  snprintf (f->bus_id, sizeof (f->bus_id), "%s", bus_id);
  /* The path itself, for the host bridge it resolves to. */
  cleanup_free char *path = nrm_fsroot_path (root, "/sys/bus/pci/devices/%s", bus_id);

  if (read_long_at (dfd, "vendor", 16, &v))
    f->vendor_id = (uint16_t) v;
  if (read_long_at (dfd, "device", 16, &v))
    f->device_id = (uint16_t) v;
  if (read_long_at (dfd, "class", 16, &v))
    f->class_code = (uint32_t) v & 0xffffff;
  if (read_long_at (dfd, "numa_node", 10, &v) && v >= 0 && v < 1024)
    f->numa_node = (int) v;
  f->local_cpus = read_line_at (dfd, "local_cpulist");
  read_root (f, root, path);
  f->driver = link_base_at (dfd, "driver");
  cleanup_free char *group = link_base_at (dfd, "iommu_group");
  char *end;
  if (group && (v = strtol (group, &end, 10)) >= 0 && *end == '\0' && end != group)
    f->iommu_group = (int) v;
  if (read_long_at (dfd, "sriov_totalvfs", 10, &v) && v >= 0)
    {
      f->sriov_total = (int) v;
      f->sriov_enabled = read_long_at (dfd, "sriov_numvfs", 10, &v) && v >= 0 ? (int) v : 0;
    }
  cleanup_free char *pf = link_base_at (dfd, "physfn");
  if (pf && nrm_pci_bus_id_valid (pf))
    snprintf (f->physfn, sizeof (f->physfn), "%s", pf);
  f->link_speed = read_line_at (dfd, "current_link_speed");
  f->max_link_speed = read_line_at (dfd, "max_link_speed");
  if (read_long_at (dfd, "current_link_width", 10, &v) && v >= 0)
    f->link_width = (int) v;
  if (read_long_at (dfd, "max_link_width", 10, &v) && v >= 0)
    f->max_link_width = (int) v;
  f->aer_fatal = read_aer_at (dfd, "aer_dev_fatal");
  f->aer_nonfatal = read_aer_at (dfd, "aer_dev_nonfatal");
  f->aer_correctable = read_aer_at (dfd, "aer_dev_correctable");

  scan_classes (f, root, dfd, 0);
  /* A function given to vfio-pci is reached through its IOMMU group. */
  if (f->driver && strcmp (f->driver, "vfio-pci") == 0 && f->iommu_group >= 0)
    {
      char p[32];
      snprintf (p, sizeof (p), "/dev/vfio/%d", f->iommu_group);
      add_node (f, root, p);
      add_node (f, root, "/dev/vfio/vfio");
    }
  if (f->n_nodes)
    qsort (f->nodes, f->n_nodes, sizeof (*f->nodes), cmp_str);
  if (f->n_netdevs)
    qsort (f->netdevs, f->n_netdevs, sizeof (*f->netdevs), cmp_str);
  return 0;
}

void
nrm_pci_facts_done (struct nrm_pci_facts *f)
{
  if (f == NULL)
    return;
  free (f->local_cpus);
  free (f->driver);
  free (f->link_speed);
  free (f->max_link_speed);
  free (f->in_use);
  nrm_pci_list_free (f->nodes, f->n_nodes);
  nrm_pci_list_free (f->netdevs, f->n_netdevs);
  memset (f, 0, sizeof (*f));
}

int
nrm_pci_list (const struct nrm_fsroot *root, char ***ret, size_t *n, nrm_error_t *err)
{
  cleanup_free char *path = nrm_fsroot_path (root, "/sys/bus/pci/devices");
  DIR *d = opendir (path);
  char **list = NULL;
  size_t k = 0;
  if (d == NULL)
    return nrm_error_errno (err, errno, "cannot list %s", path);
  for (struct dirent *e; (e = readdir (d));)
    if (nrm_pci_bus_id_valid (e->d_name))
      push (&list, &k, xstrdup (e->d_name));
  closedir (d);
  if (k)
    qsort (list, k, sizeof (*list), cmp_str);
  *ret = list;
  *n = k;
  return 0;
}

void
nrm_pci_list_free (char **list, size_t n)
{
  for (size_t i = 0; i < n; i++)
    free (list[i]);
  free (list);
}

/* --- PCI functions in other drivers' devices ---------------------------- */

void
nrm_pci_device_name (const char *class, const char *bus_id, char *buf, size_t size)
{
  snprintf (buf, size, "%s-%s", class, bus_id);
  for (char *p = buf + strlen (class) + 1; *p; p++)
    if (*p == ':' || *p == '.')
      *p = '-';
}

bool
nrm_pci_bus_id_of_device (const char *name, char buf[NRM_PCI_BUS_ID_LEN])
{
  /* <class>-dddd-bb-dd-f: a lowercase class, then the id with dashes. */
  size_t n = strlen (name), cl = strspn (name, "abcdefghijklmnopqrstuvwxyz");
  buf[0] = '\0';
  if (cl == 0 || n != cl + 13 || name[cl] != '-')
    return false;
  const char *id = name + cl + 1;
  if (id[4] != '-' || id[7] != '-' || id[10] != '-')
    return false;
  snprintf (buf, NRM_PCI_BUS_ID_LEN, "%.4s:%.2s:%.2s.%c", id, id + 5, id + 8, id[11]);
  if (nrm_pci_bus_id_valid (buf))
    return true;
  buf[0] = '\0';
  return false;
}

/* The attributes other drivers carry a PCI address in: the standard one,
 * and those of drivers that predate it (dranet's pciAddress, AMD's pciAddr). */
static const char *const bus_id_attrs[]
    = { "resource.kubernetes.io/pciBusID", "pciBusID", "pciAddress", "dra.net/pciAddress", "pciAddr" };

bool
nrm_pci_bus_id_of_attributes (json_t *attrs, char *buf)
{
  for (size_t k = 0; k < sizeof (bus_id_attrs) / sizeof (bus_id_attrs[0]); k++)
    {
      const char *v = json_string_value (json_object_get (json_object_get (attrs, bus_id_attrs[k]), "string"));
      if (v == NULL || strlen (v) != NRM_PCI_BUS_ID_LEN - 1)
        continue;
      for (size_t i = 0; i < NRM_PCI_BUS_ID_LEN; i++)
        buf[i] = (char) (v[i] >= 'A' && v[i] <= 'F' ? v[i] - 'A' + 'a' : v[i]);
      if (nrm_pci_bus_id_valid (buf))
        return true;
    }
  return false;
}
