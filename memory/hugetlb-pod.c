/* SPDX-License-Identifier: Apache-2.0 */
/* The pod-level hugetlb limits of huge-page claims (memory/hugetlb-pod.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "memory/hugetlb-pod.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

#define MAX_JOURNAL (4 << 20)

struct step
{
  char *cgroup, *file, *old, *value;
};

struct nrm_hugetlb_pod_undo
{
  int lock;
  char *journal, *prev; /* prev NULL: there was no journal */
  size_t n;
  struct step steps[];
};

static char *
journal_path (const char *state_dir)
{
  return xasprintf ("%s/hugetlb-pods.json", state_dir);
}

static int
lock_journal (const char *state_dir, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/hugetlb-pods.lock", state_dir);
  return nrm_lock_file (path, err);
}

/* The journal, or an empty one when there is none; *ret_text (may be NULL)
 * is its text, NULL when there was none. */
static int
load (const char *path, json_t **ret, char **ret_text, nrm_error_t *err)
{
  char *text = NULL;
  nrm_error_t e = NULL;
  if (nrm_read_file (path, MAX_JOURNAL, &text, NULL, &e) < 0)
    {
      if (e->status != ENOENT)
        {
          *err = e;
          return -1;
        }
      nrm_error_release (&e);
      *ret = json_pack ("{s:{}, s:{}}", "levels", "claims");
      if (ret_text)
        *ret_text = NULL;
      return 0;
    }
  json_t *j = json_loads (text, 0, NULL);
  if (!json_is_object (json_object_get (j, "levels")) || !json_is_object (json_object_get (j, "claims")))
    {
      json_decref (j);
      free (text);
      /* Written by rename only: nothing but another writer makes this. */
      return nrm_error_set (err, EINVAL, "`%s` is not a huge page journal of nrm; remove it to start afresh", path);
    }
  *ret = j;
  if (ret_text)
    *ret_text = text;
  else
    free (text);
  return 0;
}

static int
save (const char *path, json_t *j, nrm_error_t *err)
{
  if (json_object_size (json_object_get (j, "claims")) == 0 && json_object_size (json_object_get (j, "levels")) == 0)
    {
      if (unlink (path) < 0 && errno != ENOENT)
        return nrm_error_errno (err, errno, "cannot remove `%s`", path);
      return 0;
    }
  cleanup_free char *text = json_dumps (j, JSON_COMPACT | JSON_SORT_KEYS);
  /* Synced: it holds the values the kubelet set, which nothing else
   * remembers once nrm has raised them. */
  return nrm_write_atomic (path, text, strlen (text), 0600, err);
}

/* "2MB" of "hugetlb.2MB.max" or "hugetlb.2MB.rsvd.max". */
static void
size_of_file (const char *file, char *size, size_t cap)
{
  const char *s = file + strlen ("hugetlb.");
  snprintf (size, cap, "%.*s", (int) strcspn (s, "."), s);
}

/* Bytes of size over the claims at or below level. */
static unsigned long long
claimed (json_t *j, const char *level, const char *size)
{
  unsigned long long sum = 0;
  size_t ln = strlen (level);
  const char *key;
  json_t *c;
  json_object_foreach (json_object_get (j, "claims"), key, c)
  {
    const char *pod = json_string_value (json_object_get (c, "pod"));
    if (pod && strncmp (pod, level, ln) == 0 && (pod[ln] == '\0' || pod[ln] == '/'))
      sum += (unsigned long long) json_integer_value (json_object_get (json_object_get (c, "sizes"), size));
    if (sum >= NRM_HUGETLB_POD_UNBOUNDED)
      return NRM_HUGETLB_POD_UNBOUNDED; /* each claim is below it: no wrap-around */
  }
  return sum;
}

/* What one value should become: *ret_value NULL when it stays. Restores
 * (nothing claimed below) only a value that is still nrm's; raises a value
 * that is nrm's or below what the claims need. */
