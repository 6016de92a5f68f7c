/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TESTS_UTIL_H
#define NRM_TESTS_UTIL_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A new file under /tmp holding text; the caller frees the path (and
 * unlinks the file when it matters). Needs cmocka's asserts. */
static inline char *
write_tmp (const char *text)
{
  char *path = strdup ("/tmp/nrm-test-XXXXXX");
  int fd = mkstemp (path);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, text, strlen (text)), (ssize_t) strlen (text));
  close (fd);
  return path;
}

#endif
