/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the lines of the kernel's ras:mc_event trace that the
 * memory driver reads from tracefs. Each line of the input is parsed; an
 * event's promises are checked (abort when broken). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/mcevent.h"
#include "nrm/base/xalloc.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (size > 16384)
    return 0;
  char *text = xstrndup ((const char *) data, size);
  uint64_t lost = 0;
  for (char *line = text, *next; line; line = next)
    {
      next = strchr (line, '\n');
      if (next)
        *next++ = '\0';
      struct nrm_mc_event ev;
      nrm_error_t err = NULL;
      int r = nrm_mc_event_parse (line, &ev, &lost, &err);
      if ((r < 0) != (err != NULL) || r > 1)
        abort ();
      if (r == 1
          && (ev.mc > 255 || ev.count > UINT16_MAX || strlen (ev.type) == 0 || strlen (ev.type) >= sizeof (ev.type)))
        abort ();
      nrm_error_release (&err);
    }
  free (text);
  return 0;
}
