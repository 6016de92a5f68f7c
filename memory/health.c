/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memory/health.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

/* One number of a sysfs file: digits (hex ones without 0x for block sizes)
 * and a newline; anything else is refused by name. */
static int
read_number (const char *path, int base, uint64_t *ret, nrm_error_t *err)
{
  cleanup_free char *buf = NULL;
  size_t len = 0;
  if (nrm_read_file (path, 64, &buf, &len, err) < 0)
    return -1;
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
    buf[--len] = '\0';
  char *end = NULL;
  errno = 0;
  unsigned long long v = len ? strtoull (buf, &end, base) : 0;
  if (len == 0 || errno || *end || buf[0] == '-' || buf[0] == '+' || buf[0] == ' ')
    return nrm_error_set (err, EINVAL, "`%s`: `%.20s` is not a number", path, buf);
  *ret = v;
  return 0;
}

/* "mc12" and the like: prefix and a decimal index. */
static bool
indexed (const char *name, const char *prefix, unsigned *index)
{
  size_t p = strlen (prefix);
  if (strncmp (name, prefix, p) || name[p] == '\0' || strspn (name + p, "0123456789") != strlen (name + p)
      || strlen (name + p) > 9)
    return false;
  *index = (unsigned) strtoul (name + p, NULL, 10);
  return true;
}

static int
socket_of (const char *mc_name)
{
  static const char *const marks[] = { "Socket#", "SrcID#" };
  for (size_t i = 0; i < 2; i++)
    {
      const char *s = strstr (mc_name, marks[i]);
      if (s && s[strlen (marks[i])] >= '0' && s[strlen (marks[i])] <= '9')
        return (int) strtol (s + strlen (marks[i]), NULL, 10) & 0xffff;
    }
  return -1;
}

/* amd64_edac's names (drivers/edac/amd64_edac.c, per_family_init():
 * pvt->ctl_name, shown as mc_name by edac_mc_sysfs.c, mci_ctl_name_show()):
 * "K8", "F10h", "F17h_M30h", "F19h_M10h", "F1Ah"... */
static bool
amd64_name (const char *n)
{
  static const char hex[] = "0123456789ABCDEF";
  if (strcmp (n, "K8") == 0)
    return true;
  if (n[0] != 'F' || !n[1] || !strchr (hex, n[1]) || !n[2] || !strchr (hex, n[2]) || n[3] != 'h')
    return false;
  if (n[4] == '\0')
    return true;
  return n[4] == '_' && n[5] == 'M' && n[6] && strchr (hex, n[6]) && n[7] && strchr (hex, n[7]) && n[8] == 'h'
         && n[9] == '\0';
}

/* The families whose AMD node is a die, several to a package: Magny-Cours
 * (F10h), Interlagos (F15h models 00h-0Fh), Naples (F17h models 00h-0Fh)
 * and Hygon Dhyana (F18h). amd64_edac makes one controller per AMD node
 * (amd64_edac_init(): probe_one_instance(i) for i < amd_nb_num(), which
 * sets pvt->mc_node_id = i, the index of edac_mc_alloc() in
 * init_one_instance()); from Rome (F17h_M30h) on, and on the single-die
 * families, an AMD node is a socket. */
static bool
amd64_per_die (const char *n)
{
  return strcmp (n, "F10h") == 0 || strcmp (n, "F15h") == 0 || strcmp (n, "F17h") == 0 || strcmp (n, "F18h") == 0;
}

static void
classify (struct nrm_edac_mc *m)
{
  const char *n = m->ctl;
  m->map = NRM_EDAC_UNMAPPED;
  m->socket = m->node = -1;
  if ((m->socket = socket_of (n)) >= 0)
    m->map = NRM_EDAC_SOCKET;
  else if (amd64_name (n) && amd64_per_die (n))
    {
      m->map = NRM_EDAC_DIE;
      m->node = (int) m->index;
    }
  else if (amd64_name (n))
    {
      m->map = NRM_EDAC_SOCKET;
      m->socket = (int) m->index;
    }
  else if (strcmp (n, "thunderx-lmc") == 0)
    {
      /* thunderx_edac.c, thunderx_lmc_probe(): mci->ctl_name and
       * edac_mc_alloc (pci_dev_to_mc_idx (pdev), ...). */
      m->map = NRM_EDAC_NODE;
      m->node = (int) (m->index >> 3);
    }
  else if (strcmp (n, "ghes_edac") == 0)
    m->map = NRM_EDAC_FIRMWARE;
}

