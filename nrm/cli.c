/* SPDX-License-Identifier: Apache-2.0 */
/* The command line both executables share (nrm/cli.h). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "nrm/cli.h"
#include "nrm/hook.h"
#include "nrm/options.h"
#include "nrm/settings.h"
#include "nrm/setup.h"
#include "nrm/status.h"
#include "topology/topology.h"

static int
fail (nrm_error_t *err, int code)
{
  fprintf (stderr, "nrm: %s\n", nrm_error_msg (*err));
  nrm_error_release (err);
  return code;
}

/* Output is built in memory and written only on success: a failing command
 * prints nothing on stdout. */
int
nrm_cli_emit (const char *buf, size_t len, nrm_error_t *err)
{
  if (fwrite (buf, 1, len, stdout) != len || fflush (stdout) != 0)
    return nrm_error_errno (err, errno ? errno : EIO, "cannot write to stdout");
  return 0;
}

static int
emit_json (json_t *doc, nrm_error_t *err)
{
  cleanup_free char *s = json_dumps (doc, JSON_INDENT (2));
  size_t len = strlen (s);
  s[len] = '\n';
  return nrm_cli_emit (s, len + 1, err);
}

int
nrm_cli_topology (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  int r;
  if (nrm_setup_machine (&cli->cfg, cli->root, &t, err) < 0)
    return -1;
  if (cli->json)
    {
      cleanup_json json_t *doc = nrm_topology_to_json (t);
      r = emit_json (doc, err);
    }
  else
    {
      cleanup_free char *buf = NULL;
      size_t len = 0;
      FILE *f = open_memstream (&buf, &len);
      if (f == NULL)
        r = nrm_error_errno (err, errno, "open_memstream");
      else
        {
          r = cli->hardware ? nrm_topology_print_hardware (t, cli->root, f, err)
                            : nrm_topology_print_summary (t, f, err);
          fclose (f);
          if (r == 0)
            r = nrm_cli_emit (buf, len, err);
        }
    }
  nrm_topology_free (t);
  return r;
}

int
nrm_cli_slices (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  cleanup_json json_t *list = NULL;
  int r = -1;
  if (nrm_setup_machine (&cli->cfg, cli->root, &t, err) < 0)
    return -1;
  if (nrm_setup_drivers (&cli->cfg, cli->root, t, &reg, &d, err) == 0)
    r = nrm_drivers_slices (&d, &cli->cfg.publish, NULL, NULL, &list, err);
  nrm_setup_close_drivers (reg, &d);
  nrm_topology_free (t);
  if (r < 0)
    return -1;
  return emit_json (list, err);
}

int
nrm_cli_status (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  cleanup_free char *buf = NULL;
  size_t len = 0;
  int r = -1;
  /* nodes[] as the plugin matched it (by labels too), else by name. */
  long entry = nrm_settings_node_entry (cli->cfg.state_dir);
  if (entry >= 0 && (size_t) entry >= json_array_size (cli->cfg.nodes))
    return nrm_error_set (err, EINVAL,
                          "status: the plugin applied nodes[%ld] (its record in `%s`), which this config does not "
                          "have: give status the plugin's settings (the same -c file)",
                          entry, cli->cfg.state_dir);
  if ((entry >= 0 ? nrm_config_apply_node_entry (&cli->cfg, (size_t) entry, err)
                  : nrm_config_resolve_node (&cli->cfg, NULL, err))
      < 0)
    return nrm_error_wrap (err, "status");
  {
    cleanup_json json_t *kubelet = NULL;
    if (nrm_setup_kubelet (&cli->cfg, "status", -1, &kubelet, err) < 0)
      return -1;
  }
  if (nrm_setup_machine (&cli->cfg, cli->root, &t, err) < 0)
    return -1;
  if (nrm_setup_drivers (&cli->cfg, cli->root, t, &reg, &d, err) == 0)
    {
      cleanup_json json_t *mine = nrm_settings_record (&cli->cfg, t, &d);
      if (nrm_settings_check (cli->cfg.state_dir, mine, "status", err) < 0)
        {
          nrm_setup_close_drivers (reg, &d);
          nrm_topology_free (t);
          return -1;
        }
      FILE *f = open_memstream (&buf, &len);
      r = f ? nrm_status (&cli->cfg, cli->root, t, &d, cli->json, f, err)
            : nrm_error_errno (err, errno, "open_memstream");
      if (f)
        fclose (f);
    }
  nrm_setup_close_drivers (reg, &d);
  nrm_topology_free (t);
  return r < 0 ? -1 : nrm_cli_emit (buf, len, err);
}

