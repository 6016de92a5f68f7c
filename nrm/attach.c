/* SPDX-License-Identifier: Apache-2.0 */
/* nrm run --pid: the threads of a running process moved onto a run's CPUs,
 * and its pages onto the run's memory nodes. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <numa.h>

#include "nrm/attach.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

/* Affinity masks of up to this many CPUs (the kernel takes a larger mask
 * than it has CPUs, not a smaller one). */
#define MAX_CPUS 8192
#define PF_KTHREAD 0x00200000u

struct nrm_attach_thread
{
  pid_t tid;
  cpu_set_t *mask;
  bool pinned; /* set to the run's CPUs (not only saved) */
};

/* Fields of /proc/PID/stat: the state (3), the flags (9), the start time
 * (22). The name (2) may hold spaces and ')': parsing starts after the
 * last ')'. */
static int
proc_stat (pid_t pid, char *state, unsigned long *flags, unsigned long long *start)
{
  char path[64], buf[4096];
  snprintf (path, sizeof (path), "/proc/%d/stat", (int) pid);
  FILE *f = fopen (path, "re");
  if (f == NULL)
    return -1;
  size_t n = fread (buf, 1, sizeof (buf) - 1, f);
  fclose (f);
  buf[n] = '\0';
  char *p = strrchr (buf, ')');
  if (p == NULL || p[1] != ' ')
    return errno = EINVAL, -1;
  p += 2;
  *state = *p;
  for (int field = 3; p && field < 22; field++)
    {
      if (field == 9)
        *flags = strtoul (p, NULL, 10);
      p = strchr (p, ' ');
      if (p)
        p++;
    }
  if (p == NULL)
    return errno = EINVAL, -1;
  *start = strtoull (p, NULL, 10);
  return 0;
}

static cpu_set_t *
mask_alloc (void)
{
  cpu_set_t *m = CPU_ALLOC (MAX_CPUS);
  if (m == NULL)
    abort ();
  CPU_ZERO_S (CPU_ALLOC_SIZE (MAX_CPUS), m);
  return m;
}

int
nrm_attach_open (pid_t pid, struct nrm_attach *a, nrm_error_t *err)
{
  *a = (struct nrm_attach){ .pid = pid, .pidfd = -1 };
  char state = 0;
  unsigned long flags = 0;
  if (pid <= 0)
    return nrm_error_set (err, EINVAL, "--pid %d: not a process id", (int) pid);
  if (pid == 1)
    return nrm_error_set (err, EINVAL, "--pid 1: PID 1 (init) is not attached: it is the whole machine's");
  if (pid == getpid ())
    return nrm_error_set (err, EINVAL, "--pid %d: that is this nrm run", (int) pid);
  /* The pidfd first: whatever is read after it is this process, or the
   * process is gone (its pidfd says so). */
  a->pidfd = (int) syscall (SYS_pidfd_open, pid, 0);
  if (a->pidfd < 0 && errno == ESRCH)
    return nrm_error_set (err, ESRCH, "--pid %d: no such process", (int) pid);
  if (a->pidfd < 0 && errno != ENOSYS)
    return nrm_error_errno (err, errno, "--pid %d: cannot open the process (pidfd_open)", (int) pid);
  if (proc_stat (pid, &state, &flags, &a->start) < 0)
    return nrm_error_set (err, ESRCH, "--pid %d: no such process", (int) pid);
  {
    char path[64];
    snprintf (path, sizeof (path), "/proc/%d/comm", (int) pid);
    FILE *f = fopen (path, "re");
    if (f == NULL || fgets (a->comm, sizeof (a->comm), f) == NULL)
      snprintf (a->comm, sizeof (a->comm), "?");
    if (f)
      fclose (f);
    a->comm[strcspn (a->comm, "\n")] = '\0';
  }
  if (flags & PF_KTHREAD)
    return nrm_error_set (err, EINVAL, "--pid %d (%s): a kernel thread, whose CPUs are the kernel's", (int) pid,
                          a->comm);
  if (state == 'Z' || state == 'X')
    return nrm_error_set (err, ESRCH, "--pid %d (%s): it has exited (a zombie its parent has not reaped)", (int) pid,
                          a->comm);
  /* Permission: setting the affinity it has now changes nothing and
   * fails as the real change would. */
  size_t size = CPU_ALLOC_SIZE (MAX_CPUS);
  cpu_set_t *m = mask_alloc ();
  int r = sched_getaffinity (pid, size, m) < 0 ? -1 : sched_setaffinity (pid, size, m);
  int e = errno;
  CPU_FREE (m);
  if (r < 0 && e == EPERM)
    return nrm_error_errno (err, e,
                            "--pid %d (%s): not permitted to change its CPUs (another user's process: run nrm as "
                            "that user, or with CAP_SYS_NICE)",
                            (int) pid, a->comm);
  if ((r < 0 && e == ESRCH) || !nrm_attach_alive (a))
    return nrm_error_set (err, ESRCH, "--pid %d (%s): the process exited", (int) pid, a->comm);
  if (r < 0)
    return nrm_error_errno (err, e, "--pid %d (%s): cannot read its CPUs", (int) pid, a->comm);
  {
    char path[64];
    snprintf (path, sizeof (path), "/proc/%d/task", (int) pid);
    DIR *d = opendir (path);
    struct dirent *de;
    while (d && (de = readdir (d)) != NULL)
      a->n_threads += de->d_name[0] != '.';
    if (d)
      closedir (d);
  }
  return 0;
}