static int
cmp_mc (const void *a, const void *b)
{
  const struct nrm_edac_mc *x = a, *y = b;
  unsigned i = 0, j = 0;
  indexed (x->name, "mc", &i);
  indexed (y->name, "mc", &j);
  return (i > j) - (i < j);
}

int
nrm_edac_read (const struct nrm_fsroot *root, struct nrm_edac_mc **ret, size_t *n, nrm_error_t *err)
{
  cleanup_free char *dir = nrm_fsroot_path (root, "/sys/devices/system/edac/mc");
  struct nrm_edac_mc *mcs = NULL;
  size_t count = 0;
  *ret = NULL;
  *n = 0;
  DIR *d = opendir (dir);
  if (d == NULL)
    return errno == ENOENT || errno == ENOTDIR ? 0 : nrm_error_errno (err, errno, "cannot list `%s`", dir);
  struct dirent *e;
  while ((e = readdir (d)) != NULL)
    {
      unsigned index;
      if (!indexed (e->d_name, "mc", &index))
        continue;
      mcs = xrealloc (mcs, (count + 1) * sizeof (*mcs));
      struct nrm_edac_mc *m = &mcs[count++];
      uint64_t ce = 0, ue = 0;
      memset (m, 0, sizeof (*m));
      snprintf (m->name, sizeof (m->name), "mc%u", index);
      m->index = index;
      cleanup_free char *cep = xasprintf ("%s/%s/ce_count", dir, e->d_name);
      cleanup_free char *uep = xasprintf ("%s/%s/ue_count", dir, e->d_name);
      cleanup_free char *namep = xasprintf ("%s/%s/mc_name", dir, e->d_name);
      cleanup_free char *mc_name = NULL;
      size_t len;
      if (read_number (cep, 10, &ce, err) < 0 || read_number (uep, 10, &ue, err) < 0)
        {
          closedir (d);
          free (mcs);
          return -1;
        }
      /* A name places the controller; its absence is no error. */
      nrm_error_t ignore = NULL;
      if (nrm_read_file (namep, 256, &mc_name, &len, &ignore) < 0)
        nrm_error_release (&ignore);
      else
        snprintf (m->ctl, sizeof (m->ctl), "%.*s", (int) strcspn (mc_name, "\n"), mc_name);
      classify (m);
      m->ce = ce > INT64_MAX ? INT64_MAX : (int64_t) ce;
      m->ue = ue > INT64_MAX ? INT64_MAX : (int64_t) ue;
    }
  closedir (d);
  if (count)
    qsort (mcs, count, sizeof (*mcs), cmp_mc);
  *ret = mcs;
  *n = count;
  return 0;
}

/* The size of a memory block (hex in sysfs): 1 where the tree has no
 * memory blocks. */
static int
block_size (const struct nrm_fsroot *root, uint64_t *size, nrm_error_t *err)
{
  cleanup_free char *sizep = nrm_fsroot_path (root, "/sys/devices/system/memory/block_size_bytes");
  if (access (sizep, F_OK) < 0)
    return 1;
  if (read_number (sizep, 16, size, err) < 0)
    return -1;
  if (*size == 0)
    return nrm_error_set (err, EINVAL, "`%s`: a block size of 0", sizep);
  return 0;
}

