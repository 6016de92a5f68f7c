/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "nrm/logging.h"
#include "nrm/base/xalloc.h"

static enum nrm_log_level max_level = NRM_LOG_INFO;
static bool as_json;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const names[] = { "error", "warning", "info", "debug" };

void
nrm_log_setup (enum nrm_log_level max, bool json)
{
  max_level = max;
  as_json = json;
}

int
nrm_log_parse_level (const char *s, enum nrm_log_level *ret)
{
  for (int i = 0; i < 4; i++)
    if (strcmp (s, names[i]) == 0)
      {
        *ret = (enum nrm_log_level) i;
        return 0;
      }
  return -1;
}

void
nrm_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
{
  char *msg = NULL, ts[64], date[32];
  struct timespec now;
  struct tm tm;
  va_list ap;
  (void) ctx;
  if (level > max_level)
    return;
  va_start (ap, fmt);
  msg = xvasprintf (fmt, ap);
  va_end (ap);
  clock_gettime (CLOCK_REALTIME, &now);
  gmtime_r (&now.tv_sec, &tm);
  strftime (date, sizeof (date), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf (ts, sizeof (ts), "%s.%03dZ", date, (int) (now.tv_nsec / 1000000));
  pthread_mutex_lock (&lock);
  if (as_json)
    {
      /* NULL for a message that is not UTF-8: it is left out. */
      json_t *j = json_pack ("{s:s, s:s, s:s}", "time", ts, "level", names[level], "msg", msg);
      char *line = json_dumps (j, JSON_COMPACT);
      if (line)
        fprintf (stderr, "%s\n", line);
      free (line);
      json_decref (j);
    }
  else
    fprintf (stderr, "%s %-7s %s\n", ts, names[level], msg);
  fflush (stderr);
  pthread_mutex_unlock (&lock);
  free (msg);
}