bool
nrm_attach_alive (const struct nrm_attach *a)
{
  if (a->pidfd >= 0)
    {
      struct pollfd p = { .fd = a->pidfd, .events = POLLIN };
      return poll (&p, 1, 0) == 0;
    }
  char state = 0;
  unsigned long flags = 0;
  unsigned long long st = 0;
  return proc_stat (a->pid, &state, &flags, &st) == 0 && st == a->start && state != 'Z' && state != 'X';
}

static bool
saved_has (const struct nrm_attach *a, pid_t tid)
{
  for (size_t i = 0; i < a->n_saved; i++)
    if (a->saved[i].tid == tid)
      return true;
  return false;
}

/* The saved record of a thread, or NULL. */
static struct nrm_attach_thread *
saved_find (struct nrm_attach *a, pid_t tid)
{
  for (size_t i = 0; i < a->n_saved; i++)
    if (a->saved[i].tid == tid)
      return &a->saved[i];
  return NULL;
}

/* Records a thread's affinity now; NULL when it has exited. */
static struct nrm_attach_thread *
save_thread (struct nrm_attach *a, pid_t tid)
{
  cpu_set_t *old = mask_alloc ();
  if (sched_getaffinity (tid, CPU_ALLOC_SIZE (MAX_CPUS), old) < 0)
    {
      CPU_FREE (old);
      return NULL;
    }
  a->saved = xrealloc (a->saved, (a->n_saved + 1) * sizeof (*a->saved));
  a->saved[a->n_saved] = (struct nrm_attach_thread){ tid, old, false };
  return &a->saved[a->n_saved++];
}

void
nrm_attach_save (struct nrm_attach *a)
{
  char path[64];
  snprintf (path, sizeof (path), "/proc/%d/task", (int) a->pid);
  DIR *d = opendir (path);
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      char *end = NULL;
      long tid = strtol (de->d_name, &end, 10);
      if (de->d_name[0] != '.' && *end == '\0' && tid > 0 && saved_find (a, (pid_t) tid) == NULL)
        save_thread (a, (pid_t) tid);
    }
  if (d)
    closedir (d);
}

int
nrm_attach_pin (struct nrm_attach *a, const char *cpus, size_t *ret_threads, nrm_error_t *err)
{
  size_t size = CPU_ALLOC_SIZE (MAX_CPUS);
  cpu_set_t *want = mask_alloc ();
  struct bitmask *bm = numa_parse_cpustring_all (cpus);
  int r = -1;
  char path[64];
  snprintf (path, sizeof (path), "/proc/%d/task", (int) a->pid);
  if (bm == NULL)
    {
      nrm_error_set (err, EINVAL, "--pid %d: CPUs `%s` are not a CPU list", (int) a->pid, cpus);
      goto out;
    }
  for (unsigned i = 0; i < bm->size && i < MAX_CPUS; i++)
    if (numa_bitmask_isbitset (bm, i))
      CPU_SET_S (i, size, want);
  /* A thread started during a pass inherits from its creator, which may
   * not have moved yet: passes go on until one finds no new thread. */
  for (int pass = 0, moved = 1; moved; pass++)
    {
      moved = 0;
      if (pass == 1000)
        {
          nrm_error_set (err, EAGAIN, "--pid %d (%s): its threads keep starting faster than they can be moved",
                         (int) a->pid, a->comm);
          goto out;
        }
      DIR *d = opendir (path);
      if (d == NULL)
        {
          nrm_error_set (err, ESRCH, "--pid %d (%s): the process exited during attach", (int) a->pid, a->comm);
          goto out;
        }
      struct dirent *de;
      while ((de = readdir (d)) != NULL)
        {
          char *end = NULL;
          long tid = strtol (de->d_name, &end, 10);
          if (de->d_name[0] == '.' || *end || tid <= 0)
            continue;
          struct nrm_attach_thread *t = saved_find (a, (pid_t) tid);
          if (t && t->pinned)
            continue;
          if (t == NULL && (t = save_thread (a, (pid_t) tid)) == NULL)
            continue; /* the thread has exited */
          t->pinned = true;
          moved = 1;
          if (sched_setaffinity ((pid_t) tid, size, want) < 0 && errno != ESRCH)
            {
              int e = errno;
              closedir (d);
              if (e == EINVAL)
                nrm_error_errno (err, e,
                                 "--pid %d (%s): thread %ld cannot run on CPUs %s (outside the cpuset of its cgroup)",
                                 (int) a->pid, a->comm, tid, cpus);
              else
                nrm_error_errno (err, e, "--pid %d (%s): cannot move thread %ld onto CPUs %s", (int) a->pid, a->comm,
                                 tid, cpus);
              goto out;
            }
        }
      closedir (d);
    }
  if (!nrm_attach_alive (a))
    {
      nrm_error_set (err, ESRCH, "--pid %d (%s): the process exited during attach", (int) a->pid, a->comm);
      goto out;
    }
  *ret_threads = a->n_saved;
  r = 0;
out:
  if (r < 0)
    nrm_attach_restore (a);
  if (bm)
    numa_bitmask_free (bm);
  CPU_FREE (want);
  return r;
}

