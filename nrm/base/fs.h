/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_FS_H
#define NRM_FS_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "nrm/base/error.h"

/* Replaces path with data so that a reader sees either the old or the new
 * file, also after a crash of the machine: a temporary file beside it
 * (<path>.tmp.XXXXXX, locked while it is written), fsync, rename, fsync of
 * the directory. */
int nrm_write_atomic (const char *path, const void *data, size_t len, mode_t mode, nrm_error_t *err);

/* Like nrm_write_atomic() without the syncs: a reader still sees the old
 * file or the new one, but after a crash of the machine it may be empty.
 * Only for a file that is worth nothing after such a crash: one rebuilt
 * from durable state at every start before anyone may use it (a CDI spec,
 * from the checkpoint), or one that describes running containers, which
 * the crash ended (the hook's container records, the shared pool). */
int nrm_write_unsynced (const char *path, const void *data, size_t len, mode_t mode, nrm_error_t *err);

/* nrm_write_atomic() in two steps, for a writer that orders several
 * replacements of one file: nrm_write_stage() writes (and with durable,
 * syncs) the temporary file, nrm_write_commit() renames it over the path
 * (then syncs the directory) or nrm_write_abort() removes it. Either one
 * ends w. Concurrent stages of one path are fine; the commits' order is
 * the caller's. */
struct nrm_staged_write
{
  char *path, *tmp;
  int fd;       /* open (and locked) until the commit */
  bool renamed; /* the commit renamed it, even if the directory's sync failed */
};
int nrm_write_stage (const char *path, const void *data, size_t len, mode_t mode, bool durable,
                     struct nrm_staged_write *w, nrm_error_t *err);
int nrm_write_commit (struct nrm_staged_write *w, bool durable, nrm_error_t *err);
void nrm_write_abort (struct nrm_staged_write *w);

/* Removes the temporary files that interrupted nrm_write_atomic() calls
 * left in dir and, depth levels down, its folders; a file whose writer is
 * still at work is left. Counts them in *removed (may be NULL). A missing
 * dir is fine. */
int nrm_remove_stale_temps (const char *dir, int depth, unsigned *removed, nrm_error_t *err);

/* Reads a whole file (at most max bytes) into a NUL-terminated buffer. */
int nrm_read_file (const char *path, size_t max, char **ret, size_t *len, nrm_error_t *err);

/* Like nrm_read_file(), from an open descriptor to its end; path names it
 * in messages. */
int nrm_read_fd (int fd, const char *path, size_t max, char **ret, size_t *len, nrm_error_t *err);

/* Like nrm_read_file(), for the entry `name` of an open directory, and only
 * when it is a regular file: links are not followed, and a FIFO or device
 * is refused without blocking. */
int nrm_read_regular_at (int dirfd, const char *name, size_t max, char **ret, size_t *len, nrm_error_t *err);

/* A stream over the entries of an open directory that leaves dfd open
 * (closedir() closes a copy); NULL with errno set. */
DIR *nrm_opendir_at (int dfd);

/* mkdir -p with the mode for each created directory. */
int nrm_mkdir_p (const char *path, mode_t mode, nrm_error_t *err);

/* Opens (creating it, mode 0600, never through a link) and locks a lock
 * file exclusively, waiting for other holders; the descriptor holds the
 * lock until it is closed. */
int nrm_lock_file (const char *path, nrm_error_t *err);

#endif
