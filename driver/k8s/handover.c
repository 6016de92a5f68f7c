/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "driver/k8s/handover.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

#define RECORD_MAX 4096

struct nrm_handover
{
  pthread_mutex_t lock;
  char *state_dir, *record, *record_lock, *self_lock, *uid, *settings, *token;
  nrm_log_fn log;
  void *log_ctx;
  void (*became_active) (void *ctx);
  void *ctx;
  bool active;
  char *owner; /* the token of the instance last seen with the role */
};

#define LOG(h, level, ...) NRM_LOG_TO ((h)->log, (h)->log_ctx, level, __VA_ARGS__)

static const char *
str (json_t *rec, const char *key)
{
  const char *s = json_string_value (json_object_get (rec, key));
  return s ? s : "";
}

/* The record, or NULL when it is missing or not one. */
static json_t *
read_record (struct nrm_handover *h)
{
  cleanup_free char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file (h->record, RECORD_MAX, &text, NULL, &err) < 0)
    {
      nrm_error_release (&err);
      return NULL;
    }
  json_t *rec = json_loads (text, 0, NULL);
  if (!json_is_object (rec) || !*str (rec, "token") || !*str (rec, "lock"))
    {
      json_decref (rec);
      return NULL;
    }
  return rec;
}

static bool
is_self (struct nrm_handover *h, json_t *rec)
{
  return strcmp (str (rec, "token"), h->token) == 0;
}

/* Whether the instance a record names still runs: it holds its instance
 * lock for its whole life, and the kernel releases it when it dies. */
static bool
alive (struct nrm_handover *h, json_t *rec)
{
  const char *name = str (rec, "lock");
  if (strchr (name, '/') || strcmp (name, "..") == 0)
    return false;
  cleanup_free char *path = xasprintf ("%s/%s", h->state_dir, name);
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  if (flock (fd, LOCK_SH | LOCK_NB) == 0)
    return false;
  return errno == EWOULDBLOCK;
}

static char *
describe (struct nrm_handover *h, json_t *rec)
{
  const char *uid = str (rec, "instance");
  return xasprintf ("instance %s (pid %" PRIdMAX ", %s settings)", *uid ? uid : "without UID",
                    (intmax_t) json_integer_value (json_object_get (rec, "pid")),
                    strcmp (str (rec, "settings"), h->settings) ? "other" : "the same");
}

static int
write_record (struct nrm_handover *h, nrm_error_t *err)
{
  cleanup_json json_t *rec = json_pack ("{s:s, s:s, s:I, s:s, s:s, s:I}", "instance", h->uid, "lock", h->self_lock,
                                        "pid", (json_int_t) getpid (), "token", h->token, "settings", h->settings,
                                        "since", (json_int_t) time (NULL));
  cleanup_free char *text = json_dumps (rec, JSON_SORT_KEYS);
  char *nl = xasprintf ("%s\n", text);
  /* It describes running processes: worth nothing after a crash of the
   * machine, when an empty file reads as no record. */
  int r = nrm_write_unsynced (h->record, nl, strlen (nl), 0600, err);
  free (nl);
  return r < 0 ? nrm_error_wrap (err, "%s: cannot take the publisher role", h->record) : 0;
}

/* Under <driver>.publisher.lock: the record is read again, and written
 * when it names no live instance other than this one (or always, to
 * claim). *other: the record of that live instance, if any. */
static int
take (struct nrm_handover *h, bool always, json_t **other, nrm_error_t *err)
{
  *other = NULL;
  cleanup_close int fd = nrm_lock_file (h->record_lock, err);
  if (fd < 0)
    return -1;
  if (!always)
    {
      cleanup_json json_t *rec = read_record (h);
      if (rec && is_self (h, rec))
        return 0;
      if (rec && alive (h, rec))
        {
          *other = TAKE_PTR (rec);
          return 0;
        }
    }
  return write_record (h, err);
}

static void
handover_free (struct nrm_handover *h)
{
  pthread_mutex_destroy (&h->lock);
  free (h->state_dir);
  free (h->record);
  free (h->record_lock);
  free (h->self_lock);
  free (h->uid);
  free (h->settings);
  free (h->token);
  free (h->owner);
  free (h);
}

