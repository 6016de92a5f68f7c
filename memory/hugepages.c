/* SPDX-License-Identifier: Apache-2.0 */
/* Huge page pools of NUMA nodes: sysfs reads and writes. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory/hugepages.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

char *
nrm_hugepages_path (const struct nrm_fsroot *root, unsigned node, uint64_t page_size)
{
  return nrm_fsroot_path (root, "/sys/devices/system/node/node%u/hugepages/hugepages-%" PRIu64 "kB/nr_hugepages", node,
                          page_size / 1024);
}

static int
read_count (const char *path, uint64_t *count, nrm_error_t *err)
{
  cleanup_free char *text = NULL;
  char *end;
  if (nrm_read_file (path, 64, &text, NULL, err) < 0)
    return -1;
  errno = 0;
  unsigned long long v = strtoull (text, &end, 10);
  while (*end == '\n' || *end == ' ')
    end++;
  if (errno || end == text || *end || text[0] == '-')
    return nrm_error_set (err, EINVAL, "%s: `%.20s` is not a page count", path, text);
  *count = v;
  return 0;
}

int
nrm_hugepages_read (const struct nrm_fsroot *root, unsigned node, uint64_t page_size, uint64_t *count, nrm_error_t *err)
{
  cleanup_free char *path = nrm_hugepages_path (root, node, page_size);
  return read_count (path, count, err);
}

int
nrm_hugepages_write (const struct nrm_fsroot *root, unsigned node, uint64_t page_size, uint64_t count, uint64_t *got,
                     nrm_error_t *err)
{
  cleanup_free char *path = nrm_hugepages_path (root, node, page_size);
  char text[32];
  int len = snprintf (text, sizeof (text), "%" PRIu64 "\n", count);
  {
    /* O_TRUNC is what a shell's `echo N >` does; sysfs ignores it, a fake
     * tree needs it. */
    cleanup_close int fd = open (path, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      return nrm_error_errno (err, errno, "cannot open %s", path);
    if (write (fd, text, (size_t) len) != len)
      return nrm_error_errno (err, errno, "writing %" PRIu64 " to %s", count, path);
  }
  return read_count (path, got, err);
}

int
nrm_node_mem_free (const struct nrm_fsroot *root, unsigned node, uint64_t *bytes, bool *known, nrm_error_t *err)
{
  cleanup_free char *path = nrm_fsroot_path (root, "/sys/devices/system/node/node%u/meminfo", node);
  cleanup_free char *text = NULL;
  *bytes = 0;
  *known = false;
  if (access (path, F_OK) < 0)
    return 0;
  if (nrm_read_file (path, 1 << 16, &text, NULL, err) < 0)
    return -1;
  /* "Node 0 MemFree:        1234 kB" */
  for (char *line = text; line && *line; line = strchr (line, '\n') ? strchr (line, '\n') + 1 : NULL)
    {
      unsigned n;
      unsigned long long kb;
      if (sscanf (line, "Node %u MemFree: %llu kB", &n, &kb) == 2 && n == node)
        {
          *bytes = (uint64_t) kb * 1024;
          *known = true;
          return 0;
        }
    }
  return 0;
}
