/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CLEANUP_H
#define NRM_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <hwloc.h>
#include <jansson.h>

/* Owned locals release themselves when they go out of scope; hand ownership
 * on with TAKE_PTR(). Initialise every such variable to NULL (or -1). */

#define TAKE_PTR(p)                                                                                                    \
  ({                                                                                                                   \
    __typeof__ (p) _p = (p);                                                                                           \
    (p) = NULL;                                                                                                        \
    _p;                                                                                                                \
  })

#define TAKE_FD(fd)                                                                                                    \
  ({                                                                                                                   \
    int _fd = (fd);                                                                                                    \
    (fd) = -1;                                                                                                         \
    _fd;                                                                                                               \
  })

#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                                        \
  static inline void func##p (type *p)                                                                                 \
  {                                                                                                                    \
    if (*p)                                                                                                            \
      func (*p);                                                                                                       \
  }

static inline void
freep (void *p)
{
  free (*(void **) p);
}

static inline void
closep (int *fd)
{
  if (*fd >= 0)
    {
      int saved = errno;
      close (*fd);
      errno = saved;
    }
}

DEFINE_TRIVIAL_CLEANUP_FUNC (FILE *, fclose)

DEFINE_TRIVIAL_CLEANUP_FUNC (hwloc_bitmap_t, hwloc_bitmap_free)

#define cleanup_free __attribute__ ((cleanup (freep)))
#define cleanup_close __attribute__ ((cleanup (closep)))
#define cleanup_fclose __attribute__ ((cleanup (fclosep)))
/* json_decrefp() comes with jansson. */
#define cleanup_json __attribute__ ((cleanup (json_decrefp)))
#define cleanup_bitmap __attribute__ ((cleanup (hwloc_bitmap_freep)))

#endif
