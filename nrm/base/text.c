/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nrm/base/text.h"
#include "nrm/base/xalloc.h"

/* The length of the UTF-8 character at s (at most n bytes), or 0 when the
 * bytes there are not one. */
static size_t
utf8_char (const unsigned char *s, size_t n)
{
  uint32_t cp;
  size_t k;
  if (s[0] < 0x80)
    return 1;
  if (s[0] >= 0xc2 && s[0] <= 0xdf)
    k = 2, cp = s[0] & 0x1f;
  else if (s[0] >= 0xe0 && s[0] <= 0xef)
    k = 3, cp = s[0] & 0x0f;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4)
    k = 4, cp = s[0] & 0x07;
  else
    return 0;
  if (k > n)
    return 0;
  for (size_t i = 1; i < k; i++)
    {
      if ((s[i] & 0xc0) != 0x80)
        return 0;
      cp = (cp << 6) | (s[i] & 0x3f);
    }
  if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return k;
}

bool
nrm_utf8_valid (const char *s, size_t len)
{
  const unsigned char *u = (const unsigned char *) s;
  for (size_t i = 0; i < len;)
    {
      size_t k = utf8_char (u + i, len - i);
      if (k == 0)
        return false;
      i += k;
    }
  return true;
}

char *
nrm_quote (const char *s, size_t len, size_t max)
{
  const unsigned char *u = (const unsigned char *) s;
  /* Each input byte takes at most 4 output bytes (\xNN). */
  size_t in = len < max ? len : max;
  char *out = xmalloc (in * 4 + 4), *o = out;
  size_t i = 0;
  while (i < in)
    {
      size_t k = utf8_char (u + i, len - i);
      if (k == 0 || u[i] < 0x20 || u[i] == 0x7f || u[i] == '\\')
        {
          static const char names[] = { [0] = '0', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't', ['\\'] = '\\' };
          if (u[i] < sizeof (names) && names[u[i]])
            o += sprintf (o, "\\%c", names[u[i]]);
          else
            o += sprintf (o, "\\x%02x", u[i]);
          i++;
          continue;
        }
      if (i + k > in)
        break;
      memcpy (o, u + i, k);
      o += k;
      i += k;
    }
  if (i < len)
    o = stpcpy (o, "...");
  *o = '\0';
  return out;
}

void
nrm_text_defang (char *s, size_t len)
{
  unsigned char *u = (unsigned char *) s;
  size_t i = 0;
  while (i < len)
    {
      size_t k = utf8_char (u + i, len - i);
      if (k == 0)
        u[i++] = '?';
      else if (k == 1 && ((u[i] < 0x20 && u[i] != '\n') || u[i] == 0x7f))
        u[i++] = '?';
      else if (k == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0)
        {
          u[i] = '?';
          u[i + 1] = '?';
          i += 2;
        }
      else
        i += k;
    }
}

char *
nrm_text_bound (const char *s, size_t max)
{
  const unsigned char *u = (const unsigned char *) s;
  size_t len = strlen (s);
  if (max < 4)
    max = 4;
  /* Only a text longer than max is cut, and then "..." takes 3 bytes. */
  bool cut = len > max;
  size_t limit = cut ? max - 3 : max;
  char *out = xmalloc ((cut ? max : len) + 1), *o = out;
  size_t i = 0, used = 0;
  while (i < len)
    {
      size_t k = utf8_char (u + i, len - i);
      size_t w = k ? k : 1;
      if (used + w > limit)
        break;
      if (k)
        memcpy (o, u + i, k);
      else
        *o = '?';
      o += w;
      used += w;
      i += w;
    }
  if (i < len)
    o = stpcpy (o, "...");
  *o = '\0';
  return out;
}

const char *
nrm_json_type_name (json_t *v)
{
  switch (json_typeof (v))
    {
    case JSON_OBJECT:
      return "an object";
    case JSON_ARRAY:
      return "a list";
    case JSON_STRING:
      return "a string";
    case JSON_INTEGER:
      return "an integer";
    case JSON_REAL:
      return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
      return "a boolean";
    case JSON_NULL:
      return "null";
    }
  return "?";
}
