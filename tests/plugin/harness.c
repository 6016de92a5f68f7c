/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/plugin/harness.h"
#include "tests/plugin/kubelet.h"

void
nh_init (struct nh *h, const char *tag)
{
  if (getenv ("NRM") == NULL || getenv ("NRM_TOPOLOGIES") == NULL)
    {
      fprintf (stderr, "SKIP: run through make check (NRM and NRM_TOPOLOGIES are not set)\n");
      exit (77);
    }
  memset (h, 0, sizeof (*h));
  h->pid = -1;
  snprintf (h->root, sizeof (h->root), "/tmp/nrm-%s-XXXXXX", tag);
  if (mkdtemp (h->root) == NULL)
    {
      perror ("mkdtemp");
      exit (99);
    }
  snprintf (h->kubelet_dir, sizeof (h->kubelet_dir), "%s/kubelet", h->root);
  snprintf (h->cdi_dir, sizeof (h->cdi_dir), "%s/cdi", h->root);
  snprintf (h->state_dir, sizeof (h->state_dir), "%s/state", h->root);
  snprintf (h->claims_dir, sizeof (h->claims_dir), "%s/claims", h->root);
  snprintf (h->log_path, sizeof (h->log_path), "%s/plugin.log", h->root);
  mkdir (h->claims_dir, 0700);
  mkdir (h->state_dir, 0700);
  snprintf (h->cpu_sock, sizeof (h->cpu_sock), "%s/plugins/" NH_CPU_DRIVER "/dra.sock", h->kubelet_dir);
  snprintf (h->cpu_reg, sizeof (h->cpu_reg), "%s/plugins_registry/" NH_CPU_DRIVER "-reg.sock", h->kubelet_dir);
  snprintf (h->mem_sock, sizeof (h->mem_sock), "%s/plugins/" NH_MEM_DRIVER "/dra.sock", h->kubelet_dir);
  snprintf (h->mem_reg, sizeof (h->mem_reg), "%s/plugins_registry/" NH_MEM_DRIVER "-reg.sock", h->kubelet_dir);
}

pid_t
nh_spawn (struct nh *h, const char *const *extra)
{
  char topo[4096];
  snprintf (topo, sizeof (topo), "%s/24em64t-2n6c2t-pci.xml", getenv ("NRM_TOPOLOGIES"));
  pid_t pid = fork ();
  if (pid == 0)
    {
      int fd = open (h->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2 (fd, 2);
      dup2 (fd, 1);
      const char *args[48]
          = { getenv ("NRM"),  "plugin",       "--topology",      topo,       "--node-name",     NH_NODE,
              "--kubelet-dir", h->kubelet_dir, "--cdi-dir",       h->cdi_dir, "--state-dir",     h->state_dir,
              "--claims-dir",  h->claims_dir,  "--reserved-cpus", "0",        "--isolated-cpus", "23" };
      int n = 18;
      for (int i = 0; extra && extra[i] && n < 47; i++)
        args[n++] = extra[i];
      args[n] = NULL;
      execv (args[0], (char *const *) args);
      _exit (127);
    }
  return pid;
}

/* Whether every driver that took its instance lock has written its
 * publisher record: the plugin's start is over (the registration sockets
 * answer before the last drivers are set up). */
static bool
records_written (struct nh *h)
{
  DIR *d = opendir (h->state_dir);
  struct dirent *de;
  bool all = d != NULL;
  while (all && (de = readdir (d)) != NULL)
    {
      size_t n = strlen (de->d_name), k = strlen (".instance.lock");
      char path[1200];
      if (n <= k || strcmp (de->d_name + n - k, ".instance.lock") != 0)
        continue;
      snprintf (path, sizeof (path), "%s/%.*s.publisher.json", h->state_dir, (int) (n - k), de->d_name);
      /* This instance's, not one a killed instance left. */
      json_t *rec = json_load_file (path, 0, NULL);
      all = json_integer_value (json_object_get (rec, "pid")) == (json_int_t) h->pid;
      json_decref (rec);
    }
  if (d)
    closedir (d);
  return all;
}

bool
nh_start (struct nh *h, const char *const *extra)
{
  h->pid = nh_spawn (h, extra);
  for (int i = 0; i < 150; i++)
    {
      if (kc_answers (h->cpu_reg) && kc_answers (h->mem_reg) && records_written (h))
        return true;
      if (kc_wait_exit (h->pid, 100) >= 0)
        {
          h->pid = -1; /* exited (and reaped) */
          break;
        }
    }
  return false;
}

int
nh_stop (struct nh *h, int sig)
{
  if (h->pid <= 0)
    return -1;
  kill (h->pid, sig);
  int rc = kc_wait_exit (h->pid, 15000);
  h->pid = -1;
  return rc;
}

bool
nh_log_contains (struct nh *h, const char *needle)
{
  char *text = kc_slurp (h->log_path);
  bool found = text && strstr (text, needle) != NULL;
  free (text);
  return found;
}

void
nh_write_claim (struct nh *h, const char *file, const char *name, const char *uid, const char *results)
{
  char path[600];
  snprintf (path, sizeof (path), "%s/%s", h->claims_dir, file);
  FILE *f = fopen (path, "w");
  if (f == NULL)
    {
      perror (path);
      exit (99);
    }
  fprintf (f,
           "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"%s\","
           "\"namespace\":\"default\",\"uid\":\"%s\"},\"spec\":{},\"status\":{",
           name, uid);
  if (results)
    fprintf (f, "\"allocation\":{\"devices\":{\"results\":%s}}", results);
  fputs ("}}", f);
  fclose (f);
}

int
nh_checkpoint_claims (struct nh *h, const char *driver)
{
  char path[600];
  snprintf (path, sizeof (path), "%s/%s.checkpoint.json", h->state_dir, driver);
  json_t *cp = json_load_file (path, 0, NULL);
  if (cp == NULL)
    return access (path, F_OK) == 0 ? -1 : 0;
  int n = (int) json_object_size (json_object_get (cp, "claims"));
  json_decref (cp);
  return n;
}

bool
nh_spec_exists (struct nh *h, const char *driver, const char *uid)
{
  char path[700];
  snprintf (path, sizeof (path), "%s/%s-%s.json", h->cdi_dir, driver, uid);
  return access (path, F_OK) == 0;
}

void
nh_cleanup (struct nh *h)
{
  if (h->pid > 0)
    nh_stop (h, SIGKILL);
  if (getenv ("NRM_KEEP_TMP") == NULL)
    {
      char cmd[400];
      snprintf (cmd, sizeof (cmd), "rm -rf '%s'", h->root);
      if (system (cmd) != 0)
        fprintf (stderr, "cannot remove %s\n", h->root);
    }
}
