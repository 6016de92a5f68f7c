/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/text.h"

/* Quantities come from claims and command lines: a message quotes only a
 * short, printable prefix of one. */
static int
bad (nrm_error_t *err, int status, const char *text, const char *why)
{
  cleanup_free char *q = nrm_quote (text, strlen (text), 40);
  return nrm_error_set (err, status, "quantity `%s` %s", q, why);
}

/* Anything larger cannot be a resource amount and would overflow. */
#define QUANTITY_MAX ((nrm_quantity_t) 1 << 120)

int
nrm_quantity_parse (const char *text, nrm_quantity_t *ret, nrm_error_t *err)
{
  const char *p = text;
  nrm_quantity_t whole = 0, frac = 0, frac_scale = 1, mult = 1, div = 1;
  int sign = 1, digits = 0;

  if (text == NULL || *text == '\0')
    return nrm_error_set (err, EINVAL, "empty quantity");
  if (*p == '+' || *p == '-')
    sign = *p++ == '-' ? -1 : 1;
  for (; isdigit ((unsigned char) *p); p++, digits++)
    {
      whole = whole * 10 + (*p - '0');
      if (whole > QUANTITY_MAX)
        return bad (err, ERANGE, text, "is too large");
    }
  if (*p == '.')
    {
      p++;
      for (; isdigit ((unsigned char) *p); p++, digits++)
        if (frac_scale < (nrm_quantity_t) 1000000000000000000LL)
          {
            frac = frac * 10 + (*p - '0');
            frac_scale *= 10;
          }
    }
  if (digits == 0)
    return bad (err, EINVAL, text, "has no number");

  static const struct
  {
    const char *s;
    int base, exp;
  } suffixes[] = { { "Ki", 2, 10 }, { "Mi", 2, 20 }, { "Gi", 2, 30 }, { "Ti", 2, 40 }, { "Pi", 2, 50 },
                   { "Ei", 2, 60 }, { "n", 10, -9 }, { "u", 10, -6 }, { "m", 10, -3 }, { "k", 10, 3 },
                   { "M", 10, 6 },  { "G", 10, 9 },  { "T", 10, 12 }, { "P", 10, 15 }, { "E", 10, 18 } };
  int exp10 = 0;
  if (*p == 'e' || *p == 'E')
    {
      /* "E" alone is exa; "e3"/"E-3" is an exponent. */
      const char *q = p + 1;
      int esign = 1, e = 0, ed = 0;
      if (*q == '+' || *q == '-')
        esign = *q++ == '-' ? -1 : 1;
      for (; isdigit ((unsigned char) *q) && ed < 4; q++, ed++)
        e = e * 10 + (*q - '0');
      if (ed > 0 && *q == '\0')
        {
          exp10 = esign * e;
          p = q;
        }
    }
  if (*p != '\0')
    {
      size_t i;
      for (i = 0; i < sizeof (suffixes) / sizeof (suffixes[0]); i++)
        if (strcmp (p, suffixes[i].s) == 0)
          break;
      if (i == sizeof (suffixes) / sizeof (suffixes[0]))
        return bad (err, EINVAL, text, "has an unknown suffix");
      if (suffixes[i].base == 2)
        mult = (nrm_quantity_t) 1 << suffixes[i].exp;
      else
        exp10 = suffixes[i].exp;
    }
  if (exp10 > 27 || exp10 < -27)
    return bad (err, ERANGE, text, "is out of range");
  /* value = (whole + frac/frac_scale) * mult * 10^exp10, in nano-units. */
  int e = exp10 + 9;
  for (; e > 0; e--)
    mult *= 10;
  for (; e < 0; e++)
    div *= 10;
  /* Checked before multiplying: a signed overflow is undefined. */
  const nrm_quantity_t top = (nrm_quantity_t) (((unsigned __int128) 1 << 127) - 1);
  if ((whole != 0 && mult > top / whole) || (frac != 0 && mult > top / frac))
    return bad (err, ERANGE, text, "is too large");
  nrm_quantity_t v = whole * mult;
  /* Round up a remainder below one nano-unit, as Kubernetes does. */
  nrm_quantity_t f = frac * mult;
  v = (v + div - 1) / div + (f + frac_scale * div - 1) / (frac_scale * div);
  if (v > QUANTITY_MAX)
    return bad (err, ERANGE, text, "is too large");
  *ret = sign * v;
  return 0;
}

int
nrm_quantity_parse_bytes (const char *text, uint64_t *ret, nrm_error_t *err)
{
  nrm_quantity_t q;
  if (nrm_quantity_parse (text, &q, err) < 0)
    return -1;
  if (q < 0 || q % NRM_QUANTITY_ONE != 0)
    return bad (err, EINVAL, text, "is not a whole, non-negative number of bytes");
  q /= NRM_QUANTITY_ONE;
  if (q > (nrm_quantity_t) UINT64_MAX)
    return bad (err, ERANGE, text, "is too large");
  *ret = (uint64_t) q;
  return 0;
}

char *
nrm_quantity_format (uint64_t value, int binary, char *buf, unsigned len)
{
  static const char *const units[] = { "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei" };
  unsigned u = 0;
  if (binary)
    while (value != 0 && value % 1024 == 0 && u + 1 < sizeof (units) / sizeof (units[0]))
      {
        value /= 1024;
        u++;
      }
  snprintf (buf, len, "%" PRIu64 "%s", value, units[u]);
  return buf;
}

char *
nrm_quantity_text (nrm_quantity_t q, char *buf, unsigned len)
{
  char digits[64], *p = digits + sizeof (digits);
  unsigned __int128 u = q < 0 ? -(unsigned __int128) q : (unsigned __int128) q;
  unsigned __int128 whole = u / NRM_QUANTITY_ONE;
  unsigned frac = (unsigned) (u % NRM_QUANTITY_ONE);
  *--p = '\0';
  do
    *--p = (char) ('0' + (int) (whole % 10));
  while ((whole /= 10) != 0);
  if (frac == 0)
    snprintf (buf, len, "%s%s", q < 0 ? "-" : "", p);
  else
    {
      char f[16];
      snprintf (f, sizeof (f), "%09u", frac);
      for (size_t n = strlen (f); n > 0 && f[n - 1] == '0'; n--)
        f[n - 1] = '\0';
      snprintf (buf, len, "%s%s.%s", q < 0 ? "-" : "", p, f);
    }
  return buf;
}