int
nrm_memory_block_node (const struct nrm_fsroot *root, uint64_t address, unsigned *node, nrm_error_t *err)
{
  cleanup_free char *nodes = nrm_fsroot_path (root, "/sys/devices/system/node");
  uint64_t size;
  int b = block_size (root, &size, err);
  if (b != 0)
    return b;
  /* Each node folder links the blocks it holds (memory<N>); the block
   * folder links its node back (node<N>), but a tree may copy the block. */
  DIR *d = opendir (nodes);
  if (d == NULL)
    return 1;
  struct dirent *e;
  int r = 1;
  while (r == 1 && (e = readdir (d)) != NULL)
    {
      unsigned index;
      if (!indexed (e->d_name, "node", &index))
        continue;
      cleanup_free char *link = xasprintf ("%s/%s/memory%" PRIu64, nodes, e->d_name, address / size);
      struct stat st;
      if (lstat (link, &st) == 0)
        {
          *node = index;
          r = 0;
        }
    }
  closedir (d);
  return r;
}

int
nrm_memory_blocks_read (const struct nrm_fsroot *root, unsigned node, uint64_t *online, uint64_t *offline,
                        nrm_error_t *err)
{
  cleanup_free char *nodep = nrm_fsroot_path (root, "/sys/devices/system/node/node%u", node);
  uint64_t size;
  *online = *offline = 0;
  int b = block_size (root, &size, err);
  if (b != 0)
    return b;
  DIR *d = opendir (nodep);
  if (d == NULL)
    return 1;
  struct dirent *e;
  int r = 0;
  while (r == 0 && (e = readdir (d)) != NULL)
    {
      unsigned index;
      if (!indexed (e->d_name, "memory", &index))
        continue;
      /* The block's own folder, not the link: fake trees may copy it. */
      cleanup_free char *statep = nrm_fsroot_path (root, "/sys/devices/system/memory/%s/state", e->d_name);
      cleanup_free char *state = NULL;
      size_t len;
      if (nrm_read_file (statep, 64, &state, &len, err) < 0)
        {
          r = -1;
          break;
        }
      state[strcspn (state, "\n")] = '\0';
      if (strcmp (state, "online") == 0)
        *online += size;
      else if (strcmp (state, "offline") == 0 || strcmp (state, "going-offline") == 0)
        *offline += size;
      else
        r = nrm_error_set (err, EINVAL, "`%s`: unknown state `%.20s`", statep, state);
    }
  closedir (d);
  return r;
}

/* The number after a zoneinfo keyword ("pages free 3840", "min 8"). */
static int
zone_value (const char *path, unsigned line, const char *text, uint64_t *ret, nrm_error_t *err)
{
  char *end = NULL;
  text += strspn (text, " \t");
  errno = 0;
  unsigned long long v = strtoull (text, &end, 10);
  if (end == text || errno || (*end && *end != '\n') || text[0] == '-')
    return nrm_error_set (err, EINVAL, "`%s` line %u: `%.20s` is not a number", path, line, text);
  *ret = v;
  return 0;
}

int
nrm_zones_low_read (const struct nrm_fsroot *root, unsigned node, struct nrm_zone_low *ret, size_t max,
                    nrm_error_t *err)
{
  cleanup_free char *path = nrm_fsroot_path (root, "/proc/zoneinfo");
  cleanup_fclose FILE *f = fopen (path, "re");
  cleanup_free char *line = NULL;
  size_t cap = 0, n = 0;
  unsigned number = 0;
  bool mine = false;
  struct nrm_zone_low z = { 0 };
  if (f == NULL)
    return 0;
  while (getline (&line, &cap, f) > 0)
    {
      unsigned nd;
      char zone[16];
      number++;
      if (sscanf (line, "Node %u, zone %15s", &nd, zone) == 2)
        {
          mine = nd == node;
          memset (&z, 0, sizeof (z));
          snprintf (z.zone, sizeof (z.zone), "%s", zone);
          continue;
        }
      if (!mine)
        continue;
      const char *t = line + strspn (line, " \t");
      if (strncmp (t, "pages free ", 11) == 0)
        {
          if (zone_value (path, number, t + 11, &z.free, err) < 0)
            return -1;
        }
      else if (strncmp (t, "min ", 4) == 0)
        {
          if (zone_value (path, number, t + 4, &z.min, err) < 0)
            return -1;
        }
      else if (strncmp (t, "low ", 4) == 0)
        {
          if (zone_value (path, number, t + 4, &z.low, err) < 0)
            return -1;
          if (z.free < z.low && n < max)
            ret[n++] = z;
        }
    }
  return (int) n;
}