static void
decide (const char *current, json_t *entry, unsigned long long sum, char **ret_value)
{
  const char *original = json_string_value (json_object_get (entry, "original"));
  const char *written = json_string_value (json_object_get (entry, "written"));
  unsigned long long o = 0, c = 0;
  bool ours = written && strcmp (current, written) == 0;
  *ret_value = NULL;
  if (sum == 0)
    {
      if (ours && strcmp (current, original) != 0)
        *ret_value = xstrdup (original);
      return;
    }
  nrm_cgroup_value_bytes (original, &o);
  cleanup_free char *want = xasprintf ("%llu", o + sum);
  if (strcmp (current, want) != 0 && (ours || !nrm_cgroup_value_bytes (current, &c) || c < o + sum))
    *ret_value = xstrdup (want);
}

static void
steps_free (struct step *s, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      free (s[i].cgroup);
      free (s[i].file);
      free (s[i].old);
      free (s[i].value);
    }
}

int
nrm_hugetlb_pod_raise (struct nrm_cgroupfs *fs, const char *state_dir, const char *container, const char *const *chain,
                       size_t n_chain, json_t *claims_in, struct nrm_hugetlb_pod_undo **ret_undo, nrm_error_t *err)
{
  if (ret_undo)
    *ret_undo = NULL;
  if (json_object_size (claims_in) == 0 || n_chain == 0)
    return 0;
  const char *pod = chain[0];

  cleanup_free char *path = journal_path (state_dir), *prev = NULL, *text = NULL;
  cleanup_close int lock = lock_journal (state_dir, err);
  cleanup_json json_t *j = NULL;
  if (lock < 0 || load (path, &j, &prev, err) < 0)
    return -1;
  json_t *claims = json_object_get (j, "claims"), *levels = json_object_get (j, "levels");

  /* The claims, each once per pod however many containers use it. */
  const char *uid;
  json_t *sizes;
  json_object_foreach (claims_in, uid, sizes)
  {
    cleanup_free char *key = xasprintf ("%s %s", pod, uid);
    json_t *c = json_object_get (claims, key);
    if (c == NULL)
      json_object_set_new (claims, key, c = json_pack ("{s:s, s:{}, s:{}}", "pod", pod, "sizes", "containers"));
    json_object_update (json_object_get (c, "sizes"), sizes);
    json_object_set_new (json_object_get (c, "containers"), container, json_true ());
  }

  /* The original of every limited level, read before the first raise. */
  json_object_foreach (claims_in, uid, sizes)
  {
    const char *size;
    json_t *bytes;
    json_object_foreach (sizes, size, bytes)
    {
      for (int k = 0; k < 2; k++)
        {
          cleanup_free char *file = xasprintf ("hugetlb.%s.%smax", size, k ? "rsvd." : "");
          for (size_t l = 0; l < n_chain; l++)
            {
              json_t *level = json_object_get (levels, chain[l]);
              if (json_object_get (level, file))
                continue;
              cleanup_free char *cur = NULL;
              nrm_error_t e = NULL;
              unsigned long long v;
              if (nrm_cgroup_read (fs, chain[l], file, &cur, &e) < 0)
                {
                  if (e->status == ENOENT)
                    {
                      nrm_error_release (&e); /* no hugetlb controller there, or no such level: no limit */
                      continue;
                    }
                  *err = e;
                  return nrm_error_wrap (err, "the pod's huge page limit");
                }
              if (strcmp (cur, "max") == 0 || (nrm_cgroup_value_bytes (cur, &v) && v >= NRM_HUGETLB_POD_UNBOUNDED))
                continue;
              if (!nrm_cgroup_value_bytes (cur, &v))
                return nrm_error_set (err, EINVAL, "`%s` of cgroup `%s` is `%.40s`, not a byte count", file, chain[l],
                                      cur);
              if (level == NULL)
                json_object_set_new (levels, chain[l], level = json_object ());
              json_object_set_new (level, file, json_pack ("{s:s}", "original", cur));
            }
        }
    }
  }

  /* Nothing above limits huge pages (no hugetlb controller, or all
   * unbounded): nothing to raise, nor to remember. */
  bool limited = false;
  for (size_t l = 0; l < n_chain; l++)
    limited |= json_object_get (levels, chain[l]) != NULL;
  if (!limited)
    return 0;

  /* What to write, then the journal, then the writes. */
  size_t n = 0, cap = 0;
  struct step *st = NULL;
  int r = -1;
  const char *lname;
  json_t *level;
  json_object_foreach (levels, lname, level)
  {
    const char *file;
    json_t *entry;
    bool in_chain = false;
    for (size_t l = 0; l < n_chain; l++)
      in_chain |= strcmp (chain[l], lname) == 0;
    if (!in_chain)
      continue; /* another pod's, kept as it is */
    json_object_foreach (level, file, entry)
    {
      char size[16];
      size_of_file (file, size, sizeof (size));
      unsigned long long sum = claimed (j, lname, size), o = 0;
      nrm_cgroup_value_bytes (json_string_value (json_object_get (entry, "original")), &o);
      if (sum == 0)
        continue;
      if (o + sum >= NRM_HUGETLB_POD_UNBOUNDED)
        {
          nrm_error_set (err, EINVAL, "`%s` of cgroup `%s`: %llu bytes of claims on top of %llu overflow", file, lname,
                         sum, o);
          goto out;
        }
      cleanup_free char *cur = NULL, *value = NULL;
      if (nrm_cgroup_read (fs, lname, file, &cur, err) < 0)
        goto out;
      decide (cur, entry, sum, &value);
      json_object_set_new (entry, "written", json_sprintf ("%llu", o + sum));
      if (value == NULL)
        continue;
      if (n == cap)
        st = xrealloc (st, (cap = cap ? 2 * cap : 8) * sizeof (*st));
      st[n++] = (struct step){ xstrdup (lname), xstrdup (file), cur, value };
      cur = value = NULL;
    }
  }
  text = json_dumps (j, JSON_COMPACT | JSON_SORT_KEYS);
  if ((prev == NULL || strcmp (prev, text) != 0) && save (path, j, err) < 0)
    goto out;
  size_t done = 0;
  for (; done < n; done++)
    if (nrm_cgroup_write (fs, st[done].cgroup, st[done].file, st[done].value, err) < 0)
      break;
  if (done < n)
    {
      /* Put back what was raised and the journal: as before the call. */
      while (done-- > 0)
        {
          nrm_error_t ignored = NULL;
          nrm_cgroup_write (fs, st[done].cgroup, st[done].file, st[done].old, &ignored);
          nrm_error_release (&ignored);
        }
      nrm_error_t ignored = NULL;
      if (prev)
        nrm_write_atomic (path, prev, strlen (prev), 0600, &ignored);
      else
        unlink (path);
      nrm_error_release (&ignored);
      nrm_error_wrap (err, "raising the pod's huge page limit for the claim");
      goto out;
    }
  r = 0;
  if (ret_undo && (n > 0 || prev == NULL || strcmp (prev, text) != 0))
    {
      struct nrm_hugetlb_pod_undo *u = xmalloc (sizeof (*u) + n * sizeof (struct step));
      u->lock = lock;
      lock = -1;
      u->journal = path;
      path = NULL;
      u->prev = prev;
      prev = NULL;
      u->n = n;
      if (n > 0)
        memcpy (u->steps, st, n * sizeof (*st));
      n = 0;
      *ret_undo = u;
    }
out:
  steps_free (st, n);
  free (st);
  return r;
}

