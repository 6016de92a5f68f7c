/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include "nrm/base/error.h"
#include "nrm/base/xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int error_vset (nrm_error_t *err, int status, const char *suffix, const char *fmt, va_list ap)
    __attribute__ ((format (printf, 4, 0)));

static int
error_vset (nrm_error_t *err, int status, const char *suffix, const char *fmt, va_list ap)
{
  char *msg;
  nrm_error_t e;

  if (err == NULL)
    return -1;
  msg = xvasprintf (fmt, ap);
  if (suffix != NULL)
    {
      char *full = xasprintf ("%s: %s", msg, suffix);
      free (msg);
      msg = full;
    }
  e = xcalloc (1, sizeof (*e));
  e->status = status;
  e->msg = msg;
  /* An earlier error would be lost: keep the first, it is the cause. */
  if (*err != NULL)
    {
      free (e->msg);
      free (e);
      return -1;
    }
  *err = e;
  return -1;
}

int
nrm_error_set (nrm_error_t *err, int status, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  error_vset (err, status, NULL, fmt, ap);
  va_end (ap);
  return -1;
}

int
nrm_error_errno (nrm_error_t *err, int errnum, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  error_vset (err, errnum, strerror (errnum), fmt, ap);
  va_end (ap);
  return -1;
}

int
nrm_error_wrap (nrm_error_t *err, const char *fmt, ...)
{
  char *ctx, *full;
  va_list ap;

  if (err == NULL || *err == NULL)
    return -1;
  va_start (ap, fmt);
  ctx = xvasprintf (fmt, ap);
  va_end (ap);
  full = xasprintf ("%s: %s", ctx, (*err)->msg);
  free ((*err)->msg);
  (*err)->msg = full;
  free (ctx);
  return -1;
}

void
nrm_error_release (nrm_error_t *err)
{
  if (err == NULL || *err == NULL)
    return;
  free ((*err)->msg);
  free (*err);
  *err = NULL;
}

void
nrm_error_tally (nrm_error_t *err, size_t *count, char **first)
{
  (*count)++;
  if (first && *first == NULL && err && *err)
    *first = xstrdup ((*err)->msg);
  nrm_error_release (err);
}

const char *
nrm_error_msg (nrm_error_t err)
{
  if (err == NULL)
    return "no error";
  return err->msg;
}
