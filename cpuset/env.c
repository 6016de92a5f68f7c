/* SPDX-License-Identifier: Apache-2.0 */
/* The NRM_* variables: written by the drivers, read by the commit. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/env.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"

const char *const nrm_env_name[NRM_ENV_COUNT] = {
  [NRM_ENV_CPUS] = "NRM_CPUS",
  [NRM_ENV_CPU_NODES] = "NRM_CPU_NODES",
  [NRM_ENV_SHARED_CPUS] = "NRM_SHARED_CPUS",
  [NRM_ENV_MEMS] = "NRM_MEMS",
  [NRM_ENV_MEMORY_MAX] = "NRM_MEMORY_MAX",
  [NRM_ENV_MEMORY_MIN] = "NRM_MEMORY_MIN",
  [NRM_ENV_HUGETLB] = "NRM_HUGETLB_",
  [NRM_ENV_MEMORY_POLICY] = "NRM_MEMORY_POLICY",
  [NRM_ENV_PARTITION] = "NRM_PARTITION",
  [NRM_ENV_PARTITION_REQUIRED] = "NRM_PARTITION_REQUIRED",
};

static bool
digits_only (const char *s)
{
  /* Plain digits (what the cgroup files take), and a byte count that the
   * one quantity parser accepts without wrapping. */
  uint64_t v;
  nrm_error_t e = NULL;
  if (s == NULL || *s == '\0' || strspn (s, "0123456789") != strlen (s))
    return false;
  if (nrm_quantity_parse_bytes (s, &v, &e) < 0)
    {
      nrm_error_release (&e);
      return false;
    }
  return v <= INT64_MAX;
}

static void
append (json_t *env, const char *name, const char *value)
{
  cleanup_free char *s = xasprintf ("%s=%s", name, value);
  json_array_append_new (env, json_string (s));
}

int
nrm_env_add (json_t *env, enum nrm_env_var v, const char *size, const char *uid, const char *value, nrm_error_t *err)
{
  cleanup_free char *name = xasprintf ("%s%s", nrm_env_name[v], v == NRM_ENV_HUGETLB && size ? size : "");
  cleanup_free char *key = xasprintf ("%s_%s", name, uid);
  for (char *c = key + strlen (name); *c; c++)
    *c = *c == '-' ? '_' : (char) (*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
  append (env, name, value);
  append (env, key, value);
  return 0;
}

/* "NAME=" of v, or NULL when kv is not v. */
static const char *
value_of (const char *kv, enum nrm_env_var v)
{
  size_t n = strlen (nrm_env_name[v]);
  if (strncmp (kv, nrm_env_name[v], n) != 0 || kv[n] != '=')
    return NULL;
  return kv + n + 1;
}

int
nrm_env_binding_parse (json_t *env, const char *what, struct nrm_env_binding *eb, nrm_error_t *err)
{
  size_t i;
  json_t *e;
  memset (eb, 0, sizeof (*eb));
  json_array_foreach (env, i, e)
  {
    const char *kv = json_string_value (e);
    if (kv == NULL)
      continue;
    const char *v;
    size_t pl = strlen (nrm_env_name[NRM_ENV_HUGETLB]);
    if ((v = value_of (kv, NRM_ENV_CPUS)))
      eb->cpus = v;
    else if ((v = value_of (kv, NRM_ENV_MEMS)))
      eb->mems = v;
    else if ((v = value_of (kv, NRM_ENV_CPU_NODES)))
      eb->cpu_nodes = v;
    else if ((v = value_of (kv, NRM_ENV_SHARED_CPUS)))
      eb->shared_cpus = strcmp (v, "true") == 0;
    else if ((v = value_of (kv, NRM_ENV_PARTITION)))
      eb->partition = v;
    else if ((v = value_of (kv, NRM_ENV_PARTITION_REQUIRED)))
      eb->partition_required = strcmp (v, "true") == 0;
    else if ((v = value_of (kv, NRM_ENV_MEMORY_MAX)))
      eb->memory_max = v;
    else if ((v = value_of (kv, NRM_ENV_MEMORY_MIN)))
      eb->memory_min = v;
    else if (strncmp (kv, nrm_env_name[NRM_ENV_HUGETLB], pl) == 0)
      {
        /* NRM_HUGETLB_<size>=<bytes>, the size as the kernel names it; the
         * per-claim copies (NRM_HUGETLB_<size>_<UID>) say the same. */
        const char *eq = strchr (kv, '=');
        size_t sl = eq ? (size_t) (eq - kv - pl) : 0;
        if (eq && memchr (kv + pl, '_', sl) != NULL)
          continue;
        if (sl == 0 || sl > 8 || strspn (kv + pl, "0123456789KMGB") != sl || !digits_only (eq + 1))
          return nrm_error_set (err, EINVAL, "%s: malformed `%.40s`", what, kv);
        if (eb->n_hugetlb == NRM_HUGETLB_SIZES_MAX)
          return nrm_error_set (err, EINVAL, "%s: more than %d huge page sizes", what, NRM_HUGETLB_SIZES_MAX);
        snprintf (eb->hugetlb[eb->n_hugetlb].size, sizeof (eb->hugetlb[0].size), "%.*s", (int) sl, kv + pl);
        eb->hugetlb[eb->n_hugetlb].max = eq + 1;
        eb->n_hugetlb++;
      }
  }
  if ((eb->memory_max && !digits_only (eb->memory_max)) || (eb->memory_min && !digits_only (eb->memory_min)))
    return nrm_error_set (err, EINVAL, "%s: NRM_MEMORY_MAX and NRM_MEMORY_MIN must be byte counts", what);
  return 0;
}