void
nrm_hugetlb_pod_keep (struct nrm_hugetlb_pod_undo *u)
{
  if (u == NULL)
    return;
  steps_free (u->steps, u->n);
  close (u->lock);
  free (u->journal);
  free (u->prev);
  free (u);
}

void
nrm_hugetlb_pod_undo (struct nrm_cgroupfs *fs, struct nrm_hugetlb_pod_undo *u)
{
  if (u == NULL)
    return;
  for (size_t i = u->n; i-- > 0;)
    {
      nrm_error_t ignored = NULL;
      nrm_cgroup_write (fs, u->steps[i].cgroup, u->steps[i].file, u->steps[i].old, &ignored);
      nrm_error_release (&ignored);
    }
  nrm_error_t ignored = NULL;
  /* A failure here leaves the journal naming this container, whose cgroup
   * goes with the failed start: the next sweep releases it. */
  if (u->prev)
    nrm_write_atomic (u->journal, u->prev, strlen (u->prev), 0600, &ignored);
  else
    unlink (u->journal);
  nrm_error_release (&ignored);
  nrm_hugetlb_pod_keep (u);
}

int
nrm_hugetlb_pod_sweep (struct nrm_cgroupfs *fs, const char *state_dir, struct nrm_hugetlb_pod_stats *st,
                       nrm_error_t *err)
{
  memset (st, 0, sizeof (*st));
  cleanup_free char *path = journal_path (state_dir), *before = NULL;
  cleanup_close int lock = -1;
  cleanup_json json_t *j = NULL;
  if (access (path, F_OK) < 0 && errno == ENOENT)
    return 0; /* the usual case: no claim ever raised anything */
  if ((lock = lock_journal (state_dir, err)) < 0 || load (path, &j, NULL, err) < 0)
    return -1;
  before = json_dumps (j, JSON_COMPACT | JSON_SORT_KEYS);
  json_t *claims = json_object_get (j, "claims"), *levels = json_object_get (j, "levels");

  const char *key;
  json_t *c;
  void *tmp;
  json_object_foreach_safe (claims, tmp, key, c)
  {
    const char *cg;
    json_t *v;
    void *t2;
    json_t *containers = json_object_get (c, "containers");
    json_object_foreach_safe (containers, t2, cg, v)
    {
      if (!nrm_cgroup_exists (fs, cg))
        json_object_del (containers, cg);
    }
    if (json_object_size (containers) == 0)
      {
        json_object_del (claims, key);
        st->released++;
      }
  }
  st->claims = json_object_size (claims);

  nrm_error_t first = NULL, first_save = NULL;
  const char *lname;
  json_t *level;
  json_object_foreach_safe (levels, tmp, lname, level)
  {
    const char *file;
    json_t *entry;
    void *t2;
    json_object_foreach_safe (level, t2, file, entry)
    {
      char size[16];
      size_of_file (file, size, sizeof (size));
      unsigned long long sum = claimed (j, lname, size), o = 0;
      nrm_cgroup_value_bytes (json_string_value (json_object_get (entry, "original")), &o);
      cleanup_free char *cur = NULL, *value = NULL;
      nrm_error_t e = NULL;
      if (nrm_cgroup_read (fs, lname, file, &cur, &e) < 0)
        {
          if (e->status == ENOENT)
            {
              nrm_error_release (&e); /* the pod is gone, and its limits */
              json_object_del (level, file);
            }
          else if (first == NULL)
            first = e;
          else
            nrm_error_release (&e);
          continue;
        }
      decide (cur, entry, sum, &value);
      if (value && nrm_cgroup_write (fs, lname, file, value, &e) < 0)
        {
          if (first == NULL)
            first = e;
          else
            nrm_error_release (&e);
          continue;
        }
      if (value)
        {
          if (sum == 0)
            st->restored++;
          else
            st->raised++;
        }
      if (sum == 0)
        json_object_del (level, file);
      else
        json_object_set_new (entry, "written", json_sprintf ("%llu", o + sum));
    }
    if (json_object_size (level) == 0)
      json_object_del (levels, lname);
  }
  cleanup_free char *after = json_dumps (j, JSON_COMPACT | JSON_SORT_KEYS);
  if (strcmp (before, after) != 0 && save (path, j, first ? &first_save : err) < 0 && first == NULL)
    return -1;
  nrm_error_release (&first_save);
  if (first)
    {
      *err = first;
      return nrm_error_wrap (err, "putting back the pods' huge page limits");
    }
  return 0;
}
