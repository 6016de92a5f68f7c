/* SPDX-License-Identifier: Apache-2.0 */
/* The plugin's locks and its state: the instance lock (one instance per
 * driver, per pod UID in rolling-update mode), the serialize lock that
 * every process preparing for a driver takes (a rolling-update twin, nrm
 * run), the checkpoint's picture in memory under them, and the answers of
 * completed claims known without them. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "driver/kubelet/checkpoint.h"
#include "driver/kubelet/plugin-internal.h"

static int
lock_file (const char *path, int how, int *ret, nrm_error_t *err)
{
  for (;;)
    {
      int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd < 0)
        return nrm_error_errno (err, errno, "cannot open lock file `%s`", path);
      if (how && flock (fd, how) < 0)
        {
          int e = errno;
          close (fd);
          if (e == EWOULDBLOCK)
            return nrm_error_set (err, EBUSY, "another nrm instance holds `%s`", path);
          return nrm_error_errno (err, e, "cannot lock `%s`", path);
        }
      /* An instance lock that a newer instance removed meanwhile (its
       * instance was gone: remove_dead_twins) locks nothing: again. */
      struct stat a, b;
      if ((how & LOCK_EX)
          && (fstat (fd, &a) < 0 || stat (path, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev))
        {
          close (fd);
          continue;
        }
      *ret = fd;
      return 0;
    }
}

int
nrm_plugin_locks_open (struct nrm_plugin *p, nrm_error_t *err)
{
  /* One instance per driver (per pod UID in rolling-update mode): binding
   * would silently steal a running instance's socket. */
  if (!p->cfg.local && lock_file (p->instance_lock, LOCK_EX | LOCK_NB, &p->instance_fd, err) < 0)
    return nrm_error_wrap (err, "%s: refusing to start a second instance%s", p->driver,
                           p->cfg.instance_uid ? "" : " (set an instance UID for rolling updates)");
  return lock_file (p->serialize_lock, 0, &p->serialize_fd, err);
}

/* Whether two stats are of the same version of a file: a rename makes a
 * new inode, a rewrite in place a new size or time. */
static bool
same_file (const struct stat *a, const struct stat *b)
{
  return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size
         && a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

void
nrm_plugin_publish_answers (struct nrm_plugin *p, json_t *answers)
{
  pthread_mutex_lock (&p->answers_lock);
  json_decref (p->answers);
  p->answers = answers;
  p->answers_stat = p->cp_stat;
  pthread_mutex_unlock (&p->answers_lock);
}

/* Takes the in-process mutex and the cross-process file lock (a
 * rolling-update twin shares the state directory), and brings the driver's
 * picture up to date with the checkpoint on disk. A batch goes on top of
 * the batches still writing (the group commit): the file lock is held since
 * the first of them, so nobody else wrote. Anyone else waits until all of
 * them are on disk, and so does everyone after a failed write, which the
 * picture is then read back from the file to undo. */
int
nrm_plugin_lock_state (struct nrm_plugin *p, bool batch, nrm_error_t *err)
{
  json_t *cp = NULL;
  pthread_mutex_lock (&p->lock);
  while (p->inflight > 0 && (!batch || p->poisoned))
    pthread_cond_wait (&p->turn, &p->lock);
  if (p->inflight > 0)
    return 0;
  if (p->poisoned)
    {
      p->poisoned = false;
      p->cp_generation = -1;
      memset (&p->cp_stat, 0, sizeof (p->cp_stat));
    }
  while (flock (p->serialize_fd, LOCK_EX) < 0)
    if (errno != EINTR)
      {
        int e = errno;
        pthread_mutex_unlock (&p->lock);
        return nrm_error_errno (err, e, "cannot lock `%s`", p->serialize_lock);
      }
  /* Unchanged since we last read or wrote it (a rename makes a new inode):
   * the picture in memory is current. */
  struct stat st;
  bool exists = stat (p->checkpoint, &st) == 0;
  if (p->cp != NULL && exists && same_file (&st, &p->cp_stat))
    return 0;
  if (nrm_checkpoint_read (p->checkpoint, p->driver, &cp, err) < 0)
    goto fail;
  /* The version stat saw, not one after the read: a write in between then
   * shows as a change at the next look, and the file is read again. */
  if (exists)
    p->cp_stat = st;
  else
    memset (&p->cp_stat, 0, sizeof (p->cp_stat));
  if (json_integer_value (json_object_get (cp, "generation")) != p->cp_generation || p->cp == NULL)
    {
      /* Someone else wrote it: rebuild from the file. */
      const char *uid;
      json_t *c;
      p->ops->reset (p->self);
      json_object_foreach (json_object_get (cp, "claims"), uid, c)
      {
        if (nrm_checkpoint_completed (c) && p->ops->restore (p->self, uid, json_object_get (c, "state"), err) < 0)
          {
            nrm_error_wrap (err, "checkpoint `%s`: claim %s", p->checkpoint, uid);
            goto fail;
          }
      }
      p->cp_generation = json_integer_value (json_object_get (cp, "generation"));
    }
  json_decref (p->cp);
  p->cp = cp;
  /* What a batch may now build on is what nrm_plugin_known_answer() answers from. */
  nrm_plugin_publish_answers (p, nrm_checkpoint_answers (json_object_get (p->cp, "claims")));
  return 0;
fail:
  json_decref (cp);
  flock (p->serialize_fd, LOCK_UN);
  pthread_mutex_unlock (&p->lock);
  return -1;
}

void
nrm_plugin_unlock_state (struct nrm_plugin *p)
{
  /* The answers of the completed claims, for prepares that find their
   * claim prepared without waiting for the lock (nrm_plugin_known_answer). */
  if (p->cp && (p->answers == NULL || !same_file (&p->answers_stat, &p->cp_stat)))
    nrm_plugin_publish_answers (p, nrm_checkpoint_answers (json_object_get (p->cp, "claims")));
  flock (p->serialize_fd, LOCK_UN);
  pthread_mutex_unlock (&p->lock);
}

/* The recorded answer of a completed claim, from the copy made of the
 * checkpoint as last read or written, while the file is still that one or
 * batches of ours are in flight (they hold the file lock: the file changes
 * only by them, and the copy is of the newest of them on disk): 1 prepared
 * (*ret a new reference), 0 not prepared, -1 unknown (the file changed:
 * another process wrote it), when only the lock can say. */
int
nrm_plugin_known_answer (struct nrm_plugin *p, const char *uid, json_t **ret)
{
  struct stat st;
  int r = -1;
  if (stat (p->checkpoint, &st) < 0)
    memset (&st, 0, sizeof (st));
  pthread_mutex_lock (&p->answers_lock);
  if (p->answers && (same_file (&st, &p->answers_stat) || __atomic_load_n (&p->inflight, __ATOMIC_ACQUIRE) > 0))
    {
      *ret = json_incref (json_object_get (p->answers, uid));
      r = *ret != NULL;
    }
  pthread_mutex_unlock (&p->answers_lock);
  return r;
}

void
nrm_plugin_state_written (struct nrm_plugin *p, json_int_t gen)
{
  p->cp_generation = gen;
  if (stat (p->checkpoint, &p->cp_stat) < 0)
    memset (&p->cp_stat, 0, sizeof (p->cp_stat));
}

int
nrm_plugin_write_state (struct nrm_plugin *p, nrm_error_t *err)
{
  json_int_t gen;
  if (nrm_checkpoint_write (p->checkpoint, p->cp, &gen, err) < 0)
    {
      nrm_plugin_record_write_error (p);
      return -1;
    }
  nrm_plugin_state_written (p, gen);
  return 0;
}