int
nrm_handover_claim (const struct nrm_handover_config *cfg, struct nrm_handover **ret, nrm_error_t *err)
{
  struct nrm_handover *h = xcalloc (1, sizeof (*h));
  pthread_mutex_init (&h->lock, NULL);
  const char *base = strrchr (cfg->instance_lock, '/');
  h->state_dir = xstrdup (cfg->state_dir);
  h->record = xasprintf ("%s/%s.publisher.json", cfg->state_dir, cfg->driver);
  h->record_lock = xasprintf ("%s/%s.publisher.lock", cfg->state_dir, cfg->driver);
  h->self_lock = xstrdup (base ? base + 1 : cfg->instance_lock);
  h->uid = xstrdup (cfg->instance_uid ? cfg->instance_uid : "");
  h->settings = xstrdup (cfg->settings ? cfg->settings : "");
  h->log = cfg->log;
  h->log_ctx = cfg->log_ctx;
  h->became_active = cfg->became_active;
  h->ctx = cfg->ctx;
  /* The pid alone is no name: pods have pid namespaces of their own. */
  uint64_t r = 0;
  struct timespec ts;
  clock_gettime (CLOCK_REALTIME, &ts);
  if (getrandom (&r, sizeof (r), GRND_NONBLOCK) != sizeof (r))
    r = 0;
  h->token = xasprintf ("%016" PRIx64 "%08jx%08jx", r, (uintmax_t) ts.tv_nsec, (uintmax_t) getpid ());
  cleanup_json json_t *was = read_record (h);
  json_t *other = NULL;
  if (take (h, true, &other, err) < 0)
    {
      handover_free (h);
      return -1;
    }
  if (was && alive (h, was))
    {
      cleanup_free char *who = describe (h, was);
      LOG (h, NRM_LOG_INFO, "taking over the ResourceSlices and the shared pool's cpusets from %s", who);
    }
  h->active = true;
  h->owner = xstrdup (h->token);
  *ret = h;
  return 0;
}

bool
nrm_handover_active (struct nrm_handover *h)
{
  bool became = false;
  pthread_mutex_lock (&h->lock);
  cleanup_json json_t *rec = read_record (h), *other = NULL;
  bool was = h->active, now;
  if (rec && is_self (h, rec))
    now = true;
  else if (rec && alive (h, rec))
    {
      now = false;
      other = TAKE_PTR (rec);
    }
  else
    {
      nrm_error_t err = NULL;
      now = true;
      if (take (h, false, &other, &err) < 0)
        {
          /* Unwritable state: rather both writing than neither. */
          LOG (h, NRM_LOG_ERROR, "%s", nrm_error_msg (err));
          nrm_error_release (&err);
        }
      else if (other)
        now = false;
    }
  if (!now && strcmp (str (other, "token"), h->owner) != 0)
    {
      cleanup_free char *who = describe (h, other);
      LOG (h, NRM_LOG_INFO,
           "%s publishes now: this instance stops writing ResourceSlices and the shared pool's cpusets, and keeps "
           "serving its claims",
           who);
      free (h->owner);
      h->owner = xstrdup (str (other, "token"));
    }
  else if (now && !was)
    {
      LOG (h, NRM_LOG_INFO, "the instance that published is gone: this instance publishes again");
      free (h->owner);
      h->owner = xstrdup (h->token);
      became = true;
    }
  h->active = now;
  pthread_mutex_unlock (&h->lock);
  if (became && h->became_active)
    h->became_active (h->ctx);
  return now;
}

void
nrm_handover_release (struct nrm_handover *h)
{
  if (h == NULL)
    return;
  nrm_error_t unlocked = NULL;
  cleanup_close int fd = nrm_lock_file (h->record_lock, &unlocked);
  nrm_error_release (&unlocked);
  if (fd >= 0)
    {
      cleanup_json json_t *rec = read_record (h);
      if (rec && is_self (h, rec))
        unlink (h->record);
    }
  handover_free (h);
}