int
nrm_cli_hook (struct nrm_cli *cli, nrm_error_t *err)
{
  cleanup_free char *summary = NULL;
  if (nrm_hook_stdin (cli->root, cli->cfg.state_dir, &summary, err) < 0)
    return nrm_error_wrap (err, "hook");
  return 0;
}

static void
cli_done (struct nrm_cli *cli)
{
  nrm_config_done (&cli->cfg);
  nrm_fsroot_free (cli->root);
  hwloc_bitmap_free (cli->run.cpu_list);
  hwloc_bitmap_free (cli->run.cpu_nodes);
  hwloc_bitmap_free (cli->run.mem_nodes);
  free (cli->kubectl.context);
  free (cli->kubectl.namespace);
  free (cli->kubectl.output);
  free (cli->kubectl.node);
}

int
nrm_cli_main (int argc, char **argv, const struct nrm_command *commands, size_t n)
{
  nrm_error_t err = NULL;
  struct nrm_cli cli = { .json = false, .run.memory_tier = -1, .run.partition = -1 };
  const struct nrm_command *command = NULL;
  int r;

  nrm_json_abort_on_oom ();
  if (argc < 2)
    {
      nrm_options_help (stderr, NULL);
      return NRM_EXIT_USAGE;
    }
  const char *cmd = argv[1];
  if (strcmp (cmd, "help") == 0 || strcmp (cmd, "--help") == 0 || strcmp (cmd, "-h") == 0)
    {
      nrm_options_help (stdout, argc > 2 && strcmp (cmd, "help") == 0 ? argv[2] : NULL);
      return 0;
    }
  /* The man page, made from the same table at build time. */
  if (strcmp (cmd, "--man") == 0)
    {
      nrm_options_man (stdout);
      return 0;
    }
  if (strcmp (cmd, "version") == 0 || strcmp (cmd, "--version") == 0)
    {
      printf ("nrm %s\n", PACKAGE_VERSION);
      return 0;
    }
  for (size_t i = 0; i < n && command == NULL; i++)
    if (strcmp (cmd, commands[i].name) == 0)
      command = &commands[i];
  if (command == NULL)
    {
      fprintf (stderr, "nrm: unknown command `%s`; see `nrm --help`\n", cmd);
      return NRM_EXIT_USAGE;
    }
  if (command->handoff)
    command->handoff (argv);

  /* nrm kubectl SUB: the command is "kubectl SUB", its options after SUB. */
  char kcmd[32];
  bool kubectl = strcmp (cmd, "kubectl") == 0;
  if (kubectl)
    {
      const char *sub = argc > 2 ? argv[2] : "--help";
      if (strcmp (sub, "--help") == 0 || strcmp (sub, "-h") == 0 || strcmp (sub, "help") == 0)
        {
          nrm_options_help (stdout, "kubectl");
          return 0;
        }
      if (strcmp (sub, "nodes") && strcmp (sub, "claim") && strcmp (sub, "pods"))
        {
          fprintf (stderr, "nrm: kubectl: unknown command `%s`; see `kubectl nrm --help`\n", sub);
          return NRM_EXIT_USAGE;
        }
      snprintf (kcmd, sizeof (kcmd), "kubectl %s", sub);
      cli.kubectl.sub = argv[2];
      cmd = kcmd;
      argc--;
      argv++;
    }
  nrm_config_init (&cli.cfg);
  r = nrm_options_parse (&cli, cmd, argc - 1, argv + 1, &err);
  if (r == 1)
    {
      nrm_options_help (stdout, cmd);
      cli_done (&cli);
      return 0;
    }
  /* nrm run's own failures are 125, as timeout(1)'s and env(1)'s: never
   * taken for a command's own 1 or 2. */
  bool is_run = strcmp (cmd, "run") == 0;
  /* The plugin matches nodes[] by labels too, once it has the API; status
   * takes the plugin's choice from its record. */
  if (r == 0 && strcmp (cmd, "plugin") && strcmp (cmd, "status") && !kubectl)
    r = nrm_config_resolve_node (&cli.cfg, NULL, &err);
  /* kubectl reads the API only, nothing of this machine. */
  if (r == 0 && !kubectl)
    r = nrm_fsroot_open (cli.cfg.fsroot, &cli.root, &err);
  if (r < 0)
    {
      cli_done (&cli);
      return fail (&err, is_run ? NRM_RUN_EXIT_FAILED : NRM_EXIT_USAGE);
    }
  r = command->run (&cli, &err);
  cli_done (&cli);
  if (r < 0)
    return fail (&err, is_run ? NRM_RUN_EXIT_FAILED : EXIT_FAILURE);
  return cli.status; /* nrm run: the command's own status */
}
