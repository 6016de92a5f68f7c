/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_XALLOC_H
#define NRM_BASE_XALLOC_H

/* The one policy of nrm for a failed allocation: the process aborts, as
 * crun and git do (their xmalloc()). nrm_oom() writes "nrm: out of memory"
 * to stderr and calls abort(); the x-functions below never return NULL, and
 * main() makes jansson abort the same way (nrm_json_abort_on_oom()), so
 * that json_object(), json_pack() and the like return NULL only for bad
 * input. Why: a node agent without memory cannot do anything useful (even
 * reporting an error allocates), and an error path for every allocation is
 * code that no test ever runs. The DaemonSet restarts the agent; the
 * runtime fails the container whose hook died. So: check what can fail for
 * another reason (json_pack() or json_string() of outside text, json_loads(),
 * realpath(), ...), never an allocation. This header is public: a driver
 * loaded as a shared object runs inside nrm and allocates the same way. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

/* Writes "nrm: out of memory\n" to stderr (write(2): nothing allocated) and
 * aborts. */
void nrm_oom (void) __attribute__ ((noreturn));

/* Makes jansson allocate with xmalloc(): once, at the start of main(), before
 * any JSON value exists. */
void nrm_json_abort_on_oom (void);

/* As malloc(), calloc() and realloc(), never NULL: a size of 0 gets a block
 * of its own (realloc(p, 0) would free p), xcalloc(0, size) one element. */
static inline __attribute__ ((malloc, returns_nonnull)) void *
xmalloc (size_t size)
{
  void *p = malloc (size ? size : 1);
  if (p == NULL)
    nrm_oom ();
  return p;
}

static inline __attribute__ ((malloc, returns_nonnull)) void *
xcalloc (size_t nmemb, size_t size)
{
  void *p = calloc (nmemb ? nmemb : 1, size ? size : 1);
  if (p == NULL)
    nrm_oom ();
  return p;
}

static inline __attribute__ ((returns_nonnull)) void *
xrealloc (void *ptr, size_t size)
{
  void *p = realloc (ptr, size ? size : 1);
  if (p == NULL)
    nrm_oom ();
  return p;
}

static inline __attribute__ ((malloc, returns_nonnull)) char *
xstrdup (const char *s)
{
  size_t n = strlen (s) + 1;
  return memcpy (xmalloc (n), s, n);
}

/* At most n bytes of s, and a NUL. */
static inline __attribute__ ((malloc, returns_nonnull)) char *
xstrndup (const char *s, size_t n)
{
  const char *end = memchr (s, '\0', n);
  size_t len = end ? (size_t) (end - s) : n;
  char *p = xmalloc (len + 1);
  memcpy (p, s, len);
  p[len] = '\0';
  return p;
}

/* The formatted string, as vasprintf() and asprintf() make it. */
static inline __attribute__ ((malloc, returns_nonnull, format (printf, 1, 0))) char *
xvasprintf (const char *fmt, va_list ap)
{
  va_list aq;
  va_copy (aq, ap);
  int n = vsnprintf (NULL, 0, fmt, aq);
  va_end (aq);
  if (n < 0)
    nrm_oom ();
  char *p = xmalloc ((size_t) n + 1);
  vsnprintf (p, (size_t) n + 1, fmt, ap);
  return p;
}

static inline __attribute__ ((malloc, returns_nonnull, format (printf, 1, 2))) char *
xasprintf (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  char *p = xvasprintf (fmt, ap);
  va_end (ap);
  return p;
}

/* hwloc_bitmap_alloc() and hwloc_bitmap_dup(), never NULL for lack of
 * memory; as hwloc_bitmap_dup(), xbitmap_dup(NULL) is NULL. */
static inline __attribute__ ((returns_nonnull)) hwloc_bitmap_t
xbitmap_alloc (void)
{
  hwloc_bitmap_t b = hwloc_bitmap_alloc ();
  if (b == NULL)
    nrm_oom ();
  return b;
}

static inline hwloc_bitmap_t
xbitmap_dup (hwloc_const_bitmap_t old)
{
  hwloc_bitmap_t b = hwloc_bitmap_dup (old);
  if (b == NULL && old != NULL)
    nrm_oom ();
  return b;
}

#endif
