/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/corpus.h"
#include "topology/topology.h"

size_t
corpus_load (struct corpus_entry **ret)
{
  const char *dir = getenv ("NRM_TOPOLOGIES");
  char path[4096], line[8192];
  size_t n = 0;
  struct corpus_entry *e = NULL;

  if (dir == NULL || *dir == '\0')
    {
      fprintf (stderr, "SKIP: NRM_TOPOLOGIES is not set (run through make check)\n");
      exit (77);
    }
  snprintf (path, sizeof (path), "%s/MANIFEST.tsv", dir);
  FILE *f = fopen (path, "re");
  if (f == NULL)
    {
      fprintf (stderr, "SKIP: no topology corpus at %s\n", path);
      exit (77);
    }
  if (fgets (line, sizeof (line), f) == NULL) /* header */
    {
      fprintf (stderr, "ERROR: %s is empty\n", path);
      exit (99);
    }
  while (fgets (line, sizeof (line), f))
    {
      char *save = NULL, *cols[9] = { NULL };
      int k = 0;
      for (char *tok = strtok_r (line, "\t", &save); tok && k < 9; tok = strtok_r (NULL, "\t", &save))
        cols[k++] = tok;
      if (k < 9)
        {
          fprintf (stderr, "ERROR: %s: a row has %d columns\n", path, k);
          exit (99);
        }
      e = realloc (e, (n + 1) * sizeof (*e));
      struct corpus_entry *c = &e[n++];
      c->name = strdup (cols[0]);
      if (asprintf (&c->file, "%s/%s", dir, cols[0]) < 0)
        exit (99);
      c->packages = (unsigned) strtoul (cols[2], NULL, 10);
      c->numa_nodes = (unsigned) strtoul (cols[3], NULL, 10);
      c->cores = (unsigned) strtoul (cols[4], NULL, 10);
      c->pus = (unsigned) strtoul (cols[5], NULL, 10);
      c->l3 = (unsigned) strtoul (cols[7], NULL, 10);
      c->memory = strtoull (cols[8], NULL, 10);
    }
  fclose (f);
  if (n == 0)
    {
      fprintf (stderr, "ERROR: %s lists no machines\n", path);
      exit (99);
    }
  *ret = e;
  return n;
}

void
corpus_free (struct corpus_entry *e, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      free (e[i].file);
      free (e[i].name);
    }
  free (e);
}

int
corpus_run (const char *group, const struct corpus_test *per_machine, size_t n_per, const struct CMUnitTest *others,
            size_t n_others)
{
  struct corpus_entry *c = NULL;
  size_t n = corpus_load (&c), k = 0;
  struct CMUnitTest *tests = calloc (n * n_per + n_others + 1, sizeof (*tests));
  if (tests == NULL)
    return 99;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n_per; j++)
      {
        char *name = NULL;
        if (asprintf (&name, "%s %s", per_machine[j].label, c[i].name) < 0)
          return 99;
        tests[k++] = (struct CMUnitTest){ .name = name, .test_func = per_machine[j].fn, .initial_state = &c[i] };
      }
  for (size_t j = 0; j < n_others; j++)
    tests[k + j] = others[j];
  int r = _cmocka_run_group_tests (group, tests, k + n_others, NULL, NULL);
  for (size_t i = 0; i < k; i++)
    free ((char *) tests[i].name);
  free (tests);
  corpus_free (c, n);
  return r;
}

static long
socket_of (const struct nrm_topology *t, size_t i)
{
  int cpu = hwloc_bitmap_first (t->numa[i].cpus);
  if (cpu < 0)
    return -1;
  for (size_t p = 0; p < t->n_packages; p++)
    if (hwloc_bitmap_isset (t->packages[p].cpus, (unsigned) cpu))
      return (long) t->packages[p].os_index;
  return -1;
}

static int
cmp_i64 (const void *a, const void *b)
{
  int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
  return (x > y) - (x < y);
}

size_t
corpus_near_nodes (const struct nrm_topology *t, size_t numa, int64_t *out)
{
  const uint64_t *row = t->distances ? &t->distances[numa * t->n_numa] : NULL;
  size_t n = 0;
  uint64_t min = 0;
  bool have = false;
  long own = socket_of (t, numa);

  for (size_t i = 0; row && i < t->n_numa; i++)
    if (i != numa && (!have || row[i] < min))
      min = row[i], have = true;
  out[n++] = t->numa[numa].os_index;
  if (!have)
    return n;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      long s = socket_of (t, i);
      bool other_socket = own >= 0 && s >= 0 && s != own;
      if (i != numa && row[i] == min && !other_socket)
        out[n++] = t->numa[i].os_index;
    }
  /* The own node stays first; the rest in ascending order. */
  qsort (out + 1, n - 1, sizeof (*out), cmp_i64);
  return n;
}
