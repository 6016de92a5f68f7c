/* SPDX-License-Identifier: Apache-2.0 */
/* main() of nrm: the light commands. nrm plugin, nrm run and nrm controller
 * need gRPC and libnuma, whose loading alone costs more memory than a whole
 * `nrm slices`: they live in nrm-agent, beside nrm. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nrm/cli.h"
#include "nrm/run.h"

/* nrm-agent from this executable's directory, with the same arguments. */
static void
exec_agent (char **argv)
{
  char self[4096];
  ssize_t n = readlink ("/proc/self/exe", self, sizeof (self) - 20);
  if (n > 0)
    {
      self[n] = '\0';
      char *slash = strrchr (self, '/');
      if (slash)
        {
          strcpy (slash + 1, "nrm-agent");
          argv[0] = self;
          execv (self, argv);
        }
    }
  fprintf (stderr, "nrm: cannot run nrm-agent from beside nrm (%s): %s\n", n > 0 ? self : "?", strerror (errno));
  exit (strcmp (argv[1], "run") == 0 ? NRM_RUN_EXIT_FAILED : EXIT_FAILURE);
}

/* kubectl-nrm (a link to nrm, for `kubectl nrm`): nrm kubectl. */
static void
exec_kubectl (int argc, char **argv)
{
  char **args = calloc ((size_t) argc + 2, sizeof (char *));
  if (args == NULL)
    {
      fputs ("kubectl-nrm: out of memory\n", stderr);
      exit (EXIT_FAILURE);
    }
  args[0] = argv[0];
  args[1] = (char *) "kubectl";
  for (int i = 1; i < argc; i++)
    args[i + 1] = argv[i];
  exec_agent (args);
}

int
main (int argc, char **argv)
{
  const char *base = strrchr (argv[0], '/');
  if (strcmp (base ? base + 1 : argv[0], "kubectl-nrm") == 0)
    exec_kubectl (argc, argv);
  static const struct nrm_command commands[] = {
    { "topology", nrm_cli_topology, NULL }, { "slices", nrm_cli_slices, NULL }, { "status", nrm_cli_status, NULL },
    { "hook", nrm_cli_hook, NULL },         { "plugin", NULL, exec_agent },     { "run", NULL, exec_agent },
    { "controller", NULL, exec_agent },     { "kubectl", NULL, exec_agent },
  };
  return nrm_cli_main (argc, argv, commands, sizeof (commands) / sizeof (commands[0]));
}
