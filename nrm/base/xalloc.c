/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include "nrm/base/xalloc.h"

#include <unistd.h>

#include <jansson.h>

void
nrm_oom (void)
{
  static const char msg[] = "nrm: out of memory\n";
  ssize_t n = write (STDERR_FILENO, msg, sizeof (msg) - 1);
  (void) n;
  abort ();
}

static void *
json_xmalloc (size_t size)
{
  return xmalloc (size);
}

void
nrm_json_abort_on_oom (void)
{
  json_set_alloc_funcs (json_xmalloc, free);
}
