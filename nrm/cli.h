/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CLI_H
#define NRM_CLI_H

/* The command line both executables share: nrm (the light commands) and
 * nrm-agent (nrm plugin, nrm run, nrm controller besides), each with its
 * own table of the commands it runs itself. */

#include <stdbool.h>
#include <stddef.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "nrm/conf.h"
#include "nrm/run.h"

#define NRM_EXIT_USAGE 2

/* nrm kubectl SUB (kubectl nrm SUB): its sub-command, argument and flags. */
struct nrm_kubectl_args
{
  const char *sub;  /* nodes, claim or pods */
  const char *name; /* claim NAME */
  char *context, *namespace, *output, *node;
  bool all_namespaces;
};

/* What a command line says: the settings, and what the options of a
 * command set besides. */
struct nrm_cli
{
  struct nrm_config cfg;
  struct nrm_fsroot *root; /* cfg.fsroot, opened before the command runs */
  bool json;
  bool hardware; /* nrm topology --hardware */
  struct nrm_run_request run;
  const char *options[16];
  size_t n_options;
  bool reserved_memory_flag; /* a --reserved-memory replaced the file's list */
  int status;                /* the exit status on success (nrm run: the command's own) */
  struct nrm_kubectl_args kubectl;
};

/* A command an executable runs itself, or hands to another one: handoff
 * (which does not return) is called before the options are read. */
struct nrm_command
{
  const char *name;
  int (*run) (struct nrm_cli *cli, nrm_error_t *err);
  void (*handoff) (char **argv);
};

/* main() of both executables: help, version, the options (config files
 * first, then the flags over them), then the command. */
int nrm_cli_main (int argc, char **argv, const struct nrm_command *commands, size_t n);

/* The commands both executables run. */
int nrm_cli_topology (struct nrm_cli *cli, nrm_error_t *err);
int nrm_cli_slices (struct nrm_cli *cli, nrm_error_t *err);
int nrm_cli_status (struct nrm_cli *cli, nrm_error_t *err);
int nrm_cli_hook (struct nrm_cli *cli, nrm_error_t *err);

/* Output is built in memory and written only on success: a failing command
 * prints nothing on stdout. */
int nrm_cli_emit (const char *buf, size_t len, nrm_error_t *err);

#endif
