/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TEXT_H
#define NRM_TEXT_H

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "nrm/base/error.h"

/* Whether s[0..len) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF). */
bool nrm_utf8_valid (const char *s, size_t len);

/* A printable, valid UTF-8 rendering of at most max bytes of s[0..len), for
 * messages that name untrusted input: control bytes, backslashes and bytes
 * that are not UTF-8 become C escapes (\0, \n, \x80), and "..." marks a cut.
 * The result is heap memory. */
char *nrm_quote (const char *s, size_t len, size_t max);

/* s cut to at most max bytes (a multiple of whole characters, "..." marking
 * a cut), with every byte that is not UTF-8 replaced by '?': what may go
 * into a protobuf string that a peer must be able to decode. */
char *nrm_text_bound (const char *s, size_t max);

/* Text from elsewhere made safe for a terminal, in place: every control
 * character but the newline (C0, DEL, and the C1 range U+0080-U+009F, whose
 * CSI a terminal may obey as ESC [) becomes '?', and so does every byte
 * that is not UTF-8. The length stays. */
void nrm_text_defang (char *s, size_t len);

/* What a JSON value is, for a message on a setting of the wrong type: "an
 * object", "a list", "a string", "an integer", ... */
const char *nrm_json_type_name (json_t *v);

/* In a reader of settings: unless pred (v) (json_is_string, ...), returns
 * -1 from the calling function with "key `KEY` must be WHAT, not <its
 * type>" set in its `nrm_error_t *err`. */
#define NRM_JSON_WANT(v, pred, key, what)                                                                              \
  do                                                                                                                   \
    {                                                                                                                  \
      if (!pred (v))                                                                                                   \
        return nrm_error_set (err, EINVAL, "key `%s` must be %s, not %s", key, what, nrm_json_type_name (v));          \
    }                                                                                                                  \
  while (0)

#endif
