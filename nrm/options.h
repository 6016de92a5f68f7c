/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_OPTIONS_H
#define NRM_OPTIONS_H

/* Every option of nrm in one table (nrm/options.c): its name, argument,
 * the commands that take it, its config file key, its setter and its help
 * line. The parser, --help and the man page come from it. */

#include <stdio.h>

#include "nrm/base/error.h"
#include "nrm/cli.h"

/* Reads the options of command cmd (argv[0] is its name): every -c file
 * first, then the flags over them; a flag of another command is refused,
 * naming those that take it. 1 when --help is asked for. */
int nrm_options_parse (struct nrm_cli *cli, const char *cmd, int argc, char **argv, nrm_error_t *err);

/* The help of one command, or of all (cmd NULL or unknown). */
void nrm_options_help (FILE *out, const char *cmd);

/* nrm.1, in roff. */
void nrm_options_man (FILE *out);

#endif