int
nrm_attach_migrate (struct nrm_attach *a, const char *mems, long *ret_left, nrm_error_t *err)
{
  *ret_left = 0;
  struct bitmask *to = numa_parse_nodestring_all (mems);
  if (to == NULL)
    return nrm_error_set (err, EINVAL, "--pid %d: memory nodes `%s` are not a node list", (int) a->pid, mems);
  /* From every other node: pages already on the run's nodes stay. */
  struct bitmask *from = numa_allocate_nodemask ();
  bool any = false;
  for (unsigned i = 0; i < from->size; i++)
    if (numa_bitmask_isbitset (numa_all_nodes_ptr, i) && !numa_bitmask_isbitset (to, i))
      {
        numa_bitmask_setbit (from, i);
        any = true;
      }
  int r = 0;
  if (any)
    {
      int left = numa_migrate_pages (a->pid, from, to);
      if (left < 0 && errno != ENOSYS)
        r = nrm_error_errno (err, errno, "--pid %d (%s): cannot move its pages to memory nodes %s (migrate_pages)",
                             (int) a->pid, a->comm, mems);
      else if (left > 0)
        *ret_left = left;
    }
  numa_bitmask_free (from);
  numa_bitmask_free (to);
  return r;
}

void
nrm_attach_restore (struct nrm_attach *a)
{
  size_t size = CPU_ALLOC_SIZE (MAX_CPUS);
  cpu_set_t *lead = NULL;
  for (size_t i = 0; i < a->n_saved; i++)
    {
      sched_setaffinity (a->saved[i].tid, size, a->saved[i].mask);
      if (a->saved[i].tid == a->pid)
        lead = a->saved[i].mask;
    }
  char path[64];
  snprintf (path, sizeof (path), "/proc/%d/task", (int) a->pid);
  DIR *d = lead ? opendir (path) : NULL;
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      char *end = NULL;
      long tid = strtol (de->d_name, &end, 10);
      if (de->d_name[0] != '.' && *end == '\0' && tid > 0 && !saved_has (a, (pid_t) tid))
        sched_setaffinity ((pid_t) tid, size, lead);
    }
  if (d)
    closedir (d);
  for (size_t i = 0; i < a->n_saved; i++)
    CPU_FREE (a->saved[i].mask);
  free (a->saved);
  a->saved = NULL;
  a->n_saved = 0;
}

int
nrm_attach_wait (struct nrm_attach *a, int *ret_sig, nrm_error_t *err)
{
  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, SIGINT);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGHUP);
  sigaddset (&set, SIGQUIT);
  cleanup_close int sfd = signalfd (-1, &set, SFD_CLOEXEC);
  *ret_sig = 0;
  if (sfd < 0)
    return nrm_error_errno (err, errno, "signalfd");
  for (;;)
    {
      struct pollfd p[2] = { { .fd = sfd, .events = POLLIN }, { .fd = a->pidfd, .events = POLLIN } };
      /* Without a pidfd (before Linux 5.3), the process is looked at
       * twice a second. */
      int n = poll (p, a->pidfd >= 0 ? 2 : 1, a->pidfd >= 0 ? -1 : 500);
      if (n < 0 && errno != EINTR)
        return nrm_error_errno (err, errno, "poll");
      if (n > 0 && (p[0].revents & POLLIN))
        {
          struct signalfd_siginfo si;
          if (read (sfd, &si, sizeof (si)) == (ssize_t) sizeof (si))
            {
              *ret_sig = (int) si.ssi_signo;
              return 0;
            }
        }
      if (!nrm_attach_alive (a))
        return 0;
    }
}

void
nrm_attach_close (struct nrm_attach *a)
{
  for (size_t i = 0; i < a->n_saved; i++)
    CPU_FREE (a->saved[i].mask);
  free (a->saved);
  free (a->old_cgroup);
  if (a->pidfd >= 0)
    close (a->pidfd);
  *a = (struct nrm_attach){ .pidfd = -1 };
}
