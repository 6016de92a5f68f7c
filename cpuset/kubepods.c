/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpuset/kubepods.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

static bool
copy_part (char *dst, size_t cap, const char *src, size_t n)
{
  if (n == 0 || n >= cap)
    return false;
  memcpy (dst, src, n);
  dst[n] = '\0';
  return true;
}

/* The container id inside a leaf name: "cri-containerd-<id>.scope",
 * "crio-<id>.scope", "docker-<id>.scope" or a bare "<id>". */
static bool
container_id (const char *leaf, char *out, size_t cap)
{
  static const char *const prefixes[] = { "cri-containerd-", "crio-", "docker-", "containerd-" };
  size_t n = strlen (leaf);
  const char *p = leaf;
  bool systemd = n > 6 && strcmp (leaf + n - 6, ".scope") == 0;
  if (systemd)
    n -= 6;
  if (strncmp (leaf, "crio-conmon-", 12) == 0)
    return false; /* CRI-O's monitor, not a container */
  for (size_t i = 0; i < sizeof (prefixes) / sizeof (prefixes[0]); i++)
    if (strncmp (leaf, prefixes[i], strlen (prefixes[i])) == 0)
      {
        p = leaf + strlen (prefixes[i]);
        n -= strlen (prefixes[i]);
        break;
      }
  if (systemd && p == leaf)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-' || p[i] == '_'))
      return false;
  return copy_part (out, cap, p, n);
}

bool
nrm_kubepods_parse (const char *path, struct nrm_container_cgroup *out)
{
  char parts[6][256];
  size_t n = 0;
  const char *p = path[0] == '/' ? path + 1 : path;
  memset (out, 0, sizeof (*out));
  while (*p && n < 6)
    {
      const char *slash = strchr (p, '/');
      size_t len = slash ? (size_t) (slash - p) : strlen (p);
      if (!copy_part (parts[n], sizeof (parts[0]), p, len))
        return false;
      n++;
      if (!slash)
        break;
      p = slash + 1;
    }
  if (n < 3 || n > 4 || strlen (path) >= sizeof (out->path))
    return false;
  snprintf (out->path, sizeof (out->path), "%s", path[0] == '/' ? path + 1 : path);

  bool systemd = strcmp (parts[0], "kubepods.slice") == 0;
  if (!systemd && strcmp (parts[0], "kubepods") != 0)
    return false;
  const char *pod;
  if (n == 4)
    {
      const char *q = parts[1];
      if (systemd)
        {
          if (strncmp (q, "kubepods-", 9) != 0 || strlen (q) < 16)
            return false;
          q += 9;
          size_t ql = strlen (q) - 6; /* ".slice" */
          if (!copy_part (out->qos, sizeof (out->qos), q, ql))
            return false;
        }
      else
        snprintf (out->qos, sizeof (out->qos), "%s", q);
      if (strcmp (out->qos, "burstable") && strcmp (out->qos, "besteffort"))
        return false;
      pod = parts[2];
    }
  else
    {
      snprintf (out->qos, sizeof (out->qos), "guaranteed");
      pod = parts[1];
    }
  /* The pod UID; systemd writes its '-' as '_'. */
  const char *u;
  if (systemd)
    {
      u = strstr (pod, "-pod");
      if (u == NULL || strncmp (pod, "kubepods-", 9) != 0)
        return false;
      u += 4;
    }
  else
    {
      if (strncmp (pod, "pod", 3) != 0)
        return false;
      u = pod + 3;
    }
  size_t ul = strlen (u);
  if (systemd)
    {
      if (ul < 7 || strcmp (u + ul - 6, ".slice") != 0)
        return false;
      ul -= 6;
    }
  if (!copy_part (out->pod_uid, sizeof (out->pod_uid), u, ul))
    return false;
  for (char *c = out->pod_uid; *c; c++)
    if (*c == '_')
      *c = '-';
  return container_id (parts[n - 1], out->id, sizeof (out->id));
}

static int
walk (struct nrm_cgroupfs *fs, const char *rel, int depth, int (*fn) (const struct nrm_container_cgroup *, void *),
      void *arg)
{
  cleanup_free char *full = xasprintf ("%s/%s", nrm_cgroupfs_root (fs), rel);
  DIR *d = opendir (full);
  if (d == NULL)
    return 0; /* vanished while walking: nothing to do there */
  struct dirent *de;
  int r = 0;
  while (r == 0 && (de = readdir (d)) != NULL)
    {
      if (de->d_name[0] == '.' || de->d_type != DT_DIR)
        continue;
      cleanup_free char *child = xasprintf ("%s/%s", rel, de->d_name);
      struct nrm_container_cgroup c;
      if (nrm_kubepods_parse (child, &c))
        r = fn (&c, arg);
      else if (depth < 3)
        r = walk (fs, child, depth + 1, fn, arg);
    }
  closedir (d);
  return r;
}

int
nrm_kubepods_walk (struct nrm_cgroupfs *fs, int (*fn) (const struct nrm_container_cgroup *c, void *arg), void *arg,
                   nrm_error_t *err)
{
  const char *roots[] = { "kubepods.slice", "kubepods" };
  for (int i = 0; i < 2; i++)
    {
      int r = walk (fs, roots[i], 1, fn, arg);
      if (r != 0)
        return r;
    }
  return 0;
}
