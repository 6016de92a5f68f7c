/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/names.h"
#include "nrm/base/xalloc.h"

/* RFC 1123 label syntax; max is 63 for a DNS label, unlimited inside a
 * subdomain (Kubernetes checks only the subdomain's total length). */
static bool
label_ok (const char *s, size_t n, size_t max)
{
  if (n == 0 || n > max)
    return false;
  for (size_t i = 0; i < n; i++)
    {
      char c = s[i];
      bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
      if (!alnum && !(c == '-' && i > 0 && i + 1 < n))
        return false;
    }
  return true;
}

bool
nrm_is_dns_label (const char *s)
{
  return s != NULL && label_ok (s, strlen (s), 63);
}

bool
nrm_is_dns_subdomain (const char *s, int max)
{
  if (s == NULL)
    return false;
  size_t len = strlen (s);
  if (len == 0 || len > (size_t) max)
    return false;
  for (const char *p = s;;)
    {
      const char *dot = strchr (p, '.');
      size_t n = dot ? (size_t) (dot - p) : strlen (p);
      if (!label_ok (p, n, len))
        return false;
      if (dot == NULL)
        return true;
      p = dot + 1;
    }
}

bool
nrm_is_c_identifier (const char *s, int max)
{
  if (s == NULL || *s == '\0' || strlen (s) > (size_t) max)
    return false;
  if (!(isalpha ((unsigned char) *s) || *s == '_'))
    return false;
  for (const char *p = s + 1; *p; p++)
    if (!(isalnum ((unsigned char) *p) || *p == '_'))
      return false;
  return true;
}

bool
nrm_is_qualified_name (const char *s)
{
  if (s == NULL)
    return false;
  const char *slash = strchr (s, '/');
  if (slash == NULL)
    return nrm_is_c_identifier (s, 32);
  char domain[64];
  size_t n = (size_t) (slash - s);
  if (n == 0 || n > 63)
    return false;
  memcpy (domain, s, n);
  domain[n] = '\0';
  return nrm_is_dns_subdomain (domain, 63) && nrm_is_c_identifier (slash + 1, 32);
}

char *
nrm_base_request (const char *request)
{
  const char *slash = strchr (request, '/');
  return slash ? xstrndup (request, (size_t) (slash - request)) : xstrdup (request);
}

char *
nrm_numa_name (char *buf, size_t size, unsigned node, enum nrm_numa_name_kind kind, const char *page_size)
{
  snprintf (buf, size, "numa%u%s%s", node,
            kind == NRM_NUMA_NAME_ISOLATED    ? "-isolated"
            : kind == NRM_NUMA_NAME_HUGEPAGES ? "-hugepages-"
                                              : "",
            kind == NRM_NUMA_NAME_HUGEPAGES && page_size ? page_size : "");
  if (kind == NRM_NUMA_NAME_HUGEPAGES)
    for (char *c = strrchr (buf, '-'); c && *c; c++)
      *c = (char) tolower ((unsigned char) *c);
  return buf;
}

bool
nrm_numa_name_parse (const char *name, unsigned *node, enum nrm_numa_name_kind *kind)
{
  char *end = NULL;
  if (name == NULL || strncmp (name, "numa", 4) != 0 || !isdigit ((unsigned char) name[4]))
    return false;
  errno = 0;
  unsigned long v = strtoul (name + 4, &end, 10);
  if (errno || v > 0xffffffffUL)
    return false;
  if (*end == '\0')
    *kind = NRM_NUMA_NAME_NODE;
  else if (strcmp (end, "-isolated") == 0)
    *kind = NRM_NUMA_NAME_ISOLATED;
  else if (strncmp (end, "-hugepages-", 11) == 0 && end[11] != '\0')
    *kind = NRM_NUMA_NAME_HUGEPAGES;
  else
    return false;
  *node = (unsigned) v;
  return true;
}
