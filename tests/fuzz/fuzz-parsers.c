/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the small text parsers behind flags, config keys and
 * claim fields. The first byte picks the parser, the rest is its text.
 * From 0xf0 on: the quoting of untrusted bytes for messages and the exact
 * text of quantities, whose promises are checked (abort when broken). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/placement.h"
#include "driver/names.h"
#include "nrm/base/quantity.h"
#include "nrm/base/text.h"
#include "nrm/conf.h"
#include "topology/topology.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (size < 1 || size > 4096)
    return 0;
  if (data[0] >= 0xf0)
    {
      const char *raw = (const char *) data + 1;
      size_t n = size - 1;
      if (data[0] & 1)
        {
          /* Any bytes, NUL included: printable, valid UTF-8, bounded. */
          char *q = nrm_quote (raw, n, 64);
          if (strlen (q) > 64 * 4 + 3 || !nrm_utf8_valid (q, strlen (q)))
            abort ();
          for (const char *c = q; *c; c++)
            if ((unsigned char) *c < 0x20 || *c == 0x7f)
              abort ();
          free (q);
          char *t = strndup (raw, n), *b = t ? nrm_text_bound (t, 100) : NULL;
          if (b && (strlen (b) > 100 || !nrm_utf8_valid (b, strlen (b))))
            abort ();
          free (b);
          free (t);
        }
      else
        {
          /* A quantity's exact text parses back to the same value. */
          char *t = strndup (raw, n), buf[64];
          nrm_quantity_t q, back;
          nrm_error_t e = NULL;
          if (t && nrm_quantity_parse (t, &q, &e) == 0
              && (nrm_quantity_parse (nrm_quantity_text (q, buf, sizeof (buf)), &back, &e) < 0 || back != q))
            abort ();
          nrm_error_release (&e);
          free (t);
        }
      return 0;
    }
  char *text = strndup ((const char *) data + 1, size - 1);
  if (text == NULL)
    return 0;
  nrm_error_t err = NULL;
  switch (data[0] % 7)
    {
    case 0:
      {
        nrm_quantity_t q;
        nrm_quantity_parse (text, &q, &err);
        break;
      }
    case 1:
      {
        uint64_t b;
        char buf[64];
        if (nrm_quantity_parse_bytes (text, &b, &err) == 0)
          nrm_quantity_format (b, 1, buf, sizeof (buf));
        break;
      }
    case 2:
      {
        hwloc_bitmap_t set = NULL;
        if (nrm_cpulist_parse (text, &set, &err) == 0)
          free (nrm_cpulist_format (set));
        hwloc_bitmap_free (set);
        break;
      }
    case 3:
      {
        unsigned o = 0;
        if (nrm_cpu_option_parse (text, &o, &err) == 0)
          nrm_cpu_options_check (o, &err);
        break;
      }
    case 4:
    case 5:
      {
        struct nrm_config c;
        nrm_config_init (&c);
        if (data[0] % 7 == 4)
          nrm_config_add_reserved_memory (&c, text, &err);
        else
          nrm_config_set_feature_gates (&c, text, &err);
        nrm_config_done (&c);
        break;
      }
    default:
      nrm_is_qualified_name (text);
      nrm_is_dns_subdomain (text, 253);
      nrm_is_dns_label (text);
      break;
    }
  nrm_error_release (&err);
  free (text);
  return 0;
}
